"""Load test of `agentrl serve` on loopback: 64 concurrent OpenEnv sessions through full expert episodes.

Prints p50/p99 step latency (client round trip) and episodes/s; with $OUT set, writes
$OUT/env_server_load.json. Bounded: --sessions, --episodes per session, --max-wall-s.

    PYTHONPATH=src python bench/env_server_load.py --env python-session --sessions 64 --episodes 3
    PYTHONPATH=src python bench/env_server_load.py --env wordle --sessions 64 --episodes 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="python-session")
    p.add_argument("--tasks", default="", help="task source (default: the environment's)")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--episodes", type=int, default=3, help="episodes per session")
    p.add_argument("--max-wall-s", type=float, default=300.0)
    p.add_argument("--train-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from load_generator import run_load, summary

    from agentrl.serve.env.app import BackgroundServer, EnvServerConfig

    cfg = EnvServerConfig(env=args.env, tasks=args.tasks, train_size=args.train_size, eval_size=8, port=0,
                          max_concurrent_envs=args.sessions, seed=args.seed)
    server = BackgroundServer(cfg)
    with server as url:
        tasks = list(server.served.catalog.splits["train"])
        report = run_load(url, args.env, tasks, sessions=args.sessions, episodes=args.episodes,
                          max_wall_s=args.max_wall_s, seed=args.seed)
    figures = {"env": args.env, "tasks": cfg.task_source(), "cpus": os.cpu_count(), **summary(report)}
    solved = [r for _, r in report.rewards if r is not None]
    figures["mean_reward"] = round(sum(solved) / len(solved), 4) if solved else None
    print(f"agentrl serve load ({args.env}): {figures['sessions']} sessions, {figures['episodes']} episodes, "
          f"{figures['steps']} steps in {figures['wall_s']:.1f} s | step latency p50 {figures['step_p50_ms']:.1f} ms, "
          f"p99 {figures['step_p99_ms']:.1f} ms | {figures['episodes_per_s']:.2f} episodes/s | "
          f"mean reward {figures['mean_reward']} | errors {figures['errors']}", flush=True)
    for e in report.errors[:5]:
        print("  error:", e)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "env_server_load.json").write_text(json.dumps(figures, indent=2))
    return 0 if not report.errors else 1


if __name__ == "__main__":
    sys.exit(main())

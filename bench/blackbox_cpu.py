"""CPU numbers for black-box training: opencode harness overhead and rows per episode, and the async speed-up.

    .venv/bin/python bench/blackbox_cpu.py [--episodes 4] [--steps 4] [--out bench/results/blackbox_cpu.json]

1. opencode episodes against tiny-qwen3 through the PolicyServer (bubblewrap where usable), twice: with the
   random model's own samples (it answers with text, so an episode is one model call), and with a scripted
   policy that writes the reference fix with opencode's write tool and then ends (two calls, one row).
   Reported: episode wall time, harness overhead (harness wall time outside model calls), model calls, rows.
2. The same small GRPO run (edit-menu, a scripted random-op policy scored with tiny-qwen3's own log-probs,
   so groups have reward spread and every step trains) synchronously and with --async-rollouts
   --max-staleness 1: the wall time of the training steps of each, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path


def opencode_episodes(n: int) -> dict:
    from agentrl.harness.episode import AgentConfig, BlackBoxRunner
    from agentrl.models.load import load_policy
    from agentrl.rollout.hf_sampler import SamplingConfig
    from agentrl.rollout.scripted import ScriptedSampler, tool_call_text
    from agentrl.sandbox import Sandbox
    from agentrl.serve.policy.server import PolicyServer
    from agentrl.tasks import make_tasks

    model, tok = load_policy("tiny-qwen3")
    tasks = make_tasks(n, seed=5, split="train")

    def write_the_fix(text):
        where = re.search(r"Working directory: (\S+)", text)
        task = next((t for t in tasks if f"`{t.entry}`" in text), tasks[0])
        if where and "<tool_response>" not in text:
            return tool_call_text("write", {"filePath": f"{where.group(1)}/{task.source_file}",
                                            "content": task.reference})
        return "Fixed."

    writer = ScriptedSampler(write_the_fix)
    writer.bind(model, tok)

    report = {}
    with Sandbox() as sb:
        for name, sampler in (("random tiny-qwen3", None), ("scripted write-the-fix", writer)):
            srv = PolicyServer(model, tok, sampler=sampler,  # room for the written file in the scripted call
                               sampling=SamplingConfig(max_new_tokens=64 if sampler is None else 1024))
            with BlackBoxRunner(srv, sb, AgentConfig(timeout_s=300, workers=n)) as runner:
                t0 = time.perf_counter()
                eps = runner.run(tasks)
                wall = time.perf_counter() - t0
                iso = runner.isolation
            srv.close()
            report[name] = {
                "episodes": n, "isolation": iso, "concurrent_wall_s": wall,
                "episode_wall_s_mean": statistics.mean(e.wall_s for e in eps),
                "harness_overhead_s_mean": statistics.mean(e.harness_overhead_s for e in eps),
                "model_s_mean": statistics.mean(sum(c.wall_s for c in e.trace.calls) for e in eps),
                "model_calls_mean": statistics.mean(len(e.trace.calls) for e in eps),
                "rows_per_episode_mean": statistics.mean(len(e.rows) for e in eps),
                "rewards": [e.reward for e in eps], "end_reasons": [e.end_reason for e in eps],
            }
            print(name, json.dumps(report[name]), flush=True)
    return report


def async_speedup(steps: int) -> dict:
    from agentrl.rl import trainer as trainer_mod
    from agentrl.rl.config import RLConfig
    from agentrl.rollout.scripted import random_edit_sampler

    out = {}
    for name, kw in (("sync", {}), ("async_staleness_1", {"async_rollouts": True, "max_staleness": 1})):
        cfg = RLConfig.from_flat(env="edit-menu", steps=steps, prompts_per_step=4, group_size=4, eval_n=1, eval_size=2,
                       train_size=16, max_new_tokens=48, lr=1e-4, micro=2, n_boot=200, seed=3,
                       out=tempfile.mkdtemp() + "/run", **kw)
        # the trainer binds the scripted sampler to the model it samples with (the rollout copy when async)
        path = trainer_mod.train(cfg, sampler=random_edit_sampler(0))
        data = json.loads(Path(path).read_text())
        st = data["steps"]
        out[name] = {"steps_wall_s": sum(s["time/step_s"] for s in st),
                     "rollout_s": sum(s["time/rollout_s"] for s in st),
                     "update_s": sum(s["time/update_s"] for s in st),
                     "staleness": [s["async/staleness"] for s in st],
                     "is_ratio_mean": [s.get("is/ratio_mean") for s in st]}
        print(name, json.dumps(out[name]), flush=True)
    out["speedup"] = out["sync"]["steps_wall_s"] / out["async_staleness_1"]["steps_wall_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default="bench/results/blackbox_cpu.json")
    p.add_argument("--skip-opencode", action="store_true")
    a = p.parse_args(argv)
    report = {"machine": "CPU (shared 2-core box; numbers include contention)"}
    if not a.skip_opencode:
        report["opencode"] = opencode_episodes(a.episodes)
    report["async"] = async_speedup(a.steps)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2))
    print(f"async speed-up over sync: {report['async']['speedup']:.2f}x; written {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

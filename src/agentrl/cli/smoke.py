"""`agentrl smoke`: check template and tools, run a few held-out episodes, print transcripts and stats.

Not the check itself (agentrl.rollout.smoke.run_smoke): flags in, a printed report out.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentrl.cli.args import positive_int
from agentrl.cli.flags import add_policy_flags
from agentrl.rollout.smoke import SmokeConfig, run_smoke


def register(subparsers: Any) -> None:
    """Add `smoke` to the agentrl command line."""
    p = subparsers.add_parser("smoke", help="check template and tools, run a few held-out episodes, print transcripts")
    d = SmokeConfig()
    add_policy_flags(p, d)
    p.add_argument("--env", default=d.env, help="environment name (default coding-tools)")
    for name in ("episodes", "max_turns", "max_new_tokens", "gen_batch", "max_context_tokens", "show", "seed"):
        kind = positive_int if name in ("episodes", "max_new_tokens", "max_context_tokens") else int
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name))
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """CLI entry: build a SmokeConfig from `args`, run it, print the report; exit code 0 on success."""
    cfg = SmokeConfig(**{k: getattr(args, k) for k in SmokeConfig.__dataclass_fields__})
    report = run_smoke(cfg)
    print_report(report, cfg)
    return 0


def print_report(report: dict[str, Any], cfg: SmokeConfig) -> None:
    """Print the smoke report: checks, a few transcripts, end reasons, reward and per-episode tool stats."""
    print(f"template check: {report['template_check']}")
    print(f"env check ({cfg.env}): {report['env_check']}")
    for tr in report["trajectories"][: cfg.show]:
        print(f"\n--- transcript {tr.task_id} ---\n{tr.transcript}")
    print(f"\nend reasons: {report['end_reasons']}   mean reward: {report['mean_reward']:.3f}   "
          f"unscorable: {report['unscorable']}")
    print("tool stats (mean per episode): " + ", ".join(f"{k}={v:.2f}" for k, v in report["tool_stats"].items()))
    print(f"{len(report['trajectories'])} episodes in {report['wall_clock_s']:.1f} s "
          f"({report['episodes_per_s']:.2f} episodes/s in rollout)")

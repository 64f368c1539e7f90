"""`agentrl smoke`: check template and tools, run a few held-out episodes, print transcripts and stats.

Not the check itself (agentrl.rollout.smoke.run_smoke): flags in, a printed report out.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from agentrl.cli.args import non_negative_int, positive_int
from agentrl.cli.config_file import add_parser_config_flags
from agentrl.cli.flags import add_policy_flags, policy_from_args
from agentrl.envs import env_names
from agentrl.rollout.smoke import SmokeConfig, run_smoke

SMOKE_HELP: dict[str, str] = {
    "episodes": "Held-out episodes to run.", "max_turns": "Maximum assistant turns per episode.",
    "max_new_tokens": "Maximum sampled tokens per assistant turn.", "gen_batch": "Episodes per generate call.",
    "max_context_tokens": "Prompt + completion token budget per episode.", "show": "Transcripts to print.",
    "seed": "Seed of the tasks, function names and sampling.",
    "families": "Comma-separated bug-fix families of the held-out tasks (empty = all 19, round robin); see "
                "`agentrl tasks list`.",
    "temperature": "Sampling temperature (1.0 = the policy's own distribution).",
}


def register(subparsers: Any) -> None:
    """Add `smoke` to the agentrl command line."""
    p = subparsers.add_parser(
        "smoke", help="check template and tools, run a few held-out episodes, print transcripts",
        description="Check that --model's chat template renders --env's tools and round-trips token ids, run a few "
        "held-out episodes and print their transcripts, end reasons, reward and tool-call counts. Takes a run "
        "folder (runs/x), a checkpoint or any model `agentrl train --model` takes.")
    d = SmokeConfig()
    add_policy_flags(p.add_argument_group("model"), d.policy)
    episodes = p.add_argument_group("episodes")
    episodes.add_argument("--env", default=d.env, help=f"Environment: {' | '.join(env_names())} (docs/envs.md).")
    for name in ("episodes", "max_turns", "max_new_tokens", "gen_batch", "max_context_tokens", "families",
                 "temperature", "show", "seed"):
        kind = {"seed": int, "show": non_negative_int, "families": str, "temperature": float}.get(name, positive_int)
        episodes.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name), help=SMOKE_HELP[name])
    add_parser_config_flags(p)
    from_file = p.defaults_from_argv

    def defaults(argv: list[str]) -> dict[str, Any]:  # the run record's, then the --config file's
        reused = recorded_smoke_defaults(argv)
        return {**reused, **from_file(argv), "smoke_reused": reused}

    p.defaults_from_argv = defaults
    p.set_defaults(func=main, parser=p, smoke_reused={})


# a run's settings that `agentrl smoke --model RUN` plays its episodes with unless given (smoke plays generated
# bug-fix tasks, so only a bug-fix run's): it had run coding-tools on an edit-menu run's model, and then the
# demo's model (trained on minmax, compare, zero at temperature 0.7) on all 19 families at temperature 1.0
# (mean reward 0.125 where `agentrl eval` measured pass@1 0.6)
SMOKE_REUSED = ("env", "max_turns", "max_new_tokens", "max_context_tokens", "families", "temperature")


def recorded_smoke_defaults(argv: list[str]) -> dict[str, Any]:
    """SMOKE_REUSED from the run record of `--model` (a run folder, checkpoint or model folder with an
    agentrl_run.json) when that run trained on bug-fix tasks; else {}. `families` is the run's held-out
    families (its eval_families, else its families)."""
    from agentrl.cli.eval import recorded_defaults

    found = recorded_defaults(argv)
    if found.get("tasks") != "bugfix":
        return {}
    if found.get("eval_families"):
        found = {**found, "families": found["eval_families"]}
    return {k: found[k] for k in SMOKE_REUSED if k in found and found[k] not in (None, "")}


def main(args: argparse.Namespace) -> int:
    """CLI entry: build a SmokeConfig from `args`, run it, print the report; exit code 0 on success."""
    if args.print_config:
        from agentrl.cli.config_file import dump_parser_config

        print(dump_parser_config(args.parser, args), end="")
        return 0
    same = [f"{k.replace('_', '-')}={v}" for k, v in args.smoke_reused.items() if getattr(args, k) == v]
    if same:
        print(f"smoke: the run's settings: {', '.join(same)}")
    own = {f.name: getattr(args, f.name) for f in fields(SmokeConfig) if f.name != "policy"}
    cfg = SmokeConfig(policy=policy_from_args(args), **own)
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

"""`agentrl train` and `agentrl eval`: RLConfig flags in, a results file out. Not the loop itself."""

from __future__ import annotations

import argparse
import time
from typing import Any


def register(subparsers: Any) -> None:
    """Add `train` (every RLConfig field as a flag) and `eval` (all but the TRAIN_ONLY fields)."""
    from agentrl.rl.config import TRAIN_ONLY, add_rlconfig_flags

    p = subparsers.add_parser(
        "train", help="GRPO training with held-out evaluation before and after",
        description="Train a policy with GRPO. With no flags (or only --seed, --out, --resume): --preset demo "
        "(demo-qwen3 warm-started by SFT on scripted experts, then GRPO in edit-menu; about 3 minutes on 2 CPU "
        "cores). Other flags without --preset start from the plain defaults shown below; `--preset demo --help` "
        "shows the preset's.",
    )
    add_rlconfig_flags(p)
    p.defaults_from_argv = preset_defaults
    p.set_defaults(func=train_main)
    e = subparsers.add_parser(
        "eval", help="held-out evaluation of a model (no training)",
        description="Evaluate --model on the held-out tasks of --tasks with --env (eval_n episodes per task); "
        "writes <out>/results.json (default runs/eval) with per-task counts and a task-level bootstrap interval.",
    )
    add_rlconfig_flags(e, exclude=TRAIN_ONLY)  # no --steps, --lr, --resume, ...: they do not apply
    # never the training default out: evaluating runs/default/checkpoints/... must not move that run aside;
    # steps=0 from the start, so RLConfig's training-only checks (fp16 needs loss scaling) do not apply
    e.set_defaults(func=eval_main, out="runs/eval", steps=0)


# flags that say where and with which seed a run goes, not what it trains: with only these, `agentrl train`
# is still the demo (`agentrl train --seed 1 --out runs/s1`, as results/README.md measures it)
WHERE_FLAGS = ("--seed", "--out", "--resume", "--no-resume")


def preset_defaults(argv: list[str]) -> dict[str, Any]:
    """The defaults `agentrl train ARGV` starts from: the values of `--preset NAME` (agentrl.rl.config.PRESETS),
    "demo" when ARGV is empty or holds only WHERE_FLAGS, else none ({}: RLConfig's own defaults). An unknown
    name gives {} here and argparse's "invalid choice" error when the flag is parsed."""
    from agentrl.rl.config import PRESETS

    given = [a.split("=", 1)[0].replace("_", "-") for a in argv if a.startswith("--")]
    name = "demo" if all(f in WHERE_FLAGS for f in given) else None
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("--preset="):
            name = arg.split("=", 1)[1]
    return {**PRESETS[name], "preset": name} if name in PRESETS else {}


def train_main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl train`."""
    from agentrl.eval.bootstrap import format_interval
    from agentrl.io.results import validate_results
    from agentrl.rl.config import config_from_args
    from agentrl.rl.trainer import train

    path = train(config_from_args(args))
    data = validate_results(path)
    for ev in data["evaluations"]:
        if ev["label"] in ("before", "after"):
            print(f"pass@1 {ev['label']}: {format_interval(ev['pass_at_1'])}")
    for p in data["paired"]:
        print(f"paired {p['after']} - {p['before']}: {format_interval(p['diff'], signed=True)}")
    print(f"results: {path}")
    return 0


def eval_main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl eval`: the trainer's evaluation on its own (no optimizer step is taken)."""
    from agentrl.rl.config import config_from_args
    from agentrl.rl.session import RunSession
    from agentrl.rl.trainer import run_eval, write_plots_and_report

    cfg = config_from_args(args)
    cfg.steps = 0
    with RunSession.open(cfg) as sess:
        rep = run_eval(sess, "eval", 0)
        sess.results.finish("completed", wall_clock_s=time.perf_counter() - sess.t_start)
        write_plots_and_report(sess)
    print(f"pass@1: {rep.pass_at_1.describe()} over {len(rep.tasks)} tasks")
    print(f"results: {sess.results_path}")
    return 0

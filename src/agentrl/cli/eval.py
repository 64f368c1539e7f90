"""`agentrl eval`: held-out evaluation of a model, no training (RLConfig flags but the TRAIN_ONLY ones).

The strategy is picked here: with --env-url, the held-out tasks of an `agentrl serve` server scored for
one or several --models (agentrl.serve.env.eval); otherwise the trainer's evaluation in this process
(agentrl.rl.trainer.evaluate_only). Under torchrun it is refused: every rank would evaluate and write alone.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add `eval` (every RLConfig field but TRAIN_ONLY, plus the served-environment flags)."""
    from agentrl.cli.flags import add_rlconfig_flags
    from agentrl.rl.config import TRAIN_ONLY

    e = subparsers.add_parser(
        "eval", help="held-out evaluation of a model (no training)",
        description="Evaluate --model on the held-out tasks of --tasks with --env (eval_n episodes per task); "
        "writes <out>/results.json (default runs/eval) with per-task counts and a task-level bootstrap interval.",
    )
    add_rlconfig_flags(e, exclude=TRAIN_ONLY)  # no --steps, --lr, --resume, ...: they do not apply
    # never the training default out: evaluating runs/default/checkpoints/... must not move that run aside;
    # steps=0 from the start, so RLConfig's training-only checks (fp16 needs loss scaling) do not apply
    e.set_defaults(func=main, out="runs/eval", steps=0)
    e.add_argument("--env-url", default="", help="score on the held-out tasks of an `agentrl serve` server "
                   "instead of a local environment (the server's --env and --tasks apply)")
    e.add_argument("--models", nargs="+", default=None, help="with --env-url: several models on the same tasks "
                   "in one pass, one table, paired differences against the first (default: --model)")
    e.add_argument("--concurrency", type=int, default=16,
                   help="with --env-url: episodes (server sessions) at a time")


def main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl eval` (module docstring)."""
    from agentrl.cli.flags import config_from_args
    from agentrl.scale.context import launched_by_torchrun

    cfg = config_from_args(args)
    cfg.steps = 0
    if args.env_url:
        from agentrl.serve.env.eval import eval_served

        eval_served(cfg, args.env_url, args.models or [cfg.model], concurrency=args.concurrency)
        return 0
    if args.models:
        raise ValueError("--models needs --env-url (a served environment); locally, evaluate one --model "
                         "at a time")
    if launched_by_torchrun():
        raise SystemExit("agentrl eval runs in one process; launch it without torchrun "
                         "(torchrun is for `agentrl train`)")
    from agentrl.rl.trainer import evaluate_only

    rep, results_path = evaluate_only(cfg)
    print(f"pass@1: {rep.pass_at_1.describe()} over {len(rep.tasks)} tasks")
    print(f"results: {results_path}")
    return 0

"""`agentrl train` under torchrun: routes the train command to the data-parallel session. Not a new command.

`register` runs after agentrl.rl.commands (cli.COMMAND_MODULES order) and wraps the `train` parser's
handler: launched by torchrun (WORLD_SIZE > 1), `agentrl train ...` runs agentrl.scale.train's
data-parallel run; with --rollout-workers N and/or --ray-graders N, the trainer with rollout worker
processes (agentrl.scale.workers) and/or Ray grader actors (agentrl.scale.ray_actors); otherwise the
single-process trainer exactly as before.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any


def register(subparsers: Any) -> None:
    """Wrap `train`'s handler (registered by agentrl.rl.commands) with the torchrun route."""
    train = subparsers.choices.get("train")
    if train is None:
        raise RuntimeError("agentrl.scale.commands must be registered after agentrl.rl.commands")
    train.set_defaults(func=functools.partial(train_main, single=train.get_default("func")))
    ev = subparsers.choices.get("eval")
    if ev is not None:
        ev.set_defaults(func=functools.partial(eval_main, single=ev.get_default("func")))


def eval_main(args: argparse.Namespace, *, single: Callable[[argparse.Namespace], int]) -> int:
    """`agentrl eval`: one process (under torchrun every rank would evaluate and write alone: refused)."""
    from agentrl.scale.context import launched_by_torchrun

    if launched_by_torchrun():
        raise SystemExit("agentrl eval runs in one process; launch it without torchrun "
                         "(torchrun is for `agentrl train`)")
    return single(args)


def train_main(args: argparse.Namespace, *, single: Callable[[argparse.Namespace], int]) -> int:
    """`agentrl train`: data parallel under torchrun, else `single` (agentrl.rl.commands.train_main)."""
    from agentrl.rl.config import config_from_args
    from agentrl.scale.context import launched_by_torchrun

    if not launched_by_torchrun():
        if not (getattr(args, "rollout_workers", 0) or getattr(args, "ray_graders", 0)):
            return single(args)
        from agentrl.scale.train import train_scaled

        print(f"results: {train_scaled(config_from_args(args))}")
        return 0
    from agentrl.scale.train import train_data_parallel

    path = train_data_parallel(config_from_args(args))
    if path is not None:
        print(f"results: {path}")
    return 0

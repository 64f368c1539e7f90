"""The `agentrl` command: the top-level parser and the dispatch to one module of agentrl.cli per command.

Each module listed in COMMAND_MODULES defines `register(subparsers)`, which adds its sub-command(s)
with `set_defaults(func=fn)`; `fn(args) -> int` builds a config and calls one library function.
Heavy imports (torch, transformers) happen inside those functions, so `agentrl --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# One module per command, in `agentrl --help` order; each adds its own sub-command(s).
COMMAND_MODULES: tuple[str, ...] = (
    "agentrl.cli.tasks",
    "agentrl.cli.env",
    "agentrl.cli.assets",
    "agentrl.cli.smoke",
    "agentrl.cli.report",
    "agentrl.cli.sft",
    "agentrl.cli.train",
    "agentrl.cli.eval",
    "agentrl.cli.serve_policy",
    "agentrl.cli.agent_check",
    "agentrl.cli.serve",
)


def _offline_defaults() -> None:
    """Never phone home unless the user asked: HF telemetry off; offline unless AGENTRL_ALLOW_DOWNLOADS=1;
    HF hub / transformers progress bars off."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars follow it: our progress only
    if os.environ.get("AGENTRL_ALLOW_DOWNLOADS") != "1":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered sub-command (agentrl.cli.args conventions: no prefix
    abbreviation, dashed flags, defaults in help, "did you mean" under the sub-command that was mistyped)."""
    from agentrl import __version__
    from agentrl.cli.args import AgentrlParser

    parser = AgentrlParser(prog="agentrl", description="Train LLM coding agents with RL (GRPO).")
    parser.add_argument("--version", action="version", version=f"agentrl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="the command (`agentrl COMMAND --help` for its flags)")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `agentrl` console script; returns the process exit code."""
    _offline_defaults()
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("agentrl: interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, ConnectionError) as e:  # bad input: a clear message, no traceback
        if os.environ.get("AGENTRL_DEBUG") == "1":
            raise
        print(f"agentrl {args.command}: error: {e}", file=sys.stderr)
        return 2

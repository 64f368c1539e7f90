"""`agentrl agent-check`: is the black-box harness installed and can it be isolated here?

Not the episodes (agentrl.harness.episode).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add `agent-check` to the agentrl command line."""
    p = subparsers.add_parser("agent-check", help="check that opencode (train --agent opencode) is installed and "
                              "whether bubblewrap can isolate it here",
                              description="Find the opencode binary that `train --agent opencode` would run, compare "
                              "its version with the pinned one, and say whether bubblewrap can isolate it here.")
    p.add_argument("--agent-binary", default=None, help="the opencode binary (default: $AGENTRL_OPENCODE, "
                   ".venv/opencode, PATH)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the binary, its version against the pinned one, and the isolation that episodes would get.
    Exit 0 when usable; FileNotFoundError (exit 2, with the install command) when not installed."""
    from agentrl.harness.opencode import OPENCODE_VERSION, bwrap_usable, find_opencode, opencode_version

    binary = find_opencode(args.agent_binary)
    version = opencode_version(binary)
    note = "" if version == OPENCODE_VERSION else f" (agentrl is tested with {OPENCODE_VERSION})"
    print(f"opencode: {binary}\nversion: {version}{note}")
    print("isolation: " + ("bubblewrap (own network namespace; only the policy server is reachable)" if bwrap_usable()
                           else "none: bubblewrap cannot create a network namespace here; the harness would run "
                           "as a plain child process"))
    return 0

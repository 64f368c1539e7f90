"""Every `agentrl ...` command, one module each (agentrl.cli.main lists them); imported by no library module.

`agentrl` (the console script) and `python -m agentrl` run `main`.
"""

from agentrl.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

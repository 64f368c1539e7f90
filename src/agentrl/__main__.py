"""`python -m agentrl` is the `agentrl` command."""

from agentrl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

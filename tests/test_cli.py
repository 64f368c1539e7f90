import subprocess
import sys

from agentrl.cli import build_parser, main


def test_help_lists_registered_commands(capsys):
    parser = build_parser()
    assert parser.prog == "agentrl"
    assert main([]) == 2  # no command: help, exit 2
    assert "usage: agentrl" in capsys.readouterr().out


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "agentrl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("agentrl ")

"""`--config FILE.yaml` (agentrl.cli.config_file): a file's values are checked as the same flags would be on
the command line, and a bad one is one line (exit 2) naming the file and the key."""

from __future__ import annotations

import pytest

from agentrl.cli import main


def _error(capsys, argv):
    """The last stderr line of `agentrl ARGV`, which must exit 2."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("command, text, expected", [
    ("smoke", "episodes: -3", "episodes: expected an integer >= 1, got -3"),
    ("smoke", "episodes: [1, 2]", "episodes: expected a single value, got [1, 2]"),
    ("smoke", "max_new_tokens: 2.5", "max_new_tokens: expected an integer >= 1, got '2.5'"),
    ("smoke", "seed: abc", "seed: expected int, got 'abc'"),
    ("smoke", "seed: null", "seed: expected a value, got null"),
    ("smoke", "thinking: maybe", "thinking: expected true or false, got 'maybe'"),
    ("sft", "split: both", "split: expected one of 'train', 'heldout', got 'both'"),
    ("sft", "random_op: maybe", "random_op: expected true or false, got 'maybe'"),
    ("sft", "random-op: 1", "random-op: expected true or false, got 1"),
    ("sft", "agent: claude", "agent: expected one of '', 'opencode', got 'claude'"),
    ("sft", "n_tasks: 0", "n_tasks: expected an integer >= 1, got 0"),
    ("sft", "lr: {a: 1}", "lr: expected a single value, got {'a': 1}"),
])
def test_a_file_value_the_flag_would_refuse_is_one_line(command, text, expected, tmp_path, capsys):
    """argparse checks neither the type nor the choices of a default, and the file's values are defaults:
    each is checked as its flag is (it used to print, and run, as given)."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, [command, "--config", str(path), "--print-config"])
    assert line == f"agentrl {command}: error: --config {path}: {expected}"


def test_file_values_are_converted_as_flags_are(tmp_path, capsys):
    """What the flag would take, the file takes: numbers as strings, booleans, and null where the default
    is null (sft's --max-turns, --families)."""
    path = tmp_path / "c.yaml"
    path.write_text("n_tasks: '7'\nlr: 3e-4\nrandom_op: true\nthinking: true\nmax_turns: null\nfamilies: null\n")
    assert main(["sft", "--config", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out
    for line in ("n_tasks: 7", "lr: 0.0003", "random_op: true", "thinking: true", "max_turns: null"):
        assert line in out.splitlines()

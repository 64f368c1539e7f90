import re

import pytest

from agentrl.cli import main
from agentrl.envs import ENV_NAMES, EnvCheckError, check_env, make_env
from agentrl.envs.toolenv import ToolSpec, object_schema
from agentrl.envs.wordle import WordleEnv
from agentrl.tasks.words import wordle_task


class LeakyWordle(WordleEnv):
    """Keeps its guesses across reset: the checker must notice."""

    def _reset_episode(self, task, seed):
        kept = list(self.guesses)
        out = super()._reset_episode(task, seed)
        self.guesses = kept
        self._counts["guesses"] = len(kept)
        return out


class MismatchedWordle(WordleEnv):
    """Its schema names `word`, but the handler expects `text`."""

    def _specs(self):
        return [ToolSpec("guess", "Guess.", object_schema({"word": {"type": "string"}}, ("word",)),
                         lambda text: self._guess(text))]


def test_check_env_catches_a_reset_that_leaks_state():
    with pytest.raises(EnvCheckError, match="reset did not clear"):
        check_env(LeakyWordle(), wordle_task("crane"))


def test_check_env_catches_a_schema_that_does_not_match_the_handler():
    with pytest.raises(EnvCheckError, match="do not match the handler"):
        check_env(MismatchedWordle(), wordle_task("crane"))


def test_registry():
    assert set(ENV_NAMES) == {"edit-menu", "coding-tools", "python-session", "wordle"}
    assert {make_env(n, sandbox=None, max_turns=3).name for n in ENV_NAMES} == set(ENV_NAMES)
    with pytest.raises(ValueError, match="expected one of"):
        make_env("chess")


def test_env_check_refuses_a_per_test_timeout_too_large_to_double(capsys):
    """--test-timeout-s 1e308 passed the finite check, then 2 * t overflowed to inf and math.ceil raised an
    OverflowError traceback; a value over a day is now an argument error naming the flag."""
    for value, why in (("1e308", "expected at most 86400 seconds (a day), got 1e+308"),
                       ("86401", "expected at most 86400 seconds (a day), got 86401"), ("inf", "expected a finite number > 0")):
        with pytest.raises(SystemExit) as e:
            main(["env", "check", "bugfix", "--limit", "1", "--test-timeout-s", value])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"argument --test-timeout-s: {why}" in err and "Traceback" not in err


def test_env_check_mbpp_command_prints_the_ceiling(capsys):
    assert main(["env", "check", "mbpp", "--split", "train", "--limit", "6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mbpp train: 6/6 reference solutions pass all tests (ceiling 1.000)")
    assert re.search(r"share of reward from tests shown in the prompt 0\.\d{3}\n", out)

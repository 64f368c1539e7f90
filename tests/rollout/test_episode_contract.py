"""The episode contract across every environment: scripted policies drive each environment through the
real driver into each of its end states; the Trajectory's flags and reason must equal the environment's.

The policy is a scripted token sampler (the text of each turn, encoded with the real Qwen3 tokenizer),
so the driver, parser, template and environments are all the real ones.
"""

from __future__ import annotations

import json
import random

import pytest

from agentrl.chat.template import encode
from agentrl.envs import DRIVER_END_REASONS, env_names, get_spec, make_env
from agentrl.envs.coding_tools import coding_tools_turns
from agentrl.models.load import load_policy
from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.hf_sampler import Sample, SamplingConfig
from agentrl.tasks import make_tasks
from agentrl.tasks.task import Task
from agentrl.tasks.words import wordle_task

EOT = 151645  # <|im_end|>

SQUARE = Task(id="sq-1", family="mbpp", split="train", files={}, entry="square", source_file="solution.py",
              public_tests=("assert square(3) == 9",),
              hidden_tests=("assert square(3) == 9", "assert square(-2) == 4"),
              reference="def square(x):\n    return x * x\n",
              meta={"prompt_text": "Write a function that squares a number.", "shown_test_indices": (0,)})


@pytest.fixture(scope="module")
def tok():
    return load_policy("tiny-qwen3")[1]


@pytest.fixture(scope="module")
def sandbox():
    from agentrl.sandbox import Sandbox

    box = Sandbox()
    yield box
    box.close()


@pytest.fixture(scope="module")
def bugfix():
    return make_tasks(1, seed=0, split="heldout")[0]


class BrokenSandbox:
    """A sandbox whose every method raises: the episode must end env_error, unscorable, and be logged."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RuntimeError(f"sandbox is down ({name})")
        return fail


def tool(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class Script:
    """One episode's scripted turns (texts); each call returns the next, cut at the budget like a sampler."""

    def __init__(self, tok, turns):
        self.tok, self.turns, self.k = tok, list(turns), 0

    def __call__(self, contexts, budgets):
        (budget,) = budgets
        text = self.turns[min(self.k, len(self.turns) - 1)]
        self.k += 1
        ids = encode(self.tok, text)
        cut = len(ids) >= budget
        ids = ids[:budget] if cut else ids + [EOT]
        return [Sample(tuple(ids), tuple(-0.1 for _ in ids), hit_token_limit=cut)]


def play(tok, env, task, turns, *, max_context_tokens=4096):
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=512), max_context_tokens=max_context_tokens,
                        tool_workers=1)
    (traj,) = run_episodes(None, tok, [(env, task)], cfg=cfg, sampler=Script(tok, turns), seed=0)
    return traj


def _bugfix_cases(bugfix):
    op = bugfix.correct_op.name
    path = f"/repo/{bugfix.source_file}"
    (read,), (edit,), _ = coding_tools_turns(bugfix, random.Random(0))
    fix = tool("Edit", **edit.arguments)
    return [
        # (env, kwargs, task, turns, end_reason, reward, context budget)
        ("edit-menu", {}, bugfix, [tool("read_file"), tool("edit", op=op), tool("submit")], "submitted", 1.0, None),
        ("edit-menu", {}, bugfix, ["I give up."], "final_answer", 0.0, None),
        # out of turns after a correct edit: graded on the final state (the write-ups' rule)
        ("edit-menu", {"max_turns": 2}, bugfix, [tool("edit", op=op), tool("read_file")], "out_of_turns", 1.0, None),
        ("edit-menu", {}, bugfix, [tool("edit", op=op), tool("read_file")], "out_of_tokens", 1.0, "tight"),
        ("edit-menu", {"sandbox": BrokenSandbox()}, bugfix, [tool("run_tests")], "env_error", None, None),
        ("coding-tools", {}, bugfix, [tool("Read", file_path=path), fix, "Fixed; the tests pass."], "final_answer", 1.0, None),
        ("coding-tools", {"max_turns": 2}, bugfix, [tool("Read", file_path=path), fix], "out_of_turns", 1.0, None),
        ("coding-tools", {}, bugfix, [tool("Read", file_path=path), fix, tool("Read", file_path=path)],
         "out_of_tokens", 1.0, "tight"),
        ("coding-tools", {"sandbox": BrokenSandbox()}, bugfix, [tool("Bash", command="python -m pytest -q")],
         "env_error", None, None),
    ]


def _session_and_wordle_cases():
    define = tool("run_python", code=SQUARE.reference)
    return [
        ("python-session", {}, SQUARE, [define, "Done."], "final_answer", 1.0, None),
        ("python-session", {"max_turns": 1}, SQUARE, [define], "out_of_turns", 1.0, None),
        ("python-session", {}, SQUARE, [define, tool("run_python", code="print(square(3))")], "out_of_tokens", 1.0,
         "tight"),
        ("wordle", {}, wordle_task("crane"), [tool("guess", word="slate"), tool("guess", word="crane")], "solved", 1.0,
         None),
        ("wordle", {"max_guesses": 2}, wordle_task("crane"), [tool("guess", word="slate")], "out_of_guesses", 0.0, None),
        ("wordle", {}, wordle_task("crane"), ["No idea."], "final_answer", 0.0, None),
        ("wordle", {"max_turns": 2}, wordle_task("crane"), [tool("guess", word="xx")], "out_of_turns", 0.0, None),
        ("wordle", {}, wordle_task("crane"), [tool("guess", word="slate"), tool("guess", word="pious")],
         "out_of_tokens", 0.0, "tight"),
    ]


def _tight_budget(tok, name, kwargs, task, turns):
    """A context budget that fits the prompt and every turn but the last."""
    probe = play(tok, make_env(name, **kwargs), task, turns[:-1] + ["done"])
    used = sum(len(t.completion_ids) + len(t.observation_ids) for t in probe.turns[:-1])
    return len(probe.prompt_ids) + used + 8


def test_every_environment_reaches_each_end_state_and_the_trajectory_agrees(tok, bugfix, sandbox, caplog):
    cases = _bugfix_cases(bugfix) + _session_and_wordle_cases()
    reached: dict[str, set[str]] = {name: set() for name in env_names()}
    for name, kwargs, task, turns, want_reason, want_reward, budget in cases:
        kwargs = {"sandbox": sandbox, **kwargs}
        env = make_env(name, **kwargs)
        limit = _tight_budget(tok, name, kwargs, task, turns) if budget == "tight" else 4096
        with caplog.at_level("ERROR", logger="agentrl"):
            traj = play(tok, env, task, turns, max_context_tokens=limit)
        where = f"{name} {want_reason}"
        assert traj.end_reason == want_reason, (where, traj.transcript)
        assert traj.reward == want_reward, (where, traj.transcript)
        assert traj.terminated != traj.truncated, where  # exactly one for a finished episode
        if want_reason == "env_error":
            assert traj.truncated and traj.reward is None and "sandbox is down" in traj.meta["error"]
            assert task.id in caplog.text and "Traceback" in caplog.text  # logged with the task id, never silent
        else:  # the environment's own ending, copied as is
            assert (env.end_reason, env.terminated, env.truncated) == (
                traj.end_reason, traj.terminated, traj.truncated), where
        assert traj.end_reason in get_spec(name).all_end_reasons(), where
        reached[name].add(traj.end_reason)
    for name in env_names():  # every end state an environment declares was reached, plus out_of_tokens
        assert set(get_spec(name).end_reasons) | {"out_of_tokens"} <= reached[name], name


def test_wordle_out_of_guesses_is_terminated_everywhere(tok):
    """The game is over (an MDP terminal state), not cut by a limit: env, StepResult and Trajectory agree."""
    env = make_env("wordle", max_guesses=1)
    traj = play(tok, env, wordle_task("crane"), [tool("guess", word="slate")])
    assert traj.end_reason == "out_of_guesses" and traj.terminated and not traj.truncated
    assert env.terminated and not env.truncated
    env.reset(wordle_task("crane"))
    res = env.step([make_call("guess", word="slate")])
    assert (res.done, res.terminated, res.truncated, res.end_reason) == (True, True, False, "out_of_guesses")


def make_call(name, **arguments):
    from agentrl.envs.experts import call

    return call(name, **arguments)


def test_driver_end_reasons_are_the_only_ones_it_adds():
    assert DRIVER_END_REASONS == ("out_of_tokens", "env_error")
    import agentrl.rollout.driver as driver

    assert not hasattr(driver, "TERMINATING")  # the driver keeps no table of the environments' endings
    assert "max_turns" not in RolloutConfig.__dataclass_fields__  # nor a turn limit of its own

"""How a black-box episode is scored from what its harness did (BlackBoxRunner._score, no opencode needed):
an overrun of calls or sampled tokens is graded on the workspace it left; infrastructure failures are
unscorable."""

import types

import pytest

from agentrl.harness.episode import GRADED_BUDGETS, BlackBoxRunner
from agentrl.harness.opencode import HarnessRun
from agentrl.rollout.trace import Trace, TraceCall, rows_from_trace


@pytest.fixture(scope="module")
def task():
    from agentrl.tasks import make_tasks

    return make_tasks(1, seed=3, split="train")[0]


@pytest.fixture(scope="module")
def runner():
    from agentrl.sandbox import Sandbox

    with Sandbox() as sb:
        yield types.SimpleNamespace(sandbox=sb)


def score(runner, task, *, budget="", source=None, returncode=0, events=(), calls=1, timed_out=False):
    trace = Trace("ro-x", tuple(TraceCall(i, (1, 2), (3, 4), (-0.1, -0.2), "tool_calls") for i in range(calls)),
                  budget_exceeded=budget)
    run = HarnessRun(returncode=returncode, timed_out=timed_out, wall_s=1.0, events=tuple(events), stderr_tail="",
                     stopped=f"budget_{budget}" if budget else "")
    rows = tuple(rows_from_trace(trace))
    return BlackBoxRunner._score(runner, task, run, trace, rows, source)


def test_a_finished_harness_is_graded(runner, task):
    assert score(runner, task, source=task.reference) == (1.0, "harness_exit")
    assert score(runner, task, source=task.files[task.source_file]) == (0.0, "harness_exit")


@pytest.mark.parametrize("budget", GRADED_BUDGETS)
def test_an_overrun_of_calls_or_tokens_is_graded_on_the_workspace_it_left(runner, task, budget):
    # the harness was killed (returncode -9) and reported the refused call as an error event: neither is a crash
    killed = dict(budget=budget, returncode=-9, events=[{"type": "error"}])
    assert score(runner, task, source=task.reference, **killed) == (1.0, f"budget_{budget}")
    assert score(runner, task, source=task.files[task.source_file], **killed) == (0.0, f"budget_{budget}")
    assert score(runner, task, source=None, **killed) == (0.0, f"budget_{budget}")  # graded file deleted


def test_infrastructure_failures_are_unscorable(runner, task):
    ok = task.reference
    assert score(runner, task, source=ok, budget="wall_time") == (None, "budget_wall_time")
    assert score(runner, task, source=ok, timed_out=True) == (None, "harness_timeout")
    assert score(runner, task, source=ok, returncode=1) == (None, "harness_crash")
    assert score(runner, task, source=ok, events=[{"type": "error"}]) == (None, "harness_error")
    assert score(runner, task, source=ok, calls=0) == (None, "no_model_calls")
    assert score(runner, task, source=ok, budget="max_calls", calls=0) == (None, "no_model_calls")

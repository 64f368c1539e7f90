"""Every family's invariants, graded by the real sandbox (references pass, bugs and wrong ops fail)."""

import dataclasses
import random

import pytest

from agentrl.tasks import FAMILIES, EditOp, make_tasks, randomize_names
from agentrl.tasks.check import check_tasks, render_table

sandbox = pytest.importorskip("agentrl.sandbox.sandbox", reason="agentrl.sandbox backend not merged yet")


@pytest.fixture(scope="module")
def box():
    with sandbox.Sandbox() as sb:
        yield sb


def test_every_family_keeps_its_invariants(box):
    n_per = 3
    tasks = make_tasks(n_per * len(FAMILIES), seed=9) + make_tasks(len(FAMILIES), seed=9, split="heldout")
    stats = check_tasks(tasks, box.run_tests_batch)
    assert set(stats) == set(FAMILIES)
    for s in stats.values():
        assert s.ok, (s.family, s.problems)
        assert s.tasks == n_per + 1 and s.reference_pct == 100.0 and s.buggy_pct == 0.0
        assert s.public_buggy_pct < 100.0 and s.wrong_ops >= 2 * s.tasks and s.wrong_pct == 0.0


def test_renamed_tasks_keep_their_invariants(box):
    rng = random.Random(1)
    tasks = [randomize_names(t, rng) for t in make_tasks(len(FAMILIES), seed=4)]
    assert all(s.ok for s in check_tasks(tasks, box.run_tests_batch).values())


def test_check_catches_broken_tasks(box):
    zero, minmax, sort = make_tasks(3, families=["zero", "minmax", "sort"])
    fix = zero.correct_op
    # A "wrong" op that is really the fix must be caught as a wrong op that passes.
    leaky = dataclasses.replace(zero, edit_ops=zero.edit_ops + (EditOp("fix_sign", fix.old, fix.new),))
    # Hidden tests that all pass on the buggy file: the bug is not caught.
    weak = dataclasses.replace(minmax, hidden_tests=(f"assert isinstance({minmax.entry}([5, 1]), int)",))
    # A reference that does not pass its own hidden tests.
    wrong_ref = dataclasses.replace(sort, reference=sort.files[sort.source_file])
    stats = check_tasks([leaky, weak, wrong_ref], box.run_tests_batch)
    assert stats["zero"].wrong_pass == 1 and not stats["zero"].ok
    assert stats["minmax"].buggy_pass == 1 and not stats["minmax"].ok
    assert stats["sort"].reference_pass == 0 and not stats["sort"].ok
    assert "FAIL" in str(render_table(stats).columns[-1]._cells)


def test_sandbox_failure_is_a_problem_not_a_failing_bug(box):
    # A buggy file that kills its sandbox worker gets no verdict (run.error): the check must say so,
    # not count the "bug" as caught by the hidden tests.
    (task,) = make_tasks(1, families=["zero"])
    killer = task.files[task.source_file] + "\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    broken = dataclasses.replace(task, files={**task.files, task.source_file: killer})
    stats = check_tasks([broken], box.run_tests_batch)["zero"]
    assert stats.buggy_pass == 0 and stats.reference_pass == 1 and not stats.ok
    assert any("buggy job got no verdict from the sandbox" in p for p in stats.problems), stats.problems

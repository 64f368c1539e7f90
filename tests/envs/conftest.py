"""Fixtures for the environment tests: two hand-built bug-fix tasks in the gym's shape, and a shared sandbox."""

import pytest

from agentrl.tasks.task import EditOp, Task

MINMAX_SRC = '''def stack_peak(values):
    """Return the largest value of a non-empty list."""
    best = values[0]
    for v in values[1:]:
        if v < best:
            best = v
    return best
'''

ZERO_SRC = '''def ratio_share(part, whole):
    """The share of part in whole; 0.0 when whole is zero."""
    return part / whole
'''


def _task(tid, family, src, entry, public, hidden, ops, reference):
    test_file = f"from {entry} import *\n\n" + "".join(
        f"def test_{i}():\n    {t}\n\n\n" for i, t in enumerate(public, 1))
    return Task(id=tid, family=family, split="train", files={f"{entry}.py": src, f"test_{entry}.py": test_file},
                entry=entry, source_file=f"{entry}.py", public_tests=tuple(public), hidden_tests=tuple(hidden),
                reference=reference, edit_ops=tuple(ops))


@pytest.fixture(scope="session")
def minmax_task():
    ops = [EditOp("fix_compare", "if v < best:", "if v > best:", correct=True),
           EditOp("fix_init", "best = values[0]", "best = 0"),
           EditOp("fix_range", "values[1:]", "values[2:]")]
    return _task("minmax-train-00001", "minmax", MINMAX_SRC, "stack_peak",
                 ["assert stack_peak([1, 3, 2]) == 3"],
                 ["assert stack_peak([1, 3, 2]) == 3", "assert stack_peak([-5, -2, -9]) == -2",
                  "assert stack_peak([7]) == 7", "assert stack_peak([2, 2, 8, 1]) == 8"],
                 ops, MINMAX_SRC.replace("if v < best:", "if v > best:"))


@pytest.fixture(scope="session")
def zero_task():
    fixed = ZERO_SRC.replace("return part / whole", "return part / whole if whole else 0.0")
    ops = [EditOp("fix_zero", "return part / whole", "return part / whole if whole else 0.0", correct=True),
           EditOp("fix_floor", "part / whole", "part // whole")]
    return _task("zero-train-00001", "zero", ZERO_SRC, "ratio_share",
                 ["assert ratio_share(1, 4) == 0.25"],
                 ["assert ratio_share(1, 4) == 0.25", "assert ratio_share(3, 0) == 0.0", "assert ratio_share(0, 5) == 0.0"],
                 ops, fixed)


@pytest.fixture(scope="session")
def sandbox():
    from agentrl.sandbox import Sandbox

    return Sandbox()


@pytest.fixture(scope="session")
def gym_tasks():
    """One renamed train task of every bug-fix family (the RL default setting), from agentrl.tasks."""
    import random

    from agentrl.tasks import FAMILIES, make_tasks, randomize_names

    rng = random.Random(0)
    return [randomize_names(t, rng) for t in make_tasks(len(FAMILIES), seed=0)]

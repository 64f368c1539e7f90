import random

import pytest

from agentrl.tasks import make_tasks, randomize_names
from agentrl.tasks.rename import visible_texts


def test_renaming_leaves_no_trace_of_the_old_name():
    rng = random.Random(0)
    for task in make_tasks(190, seed=2):
        new = randomize_names(task, rng)
        old = task.entry
        assert new.entry != old and new.meta["original_entry"] == old
        assert set(new.files) == {f"{new.entry}.py", f"test_{new.entry}.py"}
        assert new.source_file == f"{new.entry}.py"
        seen = "\n".join(visible_texts(new) + [new.reference, *new.hidden_tests])
        assert old not in seen
        assert f"from {new.entry} import *" in new.files[f"test_{new.entry}.py"]
        assert all(new.entry in t for t in new.hidden_tests)
        # The rename is a pure relabelling: the correct op still turns the buggy file into the reference.
        op = new.correct_op
        assert new.files[new.source_file].replace(op.old, op.new) == new.reference
        assert new.id == task.id and new.family == task.family


def test_renaming_is_deterministic_under_the_rng():
    task = make_tasks(1)[0]
    assert randomize_names(task, random.Random(7)) == randomize_names(task, random.Random(7))


def test_renaming_refuses_to_leave_a_visible_trace():
    import dataclasses

    task = make_tasks(1)[0]
    # A longer identifier that contains the name cannot be renamed by whole-word replacement.
    leaky = dataclasses.replace(task, files={**task.files, "notes.txt": f"see {task.entry}_helper"})
    with pytest.raises(ValueError, match="still visible"):
        randomize_names(leaky, random.Random(0))

"""Task sets of a run: held-out families apart from the training families (transfer to unseen bugs)."""

from __future__ import annotations

import pytest

from agentrl.tasks.sets import task_sets


def test_eval_families_hold_out_families_never_trained_on():
    sets = task_sets("bugfix", train_size=40, families="minmax,compare,zero", eval_families="range,init,zero")
    assert {t.family for t in sets.train} == {"minmax", "compare", "zero"}
    assert [t.family for t in sets.heldout].count("range") == 2 and {t.family for t in sets.heldout} == {
        "range", "init", "zero"}
    assert len(sets.heldout) == 6  # 2 per held-out family unless --eval-size says otherwise
    assert len(task_sets("bugfix", train_size=8, eval_families="range", eval_size=3).heldout) == 3
    same = task_sets("bugfix", train_size=8, families="minmax")
    assert {t.family for t in same.heldout} == {"minmax"}  # default: held out from the trained families


def test_eval_families_apply_to_bugfix_only():
    with pytest.raises(ValueError, match="--eval-families applies to --tasks bugfix only"):
        task_sets("wordle", eval_families="minmax")


@pytest.mark.parametrize("kw, flag", [({"eval_size": -1}, "--eval-size"), ({"train_size": -3}, "--train-size")])
def test_a_negative_size_is_refused_not_sliced(kw, flag):
    """A negative size was a slice: `agentrl serve --eval-size -1` served every held-out task but the last."""
    with pytest.raises(ValueError, match=f"{flag}: expected an integer >= 0"):
        task_sets("bugfix", **kw)

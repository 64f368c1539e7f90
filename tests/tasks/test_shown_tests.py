"""Issue 14.4a: the example test shown in the prompt is not part of the hidden-test reward by default
(MBPP, HumanEval); `reward_includes_shown_test` restores the write-up's scoring; results record which."""

import pytest

from agentrl.cli import build_parser
from agentrl.rl.config import RLConfig
from agentrl.tasks.humaneval import load_humaneval
from agentrl.tasks.mbpp import load_mbpp, split_shown_tests
from agentrl.tasks.sets import task_sets


@pytest.mark.parametrize("load", [load_mbpp, load_humaneval], ids=["mbpp", "humaneval"])
def test_shown_test_is_not_scored_by_default(load):
    tasks = load()
    for t in tasks:
        assert t.hidden_tests, t.id  # every problem keeps at least one scored test
        assert not set(t.public_tests) & set(t.hidden_tests), t.id
        assert t.meta["reward_includes_shown_test"] is False and t.meta["shown_test_indices"] == ()
    assert sum(bool(t.public_tests) for t in tasks) >= len(tasks) - 4  # HumanEval: 4 single-test problems
    full = {t.id: t for t in load(reward_includes_shown=True)}
    for t in tasks:
        f = full[t.id]
        assert f.hidden_tests[: len(f.public_tests)] == f.public_tests
        assert f.meta["shown_test_indices"] == tuple(range(len(f.public_tests)))
        assert set(t.hidden_tests) | set(t.public_tests) == set(f.hidden_tests)


def test_split_shown_tests_rules():
    assert split_shown_tests(["a", "b", "c"], 1, False) == (("a",), ("b", "c"), {
        "shown_test_indices": (), "reward_includes_shown_test": False})
    assert split_shown_tests(["a", "b", "c"], 1, True) == (("a",), ("a", "b", "c"), {
        "shown_test_indices": (0,), "reward_includes_shown_test": True})
    assert split_shown_tests(["a"], 1, False)[:2] == ((), ("a",))  # a lone test stays hidden, not shown
    assert split_shown_tests(["a", "b"], 0, False)[:2] == ((), ("a", "b"))


def test_flag_reaches_the_task_sets_and_the_config():
    parse = build_parser().parse_args
    assert parse(["train"]).reward_includes_shown_test is False
    assert parse(["train", "--reward-includes-shown-test"]).reward_includes_shown_test is True
    assert parse(["eval", "--reward_includes_shown_test"]).reward_includes_shown_test is True
    assert RLConfig.from_flat(reward_includes_shown_test=True).to_flat()["reward_includes_shown_test"] is True
    default = task_sets("mbpp", eval_size=4)
    written = task_sets("mbpp", eval_size=4, reward_includes_shown_test=True)
    assert all(len(w.hidden_tests) == len(d.hidden_tests) + 1 for d, w in zip(default.heldout, written.heldout,
                                                                            strict=True))

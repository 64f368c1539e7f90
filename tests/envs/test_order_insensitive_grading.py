"""Issue 14.4b: grading does not depend on hash-randomised ordering. Where a test's expected order came
from set iteration (the reference's own order changes with the hash seed), the reference and a candidate
that computes the same set pass in every fresh process; where the order is meaningful, it still counts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.envs.order_insensitive import relaxed
from agentrl.envs.session_grader import hardened_job
from agentrl.sandbox import Sandbox

WORDS = ["apple", "berry", "cherry", "damson", "elder", "fig", "grape", "hazel"]
SET_REF = "def f(xs):\n    return list(set(xs))\n"
# expected values as printed in one process: their order is that process's hash order
SET_TESTS = tuple(f"assert f({p!r}) == {p!r}" for p in (WORDS[:2], WORDS[2:5], WORDS[5:]))
SORT_REF = "def f(xs):\n    return sorted(set(xs))\n"
SORT_TESTS = ("assert f(['fig', 'apple', 'fig']) == ['apple', 'fig']", "assert f(['b', 'a']) != ['b', 'a']")


@pytest.fixture(scope="module")
def fresh():
    with Sandbox(warm_pool=False) as sb:  # every job a fresh interpreter: its own hash seed
        yield sb


def grade(sb, cells, tests, reference, runs):
    jobs = [hardened_job(cells, "solution", tests, reference=reference) for _ in range(runs)]
    return [tuple(o.status for o in r.outcomes) if not r.error else r.error for r in sb.run_tests_batch(jobs)]


def test_set_order_from_hash_iteration_passes_in_every_process(fresh):
    assert set(grade(fresh, [SET_REF], SET_TESTS, SET_REF, 8)) == {("pass",) * 3}
    other = "def f(xs):\n    out = set()\n    for x in reversed(xs):\n        out.add(x)\n    return [*out]\n"
    assert set(grade(fresh, [other], SET_TESTS, SET_REF, 6)) == {("pass",) * 3}
    wrong = "def f(xs):\n    return list(set(xs))[:-1]\n"  # not the same items: still fails
    assert set(grade(fresh, [wrong], SET_TESTS, SET_REF, 3)) == {("fail",) * 3}


def test_meaningful_order_still_counts(fresh):
    unsorted = "def f(xs):\n    return list(dict.fromkeys(xs))\n"  # right items, wrong order
    assert set(grade(fresh, [unsorted], SORT_TESTS, SORT_REF, 3)) == {("fail", "fail")}
    assert set(grade(fresh, [SORT_REF], SORT_TESTS, SORT_REF, 3)) == {("pass", "pass")}


def test_without_a_reference_grading_is_as_written(fresh):
    results = grade(fresh, [SET_REF], SET_TESTS[2:], None, 12)  # 3 strings: 1 of 6 orders is the printed one
    assert ("fail",) in results


@settings(max_examples=200, deadline=None)
@given(a=st.recursive(st.integers() | st.text(max_size=3), lambda c: st.lists(c, max_size=4) | st.tuples(c, c),
                      max_leaves=8),
       seed=st.randoms(use_true_random=False))
def test_same_items_is_equality_up_to_order(a, seed):
    ns = {}
    exec(__import__("agentrl.envs.order_insensitive", fromlist=["PRELUDE"]).PRELUDE.format(
        g="_t", ref="", setup="", strict=[], loose=[], probes=[], salts=1), ns)
    same = ns["_same_t"]
    assert same(a, a)
    if isinstance(a, list):
        b = list(a)
        seed.shuffle(b)
        assert same(a, b) and same(b, a)
        assert not same(a, b + [object()])


def test_relaxed_rewrites_equalities_only():
    assert relaxed("assert f(x) == [1, 2] and g != 3", "S") == "assert S(f(x), [1, 2]) and (not S(g, 3))"
    assert relaxed("assert f(x) < 3", "S") is None and relaxed("assert (", "S") is None

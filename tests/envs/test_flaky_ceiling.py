"""Issue 14.4b: the ceiling check grades each reference several times, each in a fresh interpreter (its own
hash seed), and names the tasks whose outcome depends on it."""

import re

from agentrl.cli import main
from agentrl.envs.ceiling import session_ceiling
from agentrl.sandbox import Sandbox
from agentrl.tasks.task import Task

WORDS = ["apple", "berry", "cherry", "damson", "elder", "fig", "grape", "hazel", "kiwi", "lemon", "mango", "nectar"]


def task(tid, reference, tests):
    return Task(id=tid, family="mbpp", split="train", files={}, entry="f", source_file="solution.py",
                public_tests=(), hidden_tests=tuple(tests), reference=reference, meta={"shown_test_indices": ()})


def test_hash_order_dependent_reference_is_reported_flaky_by_id():
    # f's output order is set iteration order of strings: it changes with the interpreter's hash seed, and a
    # test that reads one position of it is not an order-insensitive comparison (agentrl.envs.order_insensitive)
    order = task("mbpp-9001", "def f(xs):\n    return list(set(xs))\n",
                 [f"assert f([{a!r}, {b!r}])[0] == {a!r}" for a, b in zip(WORDS[::2], WORDS[1::2], strict=True)])
    stable = task("mbpp-9002", "def f(xs):\n    return sorted(set(xs))\n", ["assert f(['b', 'a', 'b']) == ['a', 'b']"])
    with Sandbox(warm_pool=False) as sandbox:
        res = session_ceiling([order, stable], sandbox, repeats=4)
    assert [tid for tid, _ in res["flaky"]] == ["mbpp-9001"]
    assert "differs between fresh processes" in res["flaky"][0][1]


def test_env_check_reports_flaky_count(capsys):
    assert main(["env", "check", "mbpp", "--split", "train", "--limit", "3", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mbpp train: 3/3 reference solutions pass all tests (ceiling 1.000)")
    assert "flaky (outcome differs between fresh processes): 0" in out
    assert re.search(r"reward: the tests not shown in the prompt", out)

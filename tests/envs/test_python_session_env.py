import pytest

from agentrl.envs import ToolCall, check_env, make_env
from agentrl.envs.experts import play
from agentrl.envs.python_session import python_session_turns
from agentrl.tasks.mbpp import load_mbpp
from agentrl.tasks.task import Task


def run(code):
    return ToolCall("run_python", {"code": code})


SQUARE = Task(id="sq-1", family="mbpp", split="train", files={}, entry="square", source_file="solution.py",
              public_tests=("assert square(3) == 9",),
              hidden_tests=("assert square(3) == 9", "assert square(-2) == 4", "assert math.isclose(square(0.5), 0.25)",
                            "assert sorted(set(map(square, [1, -1, 2]))) == [1, 4]"),
              reference="def square(x):\n    return x * x\n", test_setup="import math",
              meta={"prompt_text": "Write a function that squares a number.", "shown_test_indices": (0,)})


@pytest.fixture()
def env(sandbox):
    e = make_env("python-session", sandbox=sandbox)
    yield e
    e.close()


def test_state_persists_and_reward_is_the_hidden_fraction(env):
    obs = env.reset(SQUARE)
    assert "squares a number" in obs.user and "assert square(3) == 9" in obs.user and "-2" not in obs.user
    (r,) = env.step([run("def square(x):\n    return x * 3\nprint(square(3))")]).results
    assert r.status == "ok" and r.content == "9"
    (r,) = env.step([run("square(2)")]).results  # state persists between calls
    env.final_answer("done")
    assert env.reward() == 0.25  # only square(3) == 9 passes
    assert env.stats()["reward_from_shown_tests"] == 0.25


def test_expert_scores_one_and_check_env(env):
    assert play(env, SQUARE, python_session_turns(SQUARE, None)) == 1.0
    assert check_env(env, SQUARE)["reward"] == 1.0


HOSTILE = {
    "lying equality": "class Any(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                      "def square(x):\n    return Any(0)",
    "object that equals everything": "class Yes:\n    def __eq__(self, o):\n        return True\n"
                                     "def square(x):\n    return Yes()",
    "patched builtins": "import builtins\nbuiltins.sorted = lambda *a, **k: [1, 4]\n_s = builtins.set\n"
                        "def square(x):\n    return 0",
    "patched module at import": "import math\ndef _patch():\n    math.isclose = lambda *a, **k: True\n    return 1\n"
                                "_ok = _patch()\ndef square(x):\n    return 0",
    "patched module at call time": "import math\ndef square(x):\n    math.isclose = lambda *a, **k: True\n    return 0",
    "builtins the tests call, shadowed": "def square(x):\n    return 0\ndef sorted(*a, **k):\n    return [1, 4]\n"
                                         "def set(*a):\n    return 1\n",
    "liar defined in a kept if block": "if True:\n    class Yes:\n        def __eq__(self, o):\n            return True\n"
                                       "    def square(x):\n        return Yes()",
    "liar reached through map": "class Yes:\n    def __eq__(self, o):\n        return True\n    def __hash__(self):\n"
                                "        return 1\n    def __lt__(self, o):\n        return False\n"
                                "def square(x):\n    return Yes()",
}


# Also hostile: hacks that reached the grader from inside its own process while the tests ran beside the agent's module: the
# guard found through globals() and replaced, and the harness's per-test runner patched so that every test passes.
IN_PROCESS_HACKS = {
    "guard replaced through globals()": "class Yes:\n    def __eq__(self, o):\n        return True\n"
                                        "def _swap():\n    g = globals()\n    for k in list(g):\n"
                                        "        if k.startswith('_guard'):\n            g[k] = lambda o: o\n    return 1\n"
                                        "_ok = _swap()\ndef square(x):\n    return Yes()",
    "harness runner patched": "import sys\n_m = sys.modules['__main__']\n"
                              "_ok = setattr(_m, '_run_one_test', lambda *a, **k: ('pass', ''))\n"
                              "def square(x):\n    return 0",
}
HOSTILE.update(IN_PROCESS_HACKS)  # the tests compare in a process the module's code never runs in


@pytest.mark.parametrize("name", list(HOSTILE))
def test_session_state_cannot_forge_a_pass(env, name):
    env.reset(SQUARE)
    env.step([run(HOSTILE[name])])
    env.final_answer("done")
    # square returns 0 (or a liar): only math.isclose at call time could pass one test, and not even that
    assert env.reward() == 0.0, name


def test_a_fallback_import_around_a_definition_grades_as_in_the_session(env):
    env.reset(SQUARE)
    (r,) = env.step([run("try:\n    from operator import mul as _mul\nexcept ImportError:\n    def _mul(a, b):\n"
                         "        return a * b\ndef square(x):\n    return _mul(x, x)\nprint(square(3))")]).results
    assert r.content == "9"
    env.final_answer("done")
    assert env.reward() == 1.0  # was 0.0: the try block was dropped, so _mul was undefined when graded


def test_live_session_patches_do_not_reach_grading(env):
    env.reset(SQUARE)
    env.step([run("def square(x):\n    return x * x")])
    (r,) = env.step([run("import builtins\nbuiltins.sorted = lambda *a, **k: [1, 4]\nsquare = lambda x: 0\nprint('patched')")]).results
    assert r.content == "patched"
    env.final_answer("done")
    assert env.reward() == 0.0  # the later plain-name rebinding counts; the builtins patch does not
    env.reset(SQUARE)
    env.step([run("def square(x):\n    return x * x"), run("import builtins\nbuiltins.abs = None\nsquare(3) == 9")])
    env.final_answer("done")
    assert env.reward() == 1.0


def test_blocked_imports_timeouts_and_errors(sandbox):
    env = make_env("python-session", sandbox=sandbox, cell_timeout_s=1.0)
    env.reset(SQUARE)
    r1, r2, r3 = env.step([run("import subprocess"), run("def square(x):\n    return x * x"), run("1 / 0")]).results
    assert r1.status == "failed" and "subprocess" in r1.content
    assert r2.status == "ok" and "ZeroDivisionError" in r3.content
    (r,) = env.step([run("while True:\n    pass")]).results
    assert "[stopped: wall-clock limit of 1 s reached]" in r.content
    env.final_answer("done")
    s = env.stats()
    assert (s["blocked_imports"], s["cell_timeouts"], s["cell_errors"], s["session_restarts"]) == (1, 1, 2, 1)
    assert env.cells == [] and env.reward() == 0.0  # the timeout wiped the session, so square is gone
    env.close()


def test_a_few_real_mbpp_problems(env):
    tasks = {t.meta["task_id"]: t for t in load_mbpp(split="train")}
    for tid in (2, 602, 603):
        task = tasks[tid]
        assert play(env, task, python_session_turns(task, None)) == 1.0, tid


def _graded(sandbox, code, tests, setup=""):
    from agentrl.envs.session_grader import hardened_job

    report = sandbox.run_tests(hardened_job([code], "solution", tests, setup))
    assert report.error is None, report.error
    return [o.status for o in report.outcomes]


def test_grader_keeps_plain_python_semantics(sandbox):
    gen = "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)"
    assert _graded(sandbox, gen, ("assert list(evens(5)) == [0, 2, 4]", "assert evens(5) == [0, 2, 4]")) == [
        "pass", "fail"]  # an iterator is drained for list(), but never equals a list, as in plain Python
    private = "def _sum(xs):\n    return sum(xs)"  # exported like exec-ing code and tests in one namespace
    assert _graded(sandbox, private, ("assert _sum([1, 2]) == 3",)) == ["pass"]
    match = "import re\ndef starts_with_vowel(s):\n    return re.match('[aeiou]', s)"
    assert _graded(sandbox, match, ("assert starts_with_vowel('apple')", "assert not starts_with_vowel('pear')",
                                    "assert starts_with_vowel('apple') == 'a'")) == ["pass", "pass", "fail"]
    counter = "from collections import Counter\ndef count(s):\n    return Counter(s)"
    assert _graded(sandbox, counter, ("assert count('aab') == {'a': 2, 'b': 1}",)) == ["pass"]
    obj = "class P:\n    pass\ndef make():\n    return P()"
    assert _graded(sandbox, obj, ("assert make() is not None",)) == ["error"]  # not plain data: a clear TypeError

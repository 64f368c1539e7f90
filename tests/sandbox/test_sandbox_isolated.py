"""Isolated grading (TestJob.isolate): the module runs in an agent process, the tests compare in a checker process.

Whatever the agent process does (forge reports, die, hang, answer garbage or too much), a test it touches fails
or errs, never passes, and the tests after it get a fresh agent process.
"""

import pytest

from agentrl.sandbox.api import AGENT_VALUE, TestJob


def _statuses(sb, src, tests, setup=""):
    report = sb.run_tests(TestJob(files={"m.py": src}, module="m", tests=tests, setup=setup, isolate=True))
    assert report.error is None, report.error
    return [o.status for o in report.outcomes]


def test_plain_data_crosses_and_module_state_persists(sb):
    src = ("X = [1, (2, 'a'), {3}, frozenset({4}), {5: b'x'}, 2 ** 100, -1.5, None, True, 1 + 2j, range(3)]\n"
           "C = []\n"
           "def inc(step=1):\n    C.append(step)\n    return len(C)\n"
           "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n")
    tests = (f"assert {AGENT_VALUE}(X) == [1, (2, 'a'), {{3}}, frozenset({{4}}), {{5: b'x'}}, 2 ** 100, -1.5, None, "
             "True, 1 + 2j, range(3)]",
             "assert inc() == 1 and inc(step=(1, [2])) == 2",
             f"assert {AGENT_VALUE}(C) == [1, (1, [2])]",  # one agent process for all tests: its state persists
             "assert list(evens(5)) == [0, 2, 4] and list(map(inc, [0])) == [3]",
             "assert X == [1]")  # a value read without AGENT_VALUE is a reference, equal to nothing
    assert _statuses(sb, src, tests) == ["pass", "pass", "pass", "pass", "fail"]


def test_exceptions_keep_their_builtin_type_and_arguments_must_be_plain(sb):
    src = ("class Bad(ValueError):\n    pass\n"
           "def f(x):\n    raise Bad('no')\n"
           "def apply(g, x):\n    return g(x)\n"
           "def leave():\n    raise SystemExit(0)\n"
           "class P:\n    pass\n")
    tests = ("try:\n    f(1)\nexcept ValueError as e:\n    assert str(e) == 'no'\nelse:\n    raise AssertionError",
             "assert apply(abs, -1) == 1",  # a function is no argument (it cannot cross)
             "try:\n    leave()\nexcept Exception:\n    pass",  # SystemExit is no Exception here either
             "assert P() is not None")  # not plain data
    assert _statuses(sb, src, tests) == ["pass", "error", "error", "error"]


HOSTILE = {
    # the reporter is in the agent process's memory (a fork of the checker), its result fd is not
    "forged reports": "import gc\n"
                      "def square(x):\n"
                      "    for o in gc.get_objects():\n"
                      "        if getattr(o, '__name__', '') == 'report' and callable(o):\n"
                      "            for i in range(4):\n"
                      "                o(ev='test', i=i, s='pass', msg='')\n"
                      "            o(ev='done')\n"
                      "    return 0\n",
    "harness patched": "import sys\n"
                       "def square(x):\n"
                       "    main = sys.modules['__main__']\n"
                       "    main._run_one_test = lambda *a, **k: ('pass', '')\n"
                       "    main.run_isolated = lambda *a, **k: 0\n"
                       "    return 0\n",
    "garbage answer": "import os\n"
                      "def square(x):\n"
                      "    for fd in range(3, 256):\n"
                      "        try:\n"
                      "            os.write(fd, b'\\x00\\x00\\x00\\x05nope!')\n"
                      "        except OSError:\n"
                      "            pass\n"
                      "    return x * x\n",
    "oversized answer": "import os\n"
                        "def square(x):\n"
                        "    for fd in range(3, 256):\n"
                        "        try:\n"
                        "            os.write(fd, b'\\x7f\\xff\\xff\\xff[')\n"
                        "        except OSError:\n"
                        "            pass\n"
                        "    return x * x\n",
    "oversized result": "def square(x):\n    return 'x' * (40 << 20)\n",
    "agent process dies": "import os\ndef square(x):\n    os._exit(0)\n",
    "agent process hangs": "def square(x):\n    while True:\n        pass\n",
    "agent process forks": "import os\ndef square(x):\n    os.fork()\n    return x * x\n",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_agent_process_cannot_pass_a_test_and_the_next_test_gets_a_fresh_one(sb, name):
    src = HOSTILE[name] + "def cube(x):\n    return x * x * x\n"
    tests = ("assert square(3) == 9", "assert square(-2) == 4", "assert cube(2) == 8", "assert cube(3) == 27")
    statuses = _statuses(sb, src, tests)
    assert "pass" not in statuses[:2] and statuses[2:] == ["pass", "pass"], (name, statuses)


def test_a_fresh_interpreter_isolates_too(fresh_sb):
    """Without the warm pool (one launcher per job, no zygote), the same boundary and restarts."""
    src = "import os\ndef square(x):\n    os._exit(0)\ndef cube(x):\n    return x ** 3\n"
    assert _statuses(fresh_sb, src, ("assert square(3) == 9", "assert cube(2) == 8")) == ["error", "pass"]
    report = fresh_sb.run_tests(TestJob(files={"m.py": "raise SystemExit(0)\n"}, module="m", tests=("assert 1",),
                                        isolate=True))
    assert report.error and "import of 'm' failed" in report.error and report.passed == 0


def test_a_module_name_shadowing_a_builtin_reaches_the_tests_only_as_an_entry_name(sb):
    """A module that defines `sorted` (or `set`, `len`) to return what a test expects changed what the test's own
    `sorted(...)` computed: a wrong function passed. Only the functions the tests are about (entry_names) may
    bear a builtin's name."""
    src = "def square(x):\n    return 0\ndef sorted(*a, **k):\n    return [1, 4]\ndef len(x):\n    return 2\n"
    tests = ("assert sorted(map(square, [1, -1, 2])) == [1, 4]", "assert len(sorted([3, 1])) == 2")
    report = sb.run_tests(TestJob(files={"m.py": src}, module="m", tests=tests, isolate=True))
    assert [o.status for o in report.outcomes] == ["fail", "pass"]  # the builtins: [0, 0, 0] and 2
    report = sb.run_tests(TestJob(files={"m.py": src}, module="m", tests=tests, isolate=True, entry_names=("sorted",)))
    assert [o.status for o in report.outcomes] == ["pass", "pass"]  # sorted is what the tests are about here
    with pytest.raises(TypeError, match="entry_names"):
        TestJob(files={"m.py": src}, module="m", tests=tests, entry_names="sorted")

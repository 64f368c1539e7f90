from agentrl.envs.session_grader import definitions, harden_test, hardened_job


def test_definitions_keep_defs_imports_and_plain_assignments_only():
    cells = [
        "import math\ndef f(x):\n    return x + 1\nprint(f(2))\nassert f(1) == 2",
        "import builtins\nbuiltins.len = lambda x: 3\nmath.pi = 3\nTABLE = [1, 2]\na, b = 1, 2\nfor i in range(3):\n    TABLE.append(i)",
        "def broken(:\n    pass",  # a syntax error defined nothing in the session either
        "class Liar(int):\n    def __eq__(self, other):\n        return True",
    ]
    code, names, future = definitions(cells)
    assert "print(" not in code and "assert" not in code and "builtins.len" not in code
    assert "math.pi" not in code and "for i" not in code and "broken" not in code
    assert {"f", "TABLE", "a", "b", "Liar"} == names and future == []


def test_harden_guards_every_read_of_agent_names_only():
    out = harden_test("assert math.isclose(f(g(2)), 1.5) and len(x) == 2", {"f", "g"}, "_P")
    assert out == "assert math.isclose(_P(f)(_P(g)(2)), 1.5) and len(x) == 2"
    assert harden_test("assert sorted(map(f, xs)) == [1]", {"f"}, "_P", "_R") == "_R()\nassert sorted(map(_P(f), xs)) == [1]"
    assert harden_test("assert (", {"f"}, "_P") == "assert ("  # unparsable: unchanged, fails as written


def test_hardened_job_is_isolated_and_its_file_is_the_agents_code_only():
    """The tests run in a checker process that never imports the graded file (TestJob.isolate), so the file holds
    no grader code beside the agent's (there was a guard and a builtins snapshot, reachable from the agent's code
    through globals()), and reads of the agent's names go through the sandbox's AGENT_VALUE."""
    from agentrl.sandbox.api import AGENT_VALUE

    a = hardened_job(["def f(): return 1"], "solution", ("assert f() == 1",))
    assert a.files == {"solution.py": "def f(): return 1\n"} and a.module == "solution" and a.isolate
    assert a.tests == (f"assert {AGENT_VALUE}(f)() == 1",)


def test_a_whole_file_keeps_every_statement_and_future_imports_go_first():
    """A file the agent wrote (coding-tools) runs whole when imported: its module-level loop, `try: import`
    and expression statements are kept (a session's cells keep only definitions), and `from __future__`
    imports, in either mode, come out to be put first in the graded file."""
    src = ("from __future__ import annotations\nimport math\n_T = {}\nfor i in range(3):\n    _T[i] = i\n"
           "try:\n    import json\nexcept ImportError:\n    json = None\n")
    code, names, future = definitions([src], whole_file=True)
    assert future == ["from __future__ import annotations"] and "__future__" not in code
    assert "for i in range(3)" in code and "try:" in code and {"_T", "i", "json"} <= names
    code, names, future = definitions([src])
    assert future == ["from __future__ import annotations"] and "for i" not in code
    assert "try:" in code and "json" in names  # a try block made only of kept statements (below)
    job = hardened_job([src], "solution", ("assert _T[2] == 2",), whole_file=True)
    assert job.files["solution.py"].startswith("from __future__ import annotations\n")


def test_a_future_import_python_refuses_is_not_moved_into_place():
    """`from __future__` imports are put first in the graded file, so one that Python refuses (after other code)
    made a file that cannot be imported (pytest: "from __future__ imports must occur at the beginning of the
    file") grade as if it could: a correct function behind it scored 1.0. Such a file or cell defines nothing,
    as a syntax error; a docstring and other future imports before it are fine, as in Python."""
    for src in ('"""Doc."""\nfrom __future__ import annotations\nfrom __future__ import division\ndef f(): return 1\n',
                "def f(): return 1\nfrom __future__ import annotations\n",
                "import os\nfrom __future__ import annotations\ndef f(): return 1\n",
                '"""Doc."""\n"""Not a docstring."""\nfrom __future__ import annotations\ndef f(): return 1\n'):
        try:
            compile(src, "f.py", "exec", dont_inherit=True)
            python_takes_it = True
        except SyntaxError:
            python_takes_it = False
        for whole_file in (True, False):
            code, names, future = definitions([src], whole_file=whole_file)
            assert ("f" in names) == python_takes_it and bool(future) == python_takes_it, (src, whole_file)


def test_session_cells_keep_try_and_if_blocks_made_only_of_definitions():
    """A fallback import (`try: from math import lcm` / `except ImportError: def lcm...`) or a version check around
    definitions defines names the session has, so a correct function relying on it must grade as in the session
    (it scored 0: the block was dropped, so the name was undefined). A block with anything else in it (a call, a
    loop, an attribute assignment) is dropped whole, as at the top level."""
    cells = ["import sys\ntry:\n    from math import lcm\nexcept ImportError:\n    def lcm(a, b):\n"
             "        g = a\n        return g\nelse:\n    pass\nfinally:\n    LOADED = True\n",
             "if sys.version_info >= (3, 8):\n    def f(x):\n        local_name = lcm(x, 6)\n        return local_name\n"
             "else:\n    f = None\n",
             "try:\n    import json\n    print('loaded')\nexcept ImportError:\n    pass\n",
             "if True:\n    import builtins\n    builtins.len = None\n",
             "if True:\n    for i in range(3):\n        pass\n"]
    code, names, _ = definitions(cells)
    assert "from math import lcm" in code and "def f(x)" in code and "LOADED = True" in code
    assert "print(" not in code and "builtins.len" not in code and "for i" not in code
    assert names == {"lcm", "LOADED", "f"}  # not a def's locals (g, local_name), not dropped blocks' names
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - the test's own code
    assert ns["f"](4) == 12

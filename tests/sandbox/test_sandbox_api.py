"""The sandbox's public API: argv forms, files round trip, the grader's statuses, batches, fallback."""

import os

import pytest

from agentrl.sandbox import RunResult, Sandbox, SandboxLimits, TestJob, normalize_argv

SRC = "def add(a, b):\n    return a + b\n"


def test_normalize_argv_forms():
    assert normalize_argv(["python", "a.py", "x"]) == ["a.py", "x"]
    assert normalize_argv(["python", "-m", "pytest", "-q"]) == ["pytest", "-q"]
    assert normalize_argv(["pytest", "-x"]) == ["pytest", "-x"]
    for bad in (["bash", "-c", "ls"], ["python", "-c", "print(1)"], [], ["python", "../a.py"], "python a.py"):
        with pytest.raises(ValueError, match="sandbox argv"):
            normalize_argv(bad)


def test_run_script_args_exit_code_and_backend(sb):
    r = sb.run({"pkg/a.py": "import sys\nprint(sys.argv[1:])\nsys.exit(3)\n"}, ["python", "pkg/a.py", "x", "y"])
    assert isinstance(r, RunResult)
    assert r.stdout == "['x', 'y']\n" and r.exit_code == 3 and r.backend == sb.backend
    assert not r.timed_out and r.error is None


def test_run_uncaught_exception_gives_traceback(sb):
    r = sb.run({"a.py": "raise KeyError('boom')\n"}, ["python", "a.py"])
    assert r.exit_code == 1 and "KeyError: 'boom'" in r.stderr


def test_traceback_is_what_python_file_prints(sb):
    """No launcher or runpy frames, work-dir paths relative, a SyntaxError without a stack (as CPython)."""
    files = {"a.py": "import b\nb.g()\n", "b.py": "def g():\n    raise ValueError('v')\n"}
    r = sb.run(files, ["python", "a.py"])
    assert r.exit_code == 1
    assert r.stderr == ("Traceback (most recent call last):\n  File \"a.py\", line 2, in <module>\n    b.g()\n"
                        "  File \"b.py\", line 2, in g\n    raise ValueError('v')\nValueError: v\n")
    r = sb.run({"a.py": "x = (\n"}, ["python", "a.py"])
    assert r.exit_code == 1 and r.stderr.startswith('  File "a.py", line 1\n') and "SyntaxError" in r.stderr
    assert "launcher" not in r.stderr and "runpy" not in r.stderr


def test_pytest_forms_really_run(sb):
    files = {"m.py": SRC, "test_m.py": "from m import add\ndef test_ok():\n    assert add(1, 2) == 3\n"
             "def test_bad():\n    assert add(1, 2) == 4\n"}
    for argv in (["pytest", "-q"], ["python", "-m", "pytest", "-q"]):
        r = sb.run(files, argv)
        assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
        assert r.exit_code == 1


def test_return_files_syncs_written_files(sb):
    code = "open('out.txt','w').write('hi')\nimport os\nos.remove('gone.txt')\n"
    r = sb.run({"a.py": code, "gone.txt": "x"}, ["python", "a.py"], return_files=True)
    assert r.files == {"a.py": code, "out.txt": "hi"} and r.deleted == ("gone.txt",)


def test_only_files_that_are_gone_are_deleted(sb):
    """RunResult.deleted named given files that were still there: the ones in a cache folder the read-back does
    not enter (__pycache__, .pytest_cache), a file turned into a link to a folder, and the files of a folder
    turned into one (coding-tools then dropped them from the repository). Removed files, also under a folder
    removed whole or turned into a file, are gone."""
    code = ("import os, shutil\nos.remove('a.py')\nos.symlink('/tmp', 'a.py')\nshutil.rmtree('pkg')\n"
            "os.symlink('/tmp', 'pkg')\nos.remove('x.py')\nshutil.rmtree('sub')\nopen('sub', 'w').write('')\n")
    given = {"s.py": code, "a.py": "a\n", "pkg/b.py": "b\n", "__pycache__/n.py": "n\n", "d/.pytest_cache/v": "v\n",
             "x.py": "x\n", "sub/c.py": "c\n", "sub/deep/e.py": "e\n"}
    r = sb.run(given, ["python", "s.py"], return_files=True)
    assert r.exit_code == 0, r.stderr
    assert r.deleted == ("sub/c.py", "sub/deep/e.py", "x.py")
    assert sorted(r.files) == ["s.py", "sub"]


def test_bad_file_paths_are_rejected(sb):
    for bad in ({"/etc/x.py": ""}, {"../x.py": ""}, {"a.py": b"bytes"}):
        with pytest.raises(ValueError, match="sandbox file"):
            sb.run(bad, ["python", "a.py"])


def test_grader_statuses(sb):
    job = TestJob(files={"m.py": SRC}, module="m", setup="import math",
                  tests=("assert add(1, 2) == 3", "assert add(1, 2) == 4", "add(None, 1)",
                         "while True: pass", "assert math.sqrt(add(2, 2)) == 2"))
    rep = sb.run_tests(job)
    assert [o.status for o in rep.outcomes] == ["pass", "fail", "error", "timeout", "pass"]
    assert "TypeError" in rep.outcomes[2].message
    assert rep.passed == 2 and rep.total == 5 and rep.error is None and not rep.all_passed


def test_grader_fresh_namespace_per_test(sb):
    rep = sb.run_tests(TestJob(files={"m.py": SRC}, module="m", tests=("leak = 1", "assert 'leak' not in dir()")))
    assert rep.all_passed


def test_grader_import_failure_sets_error(sb):
    rep = sb.run_tests(TestJob(files={"m.py": "def add(:\n"}, module="m", tests=("assert True",)))
    assert rep.error and "SyntaxError" in rep.error and rep.passed == 0
    rep = sb.run_tests(TestJob(files={}, module="nope", tests=("assert True",)))
    assert rep.error and "ModuleNotFoundError" in rep.error and rep.passed == 0
    with pytest.raises(ValueError, match="TestJob.module"):
        sb.run_tests(TestJob(files={}, module="a b", tests=()))


def test_batch_preserves_order_and_runs_concurrently(sb):
    jobs = [TestJob(files={"m.py": f"def add(a, b):\n    return a + b + {k}\n"}, module="m",
                    tests=("assert add(0, 0) == 0",)) for k in range(6)]
    reps = sb.run_tests_batch(jobs, max_workers=2)
    assert [r.passed for r in reps] == [1, 0, 0, 0, 0, 0]


def test_fresh_interpreter_mode_matches_pool(fresh_sb):
    rep = fresh_sb.run_tests(TestJob(files={"m.py": SRC}, module="m", tests=("assert add(1, 2) == 3", "assert 0")))
    assert [o.status for o in rep.outcomes] == ["pass", "fail"]


def test_timeout_lowered_per_call(sb):
    r = sb.run({"a.py": "import time\ntime.sleep(30)\n"}, ["python", "a.py"], timeout_s=0.5)
    assert r.timed_out and r.wall_clock_s < 3
    with pytest.raises(ValueError, match="timeout_s"):
        sb.run({"a.py": ""}, ["python", "a.py"], timeout_s=0)


def test_describe_says_what_holds(sb):
    d = sb.describe()
    assert d["backend"] == sb.backend and d["limits"]["cpu_s"] == 2
    assert d["not_protected"] and d["protected"]
    if sb.backend == "rlimit":
        assert any("network" in g for g in d["not_protected"])


def test_auto_falls_back_to_rlimit_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH: the real probe fails
    with pytest.warns(RuntimeWarning, match="fell back to rlimit"):
        sb = Sandbox(backend="auto", limits=SandboxLimits(timeout_s=4), max_workers=1)
    with sb:
        assert sb.backend == "rlimit" and "bubblewrap unusable" in sb.describe()["notes"][0]
        assert sb.run({"a.py": "print(1)"}, ["python", "a.py"]).stdout == "1\n"
    with pytest.raises(RuntimeError, match="bwrap"):
        Sandbox(backend="bwrap")
    with pytest.raises(ValueError, match="backend"):
        Sandbox(backend="docker")


def test_close_is_idempotent_and_removes_root():
    s = Sandbox(limits=SandboxLimits(timeout_s=4), max_workers=1)
    root = s._root
    s.run({"a.py": ""}, ["python", "a.py"])
    s.close()
    s.close()
    assert not os.path.exists(root)
    with pytest.raises(RuntimeError, match="closed"):
        s.run({"a.py": ""}, ["python", "a.py"])


@pytest.mark.parametrize("kwargs,field", [
    ({"tests": "assert f(1) == 1"}, "tests"),          # a str would be graded character by character
    ({"tests": b"assert True"}, "tests"),
    ({"tests": ("assert True", 3)}, "tests"),
    ({"tests": None}, "tests"),
    ({"files": [("fn.py", "x = 1")]}, "files"),
    ({"files": {"fn.py": b"x = 1"}}, "files"),
    ({"files": {1: "x = 1"}}, "files"),
    ({"setup": None}, "setup"),
    ({"module": None}, "module"),
])
def test_testjob_rejects_wrong_types(kwargs, field):
    job = {"files": {"fn.py": "def f(x):\n    return x\n"}, "module": "fn", "tests": ("assert f(1) == 1",), **kwargs}
    with pytest.raises(TypeError, match=f"TestJob.{field}"):
        TestJob(**job)


def test_testjob_module_must_be_one_of_files_and_tests_list_becomes_tuple():
    with pytest.raises(ValueError, match="'os' is not one of files"):
        TestJob(files={"fn.py": "x = 1"}, module="os", tests=("assert True",))
    assert TestJob(files={"pkg/m.py": "x = 1"}, module="pkg.m", tests=["assert x == 1"]).tests == ("assert x == 1",)


def test_exit_reasons_are_named():
    from agentrl.sandbox.sandbox import exit_reason

    assert "CPU-time limit" in exit_reason(-24) and "SIGXCPU" in exit_reason(-24)
    assert "file-size limit" in exit_reason(-25)
    assert "SIGKILL" in exit_reason(-9)
    assert exit_reason(3) == "exit code 3" and exit_reason(None) == "exit code None"


def test_files_under_a_folder_the_read_back_cannot_list_are_not_deleted(tmp_path, monkeypatch):
    """Not root, the job's uid is the caller's: a job that made a folder (or the work dir) unlistable left its
    files unseen, so every given file in it, the source file too, counted as deleted."""
    from agentrl.sandbox.process import gone, read_back

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("a\n")
    (tmp_path / "b.py").write_text("b\n")
    scandir = os.scandir

    def refuse(path, locked=str(tmp_path / "sub")):
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    present: set[str] = set()
    assert read_back(str(tmp_path), None, present=present) == {"b.py": "b\n"}
    assert not gone("sub/a.py", present) and not gone("b.py", present) and gone("c.py", present)
    refuse.__defaults__ = (str(tmp_path),)  # the work dir itself
    present = set()
    read_back(str(tmp_path), None, present=present)
    assert not gone("b.py", present) and not gone("sub/a.py", present)

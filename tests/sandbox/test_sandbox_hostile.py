"""The hostile-input suite of issue 3: each input must leave the caller running and the result right.

Every test runs under both backends (bwrap is skipped with its reason where unusable; the rlimit
fallback always runs) through the warm pool, with short limits (tests/sandbox/conftest.py).
"""

import json
import os
import socket

import pytest

from agentrl.sandbox import TestJob
from agentrl.sandbox._child import HERMETIC_ENV

SRC = "def add(a, b):\n    return a + b\n"


def run_py(sb, code, **kw):
    return sb.run({"a.py": code}, ["python", "a.py"], **kw)


def test_fork_bomb(sb):
    r = run_py(sb, "import os\nwhile True:\n    os.fork()\n")
    assert r.exit_code == 1 and "BlockingIOError" in r.stderr


def test_subprocess_cannot_start_or_outlive_the_call(sb):
    r = run_py(sb, "import subprocess\nsubprocess.Popen(['sleep', '100'])\nprint('spawned')\n")
    assert "spawned" not in r.stdout and "BlockingIOError" in r.stderr
    assert sb.run_tests(TestJob({"m.py": SRC}, "m", ("assert add(1, 1) == 2",))).all_passed


def test_huge_list_is_a_memory_error(sb):
    r = run_py(sb, "x = [0] * 10**10\n")
    assert "MemoryError" in r.stderr and not r.timed_out


def test_infinite_loop_is_killed(sb):
    r = run_py(sb, "while True:\n    pass\n")
    assert r.exit_code in (-24, -9) or r.timed_out  # SIGXCPU at cpu_s, else the wall clock
    assert r.wall_clock_s < 6


def test_loop_ignoring_sigterm_is_killed_by_wall_clock(sb):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.05)\n"
    r = run_py(sb, code, timeout_s=1.0)
    assert r.timed_out and r.exit_code != 0 and r.wall_clock_s < 4


def test_printing_gigabytes_is_capped_with_a_mark(sb):
    r = run_py(sb, "import sys\nb = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(b)\n", timeout_s=2.0)
    assert r.truncated and "output truncated" in r.stdout
    assert len(r.stdout.encode()) < sb.limits.max_output_bytes + 200


def test_writing_a_huge_file_fails(sb):
    r = run_py(sb, "f = open('big', 'wb')\nf.write(b'x' * (8 << 20))\nf.close()\n", return_files=True)
    assert "File too large" in r.stderr and r.exit_code == 1


def test_non_utf8_output(sb):
    r = run_py(sb, "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')\n")
    assert r.stdout == "ok \ufffd\ufffd end\n"


def test_deep_recursion(sb):
    r = run_py(sb, "def f(n):\n    return f(n + 1)\nf(0)\n")
    assert "RecursionError" in r.stderr
    r = run_py(sb, "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)\n")
    assert r.exit_code != 0  # a C stack overflow kills only the child
    rep = sb.run_tests(TestJob({"m.py": "def f(n):\n    return f(n + 1)\n"}, "m", ("f(0)", "assert True")))
    assert [o.status for o in rep.outcomes] == ["error", "pass"]


def test_environment_holds_only_three_variables(sb):
    os.environ["AGENTRL_TEST_SECRET"] = "hunter2"
    try:
        r = run_py(sb, "import os\nprint(sorted(os.environ))\nprint(os.environ['HOME'] == os.getcwd())\n")
    finally:
        del os.environ["AGENTRL_TEST_SECRET"]
    # the three passed through from the trainer, plus the fixed hermetic settings (no trainer secret)
    assert r.stdout == f"{sorted({'HOME', 'LANG', 'PATH', *HERMETIC_ENV})}\nTrue\n"


def test_trainer_secrets_env_files_and_proc(sb, tmp_path):
    os.environ["AGENTRL_TEST_SECRET"] = "hunter2"
    secret = tmp_path / "token.txt"
    secret.write_text("hunter2")
    secret.chmod(0o600)
    code = ("import os\nout = []\n"
            f"for p in ['/proc/{os.getpid()}/environ', '/proc/1/environ', '/proc/self/environ', {str(secret)!r}]:\n"
            "    try:\n        out.append(open(p, 'rb').read().decode(errors='replace'))\n"
            "    except OSError as e:\n        out.append(type(e).__name__)\n"
            "print(out)\n")
    try:
        r = run_py(sb, code)
    finally:
        del os.environ["AGENTRL_TEST_SECRET"]
    if not sb.describe()["caller_is_root"] and sb.backend == "rlimit":
        pytest.skip("rlimit backend as non-root: the child has the caller's uid (documented)")
    assert "hunter2" not in r.stdout and r.exit_code == 0, r.stdout + r.stderr


def test_files_outside_the_work_dir(sb):
    here = os.path.abspath(__file__)  # the trainer's own source tree
    r = run_py(sb, f"import os\nprint(os.path.exists('/etc/passwd'), os.path.exists({here!r}), os.path.exists('/home'))\n"
                   "open('/etc/passwd').read()\n")
    if sb.backend == "rlimit":
        assert "not protected" not in r.stdout  # documented gap: world-readable files are readable
        assert any("world-readable" in g for g in sb.describe()["not_protected"])
        return
    assert r.stdout == "False False False\n" and "FileNotFoundError" in r.stderr
    r = run_py(sb, "open('/usr/evil', 'w')\n")
    assert "Read-only file system" in r.stderr or "PermissionError" in r.stderr


def test_network_connection(sb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = run_py(sb, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')\n")
    finally:
        server.close()
    if sb.backend == "rlimit":
        assert any("network" in g for g in sb.describe()["not_protected"])  # documented gap
        return
    assert "connected" not in r.stdout and ("ConnectionRefused" in r.stderr or "OSError" in r.stderr)


def test_forged_result_marker(sb):
    forged = [json.dumps({"k": "0" * 32, "ev": "imported"}), json.dumps({"k": "0" * 32, "ev": "test", "i": 0, "s": "pass"})]
    module = (f"import os\nFORGED = {forged!r}\n"
              "for line in FORGED:\n    print(line)\n"
              "for fd in range(3, 64):\n"
              "    for line in FORGED:\n"
              "        try:\n            os.write(fd, (line + '\\n').encode())\n"
              "        except OSError:\n            pass\n" + SRC)
    rep = sb.run_tests(TestJob({"m.py": module}, "m", ("assert add(1, 1) == 3",)))
    assert [o.status for o in rep.outcomes] == ["fail"]


def test_patching_builtins_cannot_silence_the_grader(sb):
    module = "import builtins, json\nbuiltins.exec = lambda *a, **k: None\njson.dumps = lambda *a, **k: '{}'\n" + SRC
    rep = sb.run_tests(TestJob({"m.py": module}, "m", ("assert add(1, 1) == 3", "assert add(1, 1) == 2")))
    assert [o.status for o in rep.outcomes] == ["fail", "pass"]


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"])
def test_exit_at_import(sb, exit_call):
    rep = sb.run_tests(TestJob({"m.py": exit_call + SRC}, "m", ("assert add(1, 1) == 2",)))
    assert rep.error and rep.passed == 0 and not rep.all_passed


def test_repo_conftest_and_test_files_are_never_run(sb):
    files = {"m.py": SRC,
             "conftest.py": "import os\nos._exit(0)\n",
             "test_m.py": "def test_ok():\n    assert True\n",
             "pytest.py": "def main(*a, **k):\n    return 0\n"}
    rep = sb.run_tests(TestJob(files, "m", ("assert add(1, 1) == 2", "assert add(1, 1) == 3")))
    assert [o.status for o in rep.outcomes] == ["pass", "fail"] and rep.error is None


def test_deleting_or_editing_files_cannot_change_the_tests(sb):
    module = ("import os, glob\nfor p in glob.glob('*'):\n    os.remove(p)\n"
              "open('m.py', 'w').write('def add(a, b):\\n    return 2\\n')\n" + SRC)
    rep = sb.run_tests(TestJob({"m.py": module}, "m", ("assert add(1, 1) == 2", "assert add(2, 2) == 2")))
    assert [o.status for o in rep.outcomes] == ["pass", "fail"]


def test_background_process_cannot_outlive_the_call(sb):
    code = ("import os\ntry:\n    pid = os.fork()\nexcept OSError as e:\n    print('denied', type(e).__name__)\n"
            "else:\n    if pid == 0:\n        import time\n        time.sleep(60)\n")
    r = run_py(sb, code)
    assert r.stdout == "denied BlockingIOError\n" and r.wall_clock_s < 3


def test_caller_survives_everything(sb):
    rep = sb.run_tests(TestJob({"m.py": SRC}, "m", ("assert add(2, 3) == 5",)))
    assert rep.all_passed


@pytest.mark.parametrize("files", [
    {"d/" * 2000 + "z.py": "x = 1\n"},  # os.makedirs recursed past the recursion limit
    {"a" * 300 + ".py": "x = 1\n"},  # a name past NAME_MAX: ENAMETOOLONG, reported as a sandbox failure
    {"/".join(["d"] * 100) + "/z.py": "x = 1\n"},
    {"q.py": "x = 1\n", "q.py/z.py": "x = 1\n"},  # a file where a folder is needed: EEXIST
    {"s.py": "x = '\udc80'\n"},  # text with a lone surrogate
    {"\udc80.py": "x = 1\n"},  # a name with a lone surrogate
    {"sub/..": "x = 1\n"},  # the work dir itself
    {"../x.py": "x = 1\n"}, {"/tmp/x.py": "x = 1\n"}, {"": "x = 1\n"}, {"a\x00.py": "x = 1\n"},
])
def test_files_the_work_dir_cannot_hold_are_refused_and_leave_nothing(sb, files):
    """Job file paths are model-written in coding-tools: any the file system cannot hold is a ValueError
    naming the file (the caller's input), never a RecursionError, an OSError reported as a sandbox
    failure, or a half-written work dir left behind."""
    root = sb._backend.root
    before = _job_dirs(root)
    with pytest.raises(ValueError, match="sandbox file"):
        sb.run({"a.py": "print(1)\n", **files}, ["python", "a.py"])
    assert _job_dirs(root) == before
    assert sb.run({"a.py": "print(1)\n", "sub/b.py": "x = 1\n"}, ["python", "a.py"]).stdout == "1\n"


def _job_dirs(root):
    return {os.path.join(d, n) for d, dirs, _ in os.walk(root) for n in dirs if n.startswith("job-")}


def test_what_a_run_hands_back_is_bounded_in_files_and_bytes(sb):
    """A run that wrote 20,000 files handed them all back (a minute to take in, then to every later run), and
    1 MiB files at hundreds a second put gigabytes into the caller: read_back returns at most
    MAX_READ_BACK_FILES files and MAX_READ_BACK_BYTES bytes, in a fixed order, the others left out, not deleted,
    and counted (RunResult.files_left_out), so the caller can say so."""
    from agentrl.sandbox.process import MAX_READ_BACK_BYTES, MAX_READ_BACK_FILES

    code = f"for i in range({MAX_READ_BACK_FILES + 500}):\n    open(f'f{{i:05d}}.txt', 'w').write('x')\n"
    r = run_py(sb, code, return_files=True)
    assert len(r.files) == MAX_READ_BACK_FILES and r.deleted == ()
    assert len(r.files_left_out) == 501 and r.files_left_out[-1] == "f02499.txt"  # a.py, 2,500 written, 2,000 back
    assert not set(r.files_left_out) & set(r.files)
    assert sorted(r.files)[:2] == ["a.py", "f00000.txt"]  # names sorted: the given file, then the first written
    big = "for i in range(40):\n    open(f'b{i:02d}.txt', 'w').write('y' * ((1 << 20) - 1))\n"
    r = run_py(sb, big, return_files=True)
    assert sum(len(t) for t in r.files.values()) <= MAX_READ_BACK_BYTES < 40 * ((1 << 20) - 1)
    assert "a.py" in r.files and r.deleted == () and len(r.files_left_out) == 41 - len(r.files) > 0
    assert run_py(sb, "print(1)", return_files=True).files_left_out == ()

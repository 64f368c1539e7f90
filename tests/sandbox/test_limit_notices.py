"""Issue 25, kind 3: every kill by a limit reads the same everywhere, with the limit and its value.

The real sandbox (whatever backend this machine has: bubblewrap reports a signal death as 128 + N, the
rlimit backend as -N), the real Bash tool, the real run_python session, the real grader and the harness
runner. Before the fix: run_python said "worker died (exit code 152)" and counted a cell error, Bash said
"[exit code -24]" (or 152), grading said "process ended: exit code 152".
"""

from __future__ import annotations

import sys

import pytest

from agentrl.envs.base import ToolCall
from agentrl.envs.registry import make_env
from agentrl.sandbox import Sandbox
from agentrl.sandbox.api import SandboxLimits, TestJob
from agentrl.tasks.task import Task

LIMITS = SandboxLimits(timeout_s=8.0, cpu_s=1, memory_bytes=256 << 20, max_output_bytes=1000,
                       file_size_bytes=10_000, test_timeout_s=6.0)
CPU = "[stopped: CPU-time limit of 1 s reached]"
PROGRAMS = {  # kind -> (program, the notice it must get, stopped)
    "cpu": ("while True:\n    pass\n", CPU),
    "wall": ("import time\ntime.sleep(60)\n", "[stopped: wall-clock limit of 3 s reached]"),
    "memory": ("x = bytearray(1 << 30)\n", "[stopped: memory limit of 256 MiB reached]"),
    "output": ("print('x' * 5000)\n", "[output cut: output limit of 1000 bytes per stream reached]"),
    "processes": ("import subprocess\nsubprocess.run(['true'])\n", "[refused: process limit of 0 new processes reached]"),
    "file_size": ("open('f.txt', 'w').write('x' * 100000)\n", "[refused: file-size limit of 10000 bytes reached]"),
}
STATS = {"cpu": "cpu_timeouts", "wall": "wall_timeouts", "memory": "memory_kills", "output": "output_caps",
         "processes": "process_limits", "file_size": "file_size_limits"}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(LIMITS) as sb:
        yield sb


def test_one_shot_runs_name_each_limit_and_its_value(sandbox):
    for kind, (code, notice) in PROGRAMS.items():
        r = sandbox.run({"p.py": code}, ["python", "p.py"], timeout_s=3.0)
        assert [h.notice() for h in r.limits_hit] == [notice], (kind, r.exit_code, r.stderr[-300:])
        assert r.limits_hit[0].stat == STATS[kind]


def test_run_python_names_the_cpu_limit_and_counts_each_kind(sandbox):
    env = make_env("python-session", sandbox=sandbox, cell_timeout_s=3.0, max_turns=20)
    env.reset(_task())
    seen = {}
    for kind, (code, notice) in PROGRAMS.items():
        if kind == "processes":  # subprocess is not importable in run_python; a thread is a process too
            code = "import threading\nthreading.Thread(target=print).start()\n"
        (r,) = env.step([ToolCall("run_python", {"code": code})]).results
        seen[kind] = r.content
        assert notice in r.content, (kind, r.content[-400:])
        assert "worker died" not in r.content and "exit code" not in r.content, (kind, r.content[-400:])
    s = env.stats()
    for stat in STATS.values():
        assert s[stat] == 1, (stat, s)
    assert s["cell_timeouts"] == 2 and s["sandbox_errors"] == 0  # CPU and wall: both time limits
    env.close()


def test_the_bash_tool_names_the_cpu_limit_and_counts_each_kind(sandbox):
    env = make_env("coding-tools", sandbox=sandbox, max_turns=30)
    env.reset(_task())
    for kind, (code, notice) in PROGRAMS.items():
        name = f"/repo/{kind}.py"
        env.step([ToolCall("Write", {"file_path": name, "content": code})])
        (r,) = env.step([ToolCall("Bash", {"command": f"python {kind}.py", "timeout": 3000})]).results
        assert notice in r.content, (kind, r.content[-400:])
        if kind in ("cpu", "wall", "memory"):  # stopped: the notice, not an exit code (-24, 152, 1)
            assert "[exit code" not in r.content, (kind, r.content[-300:])
    s = env.stats()
    for stat in STATS.values():
        assert s[stat] == 1, (stat, s)


def test_grading_names_the_limit_that_stopped_the_tests(sandbox):
    job = TestJob(files={"m.py": "def f():\n    while True:\n        pass\n"}, module="m", tests=("f()", "assert 1"))
    report = sandbox.run_tests(job)
    assert [o.status for o in report.outcomes] == ["timeout", "timeout"]
    assert all(CPU in o.message for o in report.outcomes), [o.message for o in report.outcomes]


def test_the_policy_harness_runner_names_the_wall_clock_limit(tmp_path):
    from agentrl.harness.opencode import Launch, run_harness

    run = run_harness(Launch([sys.executable, "-c", "import time; time.sleep(60)"], {}, str(tmp_path), "none"),
                      timeout_s=1.0)
    assert run.timed_out and [h.notice() for h in run.limits_hit] == ["[stopped: wall-clock limit of 1 s reached]"]


def test_an_exit_status_of_a_program_is_not_a_limit():
    from agentrl.sandbox.guarantees import exit_signal, limit_hits

    assert exit_signal(152) == "SIGXCPU" and exit_signal(-24) == "SIGXCPU" and exit_signal(3) == ""
    assert limit_hits(LIMITS, exit_code=1, timed_out=False, timeout_s=8.0, wall_clock_s=0.1, stderr="boom") == ()
    # a SIGKILL early in the run is not the CPU limit (its hard limit is one second past the soft one)
    assert limit_hits(LIMITS, exit_code=-9, timed_out=False, timeout_s=8.0, wall_clock_s=0.2) == ()


def _task() -> Task:
    src = "def one():\n    return 1\n"
    return Task(id="limits-0", family="limits", split="train", files={"one.py": src, "test_one.py":
                "from one import one\n\n\ndef test_1():\n    assert one() == 1\n"}, entry="one", source_file="one.py",
                public_tests=("assert one() == 1",), hidden_tests=("assert one() == 1",), reference=src)


def test_grading_names_the_per_test_and_memory_limits(sandbox):
    job = TestJob(files={"m.py": "def spin():\n    while True:\n        pass\n"}, module="m",
                  tests=("import time\ntime.sleep(30)", "x = bytearray(1 << 30)"), timeout_s=8.0)
    fast = SandboxLimits(timeout_s=8.0, cpu_s=5, memory_bytes=256 << 20, test_timeout_s=1.0)
    with Sandbox(fast) as sb:
        report = sb.run_tests(job)
    (slow, big) = report.outcomes
    assert (slow.status, slow.message) == ("timeout", "[stopped: wall-clock limit of 1 s per test reached]")
    assert (big.status, big.message) == ("error", "[stopped: memory limit of 256 MiB reached]")

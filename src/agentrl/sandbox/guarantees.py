"""What the sandbox does and does not protect against, per backend and privilege, as data; and which
limit a finished run reached (`limit_hits`, the one wording of a kill by a limit).

Sandbox.describe() returns this for results files; docs/sandbox.md explains it in prose.
Not enforcement: that lives in the launcher (_child) and the backends (process, pool).
"""

from __future__ import annotations

import dataclasses
import os
import signal

from agentrl.sandbox._child import HERMETIC_ENV
from agentrl.sandbox.api import LimitHit, SandboxLimits
from agentrl.sandbox.process import Backend

# What a limit leaves in stderr when it refuses instead of killing (Python ignores SIGXFSZ, so an
# over-size write is an OSError; RLIMIT_AS is a MemoryError; RLIMIT_NPROC fails fork and threads).
_MEMORY_MARKS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory")
_PROCESS_MARKS = ("BlockingIOError: [Errno 11] Resource temporarily unavailable", "can't start new thread",
                  "fork: Resource temporarily unavailable", "Cannot fork", "pthread_create failed")
_FILE_SIZE_MARKS = ("[Errno 27] File too large",)


def exit_signal(exit_code: int | None) -> str:
    """The signal name behind an exit status, or "": negative codes are Popen's signal deaths; under
    bubblewrap a child killed by signal N exits 128 + N (counted only for the limit signals SIGXCPU,
    SIGXFSZ and SIGKILL, which a sandboxed program has no reason to exit with)."""
    if exit_code is None or exit_code == 0:
        return ""
    num = -exit_code if exit_code < 0 else exit_code - 128
    try:
        name = signal.Signals(num).name
    except ValueError:
        return ""
    return name if exit_code < 0 or name in ("SIGXCPU", "SIGXFSZ", "SIGKILL") else ""


def limit_hits(limits: SandboxLimits, *, exit_code: int | None, timed_out: bool, timeout_s: float,
               wall_clock_s: float, stderr: str = "", truncated: bool = False) -> tuple[LimitHit, ...]:
    """Which limits a finished run or session call reached, from its exit status and output.

    Args:
        limits: the limits it ran under; timeout_s: its wall-clock limit (a call may lower limits.timeout_s).
        exit_code: its exit status (None: still running, e.g. a session call that returned); timed_out:
            killed at the wall-clock limit; wall_clock_s: how long it ran.
        stderr: its captured stderr (a refused allocation, process or write leaves its mark there);
        truncated: a captured stream was cut at limits.max_output_bytes.

    Returns:
        The hits, stopping ones first. RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL one second
        later (a program that ignores SIGXCPU); a SIGKILL before the wall-clock limit and after that
        much run time is the CPU limit too.
    """
    hits: list[LimitHit] = []
    sig = exit_signal(exit_code)
    if timed_out:
        hits.append(LimitHit("wall", float(timeout_s), True))
    elif sig == "SIGXCPU" or (sig == "SIGKILL" and wall_clock_s >= limits.cpu_s + 0.5):
        hits.append(LimitHit("cpu", float(limits.cpu_s), True))
    tail = "\n".join(stderr.strip().splitlines()[-3:])
    if any(m in tail for m in _MEMORY_MARKS):
        hits.append(LimitHit("memory", float(limits.memory_bytes), True))
    if sig == "SIGXFSZ" or any(m in tail for m in _FILE_SIZE_MARKS):
        hits.append(LimitHit("file_size", float(limits.file_size_bytes), sig == "SIGXFSZ"))
    if any(m in stderr[-4000:] for m in _PROCESS_MARKS):
        hits.append(LimitHit("processes", float(limits.max_processes), False))
    if truncated:
        hits.append(LimitHit("output", float(limits.max_output_bytes), False))
    return tuple(hits)


def notices(hits: tuple[LimitHit, ...] | list[LimitHit]) -> str:
    """The hits' notices on one line each ("" for none)."""
    return "\n".join(h.notice() for h in hits)

NOT_PROTECTED = (
    "kernel exploits and CPU side channels (bubblewrap shares the host kernel; no seccomp filter, no VM)",
    "disk usage: RLIMIT_FSIZE caps each file, not the number of files a child writes in its time (what comes back "
    "to the caller is capped: MAX_READ_BACK_FILES files, MAX_READ_BACK_BYTES bytes)",
    "a plain (not isolated) test job reading the grader's in-process state: harness and repo code share one "
    "interpreter, so code that walks frames/gc or writes to the result fd directly can forge results (it must "
    "find the per-call marker in memory first; printed text alone cannot). TestJob(isolate=True), which the "
    "hardened graders use, runs the module in a separate agent process that has no result fd",
    "threads: RLIMIT_NPROC also counts threads, so with max_processes=0 a job cannot start threads",
)


def describe(backend: Backend, limits: SandboxLimits, pooled: bool) -> dict:
    """A JSON-ready record: backend, limits, uid policy, protections that hold, and known gaps."""
    bwrap = backend.name == "bwrap"
    root = os.geteuid() == 0
    holds = [
        "code runs in a separate process: python -I -S -B, environment of only PATH, HOME (work dir), LANG "
        "and fixed settings (no pytest plugin autoloading, single-threaded native libraries: 'environment')",
        "rlimits set in the child before repository code: CPU, address space, file size, processes, no core",
        "wall-clock timeout kills the whole process group (and, under bwrap, the PID namespace)",
        "output captured and capped per stream with a visible truncation mark",
        "results come back on a separate fd, tagged with a per-call random marker; printed text is ignored",
        "the grader copies only the files under test and never runs repository test files or conftest.py",
        "a fresh work dir per call, deleted afterwards",
    ]
    if backend.drop_uid:
        holds.append("children run as a dedicated unprivileged uid, so RLIMIT_NPROC binds even though "
                     "the caller is root; after each pooled job every leftover process of that uid is killed")
    elif not root:
        holds.append("children run as the caller's (non-root) uid; RLIMIT_NPROC binds")
    if bwrap:
        holds += ["no network (own network namespace)", "read-only system; only the work dir is writable",
                  "no /etc, /home, /root or trainer files visible; own PID namespace; dies with its parent"]
    gaps = list(NOT_PROTECTED)
    if not bwrap:
        gaps += ["network access is open (rlimit backend)",
                 "files readable by the child's uid (world-readable files such as /etc/passwd) can be read",
                 "no PID namespace: /proc of other processes is visible (their environ is not, uid differs)"]
    return {
        "backend": backend.name,
        "limits": dataclasses.asdict(limits),
        "warm_pool": pooled,
        "caller_is_root": root,
        "child_uid": "dedicated unprivileged uid per worker/run" if backend.drop_uid else "caller's uid",
        "python": backend.python,
        "environment": dict(HERMETIC_ENV),
        "protected": holds,
        "not_protected": gaps,
        "notes": list(backend.notes),
    }

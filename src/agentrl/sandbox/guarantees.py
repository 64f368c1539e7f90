"""What the sandbox does and does not protect against, per backend and privilege, as data.

Sandbox.describe() returns this for results files; docs/sandbox.md explains it in prose.
Not enforcement: that lives in the launcher (_child) and the backends (process, pool).
"""

from __future__ import annotations

import dataclasses
import os

from agentrl.sandbox._child import HERMETIC_ENV
from agentrl.sandbox.api import SandboxLimits
from agentrl.sandbox.process import Backend

NOT_PROTECTED = (
    "kernel exploits and CPU side channels (bubblewrap shares the host kernel; no seccomp filter, no VM)",
    "disk usage: RLIMIT_FSIZE caps each file, not the number of files a child writes in its time",
    "a job reading the grader's in-process state: harness and repo code share one interpreter, so code "
    "that walks frames/gc or writes to the result fd directly can forge results (it must find the "
    "per-call marker in memory first; printed text alone cannot)",
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

"""The Sandbox: one-shot runs, the hidden-test grader, batches and persistent sessions.

This is the public entry point of agentrl.sandbox. It chooses the backend (bubblewrap when usable,
else rlimits only, reported in every result), owns the warm pool and turns raw runs into RunResult
and TestReport. Not the child side (agentrl.sandbox._child) nor the process plumbing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor

from agentrl.sandbox.api import RunResult, SandboxLimits, TestJob, TestOutcome, TestReport
from agentrl.sandbox.guarantees import exit_signal, limit_hits, notices
from agentrl.sandbox.oneshot import RawRun, run_fresh
from agentrl.sandbox.pool import WarmPool, ZygoteError
from agentrl.sandbox.process import Backend, gone, make_backend
from agentrl.sandbox.repl import PythonSession
from agentrl.sandbox.uid_reach import sandbox_tmp_base

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_STATUSES = ("pass", "fail", "error", "timeout")
_PYTHONS = ("python", "python3")


def normalize_argv(argv: list[str]) -> list[str]:
    """Map an accepted command to the launcher's form: ["pytest", *args] or [file.py, *args].

    Accepted: ["python", "<file>.py", *args], ["python", "-m", "pytest", *args], ["pytest", *args]
    ("python3" too). Raises ValueError naming the command otherwise.
    """
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"sandbox argv {argv!r}: expected a non-empty list of str")
    argv = list(argv)
    if argv[0] == "pytest":
        return argv
    if argv[0] in _PYTHONS and argv[1:3] == ["-m", "pytest"]:
        return ["pytest", *argv[3:]]
    if argv[0] in _PYTHONS and len(argv) >= 2 and argv[1].endswith(".py") and not argv[1].startswith("-"):
        path = os.path.normpath(argv[1])
        if os.path.isabs(argv[1]) or path.startswith(".."):
            raise ValueError(f"sandbox argv {argv!r}: the script must be a relative path in the work dir")
        return [path, *argv[2:]]
    raise ValueError(f"sandbox argv {argv!r}: expected ['python', '<file>.py', *args], "
                     f"['python', '-m', 'pytest', *args] or ['pytest', *args]")


def choose_backend(kind: str, root: str) -> Backend:
    """Backend `kind`: "bwrap" (RuntimeError if unusable), "rlimit", or "auto" (bwrap, else rlimit + note)."""
    if kind not in ("auto", "bwrap", "rlimit"):
        raise ValueError(f"sandbox backend {kind!r}: expected 'auto', 'bwrap' or 'rlimit'")
    if kind != "auto":
        return make_backend(kind, root)
    try:
        return make_backend("bwrap", root)
    except (RuntimeError, OSError) as e:
        b = make_backend("rlimit", root)
        b.notes.insert(0, f"bubblewrap unusable, fell back to rlimit-only isolation: {e}")
        warnings.warn(f"agentrl.sandbox: {b.notes[0]}", RuntimeWarning, stacklevel=3)
        return b


class Sandbox:
    """Runs model-written code in limited child processes; never in the calling process.

    Args:
        limits: SandboxLimits applied to every child (before any repository code is imported).
        backend: "auto" (bubblewrap if usable, else rlimit with a note), "bwrap" or "rlimit".
        max_workers: warm-pool width and default batch concurrency (default: CPU count, 1..16).
        warm_pool: reuse pre-started clean interpreters (fork per job); False starts a fresh
            interpreter per call (the baseline of bench/bench_sandbox.py).
        preload_pytest: the warm pool's interpreters import pytest before their first job, so a
            `python -m pytest` run costs about a third of its CPU time (bench/bench_sandbox.py --pytest);
            False imports it in each job, as a fresh interpreter does.

    Raises RuntimeError if backend="bwrap" is asked for and unusable, or if (as root) no temp dir is
    traversable by the unprivileged job uid (a private TMPDIR falls back to /tmp, /var/tmp or
    /dev/shm, said in describe()["notes"]). Use as a context manager or
    call close() to stop the pool and delete the sandbox root.
    """

    def __init__(self, limits: SandboxLimits | None = None, backend: str = "auto",
                 max_workers: int | None = None, warm_pool: bool = True, preload_pytest: bool = True):
        self.limits = limits or SandboxLimits()
        self.max_workers = max(1, min(16, max_workers or os.cpu_count() or 1))
        base = sandbox_tmp_base(os.geteuid() == 0)
        self._root = tempfile.mkdtemp(prefix="agentrl-sandbox-", dir=base)
        os.chmod(self._root, 0o711)
        try:
            self._backend = choose_backend(backend, self._root)
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        self._backend.preload_pytest = preload_pytest
        if base != tempfile.gettempdir():
            self._backend.notes.append(f"temp dir {tempfile.gettempdir()} is private; sandbox root is in {base}")
        try:
            self._pool = WarmPool(self._backend, self.max_workers) if warm_pool else None
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        self._sessions: list[PythonSession] = []
        self._closed = False

    @property
    def backend(self) -> str:
        """"bwrap" or "rlimit" (a fallback is noted in describe() and warned about once)."""
        return self._backend.name

    def warm(self) -> None:
        """Start every pool worker now instead of on first use."""
        if self._pool is not None:
            self._pool.warm()

    def _timeout(self, timeout_s: float | None) -> float:
        if timeout_s is None:
            return self.limits.timeout_s
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of seconds")
        return min(float(timeout_s), self.limits.timeout_s)

    def _execute(self, files: dict[str, str], kind: str, timeout_s: float, return_files: bool, **extra) -> RawRun:
        if self._closed:
            raise RuntimeError("Sandbox is closed")
        if not isinstance(files, dict):
            raise ValueError(f"sandbox files {type(files).__name__}: expected dict[str, str]")
        limits = dataclasses.asdict(self.limits)
        try:
            if self._pool is not None:
                return self._pool.run(files, kind, limits, timeout_s, return_files, **extra)
            return run_fresh(self._backend, files, kind, limits, timeout_s, return_files, **extra)
        except (ZygoteError, OSError) as e:
            return RawRun(None, "", "", False, False, 0.0, [], None, f"sandbox failure: {e}")

    def _result(self, raw: RawRun, timeout_s: float, given: dict[str, str] | None = None) -> RunResult:
        hits = limit_hits(self.limits, exit_code=raw.exit_code, timed_out=raw.timed_out, timeout_s=timeout_s,
                          wall_clock_s=raw.wall_clock_s, stderr=raw.stderr, truncated=raw.truncated)
        deleted = () if raw.present is None or given is None else tuple(sorted(
            p for p in given if gone(p, raw.present)))
        return RunResult(raw.exit_code, raw.stdout, raw.stderr, raw.timed_out, raw.wall_clock_s,
                         raw.truncated, self.backend, raw.files, raw.error, hits, deleted, raw.left_out)

    def run(self, files: dict[str, str], argv: list[str], *, timeout_s: float | None = None,
            return_files: bool = False) -> RunResult:
        """Copy `files` into a fresh work dir and run `argv` there under the limits.

        argv: ["python", "<file>.py", *args], ["python", "-m", "pytest", *args] or ["pytest", *args];
        anything else raises ValueError. timeout_s lowers (never raises) limits.timeout_s.
        With return_files=True, RunResult.files holds the work dir's text files after the run and
        RunResult.deleted the given files it removed.
        """
        argv = normalize_argv(argv)
        timeout = self._timeout(timeout_s)
        raw = self._execute(files, "run", timeout, return_files, argv=argv)
        return self._result(raw, timeout, files)

    def run_tests(self, job: TestJob) -> TestReport:
        """Grade `job`: per-test pass/fail/error/timeout, parsed from the marked result channel.

        Raises ValueError for a module name that is not a dotted identifier.
        """
        if not _MODULE_RE.match(job.module or ""):
            raise ValueError(f"TestJob.module {job.module!r}: expected a dotted Python module name")
        timeout = self._timeout(job.timeout_s)
        raw = self._execute(job.files, "tests", timeout, False, module=job.module, tests=list(job.tests),
                            setup=job.setup or "", test_timeout_s=min(self.limits.test_timeout_s, timeout),
                            isolate=bool(job.isolate), entry_names=list(job.entry_names))
        return build_report(raw, job, self._result(raw, timeout))

    def run_tests_batch(self, jobs: list[TestJob], max_workers: int | None = None) -> list[TestReport]:
        """run_tests on each job, `max_workers` at once (default: the pool width); order preserved."""
        jobs = list(jobs)
        width = max(1, min(len(jobs) or 1, max_workers or self.max_workers))
        if width == 1:
            return [self.run_tests(j) for j in jobs]
        with ThreadPoolExecutor(width, thread_name_prefix="agentrl-sandbox") as ex:
            return list(ex.map(self.run_tests, jobs))

    def session(self, limits: SandboxLimits | None = None, files: dict[str, str] | None = None) -> PythonSession:
        """A persistent run_python worker (state kept across execute calls) under `limits`."""
        s = PythonSession(self._backend, limits or self.limits, files or {})
        self._sessions.append(s)
        return s

    def describe(self) -> dict:
        """Backend, limits, and what is and is not protected, for results files."""
        from agentrl.sandbox.guarantees import describe

        return describe(self._backend, self.limits, pooled=self._pool is not None)

    def close(self) -> None:
        """Stop pool workers and sessions and delete the sandbox root (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.close()
        for s in self._sessions:
            s.close()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def exit_reason(exit_code: int | None) -> str:
    """Plain words for a sandboxed child's exit status ("exit code -24" or, under bubblewrap, 152 -> the
    CPU limit, SIGXCPU). Which limit and its value: agentrl.sandbox.guarantees.limit_hits."""
    name = exit_signal(exit_code)
    if not name:
        return f"exit code {exit_code}"
    why = {"SIGXCPU": "CPU-time limit exceeded", "SIGXFSZ": "file-size limit exceeded",
           "SIGKILL": "killed (wall-clock limit, memory, or the sandbox)", "SIGSEGV": "crashed (segmentation fault)",
           "SIGABRT": "aborted"}.get(name, "killed by a signal")
    return f"{why} ({name}, exit code {exit_code})"


def _start_error(raw: RawRun, module: str, run: RunResult) -> str:
    names = {ev.get("ev") for ev in raw.events}
    tail = raw.stderr.strip()[-800:]
    if raw.error:
        return raw.error
    if "started" not in names:
        return f"the sandboxed process did not start ({exit_reason(raw.exit_code)}): {tail}"
    stopped = [h for h in run.limits_hit if h.stopped]
    if stopped:
        return f"{notices(stopped)} while importing {module!r}"
    return f"the process ended while importing {module!r} ({exit_reason(raw.exit_code)}): {tail}"


def build_report(raw: RawRun, job: TestJob, run: RunResult) -> TestReport:
    """Per-test outcomes from the marked events; missing results become timeout/error, never pass."""
    n = len(job.tests)
    events = raw.events
    names = [ev.get("ev") for ev in events]
    if "import_error" in names:
        msg = next(ev.get("msg", "") for ev in events if ev.get("ev") == "import_error")
        err = f"import of {job.module!r} failed: {msg}"
        return TestReport(tuple(TestOutcome(i, "error", err) for i in range(n)), run, err)
    if "imported" not in names:
        err = _start_error(raw, job.module, run)
        return TestReport(tuple(TestOutcome(i, "error", err) for i in range(n)), run, err)
    got: dict[int, TestOutcome] = {}
    conflict = None
    for ev in events:
        i, s = ev.get("i"), ev.get("s")
        if ev.get("ev") != "test" or not isinstance(i, int) or not 0 <= i < n or s not in _STATUSES:
            continue
        if i in got and got[i].status != s:
            conflict = f"conflicting results for test {i}: the result channel was tampered with"
        got.setdefault(i, TestOutcome(i, s, str(ev.get("msg", ""))))
    stopped = [h for h in run.limits_hit if h.stopped]
    timed = any(h.kind in ("cpu", "wall") for h in stopped) or raw.timed_out or exit_signal(raw.exit_code) == "SIGKILL"
    missing_status = "timeout" if timed else "error"
    why = notices(stopped) if stopped else f"process ended: {exit_reason(raw.exit_code)}"
    outcomes = tuple(got.get(i) or TestOutcome(i, missing_status, f"no result: {why}") for i in range(n))
    if conflict:
        outcomes = tuple(TestOutcome(o.index, "error", conflict) for o in outcomes)
    return TestReport(outcomes, run, conflict)

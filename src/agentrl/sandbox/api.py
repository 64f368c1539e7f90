"""The sandbox's public types: limits, one-shot run results, per-test reports, test jobs.

This module is the contract between the sandbox and its callers (task checks, environments,
graders); it holds data only. Execution lives in the backend modules of this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# The name under which an isolated TestJob's tests find the function that fetches a module value (see TestJob).
AGENT_VALUE = "__agent_value__"
TestStatus = Literal["pass", "fail", "error", "timeout"]
LimitKind = Literal["cpu", "wall", "memory", "output", "processes", "file_size"]
# The tool statistic that counts each kind of limit hit.
LIMIT_STATS: dict[str, str] = {"cpu": "cpu_timeouts", "wall": "wall_timeouts", "memory": "memory_kills",
                               "output": "output_caps", "processes": "process_limits", "file_size": "file_size_limits"}


@dataclass(frozen=True)
class LimitHit:
    """A sandbox limit that a run reached (agentrl.sandbox.guarantees.limit_hits finds them).

    Attributes:
        kind: "cpu" (CPU seconds), "wall" (wall-clock seconds), "memory" (address-space bytes), "output"
            (bytes per captured stream), "processes" (new processes), "file_size" (bytes per file).
        value: the limit, in the kind's unit (seconds, bytes or processes).
        stopped: the limit stopped the code (else the code went on: its output was cut, or a process or a
            write was refused).
    """

    kind: LimitKind
    value: float
    stopped: bool

    @property
    def stat(self) -> str:
        """The tool statistic that counts this kind (cpu_timeouts, wall_timeouts, memory_kills, ...)."""
        return LIMIT_STATS[self.kind]

    def notice(self) -> str:
        """The one wording of this hit everywhere (tool output, grading messages, logs), e.g.
        "[stopped: CPU-time limit of 10 s reached]"."""
        v = self.value
        what = {"cpu": f"CPU-time limit of {v:g} s", "wall": f"wall-clock limit of {v:g} s",
                "memory": f"memory limit of {v / (1 << 20):g} MiB", "output": f"output limit of {v:g} bytes per stream",
                "processes": f"process limit of {v:g} new processes", "file_size": f"file-size limit of {v:g} bytes"}
        head = "stopped" if self.stopped else {"output": "output cut", "processes": "refused",
                                               "file_size": "refused"}.get(self.kind, "limit")
        return f"[{head}: {what[self.kind]} reached]"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every sandboxed child, before any repository code is imported.

    Attributes:
        timeout_s: wall-clock limit of one call, seconds (a call may lower it, never raise it).
        cpu_s: RLIMIT_CPU, CPU-seconds.
        memory_bytes: RLIMIT_AS, bytes of address space.
        file_size_bytes: RLIMIT_FSIZE, bytes per written file.
        max_output_bytes: cap on each captured stream (stdout, stderr); the rest is cut with a mark.
        max_processes: new processes the child may start (0: none).
        test_timeout_s: wall-clock limit of one test inside a graded job (SIGALRM), seconds.
        session_cpu_s: CPU-seconds a persistent run_python session may use over its whole life
            (each call is also held to cpu_s).
    """

    timeout_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 1 << 30
    file_size_bytes: int = 1 << 20
    max_output_bytes: int = 64 * 1024
    max_processes: int = 0
    test_timeout_s: float = 2.0
    session_cpu_s: int = 600


@dataclass(frozen=True)
class RunResult:
    """Outcome of one sandboxed command.

    Attributes:
        exit_code: the child's exit status; negative for a signal; None if it never started.
        stdout, stderr: captured text (decoded with replacement), each capped at max_output_bytes,
            ending in a visible truncation mark when cut.
        timed_out: True if the wall-clock limit killed the child.
        wall_clock_s: seconds from start to reap.
        truncated: True if either stream was cut.
        backend: which isolation backend ran it ("bwrap" or "rlimit").
        files: the work dir's text files after the run (path -> text) when asked for, else None.
        error: a sandbox-side failure (could not start, ...), else None.
        limits_hit: the limits the run reached, each with its one wording (LimitHit.notice).
        deleted: with files, the given files the run removed (sorted paths; a given file that is still there
            but not returned, e.g. turned into a link or a binary, is not among them), else ().
        files_left_out: with files, the files in the work dir that did not come back because what one run hands
            back is capped (agentrl.sandbox.process.MAX_READ_BACK_FILES files, MAX_READ_BACK_BYTES bytes of
            text; paths in walk order, given files among them); they are not deleted either. () otherwise.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_clock_s: float
    truncated: bool = False
    backend: str = ""
    files: dict[str, str] | None = None
    error: str | None = None
    limits_hit: tuple[LimitHit, ...] = ()
    deleted: tuple[str, ...] = ()
    files_left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionResult:
    """Outcome of one PythonSession.execute call.

    Attributes:
        stdout, stderr: what the call printed (stderr holds the traceback of an exception),
            each capped at max_output_bytes with a visible mark.
        timed_out: the call ran past its wall-clock limit and the worker was killed.
        restarted: the worker had died or timed out and was restarted: earlier state is gone.
        wall_clock_s: seconds the call took.
        error: a sandbox-side failure (worker died, could not start), else None; a worker stopped by a
            limit is not one (see limits_hit).
        limits_hit: the limits the call reached, each with its one wording (LimitHit.notice).
    """

    stdout: str
    stderr: str
    timed_out: bool
    restarted: bool
    wall_clock_s: float
    error: str | None = None
    limits_hit: tuple[LimitHit, ...] = ()


@dataclass(frozen=True)
class TestJob:
    """Grade `tests` against `files`: each test runs after `setup` and `from <module> import *`.

    The grader copies only `files` (the source under test) plus its own harness; it never runs
    test files, conftest.py or anything else from the agent's repository.

    With `isolate`, the module is imported in a separate agent process and the tests run in a checker
    process that never runs its code (docs/sandbox.md, "Isolated grading"): each test's namespace holds
    the module's names (every name not starting with `__`, or its `__all__`) as stand-ins, bound before
    `setup` runs. A callable becomes a function that calls it in the agent process and returns its result
    as plain data (int, float, complex, str, bytes, None, bool, range, and lists, tuples, dicts, sets and
    frozensets of those; a re.Match or re.Pattern becomes an opaque object equal only to itself, an
    iterator an iterator over the list of its items); its arguments must be plain data too. A module
    becomes the checker's own copy, if it has one. Any other value is a reference that
    `__agent_value__(ref)` (AGENT_VALUE, bound in every test namespace) fetches as plain data; a test
    must read such values through it (agentrl.envs.session_grader.harden_test rewrites tests so).
    A module name that is also a builtin's (`sorted`, `set`, `len`) is not bound unless it is one of
    `entry_names` (the functions the tests are about): a module defining `sorted` to return what a test
    expects must not change what the test's own `sorted(...)` computes.
    """

    __test__ = False  # not a pytest test class

    files: dict[str, str]
    module: str
    tests: tuple[str, ...]
    setup: str = ""
    timeout_s: float | None = None
    isolate: bool = False
    entry_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Reject wrongly typed fields up front (TypeError naming the field).

        A str for `tests` would otherwise be graded character by character, and a `module` that is not
        one of `files` would grade whatever importable module has that name (e.g. the stdlib's `os`).
        A list of tests is accepted and stored as a tuple.
        """
        if not isinstance(self.files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.files.items()):
            raise TypeError(f"TestJob.files: expected a dict of str path -> str text, got {_describe(self.files)}")
        if isinstance(self.tests, (str, bytes)) or not isinstance(self.tests, (tuple, list)):
            raise TypeError(f"TestJob.tests: expected a tuple of test source strings, got {_describe(self.tests)}")
        if not all(isinstance(t, str) for t in self.tests):
            raise TypeError("TestJob.tests: every test must be a str of Python source")
        object.__setattr__(self, "tests", tuple(self.tests))
        if isinstance(self.entry_names, (str, bytes)) or not isinstance(self.entry_names, (tuple, list)) or not all(
                isinstance(n, str) for n in self.entry_names):
            raise TypeError(f"TestJob.entry_names: expected a tuple of names, got {_describe(self.entry_names)}")
        object.__setattr__(self, "entry_names", tuple(self.entry_names))
        if not isinstance(self.setup, str):
            raise TypeError(f"TestJob.setup: expected a str, got {_describe(self.setup)}")
        if not isinstance(self.module, str):  # its syntax is checked by Sandbox.run_tests (ValueError)
            raise TypeError(f"TestJob.module: expected a str module name, got {_describe(self.module)}")
        stem = self.module.replace(".", "/")
        if self.files and f"{stem}.py" not in self.files and f"{stem}/__init__.py" not in self.files:
            raise ValueError(f"TestJob.module: {self.module!r} is not one of files "
                             f"({', '.join(sorted(self.files)) or 'none'}); the job would grade another module")


@dataclass(frozen=True)
class TestOutcome:
    """One test's result: status is parsed from the harness's marked report, never guessed."""

    __test__ = False  # not a pytest test class

    index: int
    status: TestStatus
    message: str = ""


@dataclass(frozen=True)
class TestReport:
    """Per-test outcomes of one TestJob.

    `error` is set when no trustworthy per-test report exists (import of the module failed, the
    process died, the report marker was missing or forged); then every test counts as not passed.
    """

    __test__ = False  # not a pytest test class

    outcomes: tuple[TestOutcome, ...]
    run: RunResult
    error: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(o.status == "pass" for o in self.outcomes)

    @property
    def fraction(self) -> float:
        """Fraction of tests that passed, in [0, 1]; 0.0 for a job with no tests."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def _describe(value: object) -> str:
    """The type and size of a wrongly typed field, never its text: a TestJob's fields are hidden tests and
    graded source, and a TypeError's message can travel (logs, an env_error answered to a client)."""
    if isinstance(value, (str, bytes, list, tuple, dict, set)):
        return f"{type(value).__name__} of length {len(value)}"
    if value is None or isinstance(value, (bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__

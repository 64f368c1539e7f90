"""Hidden-test grading of a source file through agentrl.sandbox, shared by the code environments.

Not the sandbox (agentrl.sandbox runs the code) and not the python-session's hardened grader
(session_grader.py); this module only builds TestJobs and summarises TestReports.
"""

from __future__ import annotations

from typing import Any

from agentrl.sandbox.api import TestJob, TestReport
from agentrl.tasks.task import Task


def default_sandbox() -> Any:
    """A fresh `agentrl.sandbox.Sandbox()` with default limits (imported lazily)."""
    from agentrl.sandbox import Sandbox

    return Sandbox()


def source_job(task: Task, source: str | None, tests: tuple[str, ...]) -> TestJob:
    """A TestJob grading `tests` against `source` as the task's `source_file` (only that file is copied)."""
    return TestJob(files={task.source_file: source or ""}, module=task.module, tests=tests, setup=task.test_setup)


def is_sandbox_failure(report: TestReport) -> bool:
    """True when the sandbox itself failed (no trustworthy report), as opposed to the code failing."""
    return bool(report.error) and report.error.startswith("sandbox failure")


def grade(sandbox: Any, job: TestJob, retries: int = 2) -> TestReport:
    """`sandbox.run_tests(job)`, retried up to `retries` times while the sandbox itself fails
    (e.g. a lost pool worker); the code's own failures are never retried."""
    report = sandbox.run_tests(job)
    for _ in range(retries):
        if not is_sandbox_failure(report):
            break
        report = sandbox.run_tests(job)
    return report


def report_lines(report: TestReport, tests: tuple[str, ...], max_lines: int = 20) -> str:
    """Readable summary of a TestReport: "k/n tests passed" and one line per failing test."""
    if report.error:
        return f"0/{len(tests)} tests passed: {report.error.strip()[:2000]}"
    lines = [f"{report.passed}/{report.total} tests passed."]
    for o in report.outcomes:
        if o.status != "pass" and len(lines) <= max_lines:
            test = tests[o.index] if 0 <= o.index < len(tests) else f"test {o.index}"
            msg = f": {o.message.strip()[:300]}" if o.message.strip() else ""
            lines.append(f"FAILED ({o.status}) {test}{msg}")
    return "\n".join(lines)

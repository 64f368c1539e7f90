"""Behavioural check of bug-fix tasks through the sandbox; per-family pass rates. Not a generator.

For every task it grades, in the sandbox: the reference against the hidden tests (must all pass),
the buggy original against the hidden tests (must fail at least one), the buggy original against
the public tests (at least one must fail, so the public tests are informative), and each wrong
edit op applied to the buggy file against the hidden tests (each must fail at least one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentrl.sandbox.api import TestJob, TestReport
from agentrl.tasks.task import Task

RunBatch = Callable[[list[TestJob]], Sequence[TestReport]]


@dataclass
class FamilyStats:
    """Counts for one family; the `*_pct` properties are percentages in [0, 100].

    Invariants (`ok`): reference 100%, buggy 0%, no task whose public tests all pass on the buggy
    file, wrong ops 0%, and no structural problem.
    """

    family: str
    tasks: int = 0
    reference_pass: int = 0
    buggy_pass: int = 0
    public_tests: int = 0
    public_buggy_pass: int = 0
    uninformative: int = 0
    wrong_ops: int = 0
    wrong_pass: int = 0
    problems: list[str] = field(default_factory=list)

    @staticmethod
    def _pct(num: int, den: int) -> float:
        return 100.0 * num / den if den else 0.0

    @property
    def reference_pct(self) -> float:
        return self._pct(self.reference_pass, self.tasks)

    @property
    def buggy_pct(self) -> float:
        return self._pct(self.buggy_pass, self.tasks)

    @property
    def public_buggy_pct(self) -> float:
        """Share of public tests (not tasks) that pass on the buggy original."""
        return self._pct(self.public_buggy_pass, self.public_tests)

    @property
    def wrong_pct(self) -> float:
        return self._pct(self.wrong_pass, self.wrong_ops)

    @property
    def ok(self) -> bool:
        return (self.tasks > 0 and self.reference_pass == self.tasks and self.buggy_pass == 0
                and self.uninformative == 0 and self.wrong_pass == 0 and not self.problems)


def _apply(source: str, old: str, new: str) -> str | None:
    """`source` with the one occurrence of `old` replaced, or None if `old` does not occur exactly once."""
    return source.replace(old, new) if old and source.count(old) == 1 else None


def _job(task: Task, text: str, tests: tuple[str, ...]) -> TestJob:
    """`tests` run against `text` as the task's source file (its module and test setup)."""
    return TestJob(files={task.source_file: text}, module=task.module, tests=tests, setup=task.test_setup)


def _reference_failure(report: TestReport) -> str:
    """What a reference job's failing report says: how many hidden tests fail, and its error if any."""
    return (f"reference fails {report.total - report.passed} hidden test(s)"
            + (f" ({report.error})" if report.error else ""))


def _jobs(task: Task, stats: FamilyStats) -> list[tuple[str, TestJob]]:
    """The (kind, job) pairs that grade one task; structural problems go to `stats.problems`."""
    buggy = task.files.get(task.source_file)
    if buggy is None:
        stats.problems.append(f"{task.id}: source file {task.source_file!r} missing from files")
        return []

    out = [("reference", _job(task, task.reference, task.hidden_tests)),
           ("buggy", _job(task, buggy, task.hidden_tests)), ("public", _job(task, buggy, task.public_tests))]
    for op in task.edit_ops:
        edited = _apply(buggy, op.old, op.new)
        if edited is None or edited == buggy:
            stats.problems.append(f"{task.id}: op {op.name} does not apply once or changes nothing")
        elif op.correct:
            if edited != task.reference:
                stats.problems.append(f"{task.id}: correct op {op.name} does not restore the reference")
        else:
            out.append((f"wrong:{op.name}", _job(task, edited, task.hidden_tests)))
    return out


def _tally(task: Task, kind: str, report: TestReport, stats: FamilyStats) -> None:
    if report.run.error is not None:  # the sandbox gave no verdict: never read as "the code fails"
        stats.problems.append(f"{task.id}: {kind} job got no verdict from the sandbox ({report.run.error})")
    if kind == "reference":
        stats.reference_pass += report.all_passed
        if not report.all_passed:
            stats.problems.append(f"{task.id}: {_reference_failure(report)}")
    elif kind == "buggy":
        stats.buggy_pass += report.all_passed
        if report.all_passed:
            stats.problems.append(f"{task.id}: buggy original passes every hidden test")
    elif kind == "public":
        stats.public_tests += len(task.public_tests)
        stats.public_buggy_pass += report.passed if report.error is None else 0
        if report.all_passed:
            stats.uninformative += 1
            stats.problems.append(f"{task.id}: every public test passes on the buggy original")
    else:
        stats.wrong_ops += 1
        stats.wrong_pass += report.all_passed
        if report.all_passed:
            stats.problems.append(f"{task.id}: wrong op {kind.removeprefix('wrong:')} passes every hidden test")


def failing_references(tasks: Sequence[Task], run_batch: RunBatch) -> list[tuple[str, str]]:
    """The tasks whose reference solution does not pass their own hidden tests: [(task id, why)], in order.

    Such a task rewards 0 whatever the policy writes, so a run on it trains on noise without saying so (its
    groups have no reward spread). One sandbox job per task (`run_batch`, as in check_tasks); a job the sandbox
    gave no verdict for is not counted as failing. Tasks without hidden tests or reference are skipped.
    """
    todo = [t for t in tasks if t.hidden_tests and t.reference and t.source_file in t.files]
    reports = list(run_batch([_job(t, t.reference, t.hidden_tests) for t in todo])) if todo else []
    return [(task.id, _reference_failure(report)) for task, report in zip(todo, reports, strict=True)
            if report.run.error is None and not report.all_passed]


def check_tasks(tasks: Sequence[Task], run_batch: RunBatch | None = None) -> dict[str, FamilyStats]:
    """Grade every task (see the module docstring) and return per-family stats, in first-seen order.

    `run_batch` maps a list of TestJobs to their TestReports in order; default: the pooled sandbox's
    `Sandbox().run_tests_batch`. Never runs task code in this process.
    """
    if run_batch is None:
        from agentrl.sandbox import Sandbox

        with Sandbox() as sandbox:
            return check_tasks(tasks, sandbox.run_tests_batch)
    stats: dict[str, FamilyStats] = {}
    pending: list[tuple[Task, str]] = []
    jobs: list[TestJob] = []
    for task in tasks:
        fam = stats.setdefault(task.family, FamilyStats(task.family))
        fam.tasks += 1
        for kind, job in _jobs(task, fam):
            pending.append((task, kind))
            jobs.append(job)
    reports = list(run_batch(jobs)) if jobs else []
    if len(reports) != len(jobs):
        raise RuntimeError(f"sandbox returned {len(reports)} reports for {len(jobs)} jobs")
    for (task, kind), report in zip(pending, reports, strict=True):
        _tally(task, kind, report, stats[task.family])
    return stats


def render_table(stats: dict[str, FamilyStats], title: str = "bug-fix task check"):
    """A rich Table: one row per family plus a total row; the invariant columns say what they must be."""
    from rich.table import Table

    table = Table(title=title)
    for name, justify in [("family", "left"), ("tasks", "right"), ("reference\n=100%", "right"),
                          ("buggy\n=0%", "right"), ("public on\nbuggy <100%", "right"),
                          ("wrong\nops", "right"), ("wrong op\n=0%", "right"), ("ok", "center")]:
        table.add_column(name, justify=justify, no_wrap=name == "family")
    total = FamilyStats("all")
    for s in stats.values():
        table.add_row(s.family, str(s.tasks), f"{s.reference_pct:.1f}%", f"{s.buggy_pct:.1f}%",
                      f"{s.public_buggy_pct:.1f}%", str(s.wrong_ops), f"{s.wrong_pct:.1f}%",
                      "[green]ok[/]" if s.ok else "[red]FAIL[/]")
        for f in ("tasks", "reference_pass", "buggy_pass", "public_tests", "public_buggy_pass", "uninformative",
                  "wrong_ops", "wrong_pass"):
            setattr(total, f, getattr(total, f) + getattr(s, f))
        total.problems += s.problems
    table.add_section()
    table.add_row("all", str(total.tasks), f"{total.reference_pct:.1f}%", f"{total.buggy_pct:.1f}%",
                  f"{total.public_buggy_pct:.1f}%", str(total.wrong_ops), f"{total.wrong_pct:.1f}%",
                  "[green]ok[/]" if total.ok else "[red]FAIL[/]")
    return table

"""The typed result of one held-out evaluation (per-task and per-family counts, pass@1 with its interval)
and the paired after - before difference; each computed once, here. Not the runner (agentrl.eval.evaluate)
and not the results file (agentrl.report.results stores `to_dict()` and nothing else).

Counting rules: an episode is scorable when its reward is not None (None: the environment could not
grade it, e.g. a sandbox failure); a success is a scorable episode with reward >= 1. A task's rate is
successes / scorable episodes; pass@1 is the macro mean of the rates of the tasks with at least one
scorable episode, with a task-level bootstrap interval (agentrl.eval.bootstrap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl.eval.bootstrap import BootstrapConfig, Interval, paired_diff_ci, pass_at_1_ci


@dataclass(frozen=True)
class TaskResult:
    """One task's episodes. episodes = trials + unscorable; 0 <= successes <= trials.

    mean_reward: mean over the scorable episodes (differs from successes/trials for fractional rewards);
    None when none was scorable.
    """

    task_id: str
    family: str
    episodes: int
    trials: int
    successes: int
    mean_reward: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.successes <= self.trials <= self.episodes or self.episodes < 1:
            raise ValueError(f"TaskResult {self.task_id!r}: need 0 <= successes <= trials <= episodes and "
                             f"episodes >= 1, got {self.successes}/{self.trials}/{self.episodes}")

    @property
    def unscorable(self) -> int:
        return self.episodes - self.trials

    @property
    def rate(self) -> float | None:
        """successes / trials, or None for a task without a scorable episode."""
        return self.successes / self.trials if self.trials else None


@dataclass(frozen=True)
class FamilyResult:
    """Counts summed over one family's tasks; pass_at_1 the macro mean of its scored tasks' rates."""

    family: str
    tasks: int
    episodes: int
    trials: int
    successes: int
    pass_at_1: float | None


@dataclass(frozen=True)
class EvalReport:
    """One held-out evaluation. Build it with `summarize` / `report_from_counts` (they compute the
    interval), or `from_dict` to read back what `to_dict` stored.

    Attributes:
        tasks: [T] per-task results, in evaluation order.
        pass_at_1: macro pass@1 over the scored tasks with its task-level bootstrap interval.
        tool_stats: mean of every tool statistic over all episodes.
        transcripts: one full transcript per task (the first episode); not part of `to_dict`.
        episodes: the same first episode per task as {"end_reason", "reward", "turns"}
            (agentrl.eval.evaluate.episode_record), for the HTML transcript browser; not part of `to_dict`.
        end_reasons: {end_reason: episodes} over all episodes (the episode contract's vocabulary:
            the environment's EnvSpec.end_reasons plus the driver's "out_of_tokens", "env_error").
    """

    tasks: tuple[TaskResult, ...]
    pass_at_1: Interval
    tool_stats: dict[str, float] = field(default_factory=dict)
    transcripts: dict[str, str] = field(default_factory=dict)
    episodes: dict[str, dict] = field(default_factory=dict)
    end_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    @property
    def successes(self) -> list[int]:
        return [t.successes for t in self.tasks]

    @property
    def trials(self) -> list[int]:
        return [t.trials for t in self.tasks]

    @property
    def unscorable(self) -> int:
        """Episodes the environment could not score, over all tasks."""
        return sum(t.unscorable for t in self.tasks)

    def per_family(self) -> dict[str, FamilyResult]:
        """{family: FamilyResult}, families in order of first appearance."""
        groups: dict[str, list[TaskResult]] = {}
        for t in self.tasks:
            groups.setdefault(t.family, []).append(t)
        out = {}
        for fam, ts in groups.items():
            rates = [t.rate for t in ts if t.rate is not None]
            out[fam] = FamilyResult(fam, len(ts), sum(t.episodes for t in ts), sum(t.trials for t in ts),
                                    sum(t.successes for t in ts), float(np.mean(rates)) if rates else None)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON record of agentrl.report.results (keys: tasks, per_family, pass_at_1, unscorable, end_reasons,
        tool_stats)."""
        return {
            "tasks": [{"task_id": t.task_id, "family": t.family, "episodes": t.episodes, "trials": t.trials,
                       "successes": t.successes, "unscorable": t.unscorable, "mean_reward": t.mean_reward}
                      for t in self.tasks],
            "per_family": {f: {"tasks": r.tasks, "episodes": r.episodes, "trials": r.trials,
                               "successes": r.successes, "pass_at_1": r.pass_at_1}
                           for f, r in self.per_family().items()},
            "pass_at_1": self.pass_at_1.to_dict(),
            "unscorable": self.unscorable,
            "end_reasons": dict(self.end_reasons),
            "tool_stats": dict(self.tool_stats),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalReport:
        """Read back a `to_dict()` record (e.g. the "before" evaluation of a resumed run's results file).
        Records written before `family`/`episodes` were stored read as family "" and episodes = trials."""
        tasks = tuple(TaskResult(task_id=str(t["task_id"]), family=str(t.get("family", "")),
                                 episodes=int(t.get("episodes", t["trials"])), trials=int(t["trials"]),
                                 successes=int(t["successes"]), mean_reward=t.get("mean_reward"))
                      for t in d["tasks"])
        return cls(tasks=tasks, pass_at_1=Interval.from_dict(d["pass_at_1"]), tool_stats=dict(d.get("tool_stats") or {}),
                   end_reasons={str(k): int(v) for k, v in (d.get("end_reasons") or {}).items()})


def _pass_at_1(tasks: Sequence[TaskResult], boot: BootstrapConfig) -> Interval:
    scored = [t for t in tasks if t.trials]
    if not scored:
        return Interval(mean=None, lo=None, hi=None, n_tasks=0, alpha=boot.alpha, n_boot=boot.n_boot,
                        seed=boot.seed, undefined="no task has a scorable episode")
    return pass_at_1_ci([t.successes for t in scored], [t.trials for t in scored], n_boot=boot.n_boot,
                        alpha=boot.alpha, seed=boot.seed)


def report_from_counts(tasks: Sequence[TaskResult], boot: BootstrapConfig, *,
                       tool_stats: dict[str, float] | None = None,
                       transcripts: dict[str, str] | None = None,
                       episodes: dict[str, dict] | None = None,
                       end_reasons: dict[str, int] | None = None) -> EvalReport:
    """An EvalReport from per-task counts (computes pass@1 and its interval once, with `boot`).

    Raises:
        ValueError: no tasks, or a task id that appears twice.
    """
    ids = [t.task_id for t in tasks]
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"report_from_counts: need at least one task and distinct task ids, got {ids}")
    return EvalReport(tasks=tuple(tasks), pass_at_1=_pass_at_1(tasks, boot), tool_stats=dict(tool_stats or {}),
                      transcripts=dict(transcripts or {}), episodes=dict(episodes or {}),
                      end_reasons=dict(end_reasons or {}))


@dataclass(frozen=True)
class PairedDifference:
    """after - before pass@1 over the tasks scored in both, with the paired task-level interval.

    Attributes:
        diff: Interval of mean_t (rate_after_t - rate_before_t); undefined (with the reason) for one task or
            when every task's difference is the same.
        task_ids: the tasks compared (sorted); excluded: tasks left out (no scorable episode before or after).
    """

    diff: Interval
    task_ids: tuple[str, ...]
    excluded: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"diff": self.diff.to_dict(), "tasks": len(self.task_ids), "excluded": list(self.excluded)}


def paired_difference(before: EvalReport, after: EvalReport, boot: BootstrapConfig) -> PairedDifference:
    """Match tasks by id and bootstrap the per-task rate differences (the same resampled tasks for both).

    Raises:
        ValueError: the two evaluations cover different tasks (names the ones that differ).
    """
    b = {t.task_id: t for t in before.tasks}
    a = {t.task_id: t for t in after.tasks}
    if set(a) != set(b):
        raise ValueError(f"paired_difference: the evaluations cover different tasks (only before: "
                         f"{sorted(set(b) - set(a))}, only after: {sorted(set(a) - set(b))})")
    ids = sorted(i for i in b if b[i].trials and a[i].trials)
    excluded = tuple(sorted(set(b) - set(ids)))
    if not ids:
        iv = Interval(mean=None, lo=None, hi=None, n_tasks=0, alpha=boot.alpha, n_boot=boot.n_boot,
                      seed=boot.seed, undefined="no task is scorable both before and after")
        return PairedDifference(iv, (), excluded)
    diff = paired_diff_ci([b[i].successes for i in ids], [a[i].successes for i in ids], [b[i].trials for i in ids],
                          [a[i].trials for i in ids], n_boot=boot.n_boot, alpha=boot.alpha, seed=boot.seed)
    return PairedDifference(diff, tuple(ids), excluded)

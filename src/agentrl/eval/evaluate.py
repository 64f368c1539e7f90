"""Held-out evaluation: run n episodes per task with the current policy and summarise them.

Not the statistics themselves (agentrl.eval.bootstrap) and not the sampler (agentrl.rollout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agentrl.eval.bootstrap import pass_at_1_ci
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task


@dataclass
class EvalResult:
    """Outcome of one held-out evaluation.

    Attributes:
        task_ids: [T] evaluated task ids, in order.
        families: [T] their families.
        successes: [T] episodes (of `trials`) with reward 1 per task.
        trials: episodes per task (the same n for every task).
        mean_reward: [T] mean reward per task (differs from successes/trials for fractional rewards).
        pass_at_1: mean success rate over tasks, with `ci` = (lo, hi) task-level bootstrap interval.
        tool_stats: mean of every tool statistic over all episodes.
        transcripts: one full transcript per task (the first episode).
    """

    task_ids: list[str]
    families: list[str]
    successes: list[int]
    trials: int
    mean_reward: list[float]
    pass_at_1: float
    ci: tuple[float, float]
    tool_stats: dict[str, float] = field(default_factory=dict)
    transcripts: dict[str, str] = field(default_factory=dict)

    def per_family(self) -> dict[str, dict[str, int]]:
        """{family: {"tasks", "successes", "trials"}} summed over the family's tasks."""
        out: dict[str, dict[str, int]] = {}
        for fam, s in zip(self.families, self.successes, strict=True):
            d = out.setdefault(fam, {"tasks": 0, "successes": 0, "trials": 0})
            d["tasks"] += 1
            d["successes"] += int(s)
            d["trials"] += self.trials
        return out


def mean_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Mean of each numeric stat over trajectories (a stat missing from one episode counts as 0)."""
    keys = sorted({k for t in trajs for k, v in t.stats.items() if isinstance(v, int | float)})
    return {k: float(np.mean([float(t.stats.get(k, 0.0)) for t in trajs])) for k in keys} if trajs else {}


def summarize(
    tasks: Sequence[Task], trajs: Sequence[Trajectory], n: int, *, n_boot: int = 2000, seed: int = 0
) -> EvalResult:
    """Group `trajs` (n per task, any order) by task and compute counts, pass@1 and its interval.

    Raises:
        ValueError: if some task does not have exactly `n` trajectories.
    """
    by_task: dict[str, list[Trajectory]] = {t.id: [] for t in tasks}
    for tr in trajs:
        by_task[tr.task_id].append(tr)
    bad = {k: len(v) for k, v in by_task.items() if len(v) != n}
    if bad:
        raise ValueError(f"expected {n} episodes per task, got {bad}")
    succ = [sum(tr.reward >= 1.0 for tr in by_task[t.id]) for t in tasks]
    mean_r = [float(np.mean([tr.reward for tr in by_task[t.id]])) for t in tasks]
    p, lo, hi = pass_at_1_ci(succ, n, n_boot=n_boot, seed=seed)
    return EvalResult(
        task_ids=[t.id for t in tasks],
        families=[t.family for t in tasks],
        successes=succ,
        trials=n,
        mean_reward=mean_r,
        pass_at_1=float(p),
        ci=(float(lo), float(hi)),
        tool_stats=mean_stats(trajs),
        transcripts={t.id: by_task[t.id][0].transcript for t in tasks},
    )


def evaluate(
    rollout_fn: Callable[[Sequence[Task]], list[Trajectory]],
    tasks: Sequence[Task],
    n: int,
    *,
    seed: int = 0,
) -> EvalResult:
    """Run `n` episodes of every task through `rollout_fn` and summarise them.

    Args:
        rollout_fn: maps a list of tasks (one entry per episode) to one Trajectory each.
        tasks: held-out tasks.
        n: episodes per task (>= 1).

    Raises:
        ValueError: if n < 1 or tasks is empty.
    """
    if n < 1 or not tasks:
        raise ValueError(f"evaluation needs n >= 1 and at least one task (n={n}, tasks={len(tasks)})")
    episodes = [t for t in tasks for _ in range(n)]
    return summarize(tasks, rollout_fn(episodes), n, seed=seed)

"""Held-out evaluation: run n episodes per task with the current policy and summarise them once.

Not the statistics themselves (agentrl.eval.bootstrap), not the result type (agentrl.eval.report) and
not the sampler (agentrl.rollout).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from agentrl.eval.bootstrap import BootstrapConfig
from agentrl.eval.report import EvalReport, TaskResult, report_from_counts
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task


def mean_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Mean of each numeric stat over trajectories (a stat missing from one episode counts as 0)."""
    keys = sorted({k for t in trajs for k, v in t.stats.items() if isinstance(v, int | float)})
    return {k: float(np.mean([float(t.stats.get(k, 0.0)) for t in trajs])) for k in keys} if trajs else {}


def _task_result(task: Task, trajs: Sequence[Trajectory]) -> TaskResult:
    scored = [float(tr.reward) for tr in trajs if tr.reward is not None]
    return TaskResult(task_id=task.id, family=task.family, episodes=len(trajs), trials=len(scored),
                      successes=sum(r >= 1.0 for r in scored),
                      mean_reward=float(np.mean(scored)) if scored else None)


def summarize(tasks: Sequence[Task], trajs: Sequence[Trajectory], n: int,
              boot: BootstrapConfig) -> EvalReport:
    """Group `trajs` (n per task, any order) by task into one EvalReport: per-task counts (an episode with
    reward None is unscorable: not a trial), per-family counts, end-reason counts, pass@1 with its interval
    (from `boot`).

    Raises:
        ValueError: if some task does not have exactly `n` trajectories, or one belongs to no task.
    """
    by_task: dict[str, list[Trajectory]] = {t.id: [] for t in tasks}
    stray = sorted({tr.task_id for tr in trajs} - set(by_task))
    if stray:
        raise ValueError(f"summarize: trajectories of tasks that were not evaluated: {stray}")
    for tr in trajs:
        by_task[tr.task_id].append(tr)
    bad = {k: len(v) for k, v in by_task.items() if len(v) != n}
    if bad:
        raise ValueError(f"expected {n} episodes per task, got {bad}")
    return report_from_counts([_task_result(t, by_task[t.id]) for t in tasks], boot, tool_stats=mean_stats(trajs),
                              transcripts={t.id: by_task[t.id][0].transcript for t in tasks},
                              episodes={t.id: episode_record(by_task[t.id][0]) for t in tasks},
                              end_reasons=dict(sorted(Counter(tr.end_reason or "unknown" for tr in trajs).items())))


def episode_record(traj: Trajectory) -> dict:
    """{"end_reason", "reward", "turns"} of one episode (turns as agentrl.rollout.transcript.turn_records)."""
    from agentrl.rollout.transcript import turn_records

    return {"end_reason": traj.end_reason, "reward": traj.reward, "turns": turn_records(traj.turns)}


def evaluate(
    rollout_fn: Callable[[Sequence[Task]], list[Trajectory]],
    tasks: Sequence[Task],
    n: int,
    boot: BootstrapConfig,
) -> EvalReport:
    """Run `n` episodes of every task through `rollout_fn` and summarise them (see summarize).

    Args:
        rollout_fn: maps a list of tasks (one entry per episode) to one Trajectory each.
        tasks: held-out tasks.
        n: episodes per task (>= 1).
        boot: how the interval is computed (the run's n_boot, alpha, seed).

    Raises:
        ValueError: if n < 1 or tasks is empty.
    """
    if n < 1 or not tasks:
        raise ValueError(f"evaluation needs n >= 1 and at least one task (n={n}, tasks={len(tasks)})")
    episodes = [t for t in tasks for _ in range(n)]
    return summarize(tasks, rollout_fn(episodes), n, boot)

"""Scored groups: trajectories grouped by `group_id` into per-episode advantages, with unscorable and
truncated episodes handled. Not the advantage formulas (advantages.py) and not the loss.

Rules (docs/design.md, "Episode contract"):
- Episodes are grouped by `Trajectory.group_id`, never by row position.
- An unscorable episode (`reward is None`: an environment error, or a sandbox that could not grade)
  gets advantage 0 and is left out of its group's baseline; a group with fewer than two scorable
  episodes (one, for the baseline-free mode "none") trains nothing.
- With `mask_truncated` (TRL's `mask_truncated_completions`), episodes that ended out of turns or out
  of tokens get advantage 0 but, as in TRL, their reward still enters the group's baseline.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from agentrl.rl.advantages import ADV_EPS, group_advantages
from agentrl.rl.estimators import get_estimator
from agentrl.rollout.trajectory import Trajectory

# End reasons `mask_truncated` masks: the limits (the driver's env_error is unscorable anyway).
TRUNCATION_REASONS: frozenset[str] = frozenset({"out_of_turns", "out_of_tokens"})


def groups_by_id(trajs: Sequence[Trajectory]) -> dict[int, list[int]]:
    """{group_id: row indices of its episodes}, groups in order of first appearance."""
    out: dict[int, list[int]] = {}
    for i, tr in enumerate(trajs):
        out.setdefault(tr.group_id, []).append(i)
    return out


def episode_advantages(
    trajs: Sequence[Trajectory], mode: str = "grpo", *, mask_truncated: bool = False, eps: float = ADV_EPS
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-episode advantages of trajectories in any order, grouped by `group_id`.

    Args:
        trajs: N trajectories; episodes of one prompt share a group_id.
        mode: an advantage mode of agentrl.rl.advantages.group_advantages ("grpo", "dr_grpo", "rloo", "none"),
            applied to each group's scorable episodes.
        mask_truncated: episodes whose end_reason is in TRUNCATION_REASONS get advantage 0 (still in the baseline).
        eps: the grpo std epsilon.

    Returns:
        (advantages [N] float32, row-aligned with `trajs`; stats) with stats reward_mean, reward_std
        (population, over scorable episodes; NaN if none), frac_zero_std (groups whose scorable rewards are
        all equal, over all groups), frac_untrainable (groups with too few scorable episodes), adv_abs_mean,
        num_groups, unscorable (episodes), masked_truncated (episodes).

    Raises:
        ValueError: no trajectories, or a reward that is not a finite number or None.
    """
    if not trajs:
        raise ValueError("episode_advantages: expected at least one trajectory, got none")
    adv = torch.zeros(len(trajs), dtype=torch.float32)
    min_scorable = get_estimator(mode, flag="episode_advantages: mode").min_group_size
    zero_std = untrainable = 0
    groups = groups_by_id(trajs)
    for rows in groups.values():
        scored = [i for i in rows if trajs[i].reward is not None]
        if len(scored) < min_scorable:
            untrainable += 1
            continue
        rewards = torch.tensor([float(trajs[i].reward) for i in scored], dtype=torch.float64)
        group_adv, st = group_advantages(rewards, len(scored), mode, eps=eps)
        zero_std += int(st["frac_zero_std"] == 1.0)
        adv[scored] = group_adv
    masked = [i for i, tr in enumerate(trajs) if mask_truncated and tr.reward is not None
              and tr.end_reason in TRUNCATION_REASONS]
    adv[masked] = 0.0
    scorable = [float(tr.reward) for tr in trajs if tr.reward is not None]
    stats = {
        "reward_mean": _mean(scorable),
        "reward_std": float(torch.tensor(scorable, dtype=torch.float64).std(unbiased=False)) if scorable else math.nan,
        "frac_zero_std": zero_std / len(groups),
        "frac_untrainable": untrainable / len(groups),
        "adv_abs_mean": float(adv.abs().mean()),
        "num_groups": float(len(groups)),
        "unscorable": float(len(trajs) - len(scorable)),
        "masked_truncated": float(len(masked)),
    }
    return adv, stats


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def outcome_metrics(trajs: Sequence[Trajectory], end_reasons: Iterable[str] = ()) -> dict[str, float]:
    """Per-step rollout outcome metrics: "rollout/unscorable" (a count of episodes), "rollout/truncated"
    (fraction) and "rollout/end_reason/<reason>" (fractions, one per reason in `end_reasons`, zero-filled,
    plus any other reason seen)."""
    n = max(len(trajs), 1)
    seen = Counter(tr.end_reason or "unknown" for tr in trajs)
    out = {"rollout/unscorable": float(sum(tr.reward is None for tr in trajs)),
           "rollout/truncated": sum(tr.truncated for tr in trajs) / n}
    for reason in [*dict.fromkeys(end_reasons), *sorted(set(seen) - set(end_reasons))]:
        out[f"rollout/end_reason/{reason}"] = seen.get(reason, 0) / n
    return out

"""TrainBatch and collate: padded tensors the update consumes, built from Trajectories. Not the loss."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrl.rollout.trajectory import Trajectory


@dataclass
class TrainBatch:
    """N episodes, right-padded to a common length L.

    Attributes:
        input_ids: [N, L] long, prompt_ids + completion_ids, then pad_id.
        attention_mask: [N, L] long, 1 on real tokens, 0 on padding.
        policy_mask: [N, L] long, 1 where the token at that position was sampled by the policy
            (never position 0, never prompt, observation or padding tokens).
        old_logprobs: [N, L] float32, the sampler's log-prob of the token AT that position (0 elsewhere).
        advantages: [N] float32, one advantage per episode (from agentrl.rl.advantages).
        rewards: [N] float32, the environment's rewards (for metrics; NaN for an unscorable episode).
        is_weights: [N, L] float32 truncated importance weights of an off-policy batch (1 off-policy
            positions), or None for an on-policy batch (agentrl.rl.offpolicy).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    policy_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    rewards: torch.Tensor
    is_weights: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_policy_tokens(self) -> int:
        return int(self.policy_mask.sum())

    def select(self, rows: torch.Tensor | Sequence[int], *, trim: bool = True) -> TrainBatch:
        """The sub-batch of `rows` (index tensor or list); with trim, padding columns past the last
        real token of those rows are dropped (right padding + causal attention: values unchanged)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        am = self.attention_mask[idx]
        length = int(am.sum(dim=1).max()) if trim and idx.numel() else am.shape[1]
        return TrainBatch(
            input_ids=self.input_ids[idx, :length], attention_mask=am[:, :length],
            policy_mask=self.policy_mask[idx, :length], old_logprobs=self.old_logprobs[idx, :length],
            advantages=self.advantages[idx], rewards=self.rewards[idx],
            is_weights=None if self.is_weights is None else self.is_weights[idx, :length],
        )

    def to(self, device: torch.device | str) -> TrainBatch:
        return TrainBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.policy_mask,
                                                    self.old_logprobs, self.advantages, self.rewards)),
                          is_weights=None if self.is_weights is None else self.is_weights.to(device))


def _check(i: int, tr: Trajectory) -> None:
    c = len(tr.completion_ids)
    if len(tr.policy_mask) != c or len(tr.sampler_logprobs) != c:
        raise ValueError(f"collate: trajectory {i} ({tr.task_id!r}) has {c} completion ids but "
                         f"{len(tr.policy_mask)} mask entries and {len(tr.sampler_logprobs)} sampler log-probs")
    if not tr.prompt_ids:
        raise ValueError(f"collate: trajectory {i} ({tr.task_id!r}) has an empty prompt; the first "
                         "sampled token needs a context")
    if any(m not in (0, 1) for m in tr.policy_mask):
        raise ValueError(f"collate: trajectory {i} ({tr.task_id!r}) policy_mask must hold only 0/1")


def collate(
    trajectories: Sequence[Trajectory], pad_id: int, advantages: torch.Tensor | Sequence[float] | None = None
) -> TrainBatch:
    """Right-pad trajectories into a TrainBatch.

    Args:
        trajectories: N >= 1 trajectories (in group order if advantages come from group_advantages).
        pad_id: token id used for padding (masked out; its value never matters).
        advantages: [N] per-episode advantages; None gives zeros (fill them before the update).

    Raises:
        ValueError: no trajectories, misaligned completion/mask/log-prob lengths, empty prompt,
            advantages of the wrong length.
    """
    if not trajectories:
        raise ValueError("collate: expected at least one trajectory, got none")
    for i, tr in enumerate(trajectories):
        _check(i, tr)
    n = len(trajectories)
    length = max(len(t.prompt_ids) + len(t.completion_ids) for t in trajectories)
    input_ids = torch.full((n, length), int(pad_id), dtype=torch.long)
    attention_mask = torch.zeros((n, length), dtype=torch.long)
    policy_mask = torch.zeros((n, length), dtype=torch.long)
    old_logprobs = torch.zeros((n, length), dtype=torch.float32)
    for i, tr in enumerate(trajectories):
        p, c = len(tr.prompt_ids), len(tr.completion_ids)
        input_ids[i, : p + c] = torch.tensor(tuple(tr.prompt_ids) + tuple(tr.completion_ids), dtype=torch.long)
        attention_mask[i, : p + c] = 1
        policy_mask[i, p: p + c] = torch.tensor(tr.policy_mask, dtype=torch.long)
        old_logprobs[i, p: p + c] = torch.tensor(tr.sampler_logprobs, dtype=torch.float32)
    old_logprobs = old_logprobs * policy_mask  # the contract says 0.0 off-policy; enforce it
    if advantages is None:
        adv = torch.zeros(n, dtype=torch.float32)
    else:
        adv = torch.as_tensor(advantages, dtype=torch.float32).reshape(-1)
        if adv.numel() != n:
            raise ValueError(f"collate: advantages must have one value per trajectory ({n}), got {adv.numel()}")
    rewards = torch.tensor([math.nan if t.reward is None else float(t.reward) for t in trajectories],
                           dtype=torch.float32)
    return TrainBatch(input_ids, attention_mask, policy_mask, old_logprobs, adv, rewards)

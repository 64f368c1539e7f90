"""Group advantages for GRPO-style training: pure tensor maths on rewards. Not the loss or the sampler."""

from __future__ import annotations

import math

import torch

from agentrl.rl.estimators import get_estimator

ADV_EPS = 1e-4  # TRL GRPOTrainer's epsilon in (r - mean) / (std + eps)


def group_advantages(
    rewards: torch.Tensor, group_size: int, mode: str = "grpo", *, eps: float = ADV_EPS
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-episode advantages from rewards laid out group by group.

    Args:
        rewards: [B*G] float rewards; rows g*G .. g*G+G-1 are the G episodes of group g (same prompt).
        group_size: G >= 1 (>= 2 for every mode but "none").
        mode: a registered estimator (agentrl.rl.estimators.ADV_ESTIMATORS):
            "grpo": (r - mean_g) / (std_g + eps), std_g the SAMPLE std (Bessel, divisor G-1), as TRL's
                GRPOTrainer computes it (`rewards.view(-1, G).std(dim=1)`, eps 1e-4); group-normalised
                outcome supervision of DeepSeekMath (Shao et al. 2024, Sec. 4.1.2).
            "dr_grpo": r - mean_g, no std scaling (Liu et al. 2025, "Understanding R1-Zero-Like
                Training: A Critical Perspective", Dr. GRPO).
            "rloo": r_i - mean_{j != i} r_j = G/(G-1) * (r_i - mean_g), the leave-one-out baseline
                (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization ...").
            "none": the raw reward (REINFORCE without a baseline).
        eps: added to the std in "grpo".
        (Names, minimum group sizes and formulas: agentrl.rl.estimators.ADV_ESTIMATORS, also read by RLConfig.)

    Returns:
        (advantages [B*G] float32 on rewards' device, stats) where, for every baselined mode, a group
        whose rewards are all equal gets advantages of exactly 0.0 (not a rounding residue), and stats
        holds reward_mean, reward_std (population, over all B*G), frac_zero_std (fraction of the B
        groups whose rewards are all equal; counted in every mode), adv_abs_mean, num_groups.

    Raises:
        ValueError: rewards not 1-D, length not a multiple of group_size, non-finite rewards, bad mode,
            eps not a finite number >= 0.
    """
    rewards = torch.as_tensor(rewards)  # a list or numpy array is accepted too
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"group_advantages: eps must be a finite number >= 0, got {eps!r}")
    if rewards.dim() != 1:
        raise ValueError(f"group_advantages: rewards must be 1-D [B*G], got shape {tuple(rewards.shape)}")
    est = get_estimator(mode, flag="group_advantages: mode")
    min_g = est.min_group_size
    if group_size < min_g or rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(f"group_advantages: need group_size >= {min_g} dividing len(rewards) > 0; got "
                         f"group_size={group_size}, len(rewards)={rewards.numel()}")
    r = rewards.detach().to(torch.float64)
    if not torch.isfinite(r).all():
        raise ValueError("group_advantages: rewards contain NaN or inf")
    groups = r.view(-1, group_size)  # [B, G]
    mean = groups.mean(dim=1, keepdim=True)
    constant = groups.amax(dim=1) == groups.amin(dim=1)  # [B]
    adv = est.formula(groups, mean, eps)
    if est.baselined:
        adv[constant] = 0.0
    adv = adv.reshape(-1)
    stats = {
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std(unbiased=False)),
        "frac_zero_std": float(constant.to(torch.float64).mean()),
        "adv_abs_mean": float(adv.abs().mean()),
        "num_groups": float(groups.shape[0]),
    }
    return adv.to(torch.float32), stats

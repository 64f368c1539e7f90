"""The clipped-ratio policy loss (PPO/GRPO) with an external token normalizer. Not the update loop."""

from __future__ import annotations

import torch


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    normalizer: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate against the sampler's log-probs, token-summed / `normalizer`.

    loss = [ sum_{n,t} mask * max(-A_n r_nt, -A_n clip(r_nt, 1-clip_low, 1+clip_high))
             + kl_coef * sum_{n,t} mask * k3_nt ] / normalizer,
    r = exp(logp - old_logp) (Schulman et al. 2017, PPO eq. 7; GRPO, Shao et al. 2024 eq. 3, with the
    token-level normalisation of DAPO, Yu et al. 2025, so the caller passes the minibatch's total policy
    tokens and microbatch losses add up to the minibatch loss), and k3 = exp(ref - logp) - (ref - logp) - 1
    (Schulman 2020, "Approximating KL divergence"; the GRPO paper's KL term).

    Args:
        logp: [N, T] float, trainer log-probs (differentiable).
        old_logp: [N, T] float, sampler log-probs (no gradient).
        adv: [N] float advantages, one per row.
        mask: [N, T] 0/1, policy tokens.
        clip_low, clip_high: ratio clip range [1 - clip_low, 1 + clip_high].
        normalizer: > 0, policy tokens of the whole minibatch (not only of these rows).
        ref_logp: [N, T] frozen-reference log-probs, needed when kl_coef > 0.
        kl_coef: weight of the k3 penalty.
        entropy: [N, T] optional per-token entropy, only averaged into stats.
        weights: [N, T] optional per-token importance weights (no gradient) multiplying each token's
            surrogate: the truncated-IS correction of an off-policy batch, where `old_logp` is then the
            proximal policy's log-prob (agentrl.rl.offpolicy; decoupled PPO, Hilton et al. 2022).

    Returns:
        (loss scalar, stats) with stats as means over this call's masked tokens: ratio_mean,
        clip_frac_low (A<0 and r<1-clip_low), clip_frac_high (A>0 and r>1+clip_high), clip_frac,
        kl_sampler (k3 estimate of KL(sampler || trainer)), kl_ref (k3 vs reference, if given),
        logprob_gap_abs (mean |logp - old_logp|), logprob_gap (mean old_logp - logp), entropy,
        outside_support (fraction of tokens whose trainer logp is -inf under top-k/top-p; the KL and gap
        stats are over the others), and tokens (count, for token-weighted aggregation).

    Raises:
        ValueError: mismatched shapes, normalizer <= 0, kl_coef > 0 without ref_logp.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape or adv.shape != logp.shape[:1]:
        raise ValueError(f"policy_loss: expected logp/old_logp/mask [N, T] and adv [N]; got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}, {tuple(adv.shape)}")
    if not normalizer > 0:
        raise ValueError(f"policy_loss: normalizer must be > 0 (policy tokens in the minibatch), got {normalizer}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("policy_loss: kl_coef > 0 needs ref_logp [N, T]")
    m = mask.to(logp.dtype)
    # Under top-k/top-p a sampled token can fall outside the current policy's kept set: logp = -inf, so
    # its ratio is exactly 0 (clipped either way: no gradient). Its inputs are zeroed BEFORE exp/subtract,
    # so no inf or NaN reaches the graph or the stats; the stats count it in `outside_support`.
    outside = mask.bool() & torch.isneginf(logp)
    live = mask.bool() & ~outside
    delta = torch.where(live, logp - old_logp.to(logp.dtype), 0.0)  # 0 off-policy, so exp() never overflows
    ratio = torch.exp(delta).masked_fill(outside, 0.0)
    a = adv.to(logp.dtype)[:, None]
    surrogate = torch.maximum(-a * ratio, -a * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    if weights is not None:
        if weights.shape != logp.shape:
            raise ValueError(f"policy_loss: weights must be [N, T] like logp, got {tuple(weights.shape)}")
        surrogate = surrogate * weights.detach().to(logp.dtype)
    loss = (surrogate * m).sum() / normalizer
    k3_ref = None
    if ref_logp is not None:
        d_ref = torch.where(live, ref_logp.to(logp.dtype) - logp, 0.0)
        k3_ref = torch.exp(d_ref) - d_ref - 1.0
        if kl_coef > 0:
            loss = loss + kl_coef * (k3_ref * m).sum() / normalizer
    stats = _stats(delta.detach(), ratio.detach(), a.detach(), m.detach(), clip_low, clip_high,
                   None if k3_ref is None else k3_ref.detach(), entropy, outside)
    return loss, stats


def _stats(delta, ratio, a, m, clip_low, clip_high, k3_ref, entropy, outside) -> dict[str, float]:
    tokens = float(m.sum())
    denom = max(tokens, 1.0)
    n_out = float(outside.sum())
    live = m * (~outside).to(m.dtype)

    def mean(x: torch.Tensor) -> float:
        return float((x.to(torch.float64) * m).sum() / denom)

    def live_mean(x: torch.Tensor) -> float:  # over tokens with a finite trainer log-prob
        return float((x.to(torch.float64) * live).sum() / max(tokens - n_out, 1.0))

    low = ((a < 0) & (ratio < 1.0 - clip_low)).to(m.dtype)
    high = ((a > 0) & (ratio > 1.0 + clip_high)).to(m.dtype)
    stats = {
        "tokens": tokens,
        "ratio_mean": mean(ratio),
        "clip_frac_low": mean(low),
        "clip_frac_high": mean(high),
        "clip_frac": mean(low + high),
        # x ~ sampler q, r = p/q: k3 = (r - 1) - log r, unbiased for KL(q || p) (Schulman 2020)
        "kl_sampler": live_mean(ratio - 1.0 - delta),
        "logprob_gap_abs": live_mean(delta.abs()),
        "logprob_gap": live_mean(-delta),
        "outside_support": n_out / denom,
    }
    if k3_ref is not None:
        stats["kl_ref"] = live_mean(k3_ref)
    if entropy is not None:
        stats["entropy"] = mean(entropy.detach().to(m.dtype))
    return stats

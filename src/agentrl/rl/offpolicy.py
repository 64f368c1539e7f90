"""Off-policy correction of a stale batch: proximal log-probs and truncated importance weights.

Not the loss (agentrl.rl.loss applies the weights) and not the asynchronous loop (agentrl.rl.async_loop).
A batch sampled by policy version v and trained at version k > v (asynchronous GRPO) is corrected as in
decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy optimization"; AReaL, Fu et al. 2025):
the clipped ratio is taken against the proximal policy pi_prox (the weights about to be updated, no
gradient), and each token's surrogate is weighted by the truncated importance ratio

    w_t = min(pi_prox(y_t) / pi_behav(y_t), cap)

against the behaviour policy that sampled it (the sampler's recorded log-prob): truncated IS (TIS, Yao et
al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"), as TRL's
`vllm_importance_sampling_correction` and verl's rollout IS do (verl's default threshold, 2.0, is ours).
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.rl.batch import TrainBatch
from agentrl.rl.logprobs import policy_logprobs

IS_MODES = ("stale", "always", "off")


def truncated_is_weights(prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor, cap: float
                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """w = min(exp(prox - behav), cap) on policy tokens, 1 elsewhere.

    Args:
        prox_logp, behav_logp: [N, L] float log-probs (proximal policy, sampler).
        mask: [N, L] 0/1 policy tokens.
        cap: > 0, the truncation threshold.

    Returns:
        (w [N, L] float32, stats): is/ratio_mean and is/ratio_max of the untruncated ratio over policy
        tokens, is/frac_capped (tokens whose ratio exceeded the cap).

    Raises:
        ValueError: cap <= 0 or mismatched shapes.
    """
    if not cap > 0:
        raise ValueError(f"truncated IS cap must be > 0, got {cap}")
    if prox_logp.shape != behav_logp.shape or prox_logp.shape != mask.shape:
        raise ValueError(f"truncated_is_weights: shapes differ {tuple(prox_logp.shape)}, {tuple(behav_logp.shape)}, "
                         f"{tuple(mask.shape)}")
    m = mask.bool()
    ratio = torch.exp(torch.where(m, prox_logp.double() - behav_logp.double(), 0.0))  # 1 off-policy; 0 if prox = -inf
    w = ratio.clamp(max=cap).float() * m + (~m).float()
    n = int(m.sum())
    r = ratio[m]
    stats = {"is/ratio_mean": float(r.mean()) if n else 1.0, "is/ratio_max": float(r.max()) if n else 1.0,
             "is/frac_capped": float((r > cap).double().mean()) if n else 0.0}
    return w, stats


@torch.no_grad()
def proximal_logprobs(model: Any, batch: TrainBatch, cfg: Any) -> torch.Tensor:
    """[N, L] log-probs of the current weights at the batch's policy positions (0 elsewhere), cfg.update.micro
    rows per forward pass, under the sampler's own warpers (temperature, top-k, top-p), as the trainer
    computes them. A token outside the current weights' top-k/top-p set has log-prob -inf."""
    device = next(model.parameters()).device
    out = torch.zeros(batch.old_logprobs.shape, dtype=torch.float32)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, batch.num_rows, cfg.update.micro):
            rows = torch.arange(start, min(start + cfg.update.micro, batch.num_rows))
            mb = batch.select(rows, trim=False).to(device)
            logp, _ = policy_logprobs(model, mb.input_ids, mb.attention_mask, mb.policy_mask,
                                      chunk_rows=cfg.update.logprob_chunk_rows, temperature=cfg.sampling.temperature,
                                      top_k=cfg.sampling.top_k or 0, top_p=cfg.sampling.top_p)
            out[rows] = torch.where(mb.policy_mask.bool(), logp.float(), 0.0).cpu()
    finally:
        model.train(was_training)
    return out


def correct_stale_batch(model: Any, batch: TrainBatch, cfg: Any, staleness: int) -> tuple[TrainBatch, dict[str, float]]:
    """The batch to train on, and IS metrics.

    With cfg.async_rl.is_correction "off", or "stale" and staleness 0 (sampled by the weights being trained: the
    proximal policy is the behaviour policy), the batch is returned unchanged, exactly as the synchronous
    trainer trains it. Otherwise old_logprobs become the proximal log-probs and is_weights the truncated
    ratios (cap cfg.async_rl.is_cap).
    """
    if cfg.async_rl.is_correction == "off" or (cfg.async_rl.is_correction == "stale" and staleness == 0):
        return batch, {}
    prox = proximal_logprobs(model, batch, cfg)
    w, stats = truncated_is_weights(prox, batch.old_logprobs, batch.policy_mask, cfg.async_rl.is_cap)
    # under top-k/top-p a stale token can lie outside the proximal policy's kept set: pi_prox = 0, so its
    # IS weight is exactly 0; its old log-prob stays the sampler's (finite), so the loss sees no inf
    mask = batch.policy_mask.bool()
    outside = mask & torch.isneginf(prox)
    stats["is/frac_outside_support"] = float(outside.sum()) / max(int(mask.sum()), 1)
    old = torch.where(outside, batch.old_logprobs.float(), prox) * batch.policy_mask
    corrected = TrainBatch(batch.input_ids, batch.attention_mask, batch.policy_mask, old,
                           batch.advantages, batch.rewards, is_weights=w)
    return corrected, stats

"""The data-parallel update: agentrl.rl.update's minibatch step with the rows of a step spread over
ranks, one token-mean normaliser across all of them, and FSDP2 summing the gradients. Not the loss.

Exactness (DESIGN.md rule 4, across ranks): optimizer step i trains the same global minibatch as a
single process would (the same seeded permutation of the step's rows, the same split into
minibatches); each rank runs the rows of that minibatch it owns (its own groups). The normaliser is
the minibatch's policy-token count over ALL ranks (an all-reduce before the loss), every rank's loss
is divided by it, and the reduce-scatter sums the ranks' gradients: the gradient equals the
single-process gradient of the whole minibatch (tested: fp64, rtol 1e-6).

FSDP needs every rank to run the same number of forward/backward passes (each pass all-gathers the
layers); a rank with fewer microbatches (fewer rows, or more zero-advantage rows skipped) runs the
missing passes on one real row with the loss multiplied by 0, which adds exactly zero gradient.
Gradients reduce only on the last pass of a minibatch (set_requires_gradient_sync), as FSDP2's
gradient accumulation does.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agentrl.models.lora import reference
from agentrl.rl.batch import TrainBatch
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.loss import policy_loss
from agentrl.rl.update import _WEIGHTED, microbatch_rows, update_metrics  # the same token-weighted stats
from agentrl.scale.context import DistContext


def _chunks(mb: TrainBatch | None, cfg: Any) -> list[torch.Tensor]:
    """Row-index chunks of `mb` that get a backward pass: rows with a nonzero advantage (all rows with
    a KL term), split as accumulate_gradients splits them (cfg.update.micro rows, or cfg.update.micro_tokens real tokens:
    agentrl.rl.update.microbatch_rows), leaving out chunks without a policy token."""
    if mb is None:
        return []
    active = torch.arange(mb.num_rows) if cfg.update.kl_coef > 0 else (mb.advantages != 0).nonzero().flatten().cpu()
    out = []
    for rows in microbatch_rows(active, mb.attention_mask.sum(1), cfg.update.micro, cfg.update.micro_tokens):
        if int(mb.policy_mask[rows.to(mb.policy_mask.device)].sum()):
            out.append(rows)
    return out


def _pass(engine: Any, sub: TrainBatch, cfg: Any, normalizer: float, ref_model: Any, scale: float
          ) -> dict[str, float]:
    """One forward/backward of `sub` (loss / normalizer, times `scale`); its policy_loss stats."""
    # as agentrl.rl.update.accumulate_gradients: the sampled distribution (temperature, top-k/top-p) for the
    # policy, the reference's full tempered distribution for the KL anchor
    pack = None if cfg.update.pack_rows else False  # padding-free trunk where packable
    logp, ent = engine(sub.input_ids, sub.attention_mask, sub.policy_mask, chunk_rows=cfg.update.logprob_chunk_rows,
                       temperature=cfg.sampling.temperature, top_k=cfg.sampling.top_k or 0, top_p=cfg.sampling.top_p, pack=pack)
    ref_logp = None
    if ref_model is not None and cfg.update.kl_coef > 0:
        with torch.no_grad(), reference(ref_model) as ref:
            ref_logp, _ = policy_logprobs(ref, sub.input_ids, sub.attention_mask, sub.policy_mask,
                                          chunk_rows=cfg.update.logprob_chunk_rows, temperature=cfg.sampling.temperature, pack=pack)
    loss, st = policy_loss(logp, sub.old_logprobs, sub.advantages, sub.policy_mask, clip_low=cfg.update.clip_low,
                           clip_high=cfg.update.clip_high, normalizer=float(normalizer), ref_logp=ref_logp,
                           kl_coef=cfg.update.kl_coef, entropy=ent, weights=sub.is_weights)
    (loss * scale).backward()
    st["loss"] = float(loss.detach())
    return st


def _clip_and_step(engine: Any, optimizer: torch.optim.Optimizer, max_norm: float) -> float:
    """Global grad-norm clip over the sharded gradients (the norm of the full gradient) and a step."""
    from torch.distributed.tensor import DTensor

    params = [p for p in engine.parameters() if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    optimizer.step()
    return float(total)


def dp_accumulate(engine: Any, batch: TrainBatch, mine: torch.Tensor, ctx: DistContext, cfg: Any,
                  ref_model: Any = None) -> dict[str, float]:
    """Backward one global minibatch into the engine's sharded `.grad` (added to what is there); this
    rank runs the rows `mine`. The data-parallel twin of agentrl.rl.update.accumulate_gradients.

    Args:
        engine: the FSDP2 LogprobEngine (agentrl.scale.fsdp.build_engine).
        batch: the step's [N, L] TrainBatch (every rank's rows: a dummy pass uses one of them).
        mine: indices into `batch` of this rank's rows of the minibatch (may be empty).

    Returns:
        stats summed/weighted over ranks: loss, tokens_trained, rows_skipped, the token-weighted
        policy_loss stats, normalizer (the global policy-token count) and passes (per rank; 0: nothing
        to train anywhere, `.grad` untouched).
    """
    mb = batch.select(mine) if mine.numel() else None
    chunks = _chunks(mb, cfg)
    local_tokens = mb.num_policy_tokens if mb is not None else 0
    normalizer, = ctx.all_reduce_sum([local_tokens])  # the one token-mean normaliser of all ranks
    passes = ctx.all_reduce_max(len(chunks)) if normalizer > 0 else 0
    keys = [k for k in _WEIGHTED if k != "kl_ref" or (ref_model is not None and cfg.update.kl_coef > 0)]
    sums = dict.fromkeys(["loss", "tokens_trained", *keys], 0.0)
    if passes:
        filler = int(batch.policy_mask.sum(dim=1).nonzero()[0, 0])  # a row with a policy token
        for i in range(passes):
            engine.set_requires_gradient_sync(i == passes - 1)
            real = i < len(chunks)
            sub = mb.select(chunks[i]) if real else batch.select([filler])
            st = _pass(engine, sub, cfg, normalizer, ref_model, 1.0 if real else 0.0)
            if real:
                sums["loss"] += st["loss"]
                sums["tokens_trained"] += st["tokens"]
                for k in keys:
                    sums[k] += st[k] * st["tokens"]
    skipped = (mb.num_rows - sum(c.numel() for c in chunks)) if mb is not None else 0
    reduced = ctx.all_reduce_sum([sums[k] for k in sums] + [float(skipped)])
    out = dict(zip(sums, reduced[:-1], strict=True))
    out["rows_skipped"] = reduced[-1]
    for k in keys:
        if out["tokens_trained"] > 0:
            out[k] /= out["tokens_trained"]
        else:
            del out[k]
    out["normalizer"], out["passes"] = normalizer, float(passes)
    return out


def dp_minibatch(engine: Any, optimizer: torch.optim.Optimizer, batch: TrainBatch, mine: torch.Tensor,
                 ctx: DistContext, cfg: Any, ref_model: Any = None) -> dict[str, float]:
    """One optimizer step on a global minibatch (dp_accumulate, the global grad-norm clip, the step);
    no step when no rank had anything to train. Returns dp_accumulate's stats plus grad_norm."""
    optimizer.zero_grad(set_to_none=True)
    out = dp_accumulate(engine, batch, mine, ctx, cfg, ref_model)
    passes = out.pop("passes")
    out.pop("normalizer")
    out["grad_norm"] = _clip_and_step(engine, optimizer, cfg.update.max_grad_norm) if passes else 0.0
    optimizer.zero_grad(set_to_none=True)
    return out


def dp_minibatch_step(engine: Any, optimizer: torch.optim.Optimizer, batch: TrainBatch, owner: torch.Tensor,
                      ctx: DistContext, cfg: Any, *, ref_model: Any = None,
                      generator: torch.Generator | None = None, minibatches: int | None = None) -> dict[str, float]:
    """agentrl.rl.update.minibatch_step across ranks: cfg.update.epochs passes, each split into the same
    minibatches a single process would make (the permutation from `generator`, seeded alike on every
    rank), each one optimizer step (dp_minibatch).

    Args:
        batch: [N, L] the step's rows (identical on every rank).
        owner: [N] long, the rank that trains each row (agentrl.scale.context.shard_groups).

    Returns:
        minibatch_step's metrics, summed/weighted over ranks (policy_tokens and sampler_nll over the
        whole batch; peak_memory_bytes of this rank).

    Raises:
        ValueError: minibatches outside 1..N, or `owner` not [N].
    """
    n_mb = cfg.update.minibatches if minibatches is None else minibatches
    if not 1 <= n_mb <= batch.num_rows:
        raise ValueError(f"dp_minibatch_step: {n_mb} minibatches need 1..{batch.num_rows} (the batch's rows)")
    if owner.shape != (batch.num_rows,):
        raise ValueError(f"dp_minibatch_step: owner must be [{batch.num_rows}], got {tuple(owner.shape)}")
    t0 = time.perf_counter()
    device = next(engine.parameters()).device
    batch = batch.to(device)
    local = owner.cpu() == ctx.rank
    per_step = []
    for _ in range(cfg.update.epochs):
        order = torch.randperm(batch.num_rows, generator=generator) if generator is not None else torch.arange(batch.num_rows)
        for rows in torch.tensor_split(order, n_mb):
            per_step.append(dp_minibatch(engine, optimizer, batch, rows[local[rows]], ctx, cfg, ref_model))
    return update_metrics(per_step, batch, epochs=cfg.update.epochs, has_ref=ref_model is not None,
                          elapsed_s=time.perf_counter() - t0, device=device)

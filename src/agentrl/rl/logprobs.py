"""Policy log-probs with the LM head applied only at policy positions, in chunks. Not the loss.

The trunk runs on the whole sequence; its hidden states are gathered at the positions that PREDICT a
policy token, and only those rows go through the LM head, `chunk_rows` at a time. Each chunk runs under
torch.utils.checkpoint, so its [chunk_rows, V] logits are freed after the forward and recomputed in
backward: prompt/tool tokens' full-vocabulary logits are never built, and at most one chunk's are alive.
The head's post-processing that HF models apply in their own forward is mirrored: Gemma-style
`final_logit_softcapping` and Cohere-style `logit_scale`; other custom heads are not covered.

Sampler = trainer (DESIGN.md rule 2): the sampler's temperature, top-k and top-p are applied here by the
very warpers the samplers use (agentrl.rollout.hf_sampler.sampling_warpers), in the same order on the same
fp32 logits, so the log-probs are those of the distribution that was sampled. Under top-k/top-p a token
outside the current policy's kept set has log-prob -inf (the loss gives it ratio 0 and no gradient).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from agentrl.rl.packing import packable, packed_hidden
from agentrl.rollout.hf_sampler import SamplingConfig, sampling_warpers


def split_causal_lm(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(trunk, head) of a Hugging Face causal LM.

    trunk: `model.get_decoder()` when available, else `getattr(model, model.base_model_prefix)`; called as
    trunk(input_ids=..., attention_mask=...) it returns an object with `last_hidden_state` [N, L, H]
    (final norm included). head: `model.get_output_embeddings()` (tied or not; weight [V, H]).

    Raises:
        ValueError: the model exposes neither a decoder nor an output embedding.
    """
    trunk = None
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        trunk = get_decoder()
    if trunk is None or trunk is model:
        trunk = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if trunk is None or head is None:
        raise ValueError(f"policy_logprobs: {type(model).__name__} is not a causal LM with a decoder trunk "
                         "and an output embedding (get_decoder / get_output_embeddings)")
    return trunk, head


def _head_chunk(head: nn.Module, h: torch.Tensor, targets: torch.Tensor, warpers: Any,
                softcap: float | None, logit_scale: float | None,
                entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, H] hidden, [M] targets -> ([M] log p(target), [M] entropy) under the warped distribution,
    softmax in fp32 or fp64. The entropy is built outside autograd unless `entropy_grad`: as a statistic inside
    autograd it held two more [M, V] fp32 tensors (exp and the product) beside the logits and log-softmax, in
    the chunk's forward and again in its recompute, about half of the update's memory above weights and
    optimizer state in bench/profile_update_memory.py (bench/README.md, issue 26 item 5)."""
    return _logits_logp(head(h), targets, warpers, softcap, logit_scale, entropy_grad)


def _logits_logp(logits: torch.Tensor, targets: torch.Tensor, warpers: Any, softcap: float | None,
                 logit_scale: float | None, entropy_grad: bool = False,
                 entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[M, V] head logits (any float dtype), [M] targets -> ([M] log p(target), [M] entropy or None without
    `entropy`), as `_head_chunk` (fp32 softmax, the model's head post-processing, the sampler's warpers)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # bf16/fp16 models: softmax in fp32
    if logit_scale is not None:  # Cohere-style scaled head, as the model's own forward does
        logits = logits * logit_scale
    if softcap is not None:  # Gemma-style final logit soft-capping, as the model's own forward does
        logits = torch.tanh(logits / softcap) * softcap
    if warpers:
        logits = warpers(None, logits)  # temperature, then top-k / top-p masks (-inf), as the sampler does
    logp_all = torch.log_softmax(logits, dim=-1)
    del logits  # log_softmax's backward needs its output, not its input: one [M, V] fewer from here on
    # nll_loss = -gather, but its backward writes the [M, V] gradient once (gather's zeros, then scatter_add, is two)
    logp = -torch.nn.functional.nll_loss(logp_all, targets, reduction="none")
    if not entropy:
        return logp, None
    grad = entropy_grad and torch.is_grad_enabled()
    with torch.set_grad_enabled(grad):  # off: no graph, and the product is taken in place
        finite = logp_all.masked_fill(torch.isinf(logp_all), 0.0) if warpers else logp_all  # 0 * -inf would be NaN
        probs = logp_all.exp()
        ent = -(probs * finite if grad else probs.mul_(finite)).sum(dim=-1)
    return logp, ent


class ChunkedHead(torch.autograd.Function):
    """The LM head's log-probs over all policy positions, chunk by chunk, with the head weight's gradient
    accumulated in place (addmm_) into one [V, H] tensor.

    forward(h [M, H], weight [V, H] (a bias-free nn.Linear's; the model's dtype), targets [M] long, post,
    chunk_rows, into_grad) -> (logp [M], entropy [M]), float32 (float64 for fp64): each chunk's logits
    h_c @ weight^T go through `post` (a `_logits_logp` with the run's warpers and head post-processing) with no
    graph kept. backward recomputes one chunk's logits at a time, differentiates through `post` and the head's
    product to dh_c (autograd), and adds d_logits^T @ h_c (d logp / d logits [c, V], kept by a hook) to the
    weight's gradient in place.

    `into_grad` (a caller that runs `loss.backward()` and reads `.grad`, as agentrl.rl.update's
    accumulate_gradients): the weight's gradient is added straight into `weight.grad` (made on first use) and
    not returned to autograd. Returned, autograd holds it in a buffer until every use of the weight has
    contributed: for a head tied to the input embedding that is the end of the backward pass, so one more
    [V, H] tensor stays alive through every layer's backward (297 MiB for Qwen3-0.6B in bf16). On the H200
    (Qwen3-0.6B, bf16, 16,384-token microbatches, compiled layers, 2026-12-04) the update's peak above weights
    and optimizer state sat in a layer's attention backward, with the layers' checkpointed inputs, every weight
    gradient and that buffer alive (bench/profile_update.py). Not for torch.autograd.grad, nor for DDP / FSDP,
    whose gradient hooks would not see it.

    Same values as the per-chunk checkpointed head calls up to float summation order (tests/rl/test_logprobs.py).
    The entropy is a statistic here (no gradient); `policy_logprobs` keeps the per-chunk path for entropy_grad.
    """

    @staticmethod
    def forward(ctx, h, weight, targets, post, chunk_rows, into_grad=False):  # noqa: D102 - the class says it
        lps, ents = [], []
        with torch.no_grad():
            for s in range(0, h.shape[0], chunk_rows):
                lp, en = post(torch.nn.functional.linear(h[s: s + chunk_rows], weight), targets[s: s + chunk_rows])
                lps.append(lp)
                ents.append(en)
        ctx.save_for_backward(h, weight, targets)
        ctx.post, ctx.chunk_rows = post, chunk_rows
        ctx.param = weight if into_grad else None  # the Parameter itself: its .grad is written in backward
        ent = torch.cat(ents)
        ctx.mark_non_differentiable(ent)
        return torch.cat(lps), ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):  # noqa: D102 - the class says it
        h, weight, targets = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dh = torch.empty_like(h) if need_h else None
        dw = None
        if need_w and ctx.param is not None:
            if ctx.param.grad is None:
                ctx.param.grad = torch.zeros_like(ctx.param)
            dw = ctx.param.grad
        elif need_w:
            dw = torch.zeros_like(weight)
        wd = weight.detach()
        for s in range(0, h.shape[0], ctx.chunk_rows):
            hc = h[s: s + ctx.chunk_rows]
            seen: list[torch.Tensor] = []
            with torch.enable_grad():
                # differentiated with respect to the chunk's hidden rows (the mm saves them and the weight, not
                # the logits, so the logits go once the softmax has run); a hook keeps d logp / d logits for the
                # weight's gradient
                hd = hc.detach().requires_grad_()
                logits = torch.nn.functional.linear(hd, wd)
                logits.register_hook(seen.append)
                lp, _ = ctx.post(logits, targets[s: s + ctx.chunk_rows], entropy=False)
                del logits
                (dhc,) = torch.autograd.grad(lp, hd, g_lp[s: s + ctx.chunk_rows])
            del lp
            if need_h:
                dh[s: s + ctx.chunk_rows] = dhc
            if dw is not None:
                dw.addmm_(seen[0].t(), hc)
        return dh, (dw if ctx.param is None else None), None, None, None, None


def _fused_head_ok(head: nn.Module, h: torch.Tensor, entropy_grad: bool) -> bool:
    """ChunkedHead applies: a plain bias-free nn.Linear head (not a peft or quantized wrapper), a backward to
    come (grad mode, h or the weight requiring grad), and no gradient through the entropy."""
    return (type(head) is nn.Linear and head.bias is None and not entropy_grad and torch.is_grad_enabled()
            and (h.requires_grad or head.weight.requires_grad))


def policy_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    policy_mask: torch.Tensor,
    *,
    chunk_rows: int = 256,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    pack: bool | None = None,
    entropy_grad: bool = False,
    head_grad_into: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy of the policy at each policy position.

    Args:
        model: a Hugging Face causal LM (see split_causal_lm).
        input_ids: [N, L] long.
        attention_mask: [N, L] (1 real, 0 padding). RIGHT padding (as collate builds): position ids are
            0..L-1, which is what generation used for an unpadded episode.
        policy_mask: [N, L]; 1 where input_ids[n, t] was sampled by the policy; column 0 must be 0.
        chunk_rows: policy positions per LM-head call (bounds the [chunk_rows, V] logits).
        temperature, top_k, top_p: the sampler's settings (top_k 0 and top_p 1.0 are off); the logits are
            warped exactly as the sampler warped them (rule 2 of DESIGN.md).
        pack: run the trunk padding-free (agentrl.rl.packing: rows packed into one sequence, block-diagonal
            causal attention, no compute on padding). None (default): when `packing.packable` says the model
            and batch allow it; True: required (ValueError if not packable); False: the padded forward.
            Both give the same values up to float rounding (tested in fp32 and fp64, with gradients).
        entropy_grad: build the entropy inside autograd (for a loss with an entropy term). Default False: the
            entropy is a statistic, and its graph would hold two more [chunk_rows, V] fp32 tensors in each
            chunk's forward and recompute.
        head_grad_into: the head weight's gradient goes straight into `head.weight.grad` in backward, added in
            place, instead of through autograd (ChunkedHead says why: one [V, H] tensor fewer alive through the
            backward of a tied head). For a caller that runs `loss.backward()` and reads `.grad`; not with
            torch.autograd.grad, DDP or FSDP. Applies where ChunkedHead does and the weight is a plain
            nn.Parameter; elsewhere the gradient goes through autograd as usual.

    Returns:
        (logp [N, L], entropy [N, L]), float32 (float64 for an fp64 model): at policy positions (n, t), logp = log softmax(
        logits from hidden[n, t-1])[input_ids[n, t]] and entropy = the entropy of that next-token
        distribution (nats); 0.0 elsewhere. logp is differentiable with respect to the model's parameters (entropy
        only with `entropy_grad`). With
        top_k/top_p, a target outside the kept set has logp -inf.

    Raises:
        ValueError: shape mismatch, policy token at position 0, bad chunk_rows/temperature/top_k/top_p.
    """
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape or policy_mask.shape != input_ids.shape:
        raise ValueError(f"policy_logprobs: input_ids, attention_mask, policy_mask must share shape [N, L]; got "
                         f"{tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, {tuple(policy_mask.shape)}")
    if chunk_rows < 1:
        raise ValueError(f"policy_logprobs: need chunk_rows >= 1, got {chunk_rows}")
    try:
        warpers = sampling_warpers(SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
    except ValueError as e:
        raise ValueError(f"policy_logprobs: {e}") from None
    if bool(policy_mask[:, 0].any()):
        raise ValueError("policy_logprobs: policy_mask[:, 0] must be 0 (the first token has no context)")
    n, length = input_ids.shape
    trunk, head = split_causal_lm(model)
    rows, cols = policy_mask.nonzero(as_tuple=True)  # [M] each; cols >= 1
    can_pack = hasattr(trunk, "layers") and packable(model, attention_mask)
    if pack and not can_pack:
        raise ValueError("policy_logprobs: pack=True but this model or batch cannot be packed "
                         "(see agentrl.rl.packing.packable: right padding, supported full-attention decoder)")
    if can_pack and pack is not False:
        if bool((policy_mask.bool() & ~attention_mask.bool()).any()):
            raise ValueError("policy_logprobs: policy_mask is 1 on a padding position")
        hidden, offsets = packed_hidden(trunk, model.config, input_ids, attention_mask)  # [T, H]
        h_sel = hidden[offsets[rows] + cols - 1]  # [M, H]: the gather happens BEFORE the head
    else:
        hidden = trunk(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [N, L, H]
        h_sel = hidden[rows, cols - 1]  # [M, H]
    targets = input_ids[rows, cols]  # [M]
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    logit_scale = getattr(model, "logit_scale", None)
    logit_scale = float(logit_scale) if isinstance(logit_scale, (int, float)) else None
    logps, ents = [], []
    if h_sel.shape[0] and _fused_head_ok(head, h_sel, entropy_grad):  # one Function, every chunk (ChunkedHead)
        post = functools.partial(_logits_logp, warpers=warpers, softcap=softcap, logit_scale=logit_scale)
        into = head_grad_into and type(head.weight) is nn.Parameter  # not a DTensor (FSDP) or another subclass
        lp, en = ChunkedHead.apply(h_sel, head.weight, targets, post, chunk_rows, into)
        logps, ents = [lp], [en]
    else:
        for start in range(0, h_sel.shape[0], chunk_rows):
            h = h_sel[start: start + chunk_rows]
            t = targets[start: start + chunk_rows]
            if torch.is_grad_enabled() and h.requires_grad:
                lp, en = checkpoint(_head_chunk, head, h, t, warpers, softcap, logit_scale, entropy_grad,
                                    use_reentrant=False)
            else:
                lp, en = _head_chunk(head, h, t, warpers, softcap, logit_scale, entropy_grad)
            logps.append(lp)
            ents.append(en)
    out_dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    out_lp = torch.zeros((n, length), dtype=out_dtype, device=input_ids.device)
    out_en = torch.zeros((n, length), dtype=out_dtype, device=input_ids.device)
    if logps:
        out_lp = out_lp.index_put((rows, cols), torch.cat(logps))
        out_en = out_en.index_put((rows, cols), torch.cat(ents))
    return out_lp, out_en

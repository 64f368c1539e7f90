"""Padding-free trunk forward: the rows of a right-padded batch packed into one sequence, no pad token run.

Not the log-prob math (agentrl.rl.logprobs) and not the loss. The real tokens of every row are laid end to
end ([1, T], T = total real tokens), position ids restart at 0 for each row (what the sampler used), and
attention is block-diagonal causal, so each token sees exactly the tokens of its own row that precede it:
the same function as the padded forward, without computing anything for padding. Attention goes through
a function registered with transformers' `AttentionInterface` (the model's own q/k/v projections, norms,
RoPE, MLP and gradient checkpointing are used as they are):

- CUDA, bf16/fp16, and `torch.nn.attention.varlen.varlen_attn` present (torch >= 2.10): one FlashAttention
  variable-length call per layer over the whole pack (cu_seqlens), the padding-free path of flash-attn;
- otherwise (CPU, fp32/fp64, older torch): `scaled_dot_product_attention(is_causal=True)` per row segment.

Supported: decoder-only HF models whose trunk takes `position_ids` (Llama, Qwen2, Qwen3, Mistral families;
Qwen2/Qwen3 also take a prepared per-layer-type mask dict, so no [T, T] mask is built for them) with full attention in every layer, plain or wrapped by peft (LoRA);
`packable` says so.
"""

from __future__ import annotations

import copy
import inspect
import sys
from typing import Any

import torch
import torch.nn.functional as F

PACKED_ATTENTION = "agentrl_packed"
PACKABLE_TYPES = ("llama", "qwen2", "qwen3", "mistral")
MASK_DICT_TYPES = ("qwen2", "qwen3")  # trunks that take attention_mask as {layer type: mask} and build none
_VARLEN: dict[str, Any] = {}
# Each layer's varlen_attn call split into this many groups of heads (1 = one call; used only where it divides the
# key/value head count, and only inside compiled layers: _in_compiled_region). The result is the same; what changes
# is the backward's transient memory, which scales with the heads of one call: FlashAttention-2's fp32 dq accumulator
# [T, H, D] and, for grouped-query attention, dk/dv expanded to every query head ([T, H, D] each): 216 MiB of the
# update's 2.56 GiB peak on the H200 (Qwen3-0.6B, 12,968-token microbatch; results/bench/issue26_h200_2026-12-04c).
# Measured on the H200 (results/bench/issue26_h200_2026-12-04d): 2 groups take the default update's peak above
# static from 2.56 to 2.49 GiB (0.308x -> 0.299x of full logits) and cost time: compiled, 54.1k-67.4k tokens/s in
# four processes against 64.0k-73.7k with one call in three (the spread between processes is ~15%); eager, ~30% of
# the 4-row packed update (25.7k -> 17.6k tokens/s), hence compiled layers only. 70 MiB is not worth ~5-10% of every
# update's time, so the default stays 1; a run short of memory for long microbatches can set 2 or 4.
ATTENTION_HEAD_GROUPS = 1


def _in_compiled_region() -> bool:
    """Whether this call is being traced by torch.compile (the update's compiled decoder layers): where
    ATTENTION_HEAD_GROUPS applies. A function of its own so tests can stand in for the tracer."""
    return torch.compiler.is_compiling()


def _varlen_fn():
    """(varlen_attn, its keyword parameters) or (None, ()) when this torch has none."""
    if "fn" not in _VARLEN:
        try:
            from torch.nn.attention.varlen import varlen_attn

            _VARLEN["fn"], _VARLEN["params"] = varlen_attn, tuple(inspect.signature(varlen_attn).parameters)
        except (ImportError, AttributeError, ValueError, TypeError):
            _VARLEN["fn"], _VARLEN["params"] = None, ()
    return _VARLEN["fn"], _VARLEN["params"]


def _varlen_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether packed attention on `device` in `dtype` goes through varlen_attn: CUDA, bf16/fp16, a torch that has
    it and whose kernel has not failed here (otherwise: per-row SDPA). The one test packed_hidden, pack_kwargs and
    packed_attention share."""
    return (device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and _varlen_fn()[0] is not None
            and not _VARLEN.get("broken"))


def _varlen_attention(query, key, value, cu, max_len: int, scaling: float | None, head_groups: int = 1):
    """query [1, H, T, D], key/value [1, Hkv, T, D] -> [1, T, H, D] through varlen_attn, or None if unusable.

    head_groups > 1 (dividing Hkv): one call per group of consecutive heads (query heads h*H/G.. with key/value
    heads h*Hkv/G..: the grouped-query mapping q head i -> kv head i // (H/Hkv) keeps within a group), outputs
    concatenated along the heads; autograd runs the groups' backwards one after another, so the kernel's transient
    buffers are those of H/G heads (ATTENTION_HEAD_GROUPS)."""
    fn, params = _varlen_fn()
    if fn is None or _VARLEN.get("broken"):
        return None
    q = query[0].transpose(0, 1)  # [T, H, D]
    k, v = key[0].transpose(0, 1), value[0].transpose(0, 1)  # [T, Hkv, D]
    kw: dict[str, Any] = {}
    group = q.shape[1] // k.shape[1]
    if group > 1 and "enable_gqa" in params:
        kw["enable_gqa"] = True
    elif group > 1 and not _VARLEN.get("gqa"):  # _probe_native_gqa: this torch's kernel needs equal head counts
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if "is_causal" in params:
        kw["is_causal"] = True
    else:
        kw["window_size"] = (-1, 0)  # causal: no key to the right of the query
    if scaling is not None and "scale" in params:
        kw["scale"] = float(scaling)
    elif scaling is not None and abs(float(scaling) - q.shape[-1] ** -0.5) > 1e-12:
        return None  # this torch's varlen_attn takes no scale and the model's is not the default
    groups = head_groups if head_groups > 1 and key.shape[1] % head_groups == 0 else 1
    try:
        if groups == 1:
            out = fn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, max_len, max_len, **kw)
        else:
            out = torch.cat([fn(qg.contiguous(), kg.contiguous(), vg.contiguous(), cu, cu, max_len, max_len, **kw)
                             for qg, kg, vg in zip(q.chunk(groups, 1), k.chunk(groups, 1), v.chunk(groups, 1),
                                                   strict=True)], dim=1)
    except (RuntimeError, NotImplementedError, TypeError):
        _VARLEN["broken"] = True  # e.g. a torch built without flash attention: per-row SDPA from now on
        return None
    return out[None]


def _probe_native_gqa(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this torch's varlen_attn takes key/value with fewer heads than the query (grouped-query attention)
    without an `enable_gqa` flag, as the FlashAttention kernels under it do, giving what the keys and values
    repeated per query head give. Probed once (a 2-row call of 4 query and 2 key/value heads, outside any
    compiled region: packed_hidden calls it) and cached in _VARLEN["gqa"]. Without it, `_varlen_attention`
    repeats the keys and values to every query head, which costs the [T, H, D] copies, their gradients' sums
    and their memory in each layer's backward."""
    if "gqa" in _VARLEN:
        return _VARLEN["gqa"]
    fn, params = _varlen_fn()
    ok = False
    if fn is not None and "enable_gqa" not in params and device.type == "cuda":
        g = torch.Generator(device=device).manual_seed(0)
        q = torch.randn(12, 4, 64, device=device, dtype=dtype, generator=g)
        k, v = (torch.randn(12, 2, 64, device=device, dtype=dtype, generator=g) for _ in range(2))
        cu = torch.tensor([0, 5, 12], device=device, dtype=torch.int32)
        kw = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        try:
            native = fn(q, k, v, cu, cu, 7, 7, **kw)
            rep = fn(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), cu, cu, 7, 7, **kw)
            ok = bool(torch.allclose(native.float(), rep.float(), atol=1e-2, rtol=0))
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            ok = False
    _VARLEN["gqa"] = ok
    return ok


def packed_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: Any, *, scaling: float | None = None, dropout: float = 0.0,
                     packed_cu: torch.Tensor | None = None, packed_bounds: tuple[int, ...] = (),
                     packed_max: int = 0, packed_head_groups: int = 1, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """transformers attention function: block-diagonal causal attention over a packed [1, T] batch, or the
    module's original attention implementation when called without a pack (generate, plain forwards).

    query [1, H, T, D], key/value [1, Hkv, T, D] (RoPE applied); packed_cu [R+1] int32 row offsets on the
    device (None: not a pack), packed_bounds the same as Python ints where the per-row SDPA path will run
    (packed_hidden leaves them out where varlen_attn runs: a tuple's length is a guard of the compiled layers, so
    every new row count recompiled them), packed_max the longest row, packed_head_groups the varlen path's calls
    per layer (ATTENTION_HEAD_GROUPS; used inside compiled layers only, see _in_compiled_region; the per-row
    SDPA path ignores it). Returns ([1, T, H, D], None)
    as transformers' own attention functions do.

    Raises:
        ValueError: a pack with attention dropout.
    """
    if packed_cu is None:
        return _base_attention(module)(module, query, key, value, attention_mask, scaling=scaling,
                                       dropout=dropout, **kwargs)
    if dropout:
        raise ValueError("packed_attention: attention dropout is not supported")
    if _varlen_applies(query.device, query.dtype):
        groups = packed_head_groups if _in_compiled_region() else 1
        out = _varlen_attention(query, key, value, packed_cu, packed_max, scaling, groups)
        if out is not None:
            return out, None
    group = query.shape[1] // key.shape[1]
    outs = []
    bounds = packed_bounds or tuple(int(x) for x in packed_cu.tolist())  # varlen_attn turned out unusable
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        k, v = key[:, :, a:b], value[:, :, a:b]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        outs.append(F.scaled_dot_product_attention(query[:, :, a:b], k, v, is_causal=True, scale=scaling))
    return torch.cat(outs, dim=2).transpose(1, 2), None


def _base_attention(module: Any):
    """The attention function the module used before `_install` (its modeling file's eager one by default)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    base = getattr(module.config, "_agentrl_base_attn", None) or "eager"
    fn = ALL_ATTENTION_FUNCTIONS.get_interface(base, eager)
    if fn is None:
        raise ValueError(f"packed_attention: no attention function {base!r} for {type(module).__name__}")
    return fn


def _install(trunk: Any) -> None:
    """Route every layer's attention through `packed_attention` (idempotent).

    Each attention module gets its own shallow copy of the config naming PACKED_ATTENTION (the trunk's config,
    which builds the masks and is saved with the model, is left alone); unpacked calls fall through to the
    original implementation, so generation and plain forwards are unchanged. The switch is per module and
    permanent rather than around the call, so gradient-checkpointing recomputes in backward pack too.
    """
    from transformers import AttentionInterface

    if PACKED_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    for layer in trunk.layers:
        attn = layer.self_attn
        if attn.config._attn_implementation == PACKED_ATTENTION:
            continue
        cfg = copy.copy(attn.config)
        cfg._agentrl_base_attn = attn.config._attn_implementation
        cfg._attn_implementation = PACKED_ATTENTION
        attn.config = cfg


def packable(model: Any, attention_mask: torch.Tensor) -> bool:
    """True when `packed_hidden` can run `model` on this batch: a supported model type with full attention in
    every layer, no attention dropout in training, and every row's mask a run of ones from column 0.

    A peft (LoRA) model qualifies like its base: its decoder is the base's, with adapter-wrapped linear layers
    that act per token, so packing changes nothing for them (tested with gradients, adapters on and off)."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in PACKABLE_TYPES:
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    if getattr(cfg, "use_sliding_window", False) or (model.training and getattr(cfg, "attention_dropout", 0.0)):
        return False
    lengths = attention_mask.sum(1)
    cols = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return bool(((cols[None, :] < lengths[:, None]) == attention_mask.bool()).all()) and bool((lengths > 0).all())


def pack_kwargs(cu: torch.Tensor, max_len: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """The keyword arguments the trunk hands every layer's packed_attention: packed_cu (`cu`, [R+1] int32 row
    offsets), packed_max (`max_len`, the longest row) and, only where the per-row SDPA path will run (not
    `_varlen_applies`), packed_bounds, the offsets as Python ints. A tuple's length is one of
    a compiled layer's guards, so with the bounds among their arguments every new row count per microbatch
    recompiled the update's layers (measured on the H200: 6 recompiles, 7-13 s each, in a run's first 6 steps; after
    torch's recompile limit of 8 a layer call of a new shape runs eager); the varlen path reads the tensor, and gets
    packed_head_groups (ATTENTION_HEAD_GROUPS, an int constant within a run) when that is above 1."""
    kw: dict[str, Any] = {"packed_cu": cu, "packed_max": max_len}
    if not _varlen_applies(device, dtype):
        kw["packed_bounds"] = tuple(int(x) for x in cu.tolist())
    elif ATTENTION_HEAD_GROUPS > 1:
        kw["packed_head_groups"] = int(ATTENTION_HEAD_GROUPS)
    return kw


def packed_hidden(trunk: Any, cfg: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Last hidden states of the real tokens of a right-padded batch, run as one padding-free pack.

    Args:
        trunk: the model's decoder (agentrl.rl.logprobs.split_causal_lm); cfg: the model's config.
        input_ids, attention_mask: [N, L]; every mask row is ones then zeros (`packable`).

    Returns:
        (hidden [T, H] in the trunk's dtype, offsets [N] long: row n's token t is hidden[offsets[n] + t]),
        T = attention_mask.sum(). Equal to the padded forward's hidden states at real tokens up to float
        rounding (tests pin this in fp32 and fp64).
    """
    _install(trunk)
    device = input_ids.device
    dtype = next(trunk.parameters()).dtype
    if _varlen_applies(device, dtype):
        _probe_native_gqa(device, dtype)
    keep = attention_mask.bool()
    lengths = keep.sum(1)
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=device)
    cu[1:] = lengths.cumsum(0)
    positions = (torch.arange(input_ids.shape[1], device=device)[None, :].expand_as(input_ids))[keep]
    masks = None  # Llama / Mistral build their mask from None (ignored: packed_attention masks by segment)
    if getattr(cfg, "model_type", None) in MASK_DICT_TYPES:  # a prepared per-layer-type mask dict: nothing built
        masks = {t: None for t in (set(getattr(cfg, "layer_types", None) or []) | {"full_attention"})}
    out = trunk(input_ids=input_ids[keep][None], position_ids=positions[None], attention_mask=masks,
                use_cache=False, **pack_kwargs(cu, int(lengths.max()), device, dtype))
    return out.last_hidden_state[0], cu[:-1].long()

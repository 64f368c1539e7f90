"""One decode step's attention over a static, left-padded KV cache: one query per row, per-row key masks.

Not the decode loop (agentrl.rollout.fast_sampler) and not prefill attention. Three forms, chosen by
FastSampler's `decode_attention`; all CUDA-graph capturable (static shapes, no branching on data: the row
lengths live in the mask tensor) and equal up to float rounding (tests/rollout/test_fast_sampler_attention.py):

- "matmul" (the default where "triton" cannot run, see `default_form`): each KV head's g = heads / kv_heads queries scored by one matmul, an fp32 softmax
  masked to the row's written keys, a second matmul.
- "sdpa": one `scaled_dot_product_attention` call with the GQA group folded into the query axis (q
  [b, kv_heads, g, D] against the cache's [b, kv_heads, L, D], as flash-decoding packs GQA), so KV heads are
  never repeated and each cache byte is read once; an additive key mask [b, 1, 1, L] (0 / -inf) gives the
  row lengths. A masked call with equal head counts is what PyTorch's memory-efficient and cuDNN kernels take.
- "sdpa_gqa": the same call as `enable_gqa=True` over q [b, heads, 1, D]. With a mask, PyTorch's fused CUDA
  kernels do not take GQA (the flash kernel takes no mask), so expect the math fallback; kept so that the
  benchmark (bench/bench_rollout.py --decode-attention) measures that rather than assumes it.
- "flex": PyTorch's FlexAttention (`torch.nn.attention.flex_attention`, torch >= 2.5) with `enable_gqa=True` and
  the row lengths as a score modification (-inf past the row's written keys). Under torch.compile, inductor
  generates a split-KV decoding kernel for a one-token query (FlexDecoding, as flash-decoding: the key axis split
  across thread blocks, each KV byte read once, GQA heads sharing their KV head's loads); eager it runs an
  unfused reference, so FastSampler compiles this call (on its own, over the read-only cache: see
  agentrl.rollout.decode_layer) whenever this form is chosen. The H200 profile
  (bench/README.md) measured cuDNN's flash forward, which the "sdpa" form reaches, at about 60% of the bandwidth
  on this shape.
- "triton": agentrl.rollout.triton_decode's split-KV kernel (flash-decoding, GQA packed), which takes each row's
  key range [start, end) instead of a mask and reads only those keys: a row's cost is its own length, not the
  span's. Needs the `triton` package; on the CPU it runs in Triton's interpreter (for tests; slow). The key mask
  must be one contiguous run of columns per row (FastSampler's are prefixes). FastSampler's default on CUDA
  devices of compute capability 8.0 or later when triton imports: on the H200 (results/bench/
  issue26_h200_2026-12-04) 28 layers' attention of a decode step at batch 64 / 256 (ctx 1024, bf16) took
  1.97 / 7.16 ms, 0.89 / 0.98 of reading the live KV once at 4.3 TB/s, against matmul's 3.12 / 9.99 ms and
  sdpa's 3.08 / 12.06 ms; with ragged rows 0.75 / 0.92 against sdpa's 0.30 / 0.33. It also writes the decode
  step's new K/V into the cache itself (`attend`'s new_kv, WRITES_NEW_KV), attending that column from registers:
  one launch a layer where a scatter for K, one for V and the attention took three (the Coder-0.5B profile of
  2026-12-05 spent 0.20 of a step's 1.71 ms on the 48 scatters).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DECODE_ATTENTION = ("matmul", "sdpa", "sdpa_gqa", "flex", "triton")  # the forms (FastSampler's default: default_form)
WRITES_NEW_KV = ("triton",)  # forms that write the decode step's new K/V themselves (`attend`'s new_kv)
COMPILED_ONLY = ("flex",)  # forms that run fused only inside torch.compile (FastSampler then compiles `attend`)


def default_form(device: torch.device | str) -> str:
    """FastSampler's decode attention when none is named: "triton" on a CUDA device of compute capability >= 8.0
    (Triton's bf16 tensor-core dots; Ampere, Ada, Hopper) when the triton package imports, else "matmul" (the CPU,
    where Triton runs only in its slow interpreter, and older GPUs)."""
    device = torch.device(device)
    if device.type != "cuda":
        return "matmul"
    from agentrl.rollout import triton_decode

    if not triton_decode.available():
        return "matmul"
    return "triton" if torch.cuda.get_device_capability(device) >= (8, 0) else "matmul"


def key_mask(valid: torch.Tensor, form: str, dtype: torch.dtype) -> torch.Tensor:
    """valid [b, L] bool (True: a written key of the row; every row needs at least one) -> the mask `attend`
    takes: `valid` itself for "matmul" and "flex", [b, 2] int32 key ranges for "triton" (triton_decode.key_ranges;
    each row's True columns must be contiguous), else an additive [b, 1, 1, L] mask of `dtype` (0 where valid,
    -inf elsewhere), built once per step and shared by every layer."""
    if form == "triton":
        from agentrl.rollout.triton_decode import key_ranges

        return key_ranges(valid)
    if form in ("matmul", "flex"):
        return valid
    bias = torch.zeros(valid.shape, dtype=dtype, device=valid.device).masked_fill_(~valid, float("-inf"))
    return bias[:, None, None, :]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, form: str,
           scale: float, new_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q [b, nh, 1, D], k/v [b, nkv, L, D] (nh a multiple of nkv), mask from `key_mask(.., form, ..)` ->
    [b, 1, nh * D] in HF's head order: query head j reads KV head j // g, g = nh / nkv (as repeat_interleave).

    new_kv: "triton" only (WRITES_NEW_KV): the step's new K/V [b, nkv, 1, D], written into k/v at each row's last
    valid column inside the attention kernel (triton_decode.decode_attend); the other forms attend over a cache
    the caller wrote first.

    Raises:
        ValueError: unknown form, or new_kv given to a form that does not write it.
    """
    b, nh, _, d = q.shape
    nkv = k.shape[1]
    if new_kv is not None and form not in WRITES_NEW_KV:
        raise ValueError(f"decode attention: form {form!r} does not write the new K/V (only {WRITES_NEW_KV})")
    if form == "flex":
        return _flex(q, k, v, mask, scale).reshape(b, 1, nh * d)
    if form == "triton":
        from agentrl.rollout.triton_decode import decode_attend

        return decode_attend(q, k, v, mask, scale, new_kv=new_kv)
    if form == "sdpa_gqa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True).reshape(
            b, 1, nh * d)
    qg = q.reshape(b, nkv, nh // nkv, d)  # the g queries of KV head i: heads i*g .. i*g + g - 1
    if form == "sdpa":
        return F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale).reshape(b, 1, nh * d)
    if form != "matmul":
        raise ValueError(f"decode attention: form must be one of {DECODE_ATTENTION}, got {form!r}")
    s = torch.matmul(qg, k.transpose(-1, -2)) * scale
    p = s.float().masked_fill(~mask[:, None, None, :], float("-inf")).softmax(-1).to(q.dtype)
    return torch.matmul(p, v).reshape(b, 1, nh * d)  # [b, nkv, g, D] -> heads in HF order


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float) -> torch.Tensor:
    """FlexAttention over the cache: q [b, nh, 1, D], k/v [b, nkv, L, D], valid [b, L] bool -> [b, nh, 1, D]."""
    from torch.nn.attention.flex_attention import flex_attention

    def written_keys_only(score, bi, h, qi, ki):  # a key past the row's length (or a pad column) gets -inf
        return torch.where(valid[bi, ki], score, -float("inf"))

    return flex_attention(q, k, v, score_mod=written_keys_only, enable_gqa=True, scale=scale)

"""A split-KV decode attention kernel in Triton (flash-decoding) that reads only each row's written keys.

Not the other attention forms (agentrl.rollout.decode_attention, which calls `decode_attend` for its "triton" form)
and not prefill. One decode query per row against a static cache whose rows hold their keys in one contiguous
column range [start, end) (FastSampler's rows start at column 0; a left-padded cache works too):

- GQA packed as flash-decoding does: one program serves one (row, KV head) pair's g = heads / kv_heads query
  heads, so each K/V byte is loaded once and used by all g heads (the query tile is padded to 16 rows for
  `tl.dot`; the waste is in arithmetic, and decoding is bound by memory, not arithmetic).
- Per-row lengths, not padding: the key axis is cut into `splits` chunks of a static size; a program walks its
  chunk only as far as the row's `end` and a chunk past it does no loads at all, so a short row in a long span
  costs its own bytes, not the span's.
- Split over the key axis (grid [b * kv_heads, splits]) so that a small batch still fills the GPU; a second
  kernel merges the splits' partial softmaxes by their log-sum-exp (Dao et al., "Flash-Decoding for long-context
  inference", 2023; FlashAttention's online softmax, Dao et al. 2022, inside each split).
- Static shapes and no host synchronisation, so a CUDA graph captures it (the split count depends only on the
  batch, the span and the GPU's SM count).
- The softmax runs in fp32 (scores scaled by log2(e) to use exp2); the probabilities are cast to the cache's
  dtype before the product with V, as the "matmul" form and FlashAttention do. fp32 inputs multiply in IEEE fp32
  (no TF32), so the fp32 sampler keeps the trainer's log-probs to about 1e-6 (issue 26 item 4; not bitwise: the
  sums run in another order). In bf16 the scores stay fp32 where the "matmul" form rounds them to bf16 before its
  softmax, so the two differ by up to a few 1e-2 on the output (this kernel being the nearer to exact). In the
  interpreter, 16-bit inputs are multiplied in fp32 (its 16-bit `tl.dot` returned garbage, triton 3.9), rounding
  the same way.

On the CPU the same kernels run in Triton's interpreter (numpy; correct and slow) when TRITON_INTERPRET=1 was set
before triton's first import (tests/conftest.py sets it on a host without CUDA): the tests check them there
against the reference attention. Needs the `triton` package (bundled with CUDA builds of PyTorch; `pip install
triton` elsewhere); `available()` says whether it imports, `check_device` whether it can run.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the "triton" form is then unavailable (`available()`); the other forms need nothing here
    triton = tl = None

BLOCK_N = 64  # keys per inner-loop tile of the default Tile: [BLOCK_N, D] K and V tiles per load
MIN_ROWS = 16  # tl.dot's smallest tile side: the g query heads of a KV head are padded to at least this


@dataclass(frozen=True)
class Tile:
    """The split kernel's launch shape: `block_n` keys per inner-loop tile (a power of two >= 16), Triton's
    `num_stages` (software-pipelined loads in flight) and `num_warps`, and `programs_per_sm`, how many programs per
    SM the default split count aims at. The default is Triton's usual shape for such a loop, not yet tuned on a
    GPU (bench/bench_decode_attention.py --tiles sweeps them)."""

    block_n: int = BLOCK_N
    num_stages: int = 3
    num_warps: int = 4
    programs_per_sm: int = 4

    def __post_init__(self):
        if self.block_n < 16 or self.block_n & (self.block_n - 1) or min(self.num_stages, self.num_warps,
                                                                           self.programs_per_sm) < 1:
            raise ValueError(f"Tile: block_n must be a power of two >= 16 and the rest >= 1, got {self}")

    @classmethod
    def parse(cls, text: str) -> Tile:
        """"64:3:4" or "64:3:4:4" (block_n:num_stages:num_warps[:programs_per_sm]) -> Tile; ValueError if not."""
        try:
            parts = [int(x) for x in text.split(":")]
            if len(parts) not in (3, 4):
                raise ValueError(len(parts))
            return cls(*parts)
        except (TypeError, ValueError) as e:
            raise ValueError(f"Tile: expected block_n:num_stages:num_warps[:programs_per_sm], got {text!r}") from e


DEFAULT_TILE = Tile()
# fp32 tiles of 256-wide heads: the default's 3 stages of [64, 256] fp32 K and V tiles need 276 KiB of shared
# memory, past a block's 227 KiB on the H200 (the kernel would not launch); this one needs about a third
WIDE_FP32_TILE = Tile(block_n=32, num_stages=2, num_warps=4)


def tile_for(dtype: torch.dtype, head_dim: int, tile: Tile = DEFAULT_TILE) -> Tile:
    """The tile a launch uses: `tile`, except that the default becomes WIDE_FP32_TILE for fp32 heads wider than
    128 (their K/V stages would not fit a block's shared memory)."""
    if tile == DEFAULT_TILE and dtype == torch.float32 and _pow2(head_dim, MIN_ROWS) > 128:
        return WIDE_FP32_TILE
    return tile


def precision(dtype: torch.dtype) -> str:
    """tl.dot's input_precision for a cache of `dtype`: "ieee" for fp32 (no TF32: the trainer's log-probs), else
    "tf32" (Triton's default; 16-bit inputs multiply exactly on tensor cores either way)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def available() -> bool:
    """Whether `triton` imports (the "triton" decode attention needs it)."""
    return triton is not None


def _pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def _decode_attention_split(Q, K, V, RANGE, O_PART, LSE_PART, K_NEW, V_NEW,
                            s_qb, s_qh, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn,
                            s_ob, s_oh, s_os, s_lb, s_lh, s_nkb, s_nkh, s_nvb, s_nvh,
                            n_kv, chunk, length, qk_scale,
                            G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
                            BLOCK: tl.constexpr, PRECISION: tl.constexpr, DOT_F32: tl.constexpr,
                            WRITE: tl.constexpr):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    row = pid // n_kv
    kvh = pid % n_kv
    start = tl.maximum(tl.load(RANGE + 2 * row), 0)  # clipped to the cache: a bad range reads nothing outside it
    last = tl.load(RANGE + 2 * row + 1) - 1  # WRITE: the column the row's new K/V go to (its last key)
    end = tl.minimum(last + 1, length)
    lo = start + split * chunk
    hi = tl.minimum(lo + chunk, end)
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D_PAD)
    heads = kvh * G + offs_g
    gmask = offs_g < G
    dmask = offs_d < D
    q = tl.load(Q + row * s_qb + heads[:, None] * s_qh + offs_d[None, :],
                mask=gmask[:, None] & dmask[None, :], other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    l_sum = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D_PAD], tl.float32)
    # int64 offsets: a cache of 256 rows x 8 KV heads x 8k columns x 128 passes 2^31 elements (int32 would wrap)
    k_base = K + row.to(tl.int64) * s_kb + kvh.to(tl.int64) * s_kh
    v_base = V + row.to(tl.int64) * s_vb + kvh.to(tl.int64) * s_vh
    # the tiles' pointers in int64 too, advanced a tile at a time: a column offset past 2^31 elements must not wrap
    rel = tl.arange(0, BLOCK)[:, None]
    k_ptrs = k_base + lo.to(tl.int64) * s_kn + (rel * s_kn + offs_d[None, :])
    v_ptrs = v_base + lo.to(tl.int64) * s_vn + (rel * s_vn + offs_d[None, :])
    read_hi = hi
    if WRITE:  # the new column is attended from registers below; the one program whose chunk holds it stores it
        k_new = tl.load(K_NEW + row * s_nkb + kvh * s_nkh + offs_d, mask=dmask, other=0.0)
        v_new = tl.load(V_NEW + row * s_nvb + kvh * s_nvh + offs_d, mask=dmask, other=0.0)
        at = last + tl.zeros([D_PAD], tl.int32)  # as a vector: the interpreter takes no scalar mask
        mine = dmask & (at >= lo) & (at < hi)
        tl.store(k_base + last.to(tl.int64) * s_kn + offs_d, k_new, mask=mine)
        tl.store(v_base + last.to(tl.int64) * s_vn + offs_d, v_new, mask=mine)
        read_hi = tl.minimum(hi, last)  # the cache's columns before the new one
    for n0 in range(lo, read_hi, BLOCK):
        offs_n = n0 + tl.arange(0, BLOCK)
        nmask = offs_n < read_hi
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
        if DOT_F32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        s = tl.where(nmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
        k_ptrs += BLOCK * s_kn
        v_ptrs += BLOCK * s_vn
        if DOT_F32:  # the probabilities rounded to the cache's dtype all the same, as on the GPU
            p = p.to(V.dtype.element_ty).to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    if WRITE:  # one more key, the new column, in the same online softmax (its product and p rounded as tl.dot's)
        at_g = last + tl.zeros([G_PAD], tl.int32)
        has = (at_g >= lo) & (at_g < hi)
        s1 = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], 1) * qk_scale
        m1 = tl.where(has, tl.maximum(m, s1), m)
        alpha = tl.where(has, tl.exp2(m - m1), 1.0)
        p1 = tl.where(has, tl.exp2(s1 - m1), 0.0)
        l_sum = l_sum * alpha + p1
        p1 = p1.to(V.dtype.element_ty).to(tl.float32)
        acc = acc * alpha[:, None] + p1[:, None] * v_new.to(tl.float32)[None, :]
        m = m1
    seen = l_sum > 0.0  # False for a chunk past the row's end: no keys, weight 0 in the merge
    out = acc / tl.where(seen, l_sum, 1.0)[:, None]
    lse = tl.where(seen, m + tl.log2(tl.where(seen, l_sum, 1.0)), float("-inf"))
    tl.store(O_PART + row * s_ob + heads[:, None] * s_oh + split * s_os + offs_d[None, :], out,
             mask=gmask[:, None] & dmask[None, :])
    tl.store(LSE_PART + row * s_lb + heads * s_lh + split, lse, mask=gmask)


def _decode_attention_merge(O_PART, LSE_PART, OUT, s_ob, s_oh, s_os, s_lb, s_lh, s_outb, n_heads,
                            SPLITS: tl.constexpr, S_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // n_heads
    head = pid % n_heads
    offs_s = tl.arange(0, S_PAD)
    offs_d = tl.arange(0, D_PAD)
    smask = offs_s < SPLITS
    dmask = offs_d < D
    lse = tl.load(LSE_PART + row * s_lb + head * s_lh + offs_s, mask=smask, other=float("-inf"))
    mx = tl.max(lse, 0)
    w = tl.where(lse > float("-inf"), tl.exp2(lse - mx), 0.0)
    o = tl.load(O_PART + row * s_ob + head * s_oh + offs_s[:, None] * s_os + offs_d[None, :],
                mask=smask[:, None] & dmask[None, :], other=0.0)
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)
    tl.store(OUT + row * s_outb + head * D + offs_d, out.to(OUT.dtype.element_ty), mask=dmask)


if triton is not None:
    # with TRITON_INTERPRET=1 set before triton's first import, triton.jit gives the interpreter's functions (and
    # triton.language's own helpers are interpreted too): the only way these kernels run on the CPU
    _decode_attention_split = triton.jit(_decode_attention_split)
    _decode_attention_merge = triton.jit(_decode_attention_merge)


@functools.cache
def interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (TRITON_INTERPRET=1 when triton was first imported); fixed
    for the process (the kernels were wrapped once, at import)."""
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_decode_attention_split, InterpretedFunction)


def check_device(device: torch.device) -> None:
    """Raise ValueError unless the kernels can run on `device`: CUDA with triton, or any device in the interpreter.

    Raises:
        ValueError: triton is missing, or the device is not CUDA and the interpreter is off.
    """
    if triton is None:
        raise ValueError('the "triton" decode attention needs the triton package (CUDA builds of PyTorch bring it; '
                         "elsewhere `pip install triton`)")
    if torch.device(device).type != "cuda" and not interpreted():
        raise ValueError(f'the "triton" decode attention runs on CUDA; on {torch.device(device).type} only in '
                         "Triton's interpreter (TRITON_INTERPRET=1 set before triton is first imported)")


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def default_splits(b: int, n_kv: int, span: int, device: torch.device, tile: Tile = DEFAULT_TILE) -> int:
    """Key-axis splits for a [b, n_kv] grid over `span` columns: enough programs to give every SM about
    tile.programs_per_sm (b * n_kv * splits >= that * SMs), never a chunk under tile.block_n keys, at most 64. On
    the CPU (the interpreter) 1."""
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    want = -(-tile.programs_per_sm * sms // (b * n_kv))
    return max(1, min(want, -(-span // tile.block_n), 64))


def key_ranges(valid: torch.Tensor) -> torch.Tensor:
    """valid [b, L] bool, True on one contiguous run of columns per row (at least one) -> [b, 2] int32 (start,
    end): the run is columns start .. end - 1. A row whose True columns are not contiguous is not representable
    (the kernel would attend to the gap too); FastSampler's masks are prefixes."""
    cols = torch.arange(valid.shape[1], device=valid.device, dtype=torch.int32)
    start = torch.where(valid, cols, valid.shape[1]).amin(1)
    end = torch.where(valid, cols + 1, 0).amax(1)
    return torch.stack([start, end], 1).to(torch.int32)


def decode_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ranges: torch.Tensor, scale: float,
                  splits: int | None = None, tile: Tile = DEFAULT_TILE,
                  new_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q [b, nh, 1, D], k/v [b, nkv, L, D] (last dimension contiguous; nh a multiple of nkv), ranges [b, 2] int32
    (`key_ranges`) -> [b, 1, nh * D] of q's dtype, query head j reading KV head j // (nh / nkv) over its row's
    columns [start, end) with softmax scale `scale`: softmax(q k^T * scale) v, as decode_attention.attend.
    A range reaching outside [0, L) is clipped to it (never read past the cache); an empty one gives NaN, as a
    softmax over no keys does in the other forms.

    `new_kv` (k_new, v_new), each [b, nkv, 1, D] of the cache's dtype: the decode step's new K/V, written into
    k/v at each row's last key column end - 1 (FastSampler's decode step: the column at the row's length) inside
    the same kernel, and attended as that column: the result and the cache after the call are those of writing
    them first (`kc.scatter_`) and attending then, for one launch instead of three. A column end - 1 outside
    [0, L) is neither written nor read.

    `splits` (default `default_splits`) cuts the key axis into that many chunks, each a program per (row, KV
    head), merged by log-sum-exp; `tile` is the split kernel's launch shape. CUDA tensors run the compiled
    kernels; in Triton's interpreter any device does.

    Raises:
        ValueError: triton missing or the device unsupported (`check_device`), mismatched shapes or dtypes, or a
            last dimension that is not contiguous.
    """
    check_device(q.device)
    b, nh, one, d = q.shape
    nkv, length = k.shape[1], k.shape[2]
    if one != 1 or k.shape != v.shape or k.shape[0] != b or k.shape[3] != d or nh % nkv:
        raise ValueError(f"decode_attend: q {tuple(q.shape)} / k {tuple(k.shape)} / v {tuple(v.shape)} are not "
                         "one query per row over a GQA cache")
    if not (q.dtype == k.dtype == v.dtype) or ranges.shape != (b, 2) or ranges.dtype != torch.int32:
        raise ValueError(f"decode_attend: dtypes q {q.dtype}, k {k.dtype}, v {v.dtype}, ranges {ranges.dtype} "
                         f"{tuple(ranges.shape)} (need equal float dtypes and int32 [b, 2])")
    if q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError("decode_attend: q, k and v need a contiguous last (head) dimension")
    if new_kv is not None:
        kn, vn = (t if t.stride(3) == 1 else t.contiguous() for t in new_kv)
        if kn.shape != (b, nkv, 1, d) or vn.shape != kn.shape or kn.dtype != k.dtype or vn.dtype != k.dtype:
            raise ValueError(f"decode_attend: new_kv {tuple(kn.shape)} {kn.dtype} / {tuple(vn.shape)} {vn.dtype} "
                             f"is not one new key and value per row and KV head of the cache ({(b, nkv, 1, d)}, "
                             f"{k.dtype})")
    else:
        kn = vn = k  # not read (WRITE off)
    g = nh // nkv
    tile = tile_for(q.dtype, d, tile)
    splits = splits or default_splits(b, nkv, length, q.device, tile)
    chunk = -(-max(1, -(-length // splits)) // tile.block_n) * tile.block_n
    ranges = ranges.contiguous()
    o_part = torch.empty(b, nh, splits, d, dtype=torch.float32, device=q.device)
    lse_part = torch.empty(b, nh, splits, dtype=torch.float32, device=q.device)
    out = torch.empty(b, 1, nh * d, dtype=q.dtype, device=q.device)
    d_pad = _pow2(d, MIN_ROWS)
    _decode_attention_split[(b * nkv, splits)](
        q, k, v, ranges, o_part, lse_part, kn, vn,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        kn.stride(0), kn.stride(1), vn.stride(0), vn.stride(1),
        nkv, chunk, length, scale * math.log2(math.e),
        G=g, G_PAD=_pow2(g, MIN_ROWS), D=d, D_PAD=d_pad, BLOCK=tile.block_n, PRECISION=precision(q.dtype),
        DOT_F32=q.dtype != torch.float32 and interpreted(),  # the interpreter's bf16/fp16 tl.dot is wrong (3.9)
        WRITE=new_kv is not None, num_warps=tile.num_warps, num_stages=tile.num_stages)
    _decode_attention_merge[(b * nh,)](
        o_part, lse_part, out, o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0),
        lse_part.stride(1), out.stride(0), nh, SPLITS=splits, S_PAD=_pow2(splits), D=d, D_PAD=d_pad)
    return out

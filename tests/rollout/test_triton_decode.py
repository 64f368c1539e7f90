"""The Triton split-KV decode attention (agentrl.rollout.triton_decode), compiled on a CUDA host and in Triton's
interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET=1 there): against
a hand-written reference on ragged GQA key ranges (prefixes and left-padded runs, a row of one key), for one and
several splits (splits past a row's end do nothing), head sizes that are not powers of two, fp32 and bf16, and
as FastSampler's "triton" decode attention (same tokens and log-probs as "matmul", and as a plain forward)."""

import pytest
import torch

from agentrl.rollout import triton_decode
from agentrl.rollout.decode_attention import attend, key_mask

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _runnable() -> str:
    try:
        triton_decode.check_device(torch.device(DEVICE))
    except ValueError as e:
        return str(e)
    return ""


pytestmark = pytest.mark.skipif(bool(_runnable()), reason=_runnable())


def reference(q, k, v, valid, scale):
    """softmax(q k^T * scale) v per query head j over KV head j // g, only the row's valid keys; fp32 maths."""
    nh, nkv = q.shape[1], k.shape[1]
    kr = k.float().repeat_interleave(nh // nkv, 1)
    vr = v.float().repeat_interleave(nh // nkv, 1)
    s = (q.float() @ kr.transpose(-1, -2)) * scale
    p = s.masked_fill(~valid[:, None, None], float("-inf")).softmax(-1)
    return (p @ vr).reshape(q.shape[0], 1, -1)


def ragged(b, nh, nkv, d, length, starts, ends, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, nh, 1, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(b, nkv, length, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(b, nkv, length, d, generator=g).to(DEVICE, dtype)
    cols = torch.arange(length, device=DEVICE)
    lo, hi = torch.tensor(starts, device=DEVICE), torch.tensor(ends, device=DEVICE)
    valid = (cols[None] >= lo[:, None]) & (cols[None] < hi[:, None])
    return q, k, v, valid


def test_key_ranges_are_each_rows_first_and_past_last_valid_column():
    _, _, _, valid = ragged(4, 2, 1, 16, 50, [0, 7, 49, 3], [50, 20, 50, 4])
    assert triton_decode.key_ranges(valid).tolist() == [[0, 50], [7, 20], [49, 50], [3, 4]]
    assert triton_decode.key_ranges(valid).dtype == torch.int32


@pytest.mark.parametrize("splits", [1, 3, 8])
@pytest.mark.parametrize("shape", [(4, 2, 16), (6, 3, 24), (7, 1, 64)])  # (heads, kv heads, head dim)
def test_decode_attend_equals_the_reference_on_ragged_ranges(splits, shape):
    """fp32: within 1e-5 of the reference for every split count (8 splits of 64-key chunks over 200 columns:
    most rows' later splits are past their end and must weigh nothing)."""
    nh, nkv, d = shape
    starts, ends = [0, 0, 5, 199, 60, 0], [200, 1, 130, 200, 61, 64]
    q, k, v, valid = ragged(6, nh, nkv, d, 200, starts, ends)
    out = triton_decode.decode_attend(q, k, v, triton_decode.key_ranges(valid), d ** -0.5, splits=splits)
    assert out.shape == (6, 1, nh * d) and out.dtype == torch.float32
    assert (out - reference(q, k, v, valid, d ** -0.5)).abs().max().item() < 1e-5


def test_decode_attend_reads_a_strided_cache_view_and_bf16():
    """A [:b, :, :span] view of a bigger cache (FastSampler's slices) and bf16: within bf16 rounding of the fp32
    reference on the same bf16 inputs (the probabilities are rounded to bf16 before P V, as "matmul" does)."""
    q, k_full, v_full, _ = ragged(5, 4, 2, 32, 300, [0] * 5, [1] * 5, dtype=torch.bfloat16, seed=1)
    k, v, q = k_full[:3, :, :150], v_full[:3, :, :150], q[:3]
    valid = torch.arange(150, device=DEVICE)[None] < torch.tensor([150, 77, 9], device=DEVICE)[:, None]
    out = triton_decode.decode_attend(q, k, v, triton_decode.key_ranges(valid), 32 ** -0.5, splits=2)
    ref = reference(q, k, v, valid, 32 ** -0.5)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max().item() < 2e-2
    mm = attend(q, k, v, key_mask(valid, "matmul", q.dtype), "matmul", 32 ** -0.5)
    assert (out.float() - mm.float()).abs().max().item() < 2e-2


def test_attend_triton_form_equals_matmul():
    q, k, v, valid = ragged(3, 4, 2, 16, 40, [0, 3, 10], [40, 20, 11], seed=2)
    ranges = key_mask(valid, "triton", q.dtype)
    assert ranges.tolist() == [[0, 40], [3, 20], [10, 11]]
    got = attend(q, k, v, ranges, "triton", 0.25)
    ref = attend(q, k, v, key_mask(valid, "matmul", q.dtype), "matmul", 0.25)
    assert (got - ref).abs().max().item() < 1e-5


def test_ranges_outside_the_cache_are_clipped_not_read():
    """A caller's range past the cache's columns reads only the cache (equal to the clipped range's result)."""
    q, k, v, valid = ragged(2, 4, 2, 16, 20, [0, 4], [20, 20], seed=3)
    wide = torch.tensor([[-5, 900], [4, 21]], dtype=torch.int32, device=DEVICE)
    got = triton_decode.decode_attend(q, k, v, wide, 0.25, splits=2)
    assert (got - reference(q, k, v, valid, 0.25)).abs().max().item() < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits", [1, 3, 8])
def test_the_new_kv_written_inside_the_kernel_equals_writing_it_first(splits, dtype):
    """new_kv (the decode step's K/V at each row's last key column, FastSampler's decode step): the output and the
    whole cache after the call equal scattering them into the cache first and attending without new_kv, for rows
    whose new column falls in any split's chunk (the first, a middle one, the last; a row of one key; a slice of a
    bigger cache); the cache's other columns are untouched. fp32 within 1e-5, bf16 within its rounding."""
    nh, nkv, d, length = 6, 2, 24, 200
    starts, ends = [0, 0, 5, 199, 60, 0], [200, 1, 130, 200, 61, 64]
    q, k_full, v_full, valid = ragged(6, nh, nkv, d, length + 40, starts, ends, dtype=dtype, seed=4)
    k, v = k_full[:, :, :length], v_full[:, :, :length]  # a [:, :, :span] view, as FastSampler's
    past = k_full[:, :, length:].clone(), v_full[:, :, length:].clone()
    g = torch.Generator().manual_seed(5)
    kn = torch.randn(6, nkv, 1, d, generator=g).to(DEVICE, dtype)
    vn = torch.randn(6, nkv, 1, d, generator=g).to(DEVICE, dtype)
    ranges = triton_decode.key_ranges(valid[:, :length])
    at = (ranges[:, 1].long() - 1).view(6, 1, 1, 1).expand(6, nkv, 1, d)
    k_want, v_want = k.clone(), v.clone()
    k_want.scatter_(2, at, kn)
    v_want.scatter_(2, at, vn)
    want = triton_decode.decode_attend(q, k_want, v_want, ranges, d ** -0.5, splits=splits)
    got = triton_decode.decode_attend(q, k, v, ranges, d ** -0.5, splits=splits, new_kv=(kn, vn))
    assert torch.equal(k, k_want) and torch.equal(v, v_want)
    assert torch.equal(k_full[:, :, length:], past[0]) and torch.equal(v_full[:, :, length:], past[1])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (got.float() - want.float()).abs().max().item() < tol
    assert (got.float() - reference(q, k_want, v_want, valid[:, :length], d ** -0.5)).abs().max().item() < tol


def test_a_new_column_outside_the_cache_is_neither_written_nor_read():
    """A range ending past the cache (its new column would be at L or beyond) is clipped as without new_kv: the
    result is the clipped range's over the cache as it was, and nothing is written."""
    q, k, v, valid = ragged(2, 4, 2, 16, 20, [0, 4], [20, 20], seed=6)
    kn, vn = torch.ones(2, 2, 1, 16, device=DEVICE), torch.ones(2, 2, 1, 16, device=DEVICE)
    k0, v0 = k.clone(), v.clone()
    wide = torch.tensor([[0, 25], [4, 21]], dtype=torch.int32, device=DEVICE)
    got = triton_decode.decode_attend(q, k, v, wide, 0.25, splits=2, new_kv=(kn, vn))
    assert torch.equal(k, k0) and torch.equal(v, v0)
    assert (got - reference(q, k, v, valid, 0.25)).abs().max().item() < 1e-5


def test_decode_attend_rejects_what_it_cannot_compute():
    q, k, v, valid = ragged(2, 4, 2, 16, 20, [0, 0], [20, 5])
    r = triton_decode.key_ranges(valid)
    with pytest.raises(ValueError, match="GQA"):
        triton_decode.decode_attend(q[:, :3], k, v, r, 0.25)  # 3 heads over 2 KV heads
    with pytest.raises(ValueError, match="dtypes"):
        triton_decode.decode_attend(q, k.double(), v, r, 0.25)
    with pytest.raises(ValueError, match="dtypes"):
        triton_decode.decode_attend(q, k, v, r.long(), 0.25)
    with pytest.raises(ValueError, match="contiguous"):
        triton_decode.decode_attend(q, k.transpose(2, 3).contiguous().transpose(2, 3), v, r, 0.25)
    with pytest.raises(ValueError, match="new_kv"):
        triton_decode.decode_attend(q, k, v, r, 0.25, new_kv=(k[:, :, :1], v[:, :1, :1]))
    with pytest.raises(ValueError, match="new_kv"):
        triton_decode.decode_attend(q, k, v, r, 0.25, new_kv=(k[:, :, :1].double(), v[:, :, :1].double()))
    with pytest.raises(ValueError, match="does not write"):
        attend(q, k, v, key_mask(valid, "matmul", q.dtype), "matmul", 0.25, new_kv=(k[:, :, :1], v[:, :, :1]))


def test_tiles_parse_check_and_give_the_same_result():
    assert triton_decode.Tile.parse("128:2:8") == triton_decode.Tile(128, 2, 8, 4)
    assert triton_decode.Tile.parse("32:3:4:2").programs_per_sm == 2
    for bad in ("48:3:4", "8:3:4", "64:0:4", "64", "a:b:c", "64:3:4:4:4"):
        with pytest.raises(ValueError, match="Tile"):
            triton_decode.Tile.parse(bad)
    q, k, v, valid = ragged(3, 4, 2, 16, 100, [0, 30, 99], [100, 70, 100], seed=5)
    ref = reference(q, k, v, valid, 0.25)
    for tile in ("16:1:1", "32:2:4", "128:3:8"):
        got = triton_decode.decode_attend(q, k, v, triton_decode.key_ranges(valid), 0.25, splits=3,
                                          tile=triton_decode.Tile.parse(tile))
        assert (got - ref).abs().max().item() < 1e-5, tile


def test_wide_fp32_heads_take_a_smaller_tile():
    assert triton_decode.tile_for(torch.float32, 256) == triton_decode.WIDE_FP32_TILE
    assert triton_decode.tile_for(torch.bfloat16, 256) == triton_decode.DEFAULT_TILE
    assert triton_decode.tile_for(torch.float32, 128) == triton_decode.DEFAULT_TILE
    chosen = triton_decode.Tile(128, 2, 8)
    assert triton_decode.tile_for(torch.float32, 256, chosen) == chosen  # a caller's own tile is kept
    q, k, v, valid = ragged(2, 2, 1, 256, 70, [0, 5], [70, 66], seed=6)
    got = triton_decode.decode_attend(q, k, v, triton_decode.key_ranges(valid), 0.0625, splits=2)
    assert (got - reference(q, k, v, valid, 0.0625)).abs().max().item() < 1e-5


def test_default_splits_on_the_cpu_is_one():
    assert triton_decode.default_splits(64, 8, 1024, torch.device("cpu")) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA: the split count follows the SM count")
def test_default_splits_fill_the_gpu_without_chunks_under_a_tile():
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    for b, span in [(1, 4096), (8, 1024), (64, 1152), (256, 1152), (8, 64)]:
        s = triton_decode.default_splits(b, 8, span, dev)
        assert 1 <= s <= 64 and s <= -(-span // triton_decode.BLOCK_N)
        assert b * 8 * s >= min(4 * sms, b * 8 * min(64, -(-span // triton_decode.BLOCK_N)))


def test_fast_sampler_refuses_triton_where_it_cannot_run(monkeypatch):
    """Off CUDA and outside the interpreter, FastSampler says so when built, not at its first rollout."""
    from agentrl.models.load import load_policy
    from agentrl.rollout.fast_sampler import FastSampler

    model, tok = load_policy("tiny-qwen3", "fp32")
    monkeypatch.setattr(triton_decode, "interpreted", lambda: False)
    with pytest.raises(ValueError, match="decode_attention.*runs on CUDA"):
        FastSampler(model, stop_ids=(0,), pad_id=tok.pad_token_id, decode_attention="triton")
    monkeypatch.setattr(triton_decode, "triton", None)
    with pytest.raises(ValueError, match="needs the triton package"):
        triton_decode.check_device(torch.device("cuda"))


@pytest.mark.skipif(not triton_decode.available(), reason="triton is not installed")
def test_kernels_build_for_the_h200_pipelined_and_on_tensor_cores(tmp_path):
    """bench/triton_decode_aot.py compiles both kernels for sm_90 here (Triton's ptxas, no GPU): every model
    configuration builds, fits the 227 KiB of shared memory a block may have, pipelines its K/V loads (cp.async) in
    16-byte vectors, and multiplies bf16 on tensor cores (mma); so a kernel that would not build on the GPU, or that
    lost its pipelining, fails here first."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(root / "src"), "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run([sys.executable, str(root / "bench" / "triton_decode_aot.py"), "--arch", "90", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)
    assert {(r["dtype"], r["g"], r["d"]) for r in rows} == {("bf16", 2, 128), ("bf16", 7, 64), ("bf16", 6, 128),
                                                             ("fp32", 2, 128), ("bf16", 2, 256), ("fp32", 2, 256)}
    for r in rows:
        assert r["combine_ok"] and 0 < r["shared"] <= 227 * 1024, r
        assert r["cp_async"] > 0 and r["ld_v4"] > 0, r
        assert (r["mma"] > 0) == (r["dtype"] == "bf16"), r  # fp32 runs IEEE on the FMA units, by design


def test_a_cache_past_two_to_the_31_elements_is_addressed_right():
    """A [2, 1, L, 128] bf16 cache with L * 128 past 2^31: row 1's keys (its last 100 columns) sit past element
    2^31 both as a row offset and as a column offset, and are read at their real address (int64 pointers), not at
    a wrapped one. torch.empty: only the ranges' columns are written or read (on the CPU the rest stays
    uncommitted: ~0.3 GB resident of 17 GB reserved)."""
    length = (1 << 31) // 128 + 256
    k = torch.empty(2, 1, length, 128, dtype=torch.bfloat16, device=DEVICE)
    v = torch.empty_like(k)
    g = torch.Generator().manual_seed(0)
    k[1, 0, -100:] = torch.randn(100, 128, generator=g).bfloat16().to(DEVICE)
    v[1, 0, -100:] = torch.randn(100, 128, generator=g).bfloat16().to(DEVICE)
    k[0, 0, :100], v[0, 0, :100] = k[1, 0, -100:], v[1, 0, -100:]
    q = torch.randn(2, 2, 1, 128, generator=g).bfloat16().to(DEVICE)
    q[1] = q[0]
    ranges = torch.tensor([[0, 100], [length - 100, length]], dtype=torch.int32, device=DEVICE)
    for splits in (1, 64):
        out = triton_decode.decode_attend(q, k, v, ranges, 128 ** -0.5, splits=splits)
        assert (out[0].float() - out[1].float()).abs().max().item() == 0.0  # the same keys, rows apart
        assert out[1].float().abs().sum().item() > 0
    del k, v

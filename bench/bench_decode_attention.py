"""Benchmark: one decode step's attention alone, per form (and Triton tile), against reading the live KV once.

Not a test. Isolates the part of the decode step that the issue-26 profile found slowest (attention: 3.12 of 7.14
ms a step at batch 64, ctx 1024, H200): for each batch, agentrl.rollout.decode_attention's `attend` over --layers
separate caches (so the L2 cache does not serve a layer's KV to the next), the shapes FastSampler uses (q [b, heads,
1, D], cache [b, kv_heads, span, D], span = ctx + --steps rounded up to 128, the mask or key ranges built once per
step as the sampler does), timed as one CUDA graph of all layers replayed --iters times. Columns: ms per step (all
layers), GB/s of live KV (each row's written keys, K and V, once: what a decode kernel must read), the fraction of
--bw-tbs that is, and the largest |difference| from "matmul" (the reference form) on the same inputs.

--forms: any of DECODE_ATTENTION ("flex" through torch.compile, as FastSampler runs it); --tiles: the Triton
kernel's launch shapes (agentrl.rollout.triton_decode.Tile, block_n:num_stages:num_warps[:programs_per_sm]), one
row each; --ragged: row lengths uniform in [ctx / 8, ctx] instead of all ctx (where a kernel that reads only a
row's keys should gain over one that reads the span).

    PYTHONPATH=src python bench/bench_decode_attention.py --device cuda --batches 64 256 \\
        --forms matmul sdpa flex triton --tiles 64:3:4 64:2:4 128:2:8 32:4:4

On the CPU (--device cpu, small sizes) it checks the script and times nothing of interest ("triton" there needs
TRITON_INTERPRET=1 set before the start).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from _common import Table, device_meta, find_config

from agentrl.rollout.decode_attention import DECODE_ATTENTION, attend, key_mask


def _shape(args) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim): the tiny models', --config's (a path or a bench/configs/ name, as the other
    benchmarks take it), else the flags (Qwen3-0.6B's by default)."""
    if args.tiny:
        return 4, 2, 16
    if args.config:
        c = json.loads(find_config(args.config).read_text())
        return (c["num_attention_heads"], c["num_key_value_heads"],
                c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    return args.heads, args.kv_heads, args.head_dim


def make_inputs(b: int, heads: int, kv_heads: int, d: int, ctx: int, span: int, layers: int, ragged: bool,
                dtype: torch.dtype, device: torch.device, seed: int = 0):
    """q [b, heads, 1, D], per-layer caches [b, kv_heads, span, D] (random where written, zero after), valid [b, span]
    (each row's first lens[r] columns), lens [b]."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    lens = (torch.randint(max(1, ctx // 8), ctx + 1, (b,), generator=g) if ragged else torch.full((b,), ctx))
    valid = (torch.arange(span)[None] < lens[:, None]).to(device)
    q = torch.randn(b, heads, 1, d, generator=g).to(device, dtype)
    caches = []
    for _ in range(layers):
        k = torch.randn(b, kv_heads, span, d, device=device, dtype=dtype)
        v = torch.randn(b, kv_heads, span, d, device=device, dtype=dtype)
        caches.append((k, v))
    return q, caches, valid, lens


def time_step(fn, device: torch.device, iters: int) -> float:
    """Milliseconds per call of `fn` (all layers): a CUDA graph of it replayed `iters` times, else eager calls."""
    fn()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            graph.replay()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def measure(form: str, tile_text: str | None, q: torch.Tensor, caches: list, valid: torch.Tensor, scale: float,
            ref: torch.Tensor, device: torch.device, iters: int) -> dict:
    """One row: {"max_d": largest |out - ref| on the first layer, "ms_step": all layers' calls, timed}."""
    mask = key_mask(valid, form, q.dtype)  # once per step, shared by the layers, as FastSampler builds it
    if form == "triton":
        from agentrl.rollout.triton_decode import DEFAULT_TILE, Tile, decode_attend

        tile = Tile.parse(tile_text) if tile_text else DEFAULT_TILE

        def one(k, v):
            return decode_attend(q, k, v, mask, scale, tile=tile)
    else:
        fn = torch.compile(attend, dynamic=False) if form == "flex" else attend  # flex fuses only compiled

        def one(k, v):
            return fn(q, k, v, mask, form, scale)
    max_d = (one(*caches[0]).float() - ref).abs().max().item()

    def step():
        for k, v in caches:
            one(k, v)
    return {"max_d": max_d, "ms_step": time_step(step, device, iters)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--config", default=None, help="a model's config.json, its folder, or a bench/configs/ name: the head shape")
    p.add_argument("--tiny", action="store_true", help="the tiny test models' head shape (4 over 2, head size 16)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", dest="kv_heads", type=int, default=8)
    p.add_argument("--head-dim", dest="head_dim", type=int, default=128)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    p.add_argument("--ctx", type=int, default=1024, help="written keys per row (the maximum with --ragged)")
    p.add_argument("--steps", type=int, default=128, help="decode steps the span leaves room for")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ragged", action="store_true")
    p.add_argument("--forms", nargs="+", default=["matmul", "sdpa", "triton"], choices=DECODE_ATTENTION)
    p.add_argument("--tiles", nargs="+", default=[None], help="Triton tiles (block_n:num_stages:num_warps)")
    p.add_argument("--bw-tbs", dest="bw_tbs", type=float, default=4.3, help="memory bandwidth, TB/s (H200: 4.3)")
    args = p.parse_args()
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    heads, kv_heads, d = _shape(args)
    span = -(-(args.ctx + args.steps) // 128) * 128
    meta = device_meta(str(dev)) | {"dtype": args.dtype, "heads": heads, "kv_heads": kv_heads, "head_dim": d,
                                    "ctx": args.ctx, "span": span, "layers": args.layers, "ragged": args.ragged,
                                    "bw_TBs": args.bw_tbs, "iters": args.iters}
    table = Table("bench_decode_attention", [("batch", "d"), ("form", ""), ("tile", ""), ("ms_step", ".3f"),
                                             ("kv_gb_s", ".0f"), ("frac_bw", ".3f"), ("max_d", ".2e")], meta)
    scale = d ** -0.5
    for b in args.batches:
        try:
            q, caches, valid, lens = make_inputs(b, heads, kv_heads, d, args.ctx, span, args.layers, args.ragged,
                                                 dtype, dev)
        except torch.OutOfMemoryError:
            table.note(f"batch {b}: the {args.layers} caches do not fit")
            continue
        live_bytes = args.layers * int(lens.sum()) * kv_heads * d * 2 * q.element_size()
        ref = attend(q, *caches[0], key_mask(valid, "matmul", dtype), "matmul", scale).float()
        for form in args.forms:
            for tile_text in (args.tiles if form == "triton" else [None]):
                row = {"batch": b, "form": form, "tile": tile_text or ("default" if form == "triton" else "")}
                try:
                    row |= measure(form, tile_text, q, caches, valid, scale, ref, dev, args.iters)
                    row["kv_gb_s"] = live_bytes / row["ms_step"] / 1e6
                    row["frac_bw"] = live_bytes / (row["ms_step"] / 1e3) / (args.bw_tbs * 1e12)
                except Exception as e:  # noqa: BLE001 - one form's failure is a row, not the end of the run
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    table.note(f"batch {b} {form} {tile_text or ''}: {row['error']}")
                table.add(**row)
        del caches, q
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    table.note("ms_step: all layers' attention calls of one decode step (one CUDA graph); kv_gb_s: live KV bytes (K "
               "and V of each row's written keys, every layer) / time; frac_bw: of --bw-tbs; max_d: vs matmul")
    return 0


if __name__ == "__main__":
    sys.exit(main())

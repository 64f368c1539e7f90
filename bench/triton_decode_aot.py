"""Compile the Triton decode-attention kernels (agentrl.rollout.triton_decode) ahead of time for a GPU architecture,
on any machine (no GPU needed: Triton's own ptxas): does the kernel build for sm_90 / sm_80, and how it will run.

Per configuration (dtype, GQA group g, head size D of the models we train): the split kernel's shared memory per
block, whether its K/V loads are software-pipelined (`cp.async` copies, Triton's pipeliner) and 16-byte vectors
(`ld.global.v4`), its tensor-core instructions (`mma`), and whether the merge kernel builds. The integer arguments
and pointers get the 16-byte divisibility that Triton's JIT infers at a real launch for FastSampler's cache (head
size 64 / 128, span a multiple of 128, torch's aligned allocations), with the decode step's K/V write inside
(WRITE), so this is the code a launch compiles.

    TRITON_INTERPRET=0 PYTHONPATH=src python bench/triton_decode_aot.py [--arch 90 80] [--tiles 64:3:4 128:2:8] [--json]

Not a speed figure (bench_rollout.py --decode-attention triton on the GPU is); tests/rollout/test_triton_decode.py
runs it so that a kernel that would not build on the GPU fails on the CPU first. Needs TRITON_INTERPRET unset or 0
(the interpreter's functions cannot be compiled).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# (dtype, g, D): Qwen3-0.6B (16 heads over 8, 128), Qwen2.5-Coder-0.5B (14 over 2, 64), Qwen2.5-Coder-1.5B
# (12 over 2, 128), fp32 (the exactness mode), and 256-wide heads (Gemma-like; fp32 there takes WIDE_FP32_TILE)
CONFIGS = [("bf16", 2, 128), ("bf16", 7, 64), ("bf16", 6, 128), ("fp32", 2, 128), ("bf16", 2, 256), ("fp32", 2, 256)]
SPLIT_ARGS = ["Q", "K", "V", "RANGE", "O_PART", "LSE_PART", "K_NEW", "V_NEW", "s_qb", "s_qh", "s_kb", "s_kh", "s_kn",
              "s_vb", "s_vh", "s_vn", "s_ob", "s_oh", "s_os", "s_lb", "s_lh", "s_nkb", "s_nkh", "s_nvb", "s_nvh",
              "n_kv", "chunk", "length", "qk_scale"]
# what the JIT sees as multiples of 16 for FastSampler's cache (n_kv, s_lb, s_lh: the head and split counts, not)
DIV16 = {"Q", "K", "V", "RANGE", "O_PART", "LSE_PART", "K_NEW", "V_NEW", "s_qb", "s_qh", "s_kb", "s_kh", "s_kn", "s_vb",
         "s_vh", "s_vn", "s_ob", "s_oh", "s_os", "s_nkb", "s_nkh", "s_nvb", "s_nvh", "chunk", "length"}
COMBINE_ARGS = ["O_PART", "LSE_PART", "OUT", "s_ob", "s_oh", "s_os", "s_lb", "s_lh", "s_outb", "n_heads"]


def compile_kernels(arch: int, dtype: str, g: int, d: int, tile: str | None = None) -> dict:
    """Build both kernels for sm_<arch> with the split kernel's `tile` ("block_n:num_stages:num_warps", default
    triton_decode's); -> {"shared": bytes per split block, "cp_async", "ld_v4", "mma": PTX instruction counts of
    the split kernel, "combine_ok": True}. Raises what Triton's compiler raises."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from agentrl.rollout import triton_decode as td

    tdtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    t = td.Tile.parse(tile) if tile else td.tile_for(tdtype, d)
    target = GPUTarget("cuda", arch, 32)
    types = [f"*{dtype}"] * 3 + ["*i32", "*fp32", "*fp32"] + [f"*{dtype}"] * 2 + ["i32"] * 20 + ["fp32"]
    sig = dict(zip(SPLIT_ARGS, types, strict=True))
    const = dict(G=g, G_PAD=td._pow2(g, td.MIN_ROWS), D=d, D_PAD=td._pow2(d, td.MIN_ROWS), BLOCK=t.block_n,
                 PRECISION=td.precision(tdtype), DOT_F32=False, WRITE=True)  # as FastSampler's decode step
    sig.update(dict.fromkeys(const, "constexpr"))
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(SPLIT_ARGS) if n in DIV16}
    src = ASTSource(fn=td._decode_attention_split, signature=sig, attrs=attrs,
                    constexprs={(list(sig).index(k),): v for k, v in const.items()})
    split = triton.compile(src, target=target, options={"num_warps": t.num_warps, "num_stages": t.num_stages})
    ptx = split.asm["ptx"]
    sig = dict(zip(COMBINE_ARGS, ["*fp32", "*fp32", f"*{dtype}"] + ["i32"] * 7, strict=True))
    const = dict(SPLITS=2, S_PAD=2, D=d, D_PAD=td._pow2(d, td.MIN_ROWS))
    sig.update(dict.fromkeys(const, "constexpr"))
    triton.compile(ASTSource(fn=td._decode_attention_merge, signature=sig,
                             constexprs={(list(sig).index(k),): v for k, v in const.items()}), target=target)
    return {"arch": arch, "dtype": dtype, "g": g, "d": d, "tile": f"{t.block_n}:{t.num_stages}:{t.num_warps}",
            "shared": split.metadata.shared,
            "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"), "ld_v4": ptx.count("ld.global.v4"),
            "mma": ptx.count("mma.sync"), "combine_ok": True}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, nargs="+", default=[90, 80], help="compute capabilities (90: H100/H200)")
    p.add_argument("--tiles", nargs="+", default=[None], help="split-kernel tiles block_n:num_stages:num_warps "
                   "(default: triton_decode's)")
    p.add_argument("--json", action="store_true", help="one JSON list on stdout instead of the table")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("triton_decode_aot: unset TRITON_INTERPRET (the interpreter's kernels cannot be compiled)",
              file=sys.stderr)
        return 2
    rows = [compile_kernels(a, *c, tile=t) for a in args.arch for t in args.tiles for c in CONFIGS]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'arch':>5} {'tile':>8} {'dtype':>5} {'g':>3} {'D':>4} {'shared':>8} {'cp.async':>9} {'ld.v4':>6} "
          f"{'mma':>5}")
    for r in rows:
        print(f"{r['arch']:>5} {r['tile']:>8} {r['dtype']:>5} {r['g']:>3} {r['d']:>4} {r['shared']:>8} {r['cp_async']:>9} "
              f"{r['ld_v4']:>6} {r['mma']:>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

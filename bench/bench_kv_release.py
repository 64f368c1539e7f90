"""Benchmark: what giving the static KV cache's memory back between rollouts costs (FastSampler release_kv).

Not a test. For a cache of --layers x 2 tensors of [rows, kv_heads, length, head_dim] (default: Qwen3-0.6B's
28 layers, 8 KV heads of 128, 64 rows x 1792 columns, bf16: 12.25 GiB, the coding-tools step's), the
milliseconds of: making it (agentrl.rollout.kv_memory.VmmBuffer per tensor, one VmmBuffer for all, and
torch.zeros from PyTorch's caching allocator, fresh after empty_cache and again from its cache), release and
restore (VMM: unmap + map + zero at the same addresses), each the median of --repeats (synchronized).

    PYTHONPATH=src python bench/bench_kv_release.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from _common import Table, device_meta

from agentrl.rollout.kv_memory import VmmBuffer, vmm_supported


def _ms(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--kv-heads", dest="kv_heads", type=int, default=8)
    p.add_argument("--length", type=int, default=1792)
    p.add_argument("--head-dim", dest="head_dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dev = torch.device(args.device)
    table = Table("bench_kv_release", [("method", ""), ("tensors", "d"), ("gib", ".2f"), ("make_ms", ".1f"),
                                       ("release_ms", ".1f"), ("restore_ms", ".1f"), ("free_gib_released", ".2f")],
                  device_meta(dev) | {"rows": args.rows, "length": args.length, "layers": args.layers})
    if dev.type != "cuda" or not vmm_supported(dev):
        table.note("needs a CUDA device with virtual memory management")
        return 0
    n = 2 * args.layers
    per = args.rows * args.kv_heads * args.length * args.head_dim * 2  # bf16 bytes
    med = statistics.median
    for method, tensors in (("vmm per tensor", n), ("vmm one buffer", 1)):
        size = per * n // tensors
        makes, rels, ress, freed = [], [], [], []
        for _ in range(args.repeats):
            bufs: list = []
            makes.append(_ms(lambda: bufs.extend(VmmBuffer(size, dev) for _ in range(tensors))))  # noqa: B023
            f0 = torch.cuda.mem_get_info(dev)[0]
            rels.append(_ms(lambda: [b.release() for b in bufs]))  # noqa: B023
            freed.append((torch.cuda.mem_get_info(dev)[0] - f0) / 2**30)
            ress.append(_ms(lambda: [b.restore() for b in bufs]))  # noqa: B023
            bufs.clear()
        table.add(method=method, tensors=tensors, gib=per * n / 2**30, make_ms=med(makes), release_ms=med(rels),
                  restore_ms=med(ress), free_gib_released=med(freed))
    for method in ("torch.zeros fresh", "torch.zeros cached"):
        makes = []
        for _ in range(args.repeats):
            if method.endswith("fresh"):
                torch.cuda.empty_cache()
            ts: list = []
            makes.append(_ms(lambda: ts.extend(torch.zeros(per // 2, dtype=torch.bfloat16, device=dev)  # noqa: B023
                                               for _ in range(n))))
            ts.clear()
        table.add(method=method, tensors=n, gib=per * n / 2**30, make_ms=med(makes))
    table.note("make: allocate and zero; release: unmap and free the physical memory (address kept); restore: map "
               "new memory at the same address and zero it; free_gib_released: device memory freed by the release "
               "(cudaMemGetInfo)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

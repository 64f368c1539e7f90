"""Does the compiled update recompile as batches change? RLConfig's default update (compiled layers on CUDA) on
a sequence of batches whose rows differ in number and length, as a real run's steps do (bench_update's batch
fixes both): per update its wall time and the graphs dynamo has compiled so far (torch._dynamo.utils.counters).
Run with TORCH_LOGS=recompiles to see each recompile's reason.

    PYTHONPATH=src TORCH_LOGS=recompiles python bench/compile_variety.py --device cuda [--config PATH]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from _common import make_model, sync
from bench_update import LONG_RUN_STEPS, make_batch

import agentrl.rl.update as update
from agentrl.models.device import DEVICE_HELP, resolve_device
from agentrl.rl.config import RLConfig


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    from torch._dynamo.utils import counters

    model = make_model(args.config, "bf16", args.device, tiny=args.tiny)
    update.enable_gradient_checkpointing(model)
    compiled = update.resolve_compile_layers("auto", args.device, LONG_RUN_STEPS)
    if compiled:
        update.compile_decoder_layers(model)
    opt = update.adamw(model.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        rows = 8 * int(torch.randint(2, 9, (1,), generator=g))  # 16..64 rows of 8-sample groups
        length = int(torch.randint(300, 1025, (1,), generator=g))
        batch = make_batch(model, rows, length, min(200, length // 2), 64, 8, seed=step)
        cfg = RLConfig.from_flat(prompts_per_step=rows // 8, group_size=8, dtype="bf16", lr=1e-6)
        sync(args.device)
        t0 = time.perf_counter()
        update.minibatch_step(model, opt, batch, cfg)
        sync(args.device)
        dt = time.perf_counter() - t0
        tokens = int(batch.attention_mask.sum())
        print(f"step {step}: {rows} rows <= {length} tokens, {tokens} tokens, {dt:.2f} s = {tokens / dt:,.0f} tokens/s; "
              f"graphs so far {counters['stats']['unique_graphs']}, frames {counters['stats']['calls_captured']}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

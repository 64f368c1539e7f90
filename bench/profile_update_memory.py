"""Profile: what is alive at the memory peak of one GRPO update (agentrl.rl.update.minibatch_step).

Not a test, not a timing. A TorchDispatchMode sees every op of one update (after a warm-up update that
builds AdamW's state) and keeps, per storage the op created, its bytes, shape, dtype, op and the innermost
agentrl / transformers / checkpoint frames that made it (for tensors of 1 MiB or more; the autograd engine's
backward ops have no Python frame of their own beyond the call that ran `backward`). Weights and optimizer
state (and views of them) are static and not counted. It prints the peak of the bytes made during the update
that are alive at once, and the largest tensors alive at that moment. Sizes do not depend on the device, so a
CPU run profiles the GPU update's memory (minus kernel workspaces and the allocator's rounding); fp32 on a
CPU is much faster than bf16, whose head tensors are fp32 all the same (the softmax runs in fp32).

    PYTHONPATH=src python bench/profile_update_memory.py --layers 2 --length 1024 --dtype fp32   # ~3 min on 2 cores

Found with it (issue 26 item 5, Qwen3-0.6B's config with 2 layers, 8 rows of <= 1024 tokens, 4-row
microbatches, checkpointing on, fp32, 2026-12-03): 5.04 GiB made during the update at the peak, of which
4 x 594 MiB [1024, 151936] tensors in one LM-head chunk's forward: logits, log-softmax, and the entropy's
exp and product, built inside autograd although the entropy is only a statistic. With the entropy outside
autograd, the logits freed after the log-softmax and nll_loss for the target's log-prob: 2.45 GiB
(agentrl.rl.logprobs._head_chunk; tests/rl/test_logprob_memory.py). Then the peak is the tied head/embedding
weight's gradient, summed by autograd over the chunks (two [151936, 1024] products and two sums alive), which
smaller chunks do not shrink: --chunk-rows 256 gives 2.49 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback

import torch
from _common import find_config, make_model
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import agentrl.rl.update as update
from agentrl.models.device import dtype_arg
from agentrl.rl.config import RLConfig

_FRAMES = ("agentrl", "transformers", "checkpoint")


class LiveTensors(TorchDispatchMode):
    """Bytes of the storages ops create while the mode is on, alive at once; the peak and what made it.

    Args:
        static: tensors whose storages (and views of them) are not counted (weights, optimizer state).
    """

    def __init__(self, static=()):
        super().__init__()
        self.static = {t.untyped_storage().data_ptr() for t in static}
        self.live: dict[int, tuple] = {}
        self.cur = self.peak = self.ops = 0
        self.at_peak: list[tuple] = []

    def _purge(self) -> None:
        for k in [k for k, v in self.live.items() if v[0].expired()]:
            self.cur -= self.live.pop(k)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        if self.ops % 8 == 0:
            self._purge()
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            st = t.untyped_storage()
            k = st.data_ptr()
            if k in self.live or k in self.static or st.nbytes() == 0:
                continue
            where = ""
            if st.nbytes() >= 2**20:
                fr = [f for f in traceback.extract_stack()[:-1] if any(s in f.filename for s in _FRAMES)]
                where = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in fr[-3:][::-1])
            self.live[k] = (StorageWeakRef(st), st.nbytes(), str(func), tuple(t.shape), str(t.dtype), where)
            self.cur += st.nbytes()
        if self.cur > self.peak:
            self._purge()
            if self.cur > self.peak:
                self.peak = self.cur
                self.at_peak = sorted((v[1:] for v in self.live.values()), reverse=True)[:30]
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None, help="config.json or its folder (default: qwen3-0.6b-config)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (the config's count: 0)")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--micro-tokens", dest="micro_tokens", type=int, default=0)
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--segment", type=int, default=64)
    p.add_argument("--chunk-rows", dest="chunk_rows", type=int, default=RLConfig().update.logprob_chunk_rows)
    p.add_argument("--dtype", default="fp32", type=dtype_arg)
    p.add_argument("--gc", default="on", choices=["on", "off"])
    p.add_argument("--top", type=int, default=12, help="tensors to list at the peak")
    args = p.parse_args()

    import bench_update

    raw = json.loads(find_config(args.config).read_text())
    if args.layers:
        raw["num_hidden_layers"] = args.layers
    cfg_path = os.path.join(tempfile.mkdtemp(), "config.json")
    with open(cfg_path, "w") as f:
        json.dump(raw, f)
    model = make_model(cfg_path, args.dtype, "cpu")
    if args.gc == "on":
        update.enable_gradient_checkpointing(model)
    model.train()
    batch = bench_update.make_batch(model, args.rows, args.length, args.prompt, args.segment, args.group, seed=0)
    cfg = RLConfig.from_flat(micro=args.micro, micro_tokens=args.micro_tokens, minibatches=1,
                             prompts_per_step=args.rows // args.group, group_size=args.group, dtype=args.dtype,
                             gradient_checkpointing=args.gc == "on", lr=1e-6, pack_rows=True,
                             logprob_chunk_rows=args.chunk_rows)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    update.minibatch_step(model, opt, batch, cfg)  # warm-up: AdamW state
    static = list(model.parameters()) + [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    params = sum(t.numel() * t.element_size() for t in model.parameters())
    print(f"# profile_update_memory: torch={torch.__version__}, layers={raw['num_hidden_layers']}, dtype={args.dtype}, "
          f"gc={args.gc}, rows={args.rows}, micro={args.micro}, micro_tokens={args.micro_tokens}, "
          f"chunk_rows={args.chunk_rows}, tokens={int(batch.attention_mask.sum())}, "
          f"policy={int(batch.num_policy_tokens)}, weights {params / 2**30:.3f} GiB")
    mode = LiveTensors(static)
    with mode:
        update.minibatch_step(model, opt, batch, cfg)
    print(f"peak of the bytes made during the update and alive at once: {mode.peak / 2**30:.3f} GiB; the largest:")
    for nbytes, func, shape, dtype, where in mode.at_peak[: args.top]:
        print(f"  {nbytes / 2**20:9.1f} MiB  {dtype:14s} {str(shape):22s} {func:38s} {where or 'autograd engine'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: peak memory and time of policy_logprobs (head at policy positions, chunked) vs full logits.

Not a test. Each method runs forward + backward in a fresh subprocess on a random Qwen3 with the real
Qwen3 vocabulary (151,936) and a small trunk, so the LM-head logits dominate memory, as in agentic RL
where most tokens are prompt and tool output. Prints peak memory (CUDA max allocated, or CPU peak RSS
above the post-setup baseline) and wall time, and the ratios against the full-logit baseline.

    python bench/bench_logprobs_memory.py [--device cpu|cuda] [--rows 4] [--length 512] [--policy_frac 0.25]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _child(method: str, args: argparse.Namespace) -> dict[str, float]:
    import resource

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from agentrl.rl.logprobs import policy_logprobs

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151936, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=args.hidden // 4,
                      tie_word_embeddings=True)
    dev = torch.device(args.device)
    model = Qwen3ForCausalLM(cfg).to(dev)
    n, length = args.rows, args.length
    ids = torch.randint(0, cfg.vocab_size, (n, length), device=dev)
    am = torch.ones_like(ids)
    pm = torch.zeros_like(ids)
    start = length - int(length * args.policy_frac)
    pm[:, start:] = 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.max_memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if method == "full":
        logits = model(input_ids=ids, attention_mask=am).logits.float()
        lp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None]).squeeze(2) * pm[:, 1:]
    else:
        lp, _ = policy_logprobs(model, ids, am, pm, chunk_rows=args.chunk_rows)
    lp.sum().backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_bytes_above_setup": float(peak - base), "time_s": time.perf_counter() - t0,
            "policy_tokens": float(pm.sum())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--policy_frac", type=float, default=0.25)
    p.add_argument("--chunk_rows", type=int, default=256)
    p.add_argument("--child", choices=["full", "gathered"], default=None)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args)))
        return 0
    res = {}
    for method in ("full", "gathered"):
        out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", method], capture_output=True,
                             text=True, check=True)
        res[method] = json.loads(out.stdout.strip().splitlines()[-1])
    f, g = res["full"], res["gathered"]
    print(f"rows={args.rows} length={args.length} policy_frac={args.policy_frac} vocab=151936 device={args.device}")
    for name, r in res.items():
        print(f"  {name:9s} peak +{r['peak_bytes_above_setup'] / 2**20:8.1f} MiB   {r['time_s']:.2f} s")
    print(f"  ratio gathered/full: memory {g['peak_bytes_above_setup'] / f['peak_bytes_above_setup']:.3f}, "
          f"time {g['time_s'] / f['time_s']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

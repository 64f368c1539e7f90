"""Where a FastSampler call's prefill time goes: bench_rollout's contexts (batch rows of --ctx random tokens),
a 1-token call timed, its prefill forwards (agentrl.rollout.fast_model.prefill_slots) timed apart, then the call
under torch.profiler: device time by kernel-name bucket (bench_rollout.kernel_bucket) and the top kernels.

Against two bounds: the GEMMs' FLOPs at --tflops (2 x non-embedding parameters x context tokens; the LM head
runs on each row's last token only) and the causal attention's FLOPs at the same rate. Issue 26 item 1's end to
end figure (bench_rollout at batch 128) pays this prefill once per call.

    PYTHONPATH=src python bench/profile_prefill.py [--config DIR] [--batch 128] [--ctx 1024]
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import free, make_model, model_name, sync, timed, write_out
from bench_rollout import BUCKETS, kernel_bucket, kernel_times, make_contexts, make_sampler

import agentrl.rollout.fast_sampler as fast_sampler
from agentrl.models.device import DEVICE_HELP, DTYPE_HELP, dtype_arg, resolve_device


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name")
    p.add_argument("--dtype", default="bf16", type=dtype_arg, help=DTYPE_HELP)
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--tflops", type=float, default=790.0, help="dense bf16 TFLOP/s of the device (H200: ~790)")
    args = p.parse_args()
    from torch.profiler import ProfilerActivity, profile

    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    cfg = model.config
    ctxs = make_contexts(args.batch, args.ctx, cfg.vocab_size, seed=args.batch)
    tokens = sum(map(len, ctxs))
    fs = make_sampler(model, args.batch, 2, 0)
    prefill_s: list[float] = []
    inner = fast_sampler.prefill_slots

    def timed_prefill(*a, **kw):
        sync(args.device)
        t0 = time.perf_counter()
        out = inner(*a, **kw)
        sync(args.device)
        prefill_s.append(time.perf_counter() - t0)
        return out

    fast_sampler.prefill_slots = timed_prefill
    budgets = [1] * args.batch
    fs(ctxs, budgets)  # warm-up: the cache, the kernels
    prefill_s.clear()
    _, call_s = timed(lambda: fs(ctxs, budgets), args.device)
    pre_s = sum(prefill_s)
    emb = cfg.vocab_size * cfg.hidden_size
    trunk = sum(q.numel() for q in model.parameters()) - emb * (1 if cfg.tie_word_embeddings else 2)
    gemm_ms = 2 * trunk * tokens / (args.tflops * 1e12) * 1e3
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn_ms = (2 * 2 * cfg.num_hidden_layers * cfg.num_attention_heads * hd * args.ctx * args.ctx * args.batch / 2
               / (args.tflops * 1e12) * 1e3)
    cuda = str(args.device).startswith("cuda")
    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    with prof:
        fs(ctxs, budgets)
        sync(args.device)
    timed_ev = kernel_times(prof, cuda)
    by_bucket = dict.fromkeys(BUCKETS, 0.0)
    by_name: dict[str, list] = {}
    for name, us in timed_ev:
        by_bucket[kernel_bucket(name)] += us / 1e3
        acc = by_name.setdefault(name, [0.0, 0])
        acc[0] += us / 1e3
        acc[1] += 1
    device_ms = sum(by_bucket.values())
    lines = [f"# profile_prefill: model={model_name(args.config)}, dtype={args.dtype}, batch={args.batch}, "
             f"ctx={args.ctx}, context tokens={tokens}, device={args.device}, prefill_tokens={fs.prefill_tokens}, "
             f"decode_attention={fs.decode_attention}",
             f"1-token call: {call_s * 1e3:.1f} ms wall; its prefill forwards: {pre_s * 1e3:.1f} ms "
             f"({len(prefill_s)} prefill_slots calls, {tokens / pre_s:,.0f} context tokens/s)",
             f"bounds at {args.tflops:.0f} TFLOP/s: trunk GEMMs {gemm_ms:.1f} ms ({trunk / 1e9:.3f}B non-embedding "
             f"parameters), causal attention {attn_ms:.1f} ms",
             f"device time of the profiled call: {device_ms:.1f} ms ({len(timed_ev)} kernels)"]
    lines += [f"  bucket {b:<18} {ms:9.1f} ms  {ms / device_ms:6.1%}" for b, ms in by_bucket.items()]
    lines.append("top kernels (ms, calls):")
    for name, (ms, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:25]:
        lines.append(f"  {ms:9.2f} ms {c:6d}  {name[:150]}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    write_out("profile_prefill.txt", text)
    free(args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where one GRPO update's time and memory go on a GPU: bench_update's batch (64 rows of ~--length tokens) through
agentrl.rl.update.minibatch_step as RLConfig runs it (token-budget microbatches, checkpointing, layers compiled on
CUDA), after a warm-up update that compiles and builds AdamW's state.

1. A timed update: tokens/s (all real tokens / wall s, bench_update's all_tok_s) and the peak above static.
2. The same update with the device synchronised around its phases: trunk + head forward (policy_logprobs),
   backward, clip + optimizer step; the rest is Python between them.
3. The update under torch.profiler: device busy time (the union of kernel intervals) against the wall, so idle
   device time shows, and kernel time by bucket (bench_rollout.kernel_bucket; inductor's fused kernels are
   "triton_*", elementwise) and the top kernels.
4. The update under the CUDA allocator's history (torch.cuda.memory._record_memory_history): the peak of the
   bytes allocated during the update, and the allocations alive at that moment grouped by where they were made
   (the innermost agentrl / transformers / checkpoint / inductor-generated frames; the autograd engine's own
   allocations have no Python frame and read "autograd engine").

    PYTHONPATH=src python bench/profile_update.py --device cuda [--micro-tokens 16384] [--compile auto]
    PYTHONPATH=src python bench/profile_update.py --device cpu --tiny --rows 8 --length 96   # smoke (1 and 2 only)
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import torch
from _common import free, make_model, model_name, sync, write_out
from bench_rollout import BUCKETS, kernel_bucket, kernel_times
from bench_update import LONG_RUN_STEPS, make_batch

import agentrl.rl.update as update
from agentrl.models.device import DEVICE_HELP, dtype_arg, resolve_device
from agentrl.rl import packing
from agentrl.rl.config import RLConfig

_FRAME_KEYS = ("agentrl", "transformers", "checkpoint", "torchinductor", "bench/")


def busy_ms(prof) -> float:
    """Device busy time of a finished CUDA profile: the union of every kernel's / memcpy's interval, in ms."""
    from torch.autograd import DeviceType

    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False))
    total, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1e3


def where(frames: list[dict]) -> str:
    """A short label for an allocation's Python stack (innermost first): up to three frames of _FRAME_KEYS'
    files, `file:line(function)`; "autograd engine" when the stack has none of them."""
    picked = []
    for f in frames:
        name = f.get("filename", "")
        if any(k in name for k in _FRAME_KEYS):
            short = name.split("/site-packages/")[-1].split("/src/")[-1]
            if "torchinductor" in name:
                short = "inductor:" + name.rsplit("/", 1)[-1][:10]
            picked.append(f"{short}:{f.get('line')}({f.get('name')})")
        if len(picked) == 3:
            break
    return " <- ".join(picked) or "autograd engine"


def memory_at_peak(snapshot: dict, top: int = 20) -> tuple[int, list[tuple[str, int, int]]]:
    """Replay a memory snapshot's device trace (alloc / free_completed events): the peak of the bytes allocated
    during the trace and alive at once, and what is alive then grouped by `where` label: [(label, bytes,
    count)], largest first. Allocations from before the trace (weights, optimizer state) are not counted."""
    live: dict[int, tuple[int, str]] = {}
    cur = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for trace in snapshot.get("device_traces", []):
        for ev in trace:
            act = ev.get("action")
            if act == "alloc":
                frames = ev.get("frames", [])
                live[ev["addr"]] = (ev["size"], where(frames) if frames else f"no stack: {ev['size'] / 2**20:.1f} MiB")
                cur += ev["size"]
                if cur > peak:
                    peak, at_peak = cur, dict(live)
            elif act == "free_completed" and ev["addr"] in live:
                cur -= live.pop(ev["addr"])[0]
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for size, label in at_peak.values():
        groups[label][0] += size
        groups[label][1] += 1
    rows = sorted(((k, v[0], v[1]) for k, v in groups.items()), key=lambda r: -r[1])
    return peak, rows[:top]


def compile_with_checkpoint_inside(model) -> None:
    """Experiment (--ac-inside): every decoder layer's call compiled with its activation checkpoint inside the
    compiled region, so AOTAutograd puts the recompute in the compiled backward graph, through the same
    compiled-only-in-the-update dispatch as agentrl.rl.update.compile_decoder_layers."""
    from torch.utils.checkpoint import checkpoint

    for layer in update.decoder_layers(model):
        def run(*a, _impl=layer._call_impl, **kw):
            return checkpoint(_impl, *a, use_reentrant=False, **kw)
        layer._compiled_call_impl = update._CompiledCall(layer, torch.compile(run, dynamic=True))


def phase_profile(run: tuple, device: str, static: int) -> list[str]:
    """Section 2: one update with the device synchronised around its phases; time and peak above `static`."""
    model, opt, batch, cfg = run
    cuda = str(device).startswith("cuda")
    phases: dict[str, float] = collections.defaultdict(float)
    peaks: dict[str, int] = collections.defaultdict(int)

    def timed_phase(name, fn):
        def wrapped(*a, **kw):
            sync(device)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            sync(device)
            phases[name] += time.perf_counter() - t0
            if cuda:
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated() - static)
            return out
        return wrapped

    saved = (update.policy_logprobs, torch.Tensor.backward, torch.nn.utils.clip_grad_norm_, opt.step)
    update.policy_logprobs = timed_phase("forward (trunk + head, policy_logprobs)", saved[0])
    torch.Tensor.backward = timed_phase("backward", saved[1])
    torch.nn.utils.clip_grad_norm_ = timed_phase("clip_grad_norm_", saved[2])
    opt.step = timed_phase("optimizer step", saved[3])
    try:
        sync(device)
        t0 = time.perf_counter()
        update.minibatch_step(model, opt, batch, cfg)
        sync(device)
        wall = time.perf_counter() - t0
    finally:
        update.policy_logprobs, torch.Tensor.backward, torch.nn.utils.clip_grad_norm_ = saved[:3]
        del opt.step
    phases["rest (Python between phases, batch selection, metrics)"] = wall - sum(phases.values())
    lines = [f"phases (device synchronised around each; {wall * 1e3:.0f} ms in all; the peak above static during "
             "each, GiB):"]
    lines += [f"  {ms * 1e3:8.1f} ms  {ms / wall:6.1%}  {peaks[name] / 2**30 if name in peaks else float('nan'):6.2f} "
              f"GiB  {name}" for name, ms in phases.items()]
    return lines


def kernel_profile(run: tuple, device: str) -> list[str]:
    """Section 3: one update under torch.profiler: device busy time against the wall, kernel time by bucket,
    the top kernels."""
    from torch.profiler import ProfilerActivity, profile

    model, opt, batch, cfg = run
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    sync(device)
    t0 = time.perf_counter()
    with prof:
        update.minibatch_step(model, opt, batch, cfg)
        sync(device)
    wall = time.perf_counter() - t0
    timed_ev = kernel_times(prof, True)
    by_bucket = dict.fromkeys(BUCKETS, 0.0)
    by_name: dict[str, list] = {}
    for name, us in timed_ev:
        bucket = "elementwise (inductor triton_*)" if name.startswith("triton_") else kernel_bucket(name)
        by_bucket[bucket] = by_bucket.get(bucket, 0.0) + us / 1e3
        acc = by_name.setdefault(name, [0.0, 0])
        acc[0] += us / 1e3
        acc[1] += 1
    kernel_ms = sum(by_bucket.values())
    busy = busy_ms(prof)
    lines = [f"profiled update: {wall * 1e3:.0f} ms wall (profiler on), device busy {busy:.0f} ms "
             f"({busy / wall / 1e3:.1%}), kernel time {kernel_ms:.0f} ms in {len(timed_ev)} kernels"]
    lines += [f"  bucket {b:<32} {ms:9.1f} ms  {ms / kernel_ms:6.1%}" for b, ms in by_bucket.items()]
    lines.append("top kernels (ms, calls):")
    for name, (ms, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]:
        lines.append(f"  {ms:9.2f} ms {c:6d}  {name[:140]}")
    return lines


def memory_profile(run: tuple, device: str) -> list[str]:
    """Section 4: one update under the allocator's history (Python stacks; without them where recording them
    fails, as it did in backward on torch 2.11): the peak of the bytes allocated during it and what is alive then."""
    model, opt, batch, cfg = run
    lines: list[str] = []
    free(device)
    try:
        snap = None
        for kw in ({"stacks": "python"}, {"context": None}):
            try:
                torch.cuda.memory._record_memory_history(max_entries=2_000_000, **kw)
                update.minibatch_step(model, opt, batch, cfg)
                snap = torch.cuda.memory._snapshot()
                break
            except SystemError as e:
                lines.append(f"memory: history with {kw} failed ({e}); trying without stacks")
                opt.zero_grad(set_to_none=True)
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
                free(device)
        peak, rows = memory_at_peak(snap or {})
        lines.append(f"memory: peak of the bytes allocated during the update and alive at once {peak / 2**30:.2f} GiB; "
                     "alive at that moment, by where it was made (GiB, allocations):")
        lines += [f"  {b / 2**30:7.3f} GiB {c:5d}  {label[:200]}" for label, b, c in rows]
    except Exception as e:  # noqa: BLE001 - the timings are kept
        lines.append(f"memory: history failed: {type(e).__name__}: {e}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name")
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--dtype", default="bf16", type=dtype_arg)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--segment", type=int, default=64)
    p.add_argument("--minibatches", type=int, default=2)
    d = RLConfig().update
    p.add_argument("--micro-tokens", dest="micro_tokens", type=int, default=d.micro_tokens)
    p.add_argument("--chunk-rows", dest="chunk_rows", type=int, default=d.logprob_chunk_rows)
    p.add_argument("--gc", default="on" if d.gradient_checkpointing else "off", choices=["on", "off"])
    p.add_argument("--compile", default=d.compile_layers, choices=["auto", "on", "off"],
                   help="compile_layers, resolved as the trainer does for a long run")
    p.add_argument("--act-budget", dest="act_budget", type=float, default=None,
                   help="torch._functorch.config.activation_memory_budget for the compiled layers (default: torch's)")
    p.add_argument("--optimizer", default="default", choices=["default", "torch"],
                   help="default: the trainer's (agentrl.rl.update.adamw, fused on CUDA); torch: torch.optim.AdamW's "
                        "own default (foreach on CUDA)")
    p.add_argument("--ac-inside", dest="ac_inside", action="store_true",
                   help="experiment: each layer's checkpoint traced inside its compiled region (torch.compile of "
                        "checkpoint(layer)), instead of HF's checkpoint around the compiled layer")
    p.add_argument("--attention-head-groups", dest="head_groups", type=int, default=packing.ATTENTION_HEAD_GROUPS,
                   help="each layer's packed attention as this many calls of a group of heads "
                        "(agentrl.rl.packing.ATTENTION_HEAD_GROUPS; the backward's transients shrink with it)")
    p.add_argument("--tag", default="", help="suffix of the output file's name")
    args = p.parse_args()
    if args.head_groups < 1:
        p.error("--attention-head-groups must be >= 1")
    packing.ATTENTION_HEAD_GROUPS = args.head_groups
    cuda = str(args.device).startswith("cuda")
    if args.act_budget is not None:
        import torch._functorch.config as fconfig

        fconfig.activation_memory_budget = args.act_budget
    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    if args.gc == "on" and not args.ac_inside:
        update.enable_gradient_checkpointing(model)
    model.train()
    batch = make_batch(model, args.rows, args.length, args.prompt, args.segment, args.group, seed=0)
    compiled = update.resolve_compile_layers(args.compile, args.device, LONG_RUN_STEPS)
    if compiled and args.ac_inside:
        compile_with_checkpoint_inside(model)
    elif compiled:
        update.compile_decoder_layers(model)
    cfg = RLConfig.from_flat(minibatches=args.minibatches, logprob_chunk_rows=args.chunk_rows,
                             prompts_per_step=args.rows // args.group, group_size=args.group, dtype=args.dtype,
                             gradient_checkpointing=args.gc == "on", lr=1e-6, micro_tokens=args.micro_tokens)
    opt = (update.adamw(model.parameters(), lr=cfg.update.lr) if args.optimizer == "default" else
           torch.optim.AdamW(model.parameters(), lr=cfg.update.lr, weight_decay=0.0))
    tokens = int(batch.attention_mask.sum())
    warm = update.minibatch_step(model, opt, batch, cfg)["update_s"]
    free(args.device)
    static = torch.cuda.memory_allocated() if cuda else 0
    r = update.minibatch_step(model, opt, batch, cfg)
    above = (r["peak_memory_bytes"] - static) / 2**30 if cuda else float("nan")
    lines = [f"# profile_update: model={model_name(args.config)}, dtype={args.dtype}, rows={args.rows}, "
             f"tokens={tokens}, policy tokens={int(batch.num_policy_tokens)}, minibatches={args.minibatches}, "
             f"micro_tokens={args.micro_tokens}, chunk_rows={args.chunk_rows}, checkpointing={args.gc}, "
             f"compiled={compiled}{' (checkpoint inside)' if args.ac_inside else ''}, act_budget={args.act_budget}, "
             f"attention_head_groups={args.head_groups}, optimizer={type(opt).__name__}"
             f"(fused={opt.defaults.get('fused')}), device={args.device}, torch={torch.__version__}",
             f"warm-up update {warm:.1f} s; timed update {r['update_s'] * 1e3:.0f} ms = {tokens / r['update_s']:,.0f} "
             f"tokens/s; peak above static {above:.2f} GiB (static {static / 2**30:.2f} GiB)"]

    run = (model, opt, batch, cfg)
    lines += phase_profile(run, args.device, static)
    if cuda:
        lines += kernel_profile(run, args.device)
        lines += memory_profile(run, args.device)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    write_out(f"profile_update{args.tag}.txt", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

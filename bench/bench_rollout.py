"""Benchmark: rollout decoding tokens/s, FastSampler vs plain batched HF `generate`, and the bandwidth bound.

Not a test. Qwen3-0.6B architecture (config.json only, random weights, bf16 by default), batches of
--batches episodes with ~--ctx-token left-padded contexts (lengths uniform in [7/8 ctx, ctx]), --steps
sampled tokens per row (no stop token, so every row decodes all steps). Both samplers run in this process,
one after the other, per batch size; tokens/s = batch * steps / wall seconds including prefill; the decode-only
column subtracts a 1-token (prefill) run of the same sampler. Bandwidth bound per decode step: all weight
bytes + the KV-cache bytes of every row's context so far, at --bw-tbs TB/s (4.3 = the copy bandwidth
measured on the H200). A configuration that runs out of memory prints OOM and the next one runs.
--decode-attention matmul sdpa gives one row per batch and FastSampler decode_attention (the sampler's fused
GQA attention against today's matmuls, in one run); the `attn` column says which.
--profile-steps N (after the table): the decode step of the first batch and the first --decode-attention under
torch.profiler with CUDA graphs off (kernels visible), written to $OUT/bench_rollout_profile.txt and the JSON's
"profile" key (profile_decode: device ms per decode step by kernel-name bucket and by code region, wall ms per
decode step with graphs off and on, the bandwidth bound's ms per step, the profiler's top-30 table).

    PYTHONPATH=src python bench/bench_rollout.py --device cuda [--config PATH] [--batches 64 128 256]
    PYTHONPATH=src python bench/bench_rollout.py --device cpu --tiny --batches 4 --ctx 64 --steps 8   # smoke
    PYTHONPATH=src python bench/bench_rollout.py --device cuda --batches 64 --skip-hf --no-check --steps 32 \
        --repeats 1 --profile-steps 16   # why a decode step takes what it takes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time
import traceback
import warnings

import torch
import torch.nn.functional as F
from _common import (
    Table,
    device_meta,
    free,
    is_oom,
    make_model,
    model_name,
    param_bytes,
    peak_gib,
    sync,
    target,
    target_text,
    timed,
    write_out,
)
from transformers import GenerationConfig

from agentrl.models.device import DEVICE_HELP, DTYPE_HELP, dtype_arg, resolve_device
from agentrl.rollout.decode_attention import default_form
from agentrl.rollout.fast_sampler import DECODE_ATTENTION, FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig

TRI = {"default": None, "on": True, "off": False}  # --compile-decode / --fuse-projections -> FastSampler's argument


def make_contexts(batch: int, ctx: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(ctx - ctx // 8, ctx))] for _ in range(batch)]


def hf_generate(model, contexts: list[list[int]], steps: int, pad_id: int) -> torch.Tensor:
    """Plain batched HF generate: left-padded, do_sample at temperature 1, top-k/top-p off, exactly `steps` tokens."""
    dev = next(model.parameters()).device
    width = max(map(len, contexts))
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(contexts):
        ids[i, width - len(c):] = torch.tensor(c)
        mask[i, width - len(c):] = 1
    cfg = GenerationConfig(do_sample=True, max_new_tokens=steps, min_new_tokens=steps, temperature=1.0, top_k=0,
                           top_p=1.0, eos_token_id=None, pad_token_id=pad_id, use_cache=True)
    saved, model.generation_config = model.generation_config, GenerationConfig()
    try:
        with torch.no_grad():
            return model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=cfg)
    finally:
        model.generation_config = saved


def kv_bytes_per_token(model) -> int:
    c = model.config
    elem = next(model.parameters()).element_size()
    return 2 * c.num_hidden_layers * c.num_key_value_heads * getattr(c, "head_dim", c.hidden_size // c.num_attention_heads) * elem


def bound_tokens_per_s(model, contexts, steps: int, bw_bytes_per_s: float) -> float:
    """Decode tokens/s if every step only read the weights and the live KV cache once at `bw` bytes/s."""
    kv = kv_bytes_per_token(model)
    ctx_total = sum(map(len, contexts))
    seconds = sum(param_bytes(model) + kv * (ctx_total + len(contexts) * t) for t in range(steps)) / bw_bytes_per_s
    return len(contexts) * steps / seconds


def greedy_agreement(a: list, b: list) -> tuple[bool, int, int]:
    """Two greedy (top_k=1) runs' Samples, row by row -> (tokens equal up to each row's first tie, tied steps,
    tokens compared). A tie: the top logit shared by several tokens, which top_k=1 keeps all of (HF's
    TopKLogitsWarper keeps every score >= the k-th), so the step samples uniformly among them (recorded
    log-prob log(1/m) < 0) and two runs may rightly differ there and after; a bf16 head makes ties common."""
    same, ties, compared = True, 0, 0
    for x, y in zip(a, b, strict=True):
        tied = [j for j, lp in enumerate(x.logprobs) if lp < 0] + [j for j, lp in enumerate(y.logprobs) if lp < 0]
        ties += len(set(tied))
        end = min(tied, default=max(len(x.ids), len(y.ids)))
        same &= tuple(x.ids[:end]) == tuple(y.ids[:end])
        compared += end
    return same, ties, compared


def check_logprobs(model, device: str, pad_id: int, decode_attention: str = "matmul") -> tuple[str, dict]:
    """Diagnostic on 8 rows x 24 tokens with CUDA graphs from the first step: ours vs a plain forward
    (mean/max |d logp|), and greedy (top_k=1) tokens with graphs vs without (identical up to each row's first
    tied top logit, see greedy_agreement; the bare comparison is also printed). Returns (the check line, its
    table row: check_mean_d / check_max_d / greedy_ok, batch 0)."""
    ctxs = make_contexts(8, 48, model.config.vocab_size, seed=7)
    kw = dict(stop_ids=(), pad_id=pad_id, check_every=5, min_graph_steps=1, decode_attention=decode_attention)
    samples = FastSampler(model, cfg=SamplingConfig(max_new_tokens=24), **kw)(ctxs)
    diffs = []
    for c, s in zip(ctxs, samples, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([c + list(s.ids)], device=device)).logits.float()[0, len(c) - 1: -1]
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.ids, device=device)[:, None])[:, 0]
        diffs.append((lp.cpu() - torch.tensor(s.logprobs)).abs())
    d = torch.cat(diffs)
    greedy = SamplingConfig(max_new_tokens=24, top_k=1)
    graphs = FastSampler(model, cfg=greedy, **kw)(ctxs, list(range(3, 27, 3)))
    eager = FastSampler(model, cfg=greedy, use_cuda_graphs=False, **kw)(ctxs, list(range(3, 27, 3)))
    same, ties, compared = greedy_agreement(graphs, eager)
    bare = [g.ids for g in graphs] == [e.ids for e in eager]
    row = {"batch": 0, "attn": decode_attention, "check": "logprob", "check_mean_d": float(d.mean()),
           "check_max_d": float(d.max()), "greedy_ok": "yes" if same else "NO"}
    return (f"check [{decode_attention}]: ours vs plain forward log-probs over {d.numel()} tokens: mean |d| "
            f"{d.mean():.2e}, max {d.max():.2e}; greedy tokens with graphs == without up to the first tie: {same} "
            f"({compared} tokens compared, {ties} tied steps; all tokens: {bare})"), row


def sdpa_backends(model, device: str, batch: int = 64, length: int = 1152) -> str:
    """Which SDPA backends accept the decode calls of decode_attention "sdpa" (q [b, kv, g, D], additive key
    mask) and "sdpa_gqa" (q [b, heads, 1, D], enable_gqa=True), each tried alone at the model's shapes and
    dtype (a backend that cannot take the call raises); the dispatcher picks among those that accept."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    c = model.config
    nh, nkv = c.num_attention_heads, c.num_key_value_heads
    d = getattr(c, "head_dim", c.hidden_size // nh)
    z = dict(device=device, dtype=next(model.parameters()).dtype)
    k, v = torch.randn(batch, nkv, length, d, **z), torch.randn(batch, nkv, length, d, **z)
    mask = torch.zeros(batch, 1, 1, length, **z)
    mask[:, :, :, : length // 8] = float("-inf")  # left padding
    calls = {"sdpa": lambda: F.scaled_dot_product_attention(torch.randn(batch, nkv, nh // nkv, d, **z), k, v,
                                                             attn_mask=mask),
             "sdpa_gqa": lambda: F.scaled_dot_product_attention(torch.randn(batch, nh, 1, d, **z), k, v,
                                                                 attn_mask=mask, enable_gqa=True)}
    out = []
    for name, call in calls.items():
        ok = []
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                   SDPBackend.MATH):
            try:
                with sdpa_kernel([be]), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call()
                ok.append(be.name)
            except RuntimeError:
                pass
        out.append(f"{name}: {', '.join(ok) or 'none'}")
    return f"SDPA backends accepting the decode call (batch {batch}, {length} keys): " + "; ".join(out)


def make_sampler(model, batch: int, steps: int, pad_id: int, keep_kv: bool = False,
                 decode_attention: str | None = None, use_cuda_graphs: bool | None = None,
                 compile_decode: bool | None = None, fuse_projections: bool | None = None) -> FastSampler:
    """The measured runs' FastSampler: no stop ids, `batch` slots, `steps` tokens per row unless a call gives
    budgets; CUDA graphs, decode attention, compile_decode and fuse_projections as FastSampler decides (None) unless
    the argument says."""
    return FastSampler(model, stop_ids=(), pad_id=pad_id, cfg=SamplingConfig(max_new_tokens=steps), max_batch=batch,
                       keep_kv=keep_kv, decode_attention=decode_attention, use_cuda_graphs=use_cuda_graphs,
                       compile_decode=compile_decode, fuse_projections=fuse_projections)


def run_ours(model, contexts, steps, pad_id, repeats: int, device: str, keep_kv: bool = False,
             decode_attention: str = "matmul", compile_decode: bool | None = None,
             fuse_projections: bool | None = None) -> tuple[float, float, float, int]:
    """(median wall s of `repeats` full runs after one warm-up run, wall s of a prefill-only run, wall s of the
    warm-up run (the cache's allocation, compile_decode's compile, the CUDA graphs' capture), bytes of static KV
    cache held outside PyTorch's allocator after the runs (release_kv's VMM buffers: `peak_gib` misses them)).

    keep_kv off by default: a kept row's KV is cloned out of the static cache when it finishes (the multi-turn
    reuse bench_reuse.py measures), a copy of every row's whole context per call that is not decoding."""
    fs = make_sampler(model, len(contexts), steps, pad_id, keep_kv, decode_attention, compile_decode=compile_decode,
                      fuse_projections=fuse_projections)
    budgets = [steps] * len(contexts)
    _, warm_s = timed(lambda: fs(contexts, budgets), device)  # allocates the cache, compiles, captures the graphs
    times = [timed(lambda: fs(contexts, budgets), device)[1] for _ in range(repeats)]
    _, prefill_s = timed(lambda: fs(contexts, [1] * len(contexts)), device)
    return statistics.median(times), prefill_s, warm_s, fs.kv_mapped_bytes()


def run_hf(model, contexts, steps, pad_id, device: str) -> tuple[float, float]:
    hf_generate(model, contexts[:8], 4, pad_id)  # warm-up (kernels, allocator)
    out, total = timed(lambda: hf_generate(model, contexts, steps, pad_id), device)
    assert out.shape[1] == max(map(len, contexts)) + steps, out.shape
    del out
    _, prefill_s = timed(lambda: hf_generate(model, contexts, 1, pad_id), device)
    return total, prefill_s


COLUMNS = [("batch", "d"), ("attn", ""), ("ctx", "d"), ("steps", "d"), ("hf_tok_s", ".0f"), ("ours_tok_s", ".0f"),
           ("ratio", ".2f"), ("hf_dec_tok_s", ".0f"), ("ours_dec_tok_s", ".0f"), ("dec_ratio", ".2f"),
           ("bound_tok_s", ".0f"), ("frac_bound", ".3f"), ("ours_peak_gib", ".1f"), ("hf_peak_gib", ".1f"),
           ("warm_s", ".1f"),
           ("check_mean_d", ".2e"), ("check_max_d", ".2e"), ("greedy_ok", "")]


def one_batch(model, args, batch: int, table: Table, attention: str = "matmul", hf: dict | None = None) -> dict:
    """One table row (returned): ours with `attention` at `batch`, and plain generate on the same contexts,
    or its figures taken from `hf` (the batch's earlier row) when given."""
    pad_id = 0
    ctxs = make_contexts(batch, args.ctx, model.config.vocab_size, seed=batch)
    n_tok = batch * args.steps
    row = {"batch": batch, "attn": attention, "ctx": args.ctx, "steps": args.steps}
    free(args.device)
    try:
        ours_s, ours_pre, warm_s, kv_outside = run_ours(model, ctxs, args.steps, pad_id, args.repeats, args.device,
                                                        args.keep_kv, attention, compile_decode=args.compile_decode,
                                                        fuse_projections=args.fuse_projections)
        row.update(ours_tok_s=n_tok / ours_s, ours_dec_tok_s=batch * (args.steps - 1) / max(ours_s - ours_pre, 1e-9),
                   ours_peak_gib=peak_gib(args.device) + kv_outside / 2**30, warm_s=warm_s)
    except Exception as e:  # noqa: BLE001 - one configuration failing must not end the table
        row["ours_tok_s"] = "OOM" if is_oom(e) else "ERR"
        traceback.print_exc()
    free(args.device)
    if hf is not None:
        row.update({k: v for k, v in hf.items() if k in ("hf_tok_s", "hf_dec_tok_s", "hf_peak_gib")})
    elif not args.skip_hf and (args.hf_batches is None or batch in args.hf_batches):
        try:
            hf_s, hf_pre = run_hf(model, ctxs, args.steps, pad_id, args.device)
            row.update(hf_tok_s=n_tok / hf_s, hf_dec_tok_s=batch * (args.steps - 1) / max(hf_s - hf_pre, 1e-9),
                       hf_peak_gib=peak_gib(args.device))
        except Exception as e:  # noqa: BLE001
            row["hf_tok_s"] = "OOM" if is_oom(e) else "ERR"
            traceback.print_exc()
        free(args.device)
    bound = bound_tokens_per_s(model, ctxs, args.steps - 1, args.bw_tbs * 1e12)
    row["bound_tok_s"] = bound
    if isinstance(row.get("ours_dec_tok_s"), float):
        row["frac_bound"] = row["ours_dec_tok_s"] / bound
    for a, b, k in (("ours_tok_s", "hf_tok_s", "ratio"), ("ours_dec_tok_s", "hf_dec_tok_s", "dec_ratio")):
        if isinstance(row.get(a), float) and isinstance(row.get(b), float):
            row[k] = row[a] / row[b]
    table.add(**row)
    return row


# The decode profile (--profile-steps). Kernel-name buckets, tried in this order on lower-cased names (the first
# that matches wins, else "elementwise/other"): the sampler's log-softmax over the vocabulary is sampling, not
# attention; attention is tried before GEMMs because fused attention kernels carry "cutlass" or "sm90" in their
# names (fmha_cutlassF_..., cuDNN's ..._sdpa_sm90_...; our Triton kernels are _decode_attention_split / _merge);
# "nvjet" and "gemv" are cuBLAS's Hopper GEMM and its matrix-vector kernels. On the CPU the names are aten ops
# (aten::mm, aten::_softmax, ...). The matmul decode attention's two matmuls are GEMMs by name: the code regions
# below count them as attention.
KERNEL_BUCKETS = (
    ("elementwise/other", ("logsoftmax", "log_softmax")),
    ("attention", ("attention", "flash", "fmha", "sdpa", "softmax")),
    ("gemm/matmul", ("gemm", "cutlass", "sm90", "cublas", "nvjet", "gemv", "matmul", "aten::mm", "aten::bmm",
                     "aten::addmm")),
)
BUCKETS = ("gemm/matmul", "attention", "elementwise/other")
STEP_LABEL = "decode.step"  # record_function range of one whole decode step
REGIONS = {  # record_function ranges inside a decode step (region_labels) -> what they hold
    "decode.proj_qkvo": "q/k/v/o projections, every layer",
    "decode.attention": "attention over the cache (decode_attention's call)",
    "decode.mlp": "MLP, every layer",
    "decode.lm_head": "LM head",
    "decode.sampling": "sampling (warpers, log-softmax, exponential race)",
    "decode.record": "recording the token (scatter into the outputs, stop test)",
}


def kernel_times(prof, cuda: bool, skip: frozenset[str] | set[str] = frozenset()) -> list[tuple[str, float]]:
    """(name, us) of every timed event of a finished torch.profiler run: on CUDA each kernel, memcpy and memset
    (not the GPU-side copies of record_function ranges, user annotations, nor names in `skip`); on the CPU each
    op's and range's self CPU time."""
    from torch.autograd import DeviceType

    events = [e for e in prof.events() if not e.is_async]
    if cuda:
        return [(e.name, e.time_range.elapsed_us()) for e in events if e.device_type == DeviceType.CUDA
                and not getattr(e, "is_user_annotation", False) and e.name not in skip]
    return [(e.name, e.self_cpu_time_total) for e in events if e.device_type == DeviceType.CPU]


def kernel_bucket(name: str) -> str:
    """The KERNEL_BUCKETS bucket of a kernel (or, on the CPU, aten op) name."""
    n = name.lower()
    return next((bucket for bucket, keys in KERNEL_BUCKETS if any(k in n for k in keys)), "elementwise/other")


@contextlib.contextmanager
def region_labels(fs: FastSampler):
    """While the block runs, record_function ranges (REGIONS' names) around the parts of `fs`'s decode step:
    forward hooks on every layer's q/k/v/o projections and MLP and on the LM head, and wrappers of the attention
    function its layer steps call (fs._layer_fns.attend, agentrl.rollout.decode_layer) and of fs._sample /
    fs._record. All undone on exit. Ranges only mark time; the computation is unchanged."""
    import dataclasses

    from torch.profiler import record_function

    def wrap(fn, label):
        def labelled(*a, **kw):
            with record_function(label):
                return fn(*a, **kw)
        return labelled

    open_ranges: list = []  # module calls nest, so the innermost range open is the one a module's end closes

    def hooks(module, label) -> list:
        def enter(_module, _args):
            rf = record_function(label)
            rf.__enter__()
            open_ranges.append(rf)

        def leave(_module, _args, _out):
            open_ranges.pop().__exit__(None, None, None)

        return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]

    handles = []
    for layer in fs.arch.layers:
        a = layer.self_attn
        for proj in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
            handles += hooks(proj, "decode.proj_qkvo")
        handles += hooks(layer.mlp, "decode.mlp")
    handles += hooks(fs.arch.head, "decode.lm_head")
    fns = fs._layer_fns
    fs._layer_fns = dataclasses.replace(fns, attend=wrap(fns.attend, "decode.attention"))
    fs._sample, fs._record = wrap(fs._sample, "decode.sampling"), wrap(fs._record, "decode.record")
    try:
        yield
    finally:
        fs._layer_fns = fns
        del fs._sample, fs._record  # the class's methods again
        for h in handles:
            h.remove()


def profile_decode(model, args, batch: int, attention: str, measured: dict | None = None) -> tuple[str, dict]:
    """The decode step of `batch` rows with decode_attention `attention`, profiled (--profile-steps N).

    The measured runs' sampler (make_sampler, the same contexts as the table's row) with CUDA graphs off, so
    each kernel is visible: one warm-up call, one timed call (wall ms per decode step: from the first decode
    step, after a sync, to the end of the call, host checks included), then a call under torch.profiler (CPU,
    and CUDA on a CUDA device) from its first decode step to its end, with region_labels on. Each call has
    budget N + 1 per row: the prefill samples the first token, then N decode steps. On CUDA "device time" is
    the summed duration of every kernel, memcpy and memset; on the CPU it is the self CPU time of every op and
    range. `measured`: the table's row for (batch, attention), whose decode-only tokens/s gives the wall ms per
    decode step of the measured run (CUDA graphs on a CUDA device).

    Returns (the text of bench_rollout_profile.txt, the figures for the JSON's "profile" key: times in ms per
    decode step, shares as fractions of the device time per decode step).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = str(args.device).startswith("cuda")
    n = args.profile_steps
    pad_id = 0
    ctxs = make_contexts(batch, args.ctx, model.config.vocab_size, seed=batch)
    budgets = [n + 1] * batch
    free(args.device)
    fs = make_sampler(model, batch, n + 1, pad_id, args.keep_kv, attention, use_cuda_graphs=False,
                      compile_decode=args.compile_decode, fuse_projections=args.fuse_projections)
    fs(ctxs, budgets)  # warm-up: allocates the cache, first kernels
    clock: dict = {"steps": 0, "first": None}
    decode_step = fs._decode_step

    def counted_step(b: int, span: int) -> None:
        if clock["steps"] == 0:
            clock["first"]()
        clock["steps"] += 1
        with record_function(STEP_LABEL):
            decode_step(b, span)

    fs._decode_step = counted_step
    starts: list[float] = []
    clock["first"] = lambda: (sync(args.device), starts.append(time.perf_counter()))
    fs(ctxs, budgets)
    sync(args.device)
    wall_steps = clock["steps"]
    wall_ms = (time.perf_counter() - starts[0]) * 1e3 / wall_steps
    graphs_ms = None
    if measured is not None and isinstance(measured.get("ours_dec_tok_s"), float) and measured["ours_dec_tok_s"] > 0:
        graphs_ms = batch / measured["ours_dec_tok_s"] * 1e3
    bound_ms = batch / bound_tokens_per_s(model, ctxs, wall_steps, args.bw_tbs * 1e12) * 1e3
    graphs = "on" if cuda else "off"
    lines = [profile_header(model, args, batch, attention, wall_steps),
             f"wall per decode step, CUDA graphs off (unprofiled call, {wall_steps} steps): {wall_ms:.3f} ms",
             f"wall per decode step, the measured run (CUDA graphs {graphs}, decode-only, {args.steps} steps): "
             + (f"{graphs_ms:.3f} ms" if graphs_ms else "not measured"),
             f"bandwidth bound per decode step (weights + live KV bytes at {args.bw_tbs} TB/s): {bound_ms:.3f} ms"]
    # kept if the run is stopped (its limit) in the profiled call or the profiler's post-processing
    write_out("bench_rollout_profile.txt", "\n".join(lines + ["profile: the profiled call has not finished"]) + "\n")

    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    started: list[bool] = []
    clock.update(steps=0, first=lambda: (sync(args.device), prof.start(), started.append(True)))
    try:
        with region_labels(fs):
            fs(ctxs, budgets)
        sync(args.device)
    finally:
        if started:
            prof.stop()
        del fs._decode_step
    steps = clock["steps"]
    if not steps:
        raise RuntimeError(f"profile: the profiled call ran no decode step (budget {n + 1} per row)")

    events = [e for e in prof.events() if not e.is_async]
    timed_events = kernel_times(prof, cuda, {STEP_LABEL, *REGIONS})
    total_us = sum(us for _, us in timed_events)
    per_step = 1e-3 / steps  # us in the window -> ms per decode step
    device_ms = total_us * per_step
    by_bucket = {b: [0.0, 0] for b in BUCKETS}
    by_name: dict[str, list] = {}
    for name, us in timed_events:
        for acc in (by_bucket[kernel_bucket(name)], by_name.setdefault(name, [0.0, 0])):
            acc[0] += us
            acc[1] += 1

    def range_ms(label: str) -> float:
        return per_step * sum(e.device_time_total if cuda else e.cpu_time_total for e in events
                              if e.name == label and e.device_type == DeviceType.CPU)

    step_ms = range_ms(STEP_LABEL)
    regions = {label: range_ms(label) for label in REGIONS}
    regions["rest of step"] = step_ms - sum(regions.values())
    regions["between steps"] = device_ms - step_ms
    share = (lambda ms: ms / device_ms) if device_ms > 0 else (lambda ms: float("nan"))
    source = ("CUDA kernel time (every kernel, memcpy and memset)" if cuda
              else "CPU time (self CPU time of every op and range; no device)")
    unit = "kernels" if cuda else "events"
    fig = {"batch": batch, "ctx": args.ctx, "decode_steps": steps, "dtype": args.dtype, "attention": attention,
           "device": str(args.device), "time_source": source, "device_ms_per_step": device_ms,
           f"{unit}_per_step": len(timed_events) / steps, "wall_ms_per_step_graphs_off": wall_ms,
           "wall_ms_per_step_measured": graphs_ms, "measured_graphs": graphs, "bound_ms_per_step": bound_ms,
           "device_busy_frac_graphs_off": device_ms / wall_ms if wall_ms > 0 else None,
           "buckets": {b: {"ms_per_step": us * per_step, "share": share(us * per_step), f"{unit}_per_step": c / steps}
                       for b, (us, c) in by_bucket.items()},
           "regions_ms_per_step": regions,
           "top": [{"name": name, "ms_per_step": us * per_step, "calls_per_step": c / steps}
                   for name, (us, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:10]]}
    lines[1:1] = [f"time source: {source}; profiler window: the first decode step to the end of the call",
                  f"total device time per decode step: {device_ms:.3f} ms ({len(timed_events) / steps:.0f} {unit} "
                  f"per step, {steps} steps): {device_ms / wall_ms:.1%} of the wall per step with graphs off"]
    lines.append(f"self device time per decode step by kernel name (bucket: ms per step, share, {unit} per step):")
    for b in BUCKETS:
        f = fig["buckets"][b]
        lines.append(f"  bucket {b:<18} {f['ms_per_step']:9.3f} ms  {f['share']:6.1%}  {f[f'{unit}_per_step']:7.1f}")
    lines.append("device time per decode step by code region (record_function ranges; ms per step, share):")
    for label, ms in regions.items():
        what = REGIONS.get(label, "norms, RoPE, KV writes, embedding, masks" if label == "rest of step"
                           else "host checks between steps, the final harvest")
        lines.append(f"  region {label:<18} {ms:9.3f} ms  {share(ms):6.1%}  {what}")
    sort_by = "cuda_time_total" if cuda else "cpu_time_total"
    lines.append(f"torch.profiler key_averages, sorted by {sort_by} (whole window, {steps} decode steps; "
                 f"{STEP_LABEL} and decode.* are the ranges above):")
    lines.append(prof.key_averages().table(sort_by=sort_by, row_limit=30))
    return "\n".join(lines) + "\n", fig


def profile_header(model, args, batch: int, attention: str, steps: int) -> str:
    """The first line of bench_rollout_profile.txt: what was profiled."""
    return (f"# bench_rollout_profile: model={model_name(args.config)}{' (tiny)' if args.tiny else ''}, "
            f"batch={batch}, ctx={args.ctx}, steps={steps}, dtype={args.dtype}, attention={attention}, "
            f"device={args.device}, cuda_graphs=off, layers={model.config.num_hidden_layers}")


TF32_ENV = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")  # turn TF32 GEMMs on behind torch's back

TARGETS = (  # issue 15 target 1: (batch, column, figure, op, threshold)
    (64, "frac_bound", "decode-only fraction of the bandwidth bound at batch 64", ">=", 0.5),
    (256, "frac_bound", "decode-only fraction of the bandwidth bound at batch 256", ">=", 0.7),
    (128, "ratio", "end-to-end tokens/s vs plain generate at batch 128", ">=", 12.0),
)


def targets(rows: list[dict], dtype: str = "bf16", default_attention: str = "matmul") -> list[dict]:
    """Issue 15 target 1's three ratios from the table's rows ('missing' for a batch not measured), once per
    decode attention in the rows (rows without `attn`, written before it existed, are "matmul"); figures of
    an attention other than `default_attention` (FastSampler's default on the measured device, the table's meta
    "default_attention"; "matmul" before 2026-12-04) say which. Then issue 26 item 4 from the check rows (batch 0): the
    sampler's log-probs vs a plain forward, mean |d| per token, <= 1e-4 when `dtype` is fp32, else reported."""
    out = []
    timed_rows = [r for r in rows if not r.get("check")]
    for att in dict.fromkeys(r.get("attn", "matmul") for r in timed_rows) or ["matmul"]:
        by_batch = {r["batch"]: r for r in timed_rows if r.get("attn", "matmul") == att}
        tag = "" if att == default_attention else f" (decode_attention={att})"
        out += [target("1", fig + tag, by_batch.get(b, {}).get(col), op, thr) for b, col, fig, op, thr in TARGETS]
    for r in rows:
        if r.get("check") == "logprob":
            op = "<=" if dtype == "fp32" else "info"
            out.append(target("4", f"sampler vs plain-forward log-prob mean |d| per token, {dtype}, "
                                   f"decode_attention={r['attn']} (max {r['check_max_d']:.2e}, greedy "
                                   f"graphs == eager up to ties: {r['greedy_ok']})", r["check_mean_d"], op, 1e-4))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name (default: "
                   "Qwen3-0.6B's, ../shared/assets/qwen3-0.6b-config)")
    p.add_argument("--dtype", default="bf16", type=dtype_arg, help=DTYPE_HELP)
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--ctx", type=int, default=1024, help="max context tokens per episode")
    p.add_argument("--steps", type=int, default=256, help="decode steps (sampled tokens per row)")
    p.add_argument("--repeats", type=int, default=2, help="timed runs of ours (median)")
    p.add_argument("--bw-tbs", dest="bw_tbs", type=float, default=4.3, help="memory bandwidth, TB/s")
    p.add_argument("--skip-hf", dest="skip_hf", action="store_true")
    p.add_argument("--keep-kv", dest="keep_kv", action="store_true",
                   help="FastSampler keep_kv on (clones each finished row's KV for a next turn; off: decoding only)")
    p.add_argument("--hf-batches", dest="hf_batches", type=int, nargs="+", default=None,
                   help="batches at which plain generate also runs (default: every batch; issue 15's ratio is at 128)")
    p.add_argument("--decode-attention", dest="decode_attention", nargs="+", choices=("default", *DECODE_ATTENTION),
                   default=["default"], help="FastSampler decode_attention values, one row each per batch "
                   "(plain generate runs once per batch, beside the first); default: FastSampler's default on the "
                   "device (decode_attention.default_form: triton on CUDA where it runs, else matmul)")
    p.add_argument("--compile-decode", dest="compile_decode", nargs="?", const="on", default="default",
                   choices=TRI, help="FastSampler compile_decode: each layer's step around its (eager) KV write and "
                   "attention through torch.compile, then captured (fuses the ~45 small kernels a layer; the "
                   "warm-up call compiles); default: FastSampler's (on for CUDA); bare: on")
    p.add_argument("--fuse-projections", dest="fuse_projections", default="default", choices=TRI,
                   help="FastSampler fuse_projections: q/k/v and gate/up one GEMM each; default: FastSampler's "
                   "(on for CUDA)")
    p.add_argument("--no-check", dest="no_check", action="store_true")
    p.add_argument("--check-only", dest="check_only", action="store_true",
                   help="only the log-prob check (one row per --decode-attention; e.g. with --dtype fp32)")
    p.add_argument("--profile-steps", dest="profile_steps", type=int, default=0,
                   help="after the table, profile about this many decode steps of the first batch and the first "
                   "--decode-attention with CUDA graphs off into $OUT/bench_rollout_profile.txt (0: off)")
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be >= 2")
    if args.profile_steps < 0:
        p.error("--profile-steps must be >= 0")
    default_att = default_form(args.device)
    cuda = str(args.device).startswith("cuda")
    args.compile_decode, args.fuse_projections = TRI[args.compile_decode], TRI[args.fuse_projections]
    args.decode_attention = list(dict.fromkeys(default_att if a == "default" else a for a in args.decode_attention))
    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    meta = device_meta(args.device) | {"model": model_name(args.config), "dtype": args.dtype, "params_GB": round(param_bytes(model) / 1e9, 3),
                                      "kv_bytes_per_token": kv_bytes_per_token(model), "bw_TBs": args.bw_tbs,
                                      "keep_kv": args.keep_kv,
                                      # the settings in force (None: FastSampler's default, on for CUDA)
                                      "compile_decode": cuda if args.compile_decode is None else args.compile_decode,
                                      "fuse_projections": cuda if args.fuse_projections is None
                                      else args.fuse_projections,
                                      "decode_attention": "/".join(args.decode_attention),
                                      "default_attention": default_att,
                                      # fp32 agreement needs full-fp32 GEMMs: what this process would use
                                      "fp32_matmul_precision": torch.get_float32_matmul_precision(),
                                      "tf32_env": ",".join(f"{k}={os.environ[k]}" for k in TF32_ENV
                                                           if k in os.environ) or "none"}
    table = Table("bench_rollout", COLUMNS, meta)
    if any(a != "matmul" for a in args.decode_attention):
        try:
            table.note(sdpa_backends(model, args.device))
        except Exception as e:  # noqa: BLE001 - a diagnostic
            table.note(f"SDPA backend probe failed: {type(e).__name__}: {e}")
    for att in args.decode_attention if not args.no_check else ():
        try:
            line, row = check_logprobs(model, args.device, 0, att)
            table.note(line)
            table.add(**row)
        except Exception as e:  # noqa: BLE001
            table.note(f"check [{att}] failed: {type(e).__name__}: {e}")
            traceback.print_exc()
    for batch in args.batches if not args.check_only else ():
        first = None
        for att in args.decode_attention:  # plain generate once per batch, its figures in every row of it
            row = one_batch(model, args, batch, table, att, hf=first)
            first = first or row
    for t in targets(table.rows, args.dtype, default_att):
        table.note(target_text(t))
    table.note("tok_s: batch*steps / wall s incl. prefill; dec_tok_s: decode only (minus a 1-token run); "
               "frac_bound: ours_dec_tok_s / (weights + live KV bytes per step at bw)")
    return run_profile(model, args, table) if args.profile_steps else 0


def run_profile(model, args, table: Table) -> int:
    """--profile-steps: profile_decode for the first batch and the first --decode-attention (beside the table's
    row for them, when measured), its text printed and written to $OUT/bench_rollout_profile.txt, its figures
    into the table's JSON under "profile". Returns the exit status: 1 when the profile failed (the file then
    says why)."""
    batch, att = args.batches[0], args.decode_attention[0]
    measured = next((r for r in table.rows if r.get("batch") == batch and r.get("attn") == att
                     and not r.get("check")), None)
    try:
        text, fig = profile_decode(model, args, batch, att, measured)
        status = 0
    except Exception as e:  # noqa: BLE001 - the table is written; the profile says why it is missing
        traceback.print_exc()
        why = f"{'OOM' if is_oom(e) else 'failed'}: {type(e).__name__}: {e}"
        text = f"{profile_header(model, args, batch, att, args.profile_steps)}\nprofile {why}\n"
        fig, status = {"batch": batch, "attention": att, "error": why}, 1
    print(text, end="", flush=True)
    write_out("bench_rollout_profile.txt", text)
    table.extra["profile"] = fig
    table.save()
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark (issue 15 target 4): FastSampler decoding rows that stop at ragged lengths vs a batch that stays full.

Not a test. Qwen3-0.6B architecture, random weights, bf16, no stop token. One batch of --batch contexts
(~--ctx random ids, lengths uniform in [7/8 ctx, ctx], as bench_rollout.py), runs of the same sampler:

- `continuous` (issue 26 item 2): --requests x --batch contexts with ragged budgets through a sampler of --batch
  slots (max_batch): a finished row's slot is prefilled with the next pending request within the call, so the
  batch stays full until the requests run out;
- `ragged`: per-row budgets uniform in [--min-new (default --max-new / 4), --max-new] (rows finish at ragged
  steps); finished rows
  are masked and the live rows compacted into smaller CUDA-graph buckets every `check_every` steps (the
  sampler's default behaviour);
- `no_compact`: the same budgets with compaction off (check_every larger than the budget: finished rows stay
  in the full bucket until the longest row ends);
- `full`: every row decodes L' = round(total ragged tokens / batch) tokens, the same total at the same batch:
  the batch stays full to the end, what continuous batching (new work taking finished rows' slots) would give.

steps = decode steps of the last timed call; occupancy = its decode tokens / the rows its steps ran (the buckets'
sizes summed): the schedule's share of the decode work, whatever the kernels cost; checks / admits = the call's host
syncs and admission prefills (FastSampler.stats host_checks / admissions: what a step costs beyond its kernels); tok_s = generated tokens / wall s
of the call (prefill included); dec_tok_s = the same minus a 1-token run
(prefill only); median of --repeats timed calls after one warm-up call (graph captures). The target figure is
ragged dec_tok_s / full dec_tok_s >= 0.9 ("compaction within 10% of a full batch").

--regions (issue 26 item 2: where a continuous call's time goes beside a full batch's): after the timed calls, one
more call of each row with the sampler's host checks and admissions bracketed by CUDA events (no syncs added;
on the CPU, perf_counter): decode_ms = (call - checks - the first admission) / steps, the device time of one decode
step with its launch gaps; check_s = the checks' time without their admissions (the done-flag and harvest syncs,
the host's bookkeeping); admit_s = the admissions' time (prefill of the admitted rows, sampling their first token);
pf_ms_ktok = admit_s per 1000 prefilled tokens, and pf1_ms_ktok the same in the 1-token call (whose prefill
dec_tok_s subtracts: admissions of whole batches, not of admit_rows rows).

    PYTHONPATH=src python bench/bench_ragged.py --device cuda [--config PATH] [--batch 128]
    PYTHONPATH=src python bench/bench_ragged.py --device cpu --tiny --batch 6 --ctx 40 --max-new 12   # smoke
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import traceback

from _common import (
    Table,
    device_meta,
    free,
    is_oom,
    make_model,
    model_name,
    peak_gib,
    target,
    target_text,
    timed,
)
from bench_rollout import make_contexts

from agentrl.models.device import DEVICE_HELP, DTYPE_HELP, dtype_arg, resolve_device
from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig


def ragged_budgets(batch: int, max_new: int, seed: int, min_new: int | None = None) -> list[int]:
    """`batch` budgets uniform in [min_new, max_new] (default min_new: max_new // 4; at least 1)."""
    rng = random.Random(seed)
    lo = max(max_new // 4 if min_new is None else min_new, 1)
    return [rng.randint(lo, max_new) for _ in range(batch)]


MODES = ("full", "continuous", "ragged", "ragged_fine", "no_compact")
FINE_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)  # x1.5 / x1.33 steps


class Regions:
    """Device time of named regions of a sampler call, from CUDA events recorded around them (no syncs until
    `seconds`; on the CPU, perf_counter). `wrap(obj, attr, key)` brackets every call of the bound method
    `obj.attr` (an instance attribute shadowing the class's, so only this object is timed)."""

    def __init__(self, device: str):
        import torch

        self.cuda = str(device).startswith("cuda")
        self.torch = torch
        self.spans: dict[str, list] = {}

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def wrap(self, obj, attr: str, key: str) -> None:
        orig = getattr(obj, attr)

        def timed_call(*a, **kw):
            start = self.mark()
            try:
                return orig(*a, **kw)
            finally:
                self.spans.setdefault(key, []).append((start, self.mark()))

        setattr(obj, attr, timed_call)

    def seconds(self) -> dict[str, list[float]]:
        """{key: each bracketed call's seconds, in call order}."""
        if self.cuda:
            self.torch.cuda.synchronize()
        sec = (lambda a, b: a.elapsed_time(b) / 1e3) if self.cuda else (lambda a, b: b - a)
        return {k: [sec(a, b) for a, b in v] for k, v in self.spans.items()}


def region_call(fs, contexts, budgets, device: str) -> dict:
    """One call of FastSampler `fs` with its whole call, host checks and admissions timed by Regions (see the
    module doc, --regions): {"call_s", "check": (n, s), "admit": (n, s), "first_admit_s", "steps",
    "prefill_tokens"}. The first admission is `_run`'s own, before its first check: the one outside every check."""
    reg = Regions(device)
    for attr in ("_run", "_check", "_admit"):
        reg.wrap(fs, attr, attr)
    try:
        fs(contexts, budgets)
        sec = reg.seconds()
    finally:
        for attr in ("_run", "_check", "_admit"):
            fs.__dict__.pop(attr, None)
    check, admit = sec.get("_check", []), sec.get("_admit", [])
    return {"call_s": sum(sec["_run"]), "check": (len(check), sum(check)), "admit": (len(admit), sum(admit)),
            "first_admit_s": admit[0] if admit else 0.0, "steps": fs.stats["decode_steps"],  # stats: of the last call
            "prefill_tokens": fs.stats["prefill_tokens"]}


def region_fields(timed_call: dict, one_token: dict) -> dict:
    """The --regions columns from region_call of a timed call and of the 1-token call (module doc)."""
    c = timed_call
    admit_s = c["admit"][1]
    check_s = c["check"][1] - (admit_s - c["first_admit_s"])  # checks without the admissions they ran
    decode_s = c["call_s"] - c["check"][1] - c["first_admit_s"]
    return {"decode_ms": 1e3 * decode_s / max(c["steps"], 1), "check_s": check_s, "admit_s": admit_s,
            "pf_ms_ktok": 1e6 * admit_s / max(c["prefill_tokens"], 1),
            "pf1_ms_ktok": 1e6 * one_token["admit"][1] / max(one_token["prefill_tokens"], 1)}


def run_mode(model, contexts, budgets, args, check_every: int, buckets: tuple[int, ...] | None = None,
             max_batch: int | None = None, admit_rows: int | None = None) -> dict:
    """Warm-up call, then --repeats timed calls and a 1-token call of one FastSampler (`max_batch` rows at a
    time, default all; `admit_rows` as FastSampler's, default its own): tokens and seconds."""
    fs = FastSampler(model, stop_ids=(), pad_id=0, cfg=SamplingConfig(max_new_tokens=max(budgets)),
                     max_batch=max_batch or len(contexts), keep_kv=args.keep_kv, share_prompts=False,
                     check_every=check_every, bucket_sizes=buckets, admit_rows=admit_rows)
    t0 = time.perf_counter()
    fs(contexts, budgets)  # warm-up: cache allocation, graph captures of every bucket this run reaches
    warm_s, captures, capture_s = time.perf_counter() - t0, fs.stats["graph_captures"], fs.stats["capture_ms"] / 1e3
    times, tokens = [], 0
    for _ in range(args.repeats):
        fs.clear_kv()
        out, s = timed(lambda: fs(contexts, budgets), args.device)
        times.append(s)
        tokens = sum(len(x.ids) for x in out)
    steps, row_steps = fs.stats["decode_steps"], fs.stats["decode_row_steps"]  # of the last timed call
    checks, admits = fs.stats["host_checks"], fs.stats["admissions"]
    fs.clear_kv()
    _, prefill_s = timed(lambda: fs(contexts, [1] * len(contexts)), args.device)
    wall = statistics.median(times)
    regions = {}
    if args.regions:
        fs.clear_kv()
        timed_regions = region_call(fs, contexts, budgets, args.device)
        fs.clear_kv()
        regions = region_fields(timed_regions, region_call(fs, contexts, [1] * len(contexts), args.device))
    return regions | {"tokens": tokens, "steps": steps, "occupancy": (tokens - len(contexts)) / max(row_steps, 1),
            "checks": checks, "admits": admits,
            "wall_s": wall, "prefill_s": prefill_s, "tok_s": tokens / wall,
            "dec_tok_s": (tokens - len(contexts)) / max(wall - prefill_s, 1e-9), "peak_gib": peak_gib(args.device),
            "warmup_s": warm_s, "captures": captures, "capture_s": capture_s}


def targets(rows: list[dict]) -> list[dict]:
    """Issue 15 target 4 (issue 26 item 2): ragged dec_tok_s / full dec_tok_s (rows of this table): continuous
    batching (when that row ran), the default compaction buckets, then the finer ones (FINE_BUCKETS) when that
    row ran."""
    by = {r["mode"]: r for r in rows}
    full = by.get("full", {})
    out = []
    for mode, how in (("continuous", "continuous batching"), ("ragged", "compaction"),
                      ("ragged_fine", "compaction into finer buckets")):
        rag = by.get(mode, {})
        if mode != "ragged" and not rag:
            continue
        ok = isinstance(rag.get("dec_tok_s"), float) and isinstance(full.get("dec_tok_s"), float)
        span = f"[{rag['min_new']}, {rag['max_new']}]" if rag else "[L/4, L]"
        fig = f"decode tokens/s, ragged budgets in {span} with {how} vs a full batch of the same tokens"
        if rag:
            fig += f" (batch {rag['batch']}" + (f", {rag['requests']} requests)" if rag.get("requests") else ")")
        out.append(target("4", fig, rag["dec_tok_s"] / full["dec_tok_s"] if ok else None, ">=", 0.9))
    return out


COLUMNS = [("mode", ""), ("batch", "d"), ("requests", "d"), ("admit_rows", "d"), ("tokens", "d"), ("steps", "d"), ("occupancy", ".3f"),
           ("checks", "d"), ("admits", "d"),
           ("min_new", "d"), ("max_new", "d"), ("wall_s", ".3f"),
           ("prefill_s", ".3f"), ("tok_s", ".0f"), ("dec_tok_s", ".0f"), ("vs_full", ".3f"), ("peak_gib", ".1f"),
           ("warmup_s", ".2f"), ("captures", "d"), ("capture_s", ".2f"),
           ("decode_ms", ".3f"), ("check_s", ".3f"), ("admit_s", ".3f"), ("pf_ms_ktok", ".3f"), ("pf1_ms_ktok", ".3f")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name "
                   "(default: Qwen3-0.6B's, ../shared/assets/qwen3-0.6b-config)")
    p.add_argument("--dtype", default="bf16", type=dtype_arg, help=DTYPE_HELP)
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--ctx", type=int, default=1024, help="max context tokens per row")
    p.add_argument("--max-new", dest="max_new", type=int, default=256, help="L: ragged budgets in [L/4, L]")
    p.add_argument("--min-new", dest="min_new", type=int, default=None, help="ragged budgets' low end (default L/4)")
    p.add_argument("--requests", type=int, default=4,
                   help="the continuous row: requests per call, as a multiple of --batch (the sampler's slots)")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per mode (median)")
    p.add_argument("--keep-kv", dest="keep_kv", action="store_true", help="keep finished rows' KV (off: decode only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES),
                   help="rows to run (full always runs first: every other row is a ratio to it)")
    p.add_argument("--admit-rows", dest="admit_rows", type=int, nargs="*", default=[],
                   help="extra continuous rows `continuous_kK`, FastSampler(admit_rows=K) (the continuous row: "
                        "its default, max(1, batch // 16))")
    p.add_argument("--regions", action="store_true",
                   help="one more call per row with host checks and admissions timed by CUDA events (module doc)")
    args = p.parse_args()
    if args.batch < 1 or args.max_new < 4 or args.repeats < 1 or any(k < 1 for k in args.admit_rows):
        p.error("need --batch >= 1, --max-new >= 4, --repeats >= 1, --admit-rows >= 1")
    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    contexts = make_contexts(args.batch, args.ctx, model.config.vocab_size, seed=args.seed)
    ragged = ragged_budgets(args.batch, args.max_new, args.seed, args.min_new)
    many = make_contexts(args.batch * args.requests, args.ctx, model.config.vocab_size, seed=args.seed + 1)
    many_budgets = ragged_budgets(len(many), args.max_new, args.seed + 1, args.min_new)
    full = [max(round(sum(ragged) / args.batch), 1)] * args.batch
    meta = device_meta(args.device) | {"model": model_name(args.config), "dtype": args.dtype, "ctx": args.ctx, "keep_kv": args.keep_kv}
    table = Table("bench_ragged", COLUMNS, meta)
    res: dict[str, dict] = {}
    # full first: every later row's vs_full is known when it is printed
    plan = {"full": (full, 16, None, None), "continuous": (many_budgets, 16, None, None),
            **{f"continuous_k{k}": (many_budgets, 16, None, k) for k in args.admit_rows},
            "ragged": (ragged, 16, None, None), "ragged_fine": (ragged, 16, FINE_BUCKETS, None),
            "no_compact": (ragged, 10**9, None, None)}
    wanted = {"full", *args.modes, *(f"continuous_k{k}" for k in args.admit_rows)}
    for mode, (budgets, check, buckets, admit) in plan.items():
        if mode not in wanted:
            continue
        ctxs = many if mode.startswith("continuous") else contexts
        row = {"mode": mode, "batch": args.batch, "requests": len(ctxs), "min_new": min(budgets),
               "max_new": max(budgets)}
        if mode.startswith("continuous"):
            row["admit_rows"] = admit or FastSampler.default_admit_rows(args.batch)
        free(args.device)
        try:
            res[mode] = r = run_mode(model, ctxs, budgets, args, check, buckets, max_batch=args.batch,
                                     admit_rows=admit)
            row.update(r)
            if "full" in res:
                row["vs_full"] = r["dec_tok_s"] / res["full"]["dec_tok_s"]
        except Exception as e:  # noqa: BLE001 - one mode failing must not end the table
            row["tok_s"] = "OOM" if is_oom(e) else "ERR"
            traceback.print_exc()
        table.add(**row)
    for t in targets(table.rows):
        table.note(target_text(t))
    table.note("tok_s: generated tokens / wall s incl. prefill; dec_tok_s: minus a 1-token (prefill) call; "
               "vs_full: dec_tok_s / full's; continuous: --requests x --batch requests through --batch slots "
               "(a finished row's slot takes the next request); ragged_fine: compaction buckets FINE_BUCKETS; no_compact: ragged budgets, "
               "finished rows kept in the full bucket")
    return 0


if __name__ == "__main__":
    sys.exit(main())

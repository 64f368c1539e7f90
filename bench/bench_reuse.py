"""Benchmark: FastSampler KV reuse: GRPO groups prefilled once, and an episode's KV kept across its turns.

Not a test (tests/rollout/test_fast_sampler_reuse.py pins the tokens and log-probs on CPU). Qwen3-0.6B
architecture, random weights, bf16, no stop token (every row decodes its whole budget).

- groups: --prompts prompts x --group samples (contexts of ~--ctx random ids); `shared` (share_prompts: one
  prefill per prompt, KV copied to the group's rows) vs `independent` (every row prefilled). prefill_s = a
  1-token call; tok_s = rows x --steps / wall s of a full call; greedy (top_k=1) tokens compared.
- turns: --episodes episodes of --turns turns; each turn samples --turn-tokens tokens, then appends a random
  tool response of 32..--obs-max ids (the driver's token-in/token-out context). `kept` (keep_kv: the next turn
  prefills only the appended ids) vs `reencode` (keep_kv off: every turn prefills the whole context).

    PYTHONPATH=src python bench/bench_reuse.py --device cuda [--config PATH]
    PYTHONPATH=src python bench/bench_reuse.py --device cpu --tiny --prompts 2 --group 3 --ctx 48 --steps 4 \
        --episodes 3 --turns 3 --turn-tokens 4 --obs-max 40
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback

import torch
from _common import Table, device_meta, free, is_oom, make_model, peak_gib, sync, target, target_text

from agentrl.models.device import DEVICE_HELP, DTYPE_HELP, dtype_arg, resolve_device
from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig


def _sampler(model, args, **kw) -> FastSampler:
    cfg = SamplingConfig(max_new_tokens=max(args.steps, args.turn_tokens), top_k=kw.pop("top_k", 0))
    return FastSampler(model, stop_ids=(), pad_id=0, cfg=cfg, max_batch=256, **kw)


def _call(fs, contexts, budgets, device) -> tuple[list, float]:
    sync(device)
    t0 = time.perf_counter()
    out = fs(contexts, budgets)
    sync(device)
    return out, time.perf_counter() - t0


def bench_groups(model, args, table: Table) -> None:
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prompts = [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(args.ctx - args.ctx // 8, args.ctx))]
               for _ in range(args.prompts)]
    rows = [p for p in prompts for _ in range(args.group)]
    res = {}
    for mode, kw in (("independent", {"share_prompts": False, "keep_kv": False}), ("shared", {"keep_kv": False})):
        fs = _sampler(model, args, **kw)
        _call(fs, rows, [args.steps] * len(rows), args.device)  # warm-up: graph captures
        _, pre_s = _call(fs, rows, [1] * len(rows), args.device)
        pre_tok = fs.stats["prefill_tokens"]
        torch.manual_seed(0)
        _, wall = _call(fs, rows, [args.steps] * len(rows), args.device)
        greedy = _sampler(model, args, top_k=1, **kw)(rows, [8] * len(rows))
        res[mode] = {"prefill_s": pre_s, "prefill_tokens": pre_tok, "tok_s": len(rows) * args.steps / wall,
                     "greedy": [s.ids for s in greedy], "peak_gib": peak_gib(args.device)}
        table.add(part="groups", mode=mode, rows=len(rows), group=args.group, prefill_tokens=pre_tok, prefill_s=pre_s,
                  tok_s=res[mode]["tok_s"], peak_gib=res[mode]["peak_gib"])
        del fs
        free(args.device)
    ind, sh = res["independent"], res["shared"]
    table.note(f"groups G={args.group}: prefill_s ratio shared/independent {sh['prefill_s'] / ind['prefill_s']:.3f}, "
               f"prefill tokens {sh['prefill_tokens']}/{ind['prefill_tokens']}, end-to-end tok_s ratio "
               f"{sh['tok_s'] / ind['tok_s']:.2f}; greedy tokens equal: {sh['greedy'] == ind['greedy']}")
    for t in targets(table.rows, "groups"):
        table.note(target_text(t))


def bench_turns(model, args, table: Table) -> None:
    """kept first (the target's figure: prefill tokens vs the tokens each turn appends), then reencode."""
    vocab = model.config.vocab_size
    res = {}
    for mode, keep in (("kept", True), ("reencode", False)):
        rng = random.Random(1)
        ctx = [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(args.ctx - args.ctx // 8, args.ctx))]
               for _ in range(args.episodes)]
        fs = _sampler(model, args, keep_kv=keep)
        _call(fs, ctx, [args.turn_tokens] * len(ctx), args.device)  # warm-up: graph captures
        fs.clear_kv()
        torch.manual_seed(0)
        wall = prefill = 0.0
        tokens = 0
        new = sum(map(len, ctx))  # tokens no earlier turn fed: the prompts, then each turn's last sample + response
        for turn in range(args.turns):
            samples, s = _call(fs, ctx, [args.turn_tokens] * len(ctx), args.device)
            wall += s
            prefill += fs.stats["prefill_tokens"]
            tokens += sum(len(x.ids) for x in samples)
            if turn == args.turns - 1:
                break
            obs = [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(32, args.obs_max))] for _ in ctx]
            new += sum(len(o) + 1 for o in obs)  # the sampled turn's last token was never fed
            ctx = [c + list(x.ids) + o for c, x, o in zip(ctx, samples, obs, strict=True)]
        res[mode] = {"wall": wall, "prefill": prefill, "new": new}
        table.add(part="turns", mode=mode, rows=len(ctx), turns=args.turns, prefill_tokens=int(prefill),
                  new_tokens=new, wall_s=wall,
                  tok_s=tokens / wall, peak_gib=peak_gib(args.device))
        if mode == "kept":
            for t in targets(table.rows, "turns"):
                table.note(target_text(t))
        del fs
        free(args.device)
    k, r = res["kept"], res["reencode"]
    table.note(f"turns ({args.turns} per episode): prefill tokens kept/reencode {k['prefill'] / r['prefill']:.3f}, "
               f"wall s ratio {k['wall'] / r['wall']:.3f}")


def targets(rows: list[dict], part: str | None = None) -> list[dict]:
    """Issue 15 targets 2 (groups: prefill tokens shared / independent <= 1/G, once per prompt) and 3 (turns:
    kept-KV prefill tokens / the tokens the turns appended <= 1, only the appended ids prefilled) from the
    table's rows; `part` limits to one of them."""
    by = {(r["part"], r["mode"]): r for r in rows}
    out = []
    if part in (None, "groups"):
        ind, sh = by.get(("groups", "independent"), {}), by.get(("groups", "shared"), {})
        g = sh.get("group", ind.get("group", 8))
        val = sh["prefill_tokens"] / ind["prefill_tokens"] if sh and ind and ind["prefill_tokens"] else None
        out.append(target("2", f"prefill tokens, G={g} groups shared / independent rows (once per prompt: 1/G)",
                          val, "<=", 1 / g))
    if part in (None, "turns"):
        k = by.get(("turns", "kept"), {})
        val = k["prefill_tokens"] / k["new_tokens"] if k.get("new_tokens") else None
        out.append(target("3", f"prefill tokens with kept KV / tokens the turns appended ({k.get('turns', '?')} turns; "
                          "only the appended ids: 1)", val, "<=", 1.0))
    return out


COLUMNS = [("part", ""), ("mode", ""), ("rows", "d"), ("prefill_tokens", "d"), ("new_tokens", "d"), ("prefill_s", ".3f"),
           ("wall_s", ".2f"), ("tok_s", ".0f"), ("peak_gib", ".1f")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None)
    p.add_argument("--dtype", default="bf16", type=dtype_arg, help=DTYPE_HELP)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--turn-tokens", dest="turn_tokens", type=int, default=128)
    p.add_argument("--obs-max", dest="obs_max", type=int, default=160)
    p.add_argument("--parts", nargs="+", default=["groups", "turns"], choices=["groups", "turns"])
    args = p.parse_args()
    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    table = Table("bench_reuse", COLUMNS, device_meta(args.device) | {"dtype": args.dtype})
    for part, fn in (("groups", bench_groups), ("turns", bench_turns)):
        if part in args.parts:
            try:
                fn(model, args, table)
            except Exception as e:  # noqa: BLE001 - one part failing must not end the table
                table.note(f"{part}: {'OOM' if is_oom(e) else 'ERR'} {type(e).__name__}: {str(e)[:200]}")
                traceback.print_exc()
            free(args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())

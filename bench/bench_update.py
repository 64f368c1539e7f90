"""Benchmark: GRPO update tokens/s and memory: packed (padding-free trunk, LM head at policy positions) vs
padded (same head, padded trunk) vs full logits.

Not a test. All methods run the same agentrl.rl.update.minibatch_step (same batch, same microbatching,
same loss, same optimizer) in this process: `packed` is the default (cfg.update.pack_rows), `padded` sets
pack_rows=False, `naive` swaps the log-prob function for one that materialises the full [micro, L, V]
logits (what the write-up's trainer did). Configurations: the write-up's 8 prompts x 8 samples = 64 rows of
~--length tokens (prompt, then alternating policy / tool segments), fp32 and bf16, gradient checkpointing
off / on. Each
configuration gets a fresh random-weight model and AdamW; one warm-up update, then --repeats timed updates
(median tokens/s, max peak). "Above static" = peak minus the memory allocated just before the timed update
(weights + AdamW state). OOM is reported per row. `--extra-rows default` adds RLConfig's default update as it
runs on the device (compiled layers on CUDA: compile_layers auto), the row of the "RLConfig's default" targets.

    PYTHONPATH=src python bench/bench_update.py --device cuda [--config PATH]
    PYTHONPATH=src python bench/bench_update.py --device cpu --tiny --rows 8 --length 96   # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback
from typing import NamedTuple

import torch
from _common import Table, device_meta, free, is_oom, make_model, model_name, target, target_text

import agentrl.rl.update as update
from agentrl.models.device import DEVICE_HELP, dtype_arg, resolve_device
from agentrl.rl import packing
from agentrl.rl.advantages import group_advantages
from agentrl.rl.batch import TrainBatch
from agentrl.rl.config import RLConfig
from agentrl.rl.logprobs import policy_logprobs


def naive_logprobs(model, input_ids, attention_mask, policy_mask, *, chunk_rows: int = 0, temperature: float = 1.0,
                   top_k: int = 0, top_p: float = 1.0, pack: bool | None = None, head_grad_into: bool = False):
    """Full-logit log-probs: model(...).logits [N, L, V] in fp32, log_softmax over all of it, then gather.

    Same outputs as agentrl.rl.logprobs.policy_logprobs ([N, L] logp and entropy, 0 off-policy); `chunk_rows`,
    `pack` and `head_grad_into` are accepted and ignored (always padded, the gradient through autograd). Entropy
    is taken at policy positions only (the [N, L, V] tensor is already built). top_k / top_p must be off (0 / 1.0: the bench's RLConfig defaults).
    """
    if top_k or top_p < 1.0:
        raise ValueError("naive_logprobs: top-k / top-p warping is not implemented in the full-logits baseline")
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float() / temperature  # [N, L, V]
    logp_all = torch.log_softmax(logits[:, :-1], dim=-1)  # [N, L-1, V]
    logp = logp_all.gather(2, input_ids[:, 1:, None]).squeeze(2)
    pm = policy_mask[:, 1:].bool()
    ent = torch.zeros_like(logp)
    sel = logp_all[pm]
    ent = ent.masked_scatter(pm, -(sel.exp() * sel).sum(-1))
    zero = torch.zeros_like(logp[:, :1])
    return torch.cat([zero, logp * pm], 1), torch.cat([zero, ent], 1)


def make_batch(model, rows: int, length: int, prompt: int, segment: int, group: int, seed: int) -> TrainBatch:
    """[rows, length] right-padded batch: lengths uniform in [3/4 length, length], `prompt` prompt tokens, then
    alternating `segment`-token policy and tool segments; GRPO advantages of random 0/1 rewards per group;
    old log-probs are the model's own (on-policy first epoch, ratio 1)."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(1000, vocab - 1000, (rows, length), generator=g)
    am = torch.zeros(rows, length, dtype=torch.long)
    pm = torch.zeros(rows, length, dtype=torch.long)
    for i in range(rows):
        n = int(torch.randint(3 * length // 4, length + 1, (1,), generator=g))
        am[i, :n] = 1
        for s in range(prompt, n, 2 * segment):
            pm[i, s: min(s + segment, n)] = 1
    ids = ids * am
    rewards = torch.randint(0, 2, (rows,), generator=g).float()
    rewards[::group] = 1.0 - rewards[1::group]  # every group mixed: no all-zero advantage groups
    adv, _ = group_advantages(rewards, group)
    dev = next(model.parameters()).device
    with torch.no_grad():
        old = torch.cat([policy_logprobs(model, ids[k:k + 4].to(dev), am[k:k + 4].to(dev), pm[k:k + 4].to(dev))[0].cpu()
                         for k in range(0, rows, 4)])
    return TrainBatch(ids, am, pm, old.float(), adv, rewards)


def run_config(args, dtype: str, gc: str, method: str, micro_tokens: int = 0, compiled: bool = False,
               offload: bool = False) -> dict:
    free(args.device)
    if compiled:  # as in a process of its own (the trainer's case): no dynamo cache entries or recompile counts
        torch._dynamo.reset()  # left by earlier rows' models (2026-12-04: rows after others ran 10-27% slower)
    model = make_model(args.config, dtype, args.device, tiny=args.tiny)
    if gc != "off":
        update.enable_gradient_checkpointing(model)
    model.train()
    batch = make_batch(model, args.rows, args.length, args.prompt, args.segment, args.group, seed=0)
    if compiled:  # compiled inside the update only (make_batch's scoring ran eager either way)
        update.compile_decoder_layers(model)
    cfg = RLConfig.from_flat(micro=args.micro, minibatches=args.minibatches, logprob_chunk_rows=args.chunk_rows,
                   prompts_per_step=args.rows // args.group, group_size=args.group, dtype=dtype,
                   gradient_checkpointing=gc != "off", lr=1e-6, pack_rows=method == "packed",
                   micro_tokens=micro_tokens, activation_offloading="on" if offload else "off")
    opt = update.adamw(model.parameters(), lr=cfg.update.lr)  # the trainer's (fused on CUDA)
    saved = update.policy_logprobs
    update.policy_logprobs = naive_logprobs if method == "naive" else policy_logprobs
    runs, static = [], []
    try:
        warm_s = update.minibatch_step(model, opt, batch, cfg)["update_s"]  # warm-up: optimizer state, kernels, compile
        for _ in range(args.repeats):
            free(args.device)
            static.append(torch.cuda.memory_allocated() if args.device.startswith("cuda") else 0)
            runs.append(update.minibatch_step(model, opt, batch, cfg))
    finally:
        update.policy_logprobs = saved
        del model, opt
    peak = max(r["peak_memory_bytes"] for r in runs)
    return {"tok_s": statistics.median(r["tokens_per_s"] for r in runs),
            "all_tok_s": statistics.median(float(batch.attention_mask.sum()) / r["update_s"] for r in runs),
            "peak_gib": peak / 2**30, "above_gib": (peak - max(static)) / 2**30,
            "policy_tokens": int(batch.num_policy_tokens), "tokens": int(batch.attention_mask.sum()),
            "loss": runs[-1]["loss"], "warm_s": warm_s}


def check_naive(args) -> str:
    """The two log-prob functions agree (fp32, 2 rows): max |d logp| and |d entropy| at policy positions."""
    model = make_model(args.config, "fp32", args.device, tiny=args.tiny)
    b = make_batch(model, 2, min(args.length, 256), min(args.prompt, 64), args.segment, 2, seed=1).to(args.device)
    with torch.no_grad():
        a = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
        n = naive_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
    d = [float((x - y).abs().max()) for x, y in zip(a, n, strict=True)]
    del model
    free(args.device)
    model = make_model(args.config, "bf16", args.device, tiny=args.tiny)
    with torch.no_grad():
        pk = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, pack=True)[0]
        pd = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, pack=False)[0]
    from agentrl.rl import packing

    varlen = packing._VARLEN.get("fn") is not None and not packing._VARLEN.get("broken")
    m = b.policy_mask.bool()
    del model
    free(args.device)
    return (f"check: packed vs naive on 2 rows (fp32): max |d logp| {d[0]:.2e}, max |d entropy| {d[1]:.2e}; "
            f"bf16 packed vs padded: mean |d logp| {float((pk - pd)[m].abs().mean()):.2e}, max "
            f"{float((pk - pd)[m].abs().max()):.2e}; varlen flash attention used: {varlen and args.device != 'cpu'}")


COLUMNS = [("dtype", ""), ("grad_ckpt", ""), ("micro_tok", "d"), ("compiled", ""), ("rows", "d"), ("tokens", "d"),
           ("policy_tok", "d"),
           ("packed_all_tok_s", ".0f"), ("padded_all_tok_s", ".0f"), ("naive_all_tok_s", ".0f"),
           ("speed_ratio", ".2f"), ("packed_peak_gib", ".2f"), ("naive_peak_gib", ".2f"),
           ("packed_above_gib", ".2f"), ("padded_above_gib", ".2f"), ("naive_above_gib", ".2f"), ("mem_ratio", ".3f"),
           ("warm_s", ".1f")]


def run_row(args, dtype: str, gc: str) -> dict:
    """One table row: every method of args.methods on (dtype, gc), and the packed/naive ratios."""
    row: dict = {"dtype": dtype, "grad_ckpt": gc, "rows": args.rows}
    res = {}
    for method in args.methods:
        try:
            res[method] = r = run_config(args, dtype, gc, method)
            row.update(tokens=r["tokens"], policy_tok=r["policy_tokens"])
            row[f"{method}_all_tok_s"], row[f"{method}_peak_gib"] = r["all_tok_s"], r["peak_gib"]
            row[f"{method}_above_gib"] = r["above_gib"]
        except Exception as e:  # noqa: BLE001 - one configuration failing must not end the table
            row[f"{method}_all_tok_s"] = "OOM" if is_oom(e) else "ERR"
            traceback.print_exc()
        free(args.device)
    if "packed" in res and "naive" in res:
        row["speed_ratio"] = res["packed"]["all_tok_s"] / res["naive"]["all_tok_s"]
        if res["naive"]["above_gib"] > 0:
            row["mem_ratio"] = res["packed"]["above_gib"] / res["naive"]["above_gib"]
    return row


# the run length the "default" row assumes when RLConfig's compile_layers is "auto": a long run, whose update is
# measured after the compile has paid for itself (agentrl.rl.update.COMPILE_PAYBACK_STEPS)
LONG_RUN_STEPS = 1000


def default_spec(device: str) -> str:
    """RLConfig's default update on `device` as an --extra-rows spec: bf16 (the GPU runs'), its checkpointing and
    token budget, `:compile` where its compile_layers resolves on there for a long run (the trainer's own
    agentrl.rl.update.resolve_compile_layers: on CUDA with "auto") and `:offload` where its activation_offloading
    does (agentrl.rl.offload.resolve_activation_offloading: on CUDA with checkpointing), e.g.
    bf16:on:16384:compile:offload."""
    cfg = RLConfig()
    u = cfg.update
    compiled = update.resolve_compile_layers(u.compile_layers, device, LONG_RUN_STEPS)
    offload = update.resolve_activation_offloading(u.activation_offloading, device, u.gradient_checkpointing)
    return (f"bf16:{'on' if u.gradient_checkpointing else 'off'}:{u.micro_tokens}" + (":compile" if compiled else "")
            + (":offload" if offload else ""))


class Extra(NamedTuple):
    """An --extra-rows spec read by parse_extra."""
    dtype: str
    gc: str
    micro_tokens: int
    compiled: bool
    head_groups: int
    offload: bool


def parse_extra(spec: str, device: str = "cpu") -> Extra:
    """DTYPE:GC:MICRO_TOKENS[:compile][:offload][:hgN], or "default" (default_spec(device)) -> Extra: `hgN` runs
    each layer's packed attention as N calls of a group of heads each (agentrl.rl.packing.ATTENTION_HEAD_GROUPS;
    default: the module's value), `offload` keeps the saved activations in host memory
    (RLConfig.update.activation_offloading on; rows without it run it off). Raises ValueError."""
    spec = default_spec(device) if spec == "default" else spec
    parts = spec.split(":")
    head, tail = parts[:3], parts[3:]
    groups = packing.ATTENTION_HEAD_GROUPS
    if tail and tail[-1][:2] == "hg" and tail[-1][2:].isdigit() and int(tail[-1][2:]) >= 1:
        groups = int(tail.pop()[2:])
    flags = [f for f in ("compile", "offload") if f in tail]
    if len(head) < 3 or head[1] not in ("off", "on") or not head[2].isdigit() or tail != flags:
        raise ValueError(f"--extra-rows {spec!r}: expected DTYPE:off|on:MICRO_TOKENS[:compile][:offload][:hgN] or "
                         "default, e.g. bf16:off:32768 or bf16:on:16384:compile:offload")
    return Extra(dtype_arg(head[0]), head[1], int(head[2]), "compile" in tail, groups, "offload" in tail)


def extra_row(args, spec: str, naive: dict) -> dict:
    """A packed-only row (`spec` as parse_extra: token-budget microbatches, RLConfig.micro_tokens, 0 = --micro
    rows; `compile`: agentrl.rl.update.compile_decoder_layers, warm_s then includes the compile; `default`:
    RLConfig's default update on this device); speed and memory ratios against the naive run of the same
    (dtype, gc) in `naive` when it ran. `extra` holds the spec spelled out, `rlconfig_default` whether it is
    RLConfig's default here."""
    default = default_spec(args.device)
    spec = default if spec == "default" else spec
    dtype, gc, budget, compiled, groups, offload = parse_extra(spec)
    saved_groups, packing.ATTENTION_HEAD_GROUPS = packing.ATTENTION_HEAD_GROUPS, groups
    row: dict = {"dtype": dtype, "grad_ckpt": gc, "micro_tok": budget, "compiled": "yes" if compiled else "",
                 "rows": args.rows, "extra": spec, "rlconfig_default": spec == default}
    try:
        r = run_config(args, dtype, gc, "packed", micro_tokens=budget, compiled=compiled, offload=offload)
        row.update(tokens=r["tokens"], policy_tok=r["policy_tokens"], packed_all_tok_s=r["all_tok_s"],
                   packed_peak_gib=r["peak_gib"], packed_above_gib=r["above_gib"], warm_s=r["warm_s"])
        if (dtype, gc) in naive:
            n = naive[(dtype, gc)]
            row.update(naive_all_tok_s=n["naive_all_tok_s"], speed_ratio=r["all_tok_s"] / n["naive_all_tok_s"])
            if n.get("naive_above_gib", 0) > 0:
                row["mem_ratio"] = r["above_gib"] / n["naive_above_gib"]
    except Exception as e:  # noqa: BLE001 - one configuration failing must not end the table
        row["packed_all_tok_s"] = "OOM" if is_oom(e) else "ERR"
        traceback.print_exc()
    finally:
        packing.ATTENTION_HEAD_GROUPS = saved_groups
    free(args.device)
    return row


def targets(rows: list[dict]) -> list[dict]:
    """Issue 15 target 5 from the table: speed (bf16, checkpointing off, --micro rows; RLConfig's default
    update, the extra row extra_row marks; and the fastest token-budget row) and memory above static (every
    dtype x checkpointing row)."""
    main = {(r["dtype"], r["grad_ckpt"]): r for r in rows if "extra" not in r and not r.get("micro_tok")}
    b = main.get(("bf16", "off"), {})
    old = "4-row microbatches, no checkpointing (the default before 2026-12-03)"
    out = [target("5", f"update tokens/s packed / full logits, bf16, {old}", b.get("speed_ratio"), ">=", 1.5),
           target("5", f"update tokens/s packed, bf16, {old}", b.get("packed_all_tok_s"), ">=", 70000)]
    # RLConfig's default update on the device that ran (extra_row marks it; tables before 2026-12-04: the eager
    # 16k-token row with checkpointing, RLConfig's default then)
    d = next((r for r in rows if r.get("rlconfig_default")), None) or next(
        (r for r in rows if "rlconfig_default" not in r and r.get("extra") == "bf16:on:16384"), {})
    tag = f"RLConfig's default ({d['extra'] if d else 'the row --extra-rows default adds'})"
    out += [target("5", f"update tokens/s packed / full logits, {tag}", d.get("speed_ratio"), ">=", 1.5),
            target("5", f"update tokens/s packed, {tag}", d.get("packed_all_tok_s"), ">=", 70000),
            target("5", f"update memory above static packed / full logits, {tag}", d.get("mem_ratio"), "<=", 0.3)]
    tok = [r for r in rows if "extra" in r and r["dtype"] == "bf16" and isinstance(r.get("packed_all_tok_s"), float)]
    if tok:
        best = max(tok, key=lambda r: r["packed_all_tok_s"])
        tag = f"fastest extra row: {best['extra']}"
        out += [target("5", f"update tokens/s packed / full logits, {tag}", best.get("speed_ratio"), ">=", 1.5),
                target("5", f"update tokens/s packed, {tag}", best["packed_all_tok_s"], ">=", 70000)]
        # the candidates for the default: of the extra rows at >= 70k tokens/s, the one with the least memory
        fast = [r for r in tok if r["packed_all_tok_s"] >= 70000 and isinstance(r.get("mem_ratio"), float)]
        if fast:
            lean = min(fast, key=lambda r: r["mem_ratio"])
            out.append(target("5", f"update memory above static packed / full logits, leanest extra row at >= 70k "
                                   f"tokens/s: {lean['extra']} ({lean['packed_all_tok_s']:,.0f} tokens/s)",
                              lean["mem_ratio"], "<=", 0.3))
    for dtype, gc in dict.fromkeys([("bf16", "off"), ("bf16", "on"), ("fp32", "off"), ("fp32", "on"), *main]):
        out.append(target("5", f"update memory above static packed / full logits, {dtype} ckpt {gc}",
                          main.get((dtype, gc), {}).get("mem_ratio"), "<=", 0.3))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name "
                   "(default: Qwen3-0.6B's, ../shared/assets/qwen3-0.6b-config)")
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--rows", type=int, default=64, help="episodes (8 prompts x 8 samples)")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--length", type=int, default=1024, help="max tokens per episode")
    p.add_argument("--prompt", type=int, default=384, help="prompt tokens per episode")
    p.add_argument("--segment", type=int, default=64, help="tokens per policy turn and per tool response")
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=2)
    p.add_argument("--chunk-rows", dest="chunk_rows", type=int, default=RLConfig().update.logprob_chunk_rows,
                   help="policy positions per LM-head chunk (default: RLConfig's)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], type=dtype_arg)
    p.add_argument("--gc", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument("--methods", nargs="+", default=["packed", "padded", "naive"], choices=["packed", "padded", "naive"])
    p.add_argument("--extra-rows", dest="extra_rows", nargs="*", default=[],
                   help="packed-only rows after the main ones, each DTYPE:GC:MICRO_TOKENS[:compile][:offload][:hgN]: "
                        "token-budget microbatches (RLConfig.micro_tokens; 0 = --micro rows), `compile` = decoder "
                        "layers compiled (agentrl.rl.update.compile_decoder_layers), `offload` = saved activations "
                        "in host memory (RLConfig.activation_offloading on; off in every other row), `hgN` = each "
                        "layer's packed attention in N head groups (agentrl.rl.packing.ATTENTION_HEAD_GROUPS), e.g. "
                        "bf16:off:32768 bf16:off:0:compile bf16:on:16384:compile:offload; "
                        "or `default`: RLConfig's default update on --device (bf16:on:16384:compile:offload on "
                        "CUDA: compile_layers and activation_offloading auto resolved for a long run)")
    args = p.parse_args()
    if args.rows % args.group or args.prompt >= 3 * args.length // 4:
        p.error("--rows must be a multiple of --group, and --prompt < 3/4 --length")
    for spec in args.extra_rows:
        try:
            parse_extra(spec, args.device)
        except (ValueError, argparse.ArgumentTypeError) as e:
            p.error(str(e))
    meta = device_meta(args.device) | {"model": model_name(args.config), "micro": args.micro, "minibatches": args.minibatches, "length": args.length}
    table = Table("bench_update", COLUMNS, meta)
    table.note(check_naive(args))
    naive = {}
    for dtype in args.dtypes:
        for gc in args.gc:
            row = run_row(args, dtype, gc)
            table.add(**row)
            if isinstance(row.get("naive_all_tok_s"), float):
                naive[(dtype, gc)] = row
    for spec in args.extra_rows:
        table.add(**extra_row(args, spec, naive))
    for t in targets(table.rows):
        table.note(target_text(t))
    table.note("all_tok_s: all real tokens (prompt + completion, what the trunk runs) / update wall s "
               "(minibatch_step); peak: CUDA max allocated (CPU: process peak RSS, cumulative); above: peak minus "
               "weights + AdamW state; speed_ratio = packed/naive tokens/s; mem_ratio = packed/naive above-static; "
               "targets (issue 15): speed_ratio >= 1.5 and packed bf16 >= 70k tokens/s; mem_ratio <= 0.3")
    return 0


if __name__ == "__main__":
    sys.exit(main())

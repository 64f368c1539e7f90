"""Benchmark: GRPO update tokens/s and peak memory, ours (LM head at policy positions, chunked) vs full logits.

Not a test. Both methods run the same agentrl.rl.update.minibatch_step (same batch, same microbatching,
same loss, same optimizer) in this process; the naive one swaps the log-prob function for one that
materialises the full [micro, L, V] logits (what the write-up's trainer did). Configurations: the write-up's
8 prompts x 8 samples = 64 rows of ~--length tokens (prompt, then alternating policy / tool segments),
fp32 and bf16, gradient checkpointing off and on. Each configuration gets a fresh random-weight model and
AdamW; one warm-up update, then --repeats timed updates (median tokens/s, max peak). OOM is reported per row.

    PYTHONPATH=src python bench/bench_update.py --device cuda [--config PATH]
    PYTHONPATH=src python bench/bench_update.py --device cpu --tiny --rows 8 --length 96   # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback

import torch
from _common import Table, device_meta, free, is_oom, make_model

import agentrl.rl.update as update
from agentrl.rl.advantages import group_advantages
from agentrl.rl.batch import TrainBatch
from agentrl.rl.config import RLConfig
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rollout.device import DEVICE_HELP, dtype_arg, resolve_device


def naive_logprobs(model, input_ids, attention_mask, policy_mask, *, chunk_rows: int = 0, temperature: float = 1.0):
    """Full-logit log-probs: model(...).logits [N, L, V] in fp32, log_softmax over all of it, then gather.

    Same outputs as agentrl.rl.logprobs.policy_logprobs ([N, L] logp and entropy, 0 off-policy); `chunk_rows`
    is accepted and ignored. Entropy is taken at policy positions only (the [N, L, V] tensor is already built).
    """
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


def run_config(args, dtype: str, gc: bool, method: str) -> dict:
    free(args.device)
    model = make_model(args.config, dtype, args.device, tiny=args.tiny)
    if gc:
        update.enable_gradient_checkpointing(model)
    model.train()
    batch = make_batch(model, args.rows, args.length, args.prompt, args.segment, args.group, seed=0)
    cfg = RLConfig(micro=args.micro, minibatches=args.minibatches, logprob_chunk_rows=args.chunk_rows,
                   prompts_per_step=args.rows // args.group, group_size=args.group, dtype=dtype,
                   gradient_checkpointing=gc, lr=1e-6)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    saved = update.policy_logprobs
    update.policy_logprobs = naive_logprobs if method == "naive" else policy_logprobs
    try:
        update.minibatch_step(model, opt, batch, cfg)  # warm-up: optimizer state, kernels
        runs = [update.minibatch_step(model, opt, batch, cfg) for _ in range(args.repeats)]
    finally:
        update.policy_logprobs = saved
        del model, opt
    return {"tok_s": statistics.median(r["tokens_per_s"] for r in runs),
            "all_tok_s": statistics.median(float(batch.attention_mask.sum()) / r["update_s"] for r in runs),
            "peak_gib": max(r["peak_memory_bytes"] for r in runs) / 2**30,
            "policy_tokens": int(batch.num_policy_tokens), "tokens": int(batch.attention_mask.sum()),
            "loss": runs[-1]["loss"]}


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
    return f"check: ours vs naive on 2 rows (fp32): max |d logp| {d[0]:.2e}, max |d entropy| {d[1]:.2e}"


COLUMNS = [("dtype", ""), ("grad_ckpt", ""), ("rows", "d"), ("tokens", "d"), ("policy_tok", "d"),
           ("ours_tok_s", ".0f"), ("naive_tok_s", ".0f"), ("speed_ratio", ".2f"), ("ours_peak_gib", ".2f"),
           ("naive_peak_gib", ".2f"), ("mem_ratio", ".3f")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="Qwen3 config.json or its folder (default: ../shared/assets/...)")
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--rows", type=int, default=64, help="episodes (8 prompts x 8 samples)")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--length", type=int, default=1024, help="max tokens per episode")
    p.add_argument("--prompt", type=int, default=384, help="prompt tokens per episode")
    p.add_argument("--segment", type=int, default=64, help="tokens per policy turn and per tool response")
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=2)
    p.add_argument("--chunk-rows", dest="chunk_rows", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], type=dtype_arg)
    p.add_argument("--gc", nargs="+", default=["off", "on"], choices=["off", "on"])
    args = p.parse_args()
    if args.rows % args.group or args.prompt >= 3 * args.length // 4:
        p.error("--rows must be a multiple of --group, and --prompt < 3/4 --length")
    meta = device_meta(args.device) | {"micro": args.micro, "minibatches": args.minibatches, "length": args.length}
    table = Table("bench_update", COLUMNS, meta)
    table.note(check_naive(args))
    for dtype in args.dtypes:
        for gc in args.gc:
            row = {"dtype": dtype, "grad_ckpt": gc, "rows": args.rows}
            res = {}
            for method in ("ours", "naive"):
                try:
                    res[method] = run_config(args, dtype, gc == "on", method)
                    row.update(tokens=res[method]["tokens"], policy_tok=res[method]["policy_tokens"])
                    row[f"{method}_tok_s"] = res[method]["tok_s"]
                    row[f"{method}_peak_gib"] = res[method]["peak_gib"]
                except Exception as e:  # noqa: BLE001 - one configuration failing must not end the table
                    row[f"{method}_tok_s"] = "OOM" if is_oom(e) else "ERR"
                    traceback.print_exc()
                free(args.device)
            if len(res) == 2:
                row["speed_ratio"] = res["ours"]["tok_s"] / res["naive"]["tok_s"]
                row["mem_ratio"] = res["ours"]["peak_gib"] / res["naive"]["peak_gib"]
            table.add(**row)
    table.note("tok_s: policy tokens / update wall s (minibatch_step); peak: CUDA max allocated (CPU: process "
               "peak RSS, cumulative); speed_ratio = ours/naive tokens/s; mem_ratio = ours/naive peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())

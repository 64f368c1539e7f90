"""`agentrl sft`: supervised warm start on expert trajectories (or a JSONL file), saved for `agentrl train --model`.

Not the RL trainer. Writes into --out: the model and tokenizer (save_pretrained), `sft_summary.json`
(config, loss curve, token counts, NLL before/after, wall clock) and `sft.log`.
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from agentrl.cli_checks import positive_int
from agentrl.sft.trainer import SFTConfig

log = logging.getLogger("agentrl.sft")


@dataclass(frozen=True)
class SFTRunConfig:
    """`agentrl sft` options besides the SFTConfig knobs (one CLI flag each).

    Attributes:
        env: environment whose scripted expert plays the episodes (agentrl.envs.ENV_NAMES).
        model / tokenizer: a preset ("tiny-qwen3", "small-qwen3"), a folder, or an HF id in the cache.
        n_tasks / families / split: bug-fix tasks to play (agentrl.tasks.make_tasks; names randomized).
        random_op: the expert follows the procedure but picks the edit op at random from the menu.
        max_turns: environment turn limit (None: its default).
        from_jsonl: train on this JSONL (token-level or chat-messages records) instead of expert episodes.
        save_jsonl: also write the training trajectories here.
        out: output folder; device: "auto" (cuda if available) or a torch device; dtype: float32 | bfloat16
            (bfloat16 = autocast with fp32 master weights); gradient_checkpointing: activation checkpointing.
    """

    env: str = "edit-menu"
    model: str = "tiny-qwen3"
    tokenizer: str | None = None
    n_tasks: int = 200
    families: str | None = None
    split: str = "train"
    random_op: bool = False
    max_turns: int | None = None
    from_jsonl: str | None = None
    save_jsonl: str | None = None
    out: str = "runs/sft"
    device: str = "auto"
    dtype: str = "float32"
    gradient_checkpointing: bool = False


def register(subparsers: Any) -> None:
    """Add `sft` to the agentrl command line."""
    p = subparsers.add_parser("sft", help="supervised warm start on expert trajectories (or a JSONL file)")
    d, s = SFTRunConfig(), SFTConfig()
    p.add_argument("--env", default=d.env, help="environment whose expert plays (default edit-menu)")
    p.add_argument("--model", default=d.model, help="tiny-qwen3 | small-qwen3 | local folder | HF id in the cache")
    p.add_argument("--tokenizer", default=d.tokenizer, help="tokenizer folder (default: the model's own)")
    p.add_argument("--n-tasks", type=positive_int, default=d.n_tasks, help="expert episodes (one per task)")
    p.add_argument("--families", default=d.families, help="comma-separated task families (default: all)")
    p.add_argument("--split", default=d.split, choices=("train", "heldout"))
    p.add_argument("--random-op", action="store_true", help="expert picks the edit op at random from the menu")
    p.add_argument("--max-turns", type=int, default=d.max_turns)
    p.add_argument("--from-jsonl", default=d.from_jsonl, help="train on this JSONL instead of expert episodes")
    p.add_argument("--save-jsonl", default=d.save_jsonl, help="also write the training trajectories here")
    p.add_argument("--out", default=d.out, help="output folder (model, tokenizer, sft_summary.json, sft.log)")
    p.add_argument("--device", default=d.device, help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default=d.dtype, choices=("float32", "fp32", "bfloat16", "bf16"))
    p.add_argument("--gradient-checkpointing", action="store_true")
    for f in fields(SFTConfig):
        if f.name in ("betas", "autocast_bf16"):
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(s, f.name)), default=getattr(s, f.name))
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """CLI entry: split `args` into SFTRunConfig + SFTConfig and run; exit code 0 on success."""
    run = SFTRunConfig(**{f.name: getattr(args, f.name) for f in fields(SFTRunConfig)})
    dtype = {"fp32": "float32", "bf16": "bfloat16"}.get(run.dtype, run.dtype)
    knobs = {f.name: getattr(args, f.name) for f in fields(SFTConfig) if hasattr(args, f.name)}
    cfg = SFTConfig(**knobs, autocast_bf16=dtype == "bfloat16")
    run_sft(SFTRunConfig(**{**asdict(run), "dtype": dtype}), cfg)
    return 0


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _trajectories(run: SFTRunConfig, cfg: SFTConfig, tok: Any) -> list:
    from agentrl.sft.data import expert_trajectories, load_trajectories

    if run.from_jsonl:
        return load_trajectories(run.from_jsonl, tok)
    from agentrl.sandbox import Sandbox
    from agentrl.tasks import make_tasks, randomize_names

    families = [f.strip() for f in run.families.split(",") if f.strip()] if run.families else None
    rng = random.Random(cfg.seed)
    tasks = [randomize_names(t, rng) for t in make_tasks(run.n_tasks, families, seed=cfg.seed, split=run.split)]
    return expert_trajectories(run.env, tasks, tok, random_op=run.random_op, seed=cfg.seed, sandbox=Sandbox(),
                               max_turns=run.max_turns)


def run_sft(run: SFTRunConfig, cfg: SFTConfig) -> dict[str, Any]:
    """Build or load the trajectories, fine-tune, save model + tokenizer + summary into `run.out`.

    Returns:
        The summary written to `<out>/sft_summary.json`.

    Raises:
        FileNotFoundError / ValueError: bad model path, JSONL file, environment, or SFT settings.
    """
    from agentrl.cli_checks import archive_previous, prepare_output_dir
    from agentrl.io.log import setup_logging
    from agentrl.io.results import atomic_write_json, to_json_ready, versions
    from agentrl.rl.update import enable_gradient_checkpointing
    from agentrl.rollout.models import load_policy
    from agentrl.sft.data import save_trajectories
    from agentrl.sft.trainer import policy_nll, save_policy, sft

    if not run.from_jsonl and run.n_tasks < 1:
        raise ValueError(f"--n-tasks must be >= 1 (expert episodes to train on), got {run.n_tasks}")
    if Path(run.model).is_dir() and Path(run.out).resolve() == Path(run.model).resolve():
        raise ValueError(f"--out {run.out!r} is the --model folder; pass another --out so the input model is kept")
    archived = archive_previous(run.out, "sft_summary.json")  # never overwrite an earlier SFT model
    out = prepare_output_dir(run.out, "--out")
    setup_logging(out / "sft.log")
    if archived:
        logging.getLogger("agentrl.sft").info("an earlier SFT output in %s was moved to %s", out, archived)
    t0 = time.perf_counter()
    device = _device(run.device)
    # fp32 master weights always; bfloat16 means autocast (SFTConfig.autocast_bf16).
    model, tok = load_policy(run.model, "float32", device, tokenizer_path=run.tokenizer, seed=cfg.seed)
    trajs = _trajectories(run, cfg, tok)
    if not trajs:
        raise ValueError(f"no trajectories to train on (from {run.from_jsonl or 'expert episodes'!r})")
    data_s = time.perf_counter() - t0
    if run.save_jsonl:
        save_trajectories(trajs, run.save_jsonl)
    rewards = [t.reward for t in trajs if t.reward is not None]
    log.info("%d trajectories in %.1f s (mean reward %.3f over %d scorable, %d policy tokens)", len(trajs), data_s,
             sum(rewards) / max(len(rewards), 1), len(rewards), sum(t.num_policy_tokens for t in trajs))
    if run.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    pad = tok.pad_token_id
    nll_before = policy_nll(model, trajs, pad, micro=cfg.micro, autocast_bf16=cfg.autocast_bf16)
    metrics = sft(model, trajs, cfg, pad_id=pad, on_step=lambda r: log.info(
        "step %d epoch %d loss %.4f grad_norm %.3f lr %.2e", r["step"], r["epoch"], r["loss"], r["grad_norm"], r["lr"]))
    nll_after = policy_nll(model, trajs, pad, micro=cfg.micro, autocast_bf16=cfg.autocast_bf16)
    log.info("policy NLL %.4f -> %.4f nats/token", nll_before, nll_after)
    save_policy(model, tok, out)
    summary = {
        "run": asdict(run), "sft": asdict(cfg), "device": device, "versions": versions(),
        "data": {"trajectories": len(trajs), "mean_reward": sum(rewards) / len(rewards),
                 "data_wall_clock_s": data_s},
        "nll_before": nll_before, "nll_after": nll_after, **metrics.to_dict(),
        "total_wall_clock_s": time.perf_counter() - t0,
    }
    atomic_write_json(out / "sft_summary.json", to_json_ready(summary))
    log.info("saved model, tokenizer and sft_summary.json to %s (%.1f s)", out, summary["total_wall_clock_s"])
    return summary

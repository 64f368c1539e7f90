"""Supervised fine-tuning on trajectories (warm start before RL): NLL on policy tokens only, AdamW, clipping.

Not the RL trainer (agentrl.rl.trainer) and not data building (agentrl.sft.data).
The loss is the token-mean negative log-likelihood over all policy tokens of an optimizer batch (one
normaliser per batch, as DESIGN.md rule 4; microbatching never changes the gradient); prompt and tool
tokens carry no loss. Log-probs come from agentrl.rl.logprobs.policy_logprobs (LM head only at policy
positions), batches from agentrl.rl.batch.collate.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from agentrl.rl.batch import collate
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.update import adamw
from agentrl.rollout.trajectory import Trajectory
from agentrl.sft.config import SFTConfig  # noqa: F401 - re-exported (it lived here)


def lr_factor(step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based): linear warmup, then cosine to min_lr_ratio."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps - 1)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _autocast(device: torch.device, enabled: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


def _nll_sum(model: nn.Module, trajs: Sequence[Trajectory], pad_id: int, device: torch.device,
             bf16: bool) -> tuple[torch.Tensor, int]:
    """(sum of -log p over policy tokens [scalar, differentiable], number of policy tokens) of `trajs`."""
    b = collate(trajs, pad_id).to(device)
    with _autocast(device, bf16):
        logp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
    return -(logp * b.policy_mask).sum(), b.num_policy_tokens


@torch.no_grad()
def policy_nll(model: nn.Module, trajectories: Sequence[Trajectory], pad_id: int, *, micro: int = 8,
               autocast_bf16: bool = False) -> float:
    """Token-mean NLL (nats per policy token) of `trajectories` under `model`; the SFT objective, no gradient.

    Raises:
        ValueError: no policy tokens (see also agentrl.rl.batch.collate).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(trajectories), micro):
        s, n = _nll_sum(model, trajectories[i: i + micro], pad_id, device, autocast_bf16)
        total, count = total + float(s), count + n
    model.train(was_training)
    if count == 0:
        raise ValueError("policy_nll: the trajectories have no policy tokens")
    return total / count


def _step(model, optimizer, batch: list[Trajectory], cfg: SFTConfig, pad_id: int, device) -> dict[str, float]:
    """One optimizer step over `batch`: token-mean NLL over all its policy tokens, microbatched."""
    n_tokens = sum(t.num_policy_tokens for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for i in range(0, len(batch), cfg.micro):
        s, _ = _nll_sum(model, batch[i: i + cfg.micro], pad_id, device, cfg.autocast_bf16)
        (s / n_tokens).backward()  # one normaliser for the whole batch: microbatching leaves the gradient as is
        loss_sum += float(s.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.max_grad_norm > 0:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    else:
        grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
    optimizer.step()
    return {"loss": loss_sum / n_tokens, "grad_norm": grad_norm, "policy_tokens": n_tokens,
            "tokens": sum(len(t.prompt_ids) + len(t.completion_ids) for t in batch)}


@dataclass
class SFTMetrics:
    """What `sft` measured (JSON-ready via `asdict`).

    Attributes:
        steps: one dict per optimizer step: step, epoch, loss (nats/policy token), grad_norm, lr,
            policy_tokens, tokens, wall_clock_s (since the start).
        dropped: trajectories over max_tokens or without policy tokens (not trained on).
        trained_trajectories / policy_tokens / tokens: per epoch (each epoch sees the same set).
        wall_clock_s: total seconds.
    """

    steps: list[dict[str, float]] = field(default_factory=list)
    dropped: int = 0
    trained_trajectories: int = 0
    policy_tokens: int = 0
    tokens: int = 0
    wall_clock_s: float = 0.0

    @property
    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"losses": self.losses}


def trainable(trajectories: Sequence[Trajectory], max_tokens: int) -> list[Trajectory]:
    """The trajectories `sft` trains on: those with a policy token whose prompt + completion fit `max_tokens`."""
    return [t for t in trajectories if t.num_policy_tokens > 0 and len(t.prompt_ids) + len(t.completion_ids)
            <= max_tokens]


def planned_steps(n_trajectories: int, cfg: SFTConfig) -> int:
    """Optimizer steps `sft` takes over `n_trajectories` trainable ones: ceil(n / batch) per epoch."""
    return math.ceil(n_trajectories / cfg.batch) * cfg.epochs


def sft(
    model: nn.Module,
    trajectories: Sequence[Trajectory],
    cfg: SFTConfig | None = None,
    *,
    pad_id: int,
    on_step: Callable[[dict[str, float]], None] | None = None,
    **knobs: Any,
) -> SFTMetrics:
    """Fine-tune `model` in place on the policy tokens of `trajectories` (mask 1 tokens only).

    Each epoch shuffles (random.Random(cfg.seed + epoch)) and walks the trajectories in batches of
    `cfg.batch`; each batch is one AdamW step on the token-mean NLL of its policy tokens.

    Args:
        model: HF causal LM (on its device; its parameters are updated; left in train mode).
        trajectories: token-level trajectories (agentrl.sft.data).
        pad_id: padding id for collate (masked out).
        cfg: the knobs (default SFTConfig()); `knobs` override single fields (e.g. epochs=2, lr=3e-4).
        on_step: called with each step's metrics (for logging).

    Returns:
        SFTMetrics with the per-step loss curve.

    Raises:
        ValueError: an unknown knob, or no trajectory fits `cfg.max_tokens` with at least one policy token.
    """
    from dataclasses import fields, replace

    unknown = set(knobs) - {f.name for f in fields(SFTConfig)}
    if unknown:
        raise ValueError(f"sft: unknown SFTConfig field(s) {sorted(unknown)}")
    cfg = replace(cfg or SFTConfig(), **knobs)
    t0 = time.perf_counter()
    keep = trainable(trajectories, cfg.max_tokens)
    metrics = SFTMetrics(dropped=len(trajectories) - len(keep), trained_trajectories=len(keep),
                         policy_tokens=sum(t.num_policy_tokens for t in keep),
                         tokens=sum(len(t.prompt_ids) + len(t.completion_ids) for t in keep))
    if not keep:
        raise ValueError(f"sft: none of the {len(trajectories)} trajectories has policy tokens within "
                         f"max_tokens={cfg.max_tokens}")
    device = next(model.parameters()).device
    model.train()
    optimizer = adamw([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, betas=tuple(cfg.betas),
                      weight_decay=cfg.weight_decay)
    per_epoch = math.ceil(len(keep) / cfg.batch)
    total = planned_steps(len(keep), cfg)
    step = 0
    for epoch in range(cfg.epochs):
        order = list(range(len(keep)))
        random.Random(cfg.seed + epoch).shuffle(order)
        for b in range(per_epoch):
            lr = cfg.lr * lr_factor(step, total, cfg.warmup_steps, cfg.min_lr_ratio)
            for g in optimizer.param_groups:
                g["lr"] = lr
            batch = [keep[i] for i in order[b * cfg.batch: (b + 1) * cfg.batch]]
            rec = {"step": step, "epoch": epoch, "lr": lr} | _step(model, optimizer, batch, cfg, pad_id, device)
            rec["wall_clock_s"] = time.perf_counter() - t0
            metrics.steps.append(rec)
            if on_step is not None:
                on_step(rec)
            step += 1
    metrics.wall_clock_s = time.perf_counter() - t0
    return metrics


def save_policy(model: nn.Module, tokenizer: Any, out_dir: Any, *, merged: bool = False) -> None:
    """`save_pretrained` of model (safetensors) and tokenizer (incl. chat template) into `out_dir`, so that
    agentrl.models.load.load_policy(out_dir) and `agentrl train --model out_dir` load it.

    A LoRA model saves its adapters (agentrl.models.lora.save_adapter; loading merges them into the base);
    with `merged=True` also `<out_dir>/merged`, a plain model with the adapters merged in.
    """
    from pathlib import Path

    from agentrl.models.lora import is_lora, merged_copy, save_adapter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_lora(model):
        save_adapter(model, out)
        if merged:
            merged_copy(model).save_pretrained(out / "merged")
            tokenizer.save_pretrained(out / "merged")
    else:
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    from agentrl.report.results import ordinary_modes

    for folder in (out, out / "merged"):  # save_pretrained's model.safetensors is 0600 otherwise
        if folder.is_dir():
            ordinary_modes(folder)

"""Training state: the policy as the optimizer sees it (gradient checkpointing, compiled layers, LoRA), the
optimizer, the KL reference, and what --resume restores. Not the run folder or the update maths.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.models.lora import AdapterOffReference, apply_lora
from agentrl.rl.checkpoint import latest_checkpoint, load_checkpoint, remove_partial_checkpoints
from agentrl.rl.config import RLConfig
from agentrl.rl.update import (
    COMPILE_PAYBACK_STEPS,
    adamw,
    checkpoint_if_configured,
    compile_decoder_layers,
    resolve_compile_layers,
)

log = logging.getLogger("agentrl.train")


def with_lora(cfg: RLConfig, model: Any) -> Any:
    """`model` wrapped in LoRA adapters when cfg.update.lora_r > 0 (agentrl.models.lora), else unchanged."""
    if not cfg.update.lora_r:
        return model
    base = Path(cfg.policy.model).expanduser()
    return apply_lora(model, r=cfg.update.lora_r, alpha=cfg.update.lora_alpha, dropout=cfg.update.lora_dropout,
                      target_modules=cfg.update.lora_target_modules, seed=cfg.run.seed,
                      base=str(base.resolve()) if base.exists() else cfg.policy.model)


def compile_for_update(cfg: RLConfig, model: Any) -> int:
    """Compile `model`'s decoder layers for the update (agentrl.rl.update.compile_decoder_layers: compiled inside
    the update only) when cfg.update.compile_layers resolves on for this run (resolve_compile_layers: its device
    and cfg.run.steps), and log the choice once for a training run. Returns the number of layers compiled (0:
    eager). Raises: ValueError as decoder_layers, for a model without decoder layers with "on" ("auto" then
    trains eager)."""
    if cfg.run.steps <= 0:
        return 0
    setting, device = cfg.update.compile_layers, next(model.parameters()).device
    why = f"compile_layers {setting}" + (f": {device.type}, {cfg.run.steps} steps" if setting == "auto" else "")
    if not resolve_compile_layers(setting, device, cfg.run.steps):
        hint = f"; auto compiles on CUDA from {COMPILE_PAYBACK_STEPS} steps" if setting == "auto" else ""
        log.info("decoder layers run eager in the update (%s%s)", why, hint)
        return 0
    try:
        n = compile_decoder_layers(model)
    except ValueError as e:  # a model without HF decoder layers: "on" asked for them, "auto" trains eager
        if setting == "on":
            raise
        log.info("decoder layers run eager in the update (%s: %s)", why, e)
        return 0
    log.info("compiled %d decoder layers for the update (%s)", n, why)
    return n


@dataclass
class TrainingState:
    """What the optimizer works on: the policy (LoRA-wrapped when asked), its AdamW optimizer (None for an
    evaluation of a frozen model), the KL reference (None without --kl-coef), and the completed steps a
    --resume continues after."""

    model: Any
    optimizer: torch.optim.Optimizer | None
    ref_model: Any = None
    start_step: int = 0


def build_training_state(cfg: RLConfig, out: Path, model: Any) -> TrainingState:
    """The training state of `model` (loaded by agentrl.rl.run_setup.load_inputs): gradient checkpointing
    and compiled decoder layers (compile_for_update) when asked, LoRA adapters, the optimizer over the trainable
    parameters, the reference, and on --resume the latest checkpoint in `<out>/checkpoints` loaded into model and
    optimizer (partial checkpoints left by a kill removed first).

    Raises:
        ValueError: a model with no trainable parameters for a training run; --resume without a checkpoint.
    """
    checkpoint_if_configured(cfg, model)
    compile_for_update(cfg, model)
    model = with_lora(cfg, model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable and cfg.run.steps > 0:
        raise ValueError(f"--model {cfg.policy.model}: no trainable parameters (a frozen model cannot be trained)")
    # an evaluation (steps 0) of a frozen model, e.g. a merged LoRA checkpoint, needs no optimizer
    opt = adamw(trainable, lr=cfg.update.lr, weight_decay=cfg.update.weight_decay) if trainable else None
    ref = None
    # LoRA: the policy with its adapters off is the reference (no second copy; its compiled layers run compiled in
    # the update, as the policy's); a full copy runs eager (nn.Module.__getstate__ leaves out the compiled dispatch)
    if cfg.update.kl_coef > 0:
        ref = AdapterOffReference(model) if cfg.update.lora_r else copy.deepcopy(model).eval().requires_grad_(False)
    start = 0
    ckpt = latest_checkpoint(out / "checkpoints") if cfg.run.resume else None
    if cfg.run.resume and ckpt is None:  # checked in plan_run; a checkpoint folder removed since is an error too
        raise ValueError(f"--resume: no checkpoint in {out / 'checkpoints'}")
    if ckpt is not None:
        removed = remove_partial_checkpoints(out / "checkpoints")  # left by a kill mid-write
        start = int(load_checkpoint(ckpt, model, opt)["step"])
        log.info("resumed from %s at step %d%s", ckpt, start,
                 f" (removed {len(removed)} partial checkpoint(s))" if removed else "")
    return TrainingState(model, opt, ref, start)

"""SFTConfig: the knobs of one supervised warm start. Standard library only, so `agentrl --help` needs no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrl.preflight import check_seed


@dataclass(frozen=True)
class SFTConfig:
    """SFT knobs.

    Attributes:
        epochs: passes over the trajectories.
        lr: AdamW peak learning rate; linear warmup over `warmup_steps`, then cosine decay to
            `min_lr_ratio * lr` at the last step (the usual LM fine-tuning schedule).
        batch: trajectories per optimizer step (the last batch of an epoch may be smaller).
        micro: trajectories per forward/backward (bounds memory; does not change the gradient).
        max_tokens: trajectories with more prompt + completion tokens are dropped (counted in the metrics).
        max_grad_norm: global gradient-norm clip (torch.nn.utils.clip_grad_norm_); <= 0 disables.
        weight_decay, betas: AdamW (decoupled weight decay, Loshchilov & Hutter 2019).
        autocast_bf16: run forward/backward under torch.autocast(bfloat16) with fp32 master weights.
        seed: shuffling order.
    """

    epochs: int = 2
    lr: float = 1e-4
    batch: int = 16
    micro: int = 4
    max_tokens: int = 4096
    warmup_steps: int = 10
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    autocast_bf16: bool = False
    seed: int = 0

    def __post_init__(self):
        if self.epochs < 1 or self.batch < 1 or self.micro < 1 or self.max_tokens < 2:
            raise ValueError(f"bad SFTConfig: epochs, batch, micro must be >= 1 and max_tokens >= 2 ({self})")
        if not self.lr > 0 or self.warmup_steps < 0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"bad SFTConfig: need lr > 0, warmup_steps >= 0, 0 <= min_lr_ratio <= 1 ({self})")
        # a NaN or infinite float reached AdamW and the saved model was NaN, the run "succeeding" (exit 0)
        floats = {"lr": self.lr, "max_grad_norm": self.max_grad_norm, "weight_decay": self.weight_decay,
                  "betas[0]": self.betas[0], "betas[1]": self.betas[1]}
        bad = next((k for k, v in floats.items() if not math.isfinite(v)), None)
        if bad is not None:
            raise ValueError(f"bad SFTConfig: {bad} must be a finite number, got {floats[bad]}")
        if self.weight_decay < 0 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"bad SFTConfig: need weight_decay >= 0 and betas in [0, 1) ({self})")
        check_seed(self.seed, "SFTConfig.seed")

"""The registry of advantage estimators: name, formula, source, minimum group size. RLConfig validation,
the CLI's `--adv_mode` choices and help, and agentrl.rl.advantages.group_advantages all read it.
Not the grouping of episodes and not the loss. Importing it does not import torch (each formula only
calls methods of the tensors it is given).

Each `formula(groups, mean, eps)` maps float64 rewards [B, G] (row = one group) and their row means
[B, 1] to advantages [B, G].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.registry import Registry


@dataclass(frozen=True)
class AdvantageEstimator:
    """One estimator. `baselined`: it subtracts a group baseline, so a group whose rewards are all equal
    gets advantages of exactly 0; `min_group_size`: the smallest G it is defined for."""

    name: str
    help: str
    formula: Callable[[Any, Any, float], Any]
    min_group_size: int = 2
    baselined: bool = True


def _grpo(groups: Any, mean: Any, eps: float) -> Any:
    # sample std (Bessel, G-1) as TRL's GRPOTrainer: rewards.view(-1, G).std(dim=1)
    return (groups - mean) / (groups.std(dim=1, keepdim=True) + eps)


def _dr_grpo(groups: Any, mean: Any, eps: float) -> Any:
    return groups - mean


def _rloo(groups: Any, mean: Any, eps: float) -> Any:
    g = groups.shape[1]
    return (groups - mean) * (g / (g - 1))  # r_i - mean_{j != i} r_j


def _none(groups: Any, mean: Any, eps: float) -> Any:
    return groups.clone()


ADV_ESTIMATORS: Registry[AdvantageEstimator] = Registry("an advantage estimator", (
    AdvantageEstimator("grpo", "(r - mean_g) / (std_g + eps), std with Bessel's correction as TRL's GRPOTrainer "
                       "(DeepSeekMath, Shao et al. 2024, Sec. 4.1.2)", _grpo),
    AdvantageEstimator("dr_grpo", "r - mean_g, no std scaling (Dr. GRPO, Liu et al. 2025)", _dr_grpo),
    AdvantageEstimator("rloo", "r_i - mean of the other G-1 rewards (RLOO, Ahmadian et al. 2024)", _rloo),
    AdvantageEstimator("none", "the raw reward (REINFORCE without a baseline)", _none, min_group_size=1,
                       baselined=False),
))


def adv_mode_help() -> str:
    """The --adv_mode help text, one entry per registered estimator."""
    return ADV_ESTIMATORS.help("Advantage estimator", lambda e: f"{e.name}: {e.help}")


def get_estimator(name: str, *, flag: str = "adv_mode") -> AdvantageEstimator:
    """The registered estimator `name`; ValueError naming `flag` and the registered names."""
    return ADV_ESTIMATORS.lookup(name, flag=flag)

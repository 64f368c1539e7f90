"""LoRA adapters through peft: wrap a policy, save and load adapter folders, the adapter-off KL reference.

Not the trainer. With `--lora-r R` (> 0) only the adapters train (peft freezes every base weight); a
checkpoint or SFT output saves the adapters (`adapter_config.json`, `adapter_model.safetensors`) plus
`agentrl_lora.json` naming the base model, so `load_policy` / `agentrl eval --model DIR` rebuilds the
base and merges the adapters in; `--lora-merge` also writes a merged plain model. The KL reference of a
LoRA policy is the same module with its adapters switched off (peft's `disable_adapter()`), so no second
copy of the base is held in memory.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INFO_FILE = "agentrl_lora.json"
ADAPTER_CONFIG = "adapter_config.json"


def parse_target_modules(spec: str) -> str | list[str]:
    """`--lora-target-modules` -> peft's target_modules: "all-linear" (every linear layer but the LM head)
    or a list of module-name suffixes ("q_proj,v_proj").

    Raises:
        ValueError: empty list.
    """
    spec = spec.strip()
    if spec == "all-linear":
        return spec
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError("--lora-target-modules: expected 'all-linear' or comma-separated module names")
    return names


def apply_lora(model: Any, *, r: int, alpha: float, dropout: float, target_modules: str,
               base: str = "", seed: int = 0) -> Any:
    """Wrap `model` in a peft LoRA model (rank r, scale alpha / r, dropout on the adapter input).

    Args:
        model: an HF causal LM; its weights are frozen by peft.
        base: how to rebuild the base (a `--model` value), recorded in saved adapter folders.
        seed: the base's weight seed (presets with random weights).

    Returns:
        the PeftModel (trainable parameters: the A and B matrices only; B starts at zero, so the wrapped
        model computes exactly what `model` did).

    Raises:
        ValueError: bad r / alpha / dropout, no module matches target_modules (naming --lora-target-modules and the
            model's linear layers), or r above the rank of every targeted layer (naming --lora-r and the most a
            targeted layer takes), before any adapter is made.
    """
    from peft import LoraConfig, get_peft_model

    if r < 1 or not 0 < alpha < math.inf or not 0.0 <= dropout < 1.0:  # NaN alpha: a NaN model, silently
        raise ValueError(f"LoRA needs r >= 1, alpha > 0 and 0 <= dropout < 1, got r={r}, alpha={alpha}, dropout={dropout}")
    targets = parse_target_modules(target_modules)
    linears = _targeted_linears(model, targets)
    if linears and r > max(linears.values()):  # a rank past min(in, out) adds nothing, and allocates r x (in + out)
        raise ValueError(f"--lora-r {r}: above the rank of every targeted layer (at most {max(linears.values())}, "
                         f"min(in, out) of {max(linears, key=linears.get)}); pass a smaller --lora-r")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM",
                     bias="none")
    try:
        peft_model = get_peft_model(model, cfg)
    except ValueError as e:  # peft's NoMatchingPeftModuleError: "Target modules {...} not found in the base model"
        if "not found in the base model" not in str(e):
            raise
        names = sorted({n.rsplit(".", 1)[-1] for n in _targeted_linears(model, "all-linear")})
        raise ValueError(f"--lora-target-modules {target_modules!r}: no module of the model matches; its linear layers "
                         f"are named {', '.join(names) or '(none)'} (or pass all-linear)") from None
    peft_model.agentrl_base = {"model": base, "seed": seed}
    return peft_model


def _targeted_linears(model: Any, targets: str | list[str]) -> dict[str, int]:
    """{module name: min(in, out)} of `model`'s nn.Linear layers that peft's `targets` selects: every one but the
    output embedding (the LM head) for "all-linear", else those whose name is or ends in `.<target>`."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name: min(m.in_features, m.out_features) for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head
            and (targets == "all-linear" or any(name == t or name.endswith("." + t) for t in targets))}


def is_lora(model: Any) -> bool:
    """True for a peft model (adapters attached)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def trainable_parameters(model: Any) -> list:
    """Parameters with requires_grad (LoRA: the adapters only; otherwise every parameter)."""
    return [p for p in model.parameters() if p.requires_grad]


def save_adapter(model: Any, out: str | os.PathLike) -> None:
    """Save a peft model's adapters into `out` (created) with agentrl_lora.json (base model and seed)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / INFO_FILE).write_text(json.dumps(getattr(model, "agentrl_base", {}), indent=1))


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """True if `path` is a folder of saved LoRA adapters without full weights."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def adapter_base(path: str | os.PathLike) -> tuple[str, int]:
    """(base model to load, weight seed) of an adapter folder: agentrl_lora.json, else peft's
    base_model_name_or_path.

    Raises:
        ValueError: neither names a base.
    """
    p = Path(path)
    try:
        info = json.loads((p / INFO_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        info = {}
    base, seed = info.get("model"), int(info.get("seed", 0))
    if not base:
        base = json.loads((p / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"adapter folder {p} names no base model ({INFO_FILE} or adapter_config.json)")
    return str(base), seed


def load_adapter_into(base_model: Any, path: str | os.PathLike, *, merge: bool = True) -> Any:
    """Attach the adapters saved in `path` to `base_model`; merged into its weights (a plain model) by default."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(base_model, str(path))
    return model.merge_and_unload() if merge else model


def load_adapter_state(model: Any, path: str | os.PathLike) -> None:
    """Load adapter weights saved by `save_adapter` into the peft `model` in place (checkpoint resume).

    Raises:
        FileNotFoundError: no adapter_model.safetensors; ValueError: keys that fit no adapter.
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = Path(path) / "adapter_model.safetensors"
    if not f.is_file():
        raise FileNotFoundError(f"no adapter weights (adapter_model.safetensors) in {path}")
    device = next(model.parameters()).device
    res = set_peft_model_state_dict(model, load_file(str(f), device=str(device)))
    unexpected = list(getattr(res, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"adapter weights in {path} do not fit the model: unexpected {unexpected[:5]}")


def merged_copy(model: Any) -> Any:
    """A plain model with the adapters merged in (the live peft model is left as it is)."""
    import copy

    return copy.deepcopy(model).merge_and_unload()


class AdapterOffReference:
    """The frozen KL reference of a LoRA policy: the policy itself with its adapters switched off.

    Use `with ref.active() as m:` and call m like the reference model (no gradient is needed there).
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    @contextlib.contextmanager
    def active(self) -> Iterator[Any]:
        with self.model.disable_adapter():
            yield self.model


@contextlib.contextmanager
def reference(ref_model: Any) -> Iterator[Any]:
    """The module to compute reference log-probs with: an AdapterOffReference's model with adapters off,
    or `ref_model` itself (a frozen copy)."""
    if isinstance(ref_model, AdapterOffReference):
        with ref_model.active() as m:
            yield m
    else:
        yield ref_model

"""Where a policy runs: the one device resolution of every command (train, eval, smoke, sft, serve-policy,
benchmarks) and the resolution of `--dtype auto` against a model. Not the model loader
(agentrl.models.load).

The dtype names themselves live in agentrl.models.dtypes (below rollout, so the GGUF converter can use
them too) and are re-exported here, so callers import one module. "auto" means what it means in
transformers' `from_pretrained(dtype="auto")`: the dtype stored in the checkpoint's config (`dtype` /
`torch_dtype`), fp32 when it stores none (presets with random weights included).
"""

from __future__ import annotations

from typing import Any

from agentrl.models.dtypes import (
    DTYPE_HELP,
    DTYPES,
    TORCH_NAMES,
    canonical_dtype,
    concrete_torch_dtype,
    dtype_arg,
)
from agentrl.models.presets import MODEL_PRESETS, resolve_model_dir

__all__ = ["DEVICE_HELP", "DTYPE_HELP", "DTYPES", "TORCH_NAMES", "canonical_dtype", "checkpoint_dtype",
           "concrete_torch_dtype", "dtype_arg", "resolve_device", "resolve_dtype", "torch_dtype"]


def checkpoint_dtype(model: Any, *, allow_download: bool = False) -> str:
    """The canonical dtype a checkpoint stores in its config ("fp32" when none, or for a preset name).

    `model` is anything agentrl.models.load.load_policy takes: a preset name (random weights: fp32), a
    fetched pretrained name (agentrl.models.pretrained), a folder, an agentrl checkpoint folder (its
    `model/`), a LoRA adapter folder (its base model's dtype), or an HF id in the cache.

    Raises:
        FileNotFoundError: the config cannot be read (local files only unless allowed), or a pretrained
            model is not fetched yet.
    """
    from agentrl.models.lora import adapter_base, is_adapter_dir
    from agentrl.models.pretrained import PRETRAINED, resolve_pretrained

    if str(model) in MODEL_PRESETS:
        return "fp32"
    if str(model) in PRETRAINED:
        model = resolve_pretrained(str(model))
    folder = resolve_model_dir(model)
    if is_adapter_dir(folder):
        return checkpoint_dtype(adapter_base(folder)[0], allow_download=allow_download)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=not allow_download)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"--dtype auto: could not read the config of model {str(model)!r}: {e}") from e
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return canonical_dtype(stored, flag="the checkpoint's dtype") if stored is not None else "fp32"


def resolve_dtype(spec: Any, model: Any = None, *, allow_download: bool = False, flag: str = "--dtype") -> str:
    """A concrete canonical dtype ("fp32" | "bf16" | "fp16"): `spec` canonicalised, "auto" read from
    `model`'s checkpoint (checkpoint_dtype; fp32 when no model is given)."""
    name = canonical_dtype(spec, flag=flag)
    if name != "auto":
        return name
    return checkpoint_dtype(model, allow_download=allow_download) if model is not None else "fp32"


def torch_dtype(spec: Any, model: Any = None, *, allow_download: bool = False) -> Any:
    """The torch.dtype of resolve_dtype(spec, model)."""
    return concrete_torch_dtype(resolve_dtype(spec, model, allow_download=allow_download))


def resolve_device(device: str, *, flag: str = "--device") -> str:
    """"auto" -> "cuda" if available else "cpu"; another name must be a torch device this torch can use.

    Raises:
        ValueError: not a torch device, or a CUDA device while this torch sees none (names `flag`).
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{flag} {device!r} is not a torch device; expected auto, cpu, cuda or cuda:N") from e
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{flag} {device} requested, but this torch ({torch.__version__}) sees no CUDA device; "
                         f"use {flag} cpu or auto")
    return device


DEVICE_HELP = "Torch device: auto (cuda if available, else cpu) | cpu | cuda | cuda:N."

"""The one dtype vocabulary of agentrl: every --dtype flag, RLConfig, SFT, load_policy, GGUF conversion and
the benchmarks read dtype names here and nowhere else. Not the resolution of "auto" against a checkpoint
(agentrl.models.device, which knows the model presets) and not device placement.

Canonical dtypes are "fp32", "bf16", "fp16" and "auto"; every other accepted spelling is an alias
(float32 / float / f32 / torch.float32 / a torch.dtype, bfloat16 / torch.bfloat16, float16 / half /
torch.float16, ...), matched case-insensitively. "auto" means what it means in transformers'
`from_pretrained(dtype="auto")`: the dtype stored in the checkpoint's config. Importing this module
imports neither torch nor transformers (the CLI builds its --help from it).
"""

from __future__ import annotations

from typing import Any

DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16", "auto")
TORCH_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_ALIASES: dict[str, str] = {
    **{a: "fp32" for a in ("fp32", "float32", "float", "f32", "torch.float32", "torch.float", "full")},
    **{a: "bf16" for a in ("bf16", "bfloat16", "torch.bfloat16")},
    **{a: "fp16" for a in ("fp16", "float16", "half", "f16", "torch.float16", "torch.half")},
    "auto": "auto",
}
DTYPE_HELP = ("Model dtype: fp32 | bf16 | fp16 | auto (the checkpoint's own dtype, fp32 if it stores none); "
              "float32, bfloat16, float16, half and torch.* names are accepted as aliases.")


def canonical_dtype(spec: Any, *, flag: str = "--dtype") -> str:
    """The canonical name ("fp32" | "bf16" | "fp16" | "auto") of a dtype spelling or a torch.dtype.

    Raises:
        ValueError: an unknown spelling (names `flag` and the accepted names).
    """
    key = str(spec).strip().lower() if spec is not None else ""
    if key not in _ALIASES:
        raise ValueError(f"{flag} {spec!r} is not a dtype; expected one of {', '.join(DTYPES)} "
                         f"(aliases: {', '.join(sorted(a for a in _ALIASES if a not in DTYPES))})")
    return _ALIASES[key]


def concrete_torch_dtype(name: Any) -> Any:
    """The torch.dtype of a concrete dtype spelling (fp32 | bf16 | fp16 or an alias).

    Raises:
        ValueError: an unknown spelling, or "auto" (resolve it against a checkpoint first:
            agentrl.models.device.resolve_dtype).
    """
    import torch

    canon = canonical_dtype(name)
    if canon == "auto":
        raise ValueError("dtype 'auto' has no torch dtype until it is resolved against a checkpoint "
                         "(agentrl.models.device.resolve_dtype)")
    return getattr(torch, TORCH_NAMES[canon])


def dtype_arg(text: str) -> str:
    """argparse `type=` for a --dtype flag: the canonical name, or argparse's error with our message."""
    import argparse

    try:
        return canonical_dtype(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None

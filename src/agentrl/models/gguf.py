"""Convert a GGUF file (llama.cpp's format) into a plain Hugging Face model folder.

Not a downloader (agentrl.models.pretrained fetches and verifies) and not a loader (agentrl.models.load
loads the folder this writes). transformers reads GGUF through the `gguf` package and dequantizes every
tensor to a normal torch model, but a model loaded that way refuses `save_pretrained` (its config carries
a gguf `quantization_config`). So: build a fresh model from the same config without it, copy the state
dict (every tensor checked), and save that, with the tokenizer, a generation config and, optionally, a
replacement chat template.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agentrl.models.dtypes import canonical_dtype, concrete_torch_dtype
from agentrl.preflight import check_input_file

log = logging.getLogger("agentrl.models")
WEIGHTS_DTYPES = ("fp32", "bf16")  # canonical names (agentrl.models.device); aliases accepted


def _plain_config(config: Any) -> Any:
    """The config without its gguf quantization_config (a fresh config object of the same class)."""
    d = config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version"):
        d.pop(key, None)
    return type(config).from_dict(d)


def _copy_state(src: Any, dst: Any) -> int:
    """Copy every tensor of `src`'s state dict into `dst` (shapes must match; tied heads may be absent).

    Returns the number of tensors copied. Raises ValueError naming a missing/unexpected/mis-shaped tensor.
    """
    import torch

    state = src.state_dict()
    own = dst.state_dict()
    tied = {k for k in own if k.endswith("lm_head.weight")} if getattr(dst.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(own) - set(state) - tied)
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"GGUF model and fresh model disagree: missing {missing[:5]}, unexpected {unexpected[:5]}")
    with torch.no_grad():
        for k, v in state.items():
            if own[k].shape != v.shape:
                raise ValueError(f"GGUF tensor {k} has shape {tuple(v.shape)}, the fresh model {tuple(own[k].shape)}")
            own[k].copy_(v)
    return len(state)


def convert_gguf(
    gguf_path: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    chat_template: str | None = None,
    dtype: str = "fp32",
) -> dict[str, Any]:
    """Write `dest` (a folder; created) as a Hugging Face model folder converted from `gguf_path`.

    Args:
        gguf_path: a .gguf file whose architecture transformers can read (llama, qwen2, qwen3, ...).
        dest: output folder: model.safetensors, config.json, generation_config.json, tokenizer files.
        chat_template: Jinja source replacing the GGUF's own template (None keeps it).
        dtype: "fp32" (default) or "bf16" for the saved weights, or an alias agentrl.models.device accepts
            ("float32", "bfloat16", ...).

    Returns:
        {"architecture", "parameters", "tensors", "dtype" (canonical), "original_chat_template"}.

    Raises:
        FileNotFoundError: no such file. ValueError: not a GGUF file transformers can read, a bad dtype,
        or tensors that do not match a fresh model of its config.
        ImportError: the `gguf` package is missing (named, with the pip command).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    dtype = canonical_dtype(dtype, flag="convert_gguf: dtype")
    if dtype not in WEIGHTS_DTYPES:
        raise ValueError(f"convert_gguf: dtype must be one of {WEIGHTS_DTYPES} (or an alias), got {dtype!r}")
    gguf_path = check_input_file(gguf_path, "GGUF file", "a .gguf file")
    try:
        import gguf  # noqa: F401 - transformers needs it; say so plainly
    except ImportError as e:
        raise ImportError("reading GGUF files needs the `gguf` package: pip install gguf") from e
    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        log.info("dequantizing %s (%s, %d layers)", name, config.model_type, getattr(config, "num_hidden_layers", -1))
        quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{gguf_path}: not a GGUF model transformers can read: {type(e).__name__}: {e}") from e
    plain = _plain_config(config)
    model = AutoModelForCausalLM.from_config(plain, dtype=torch.float32)
    n = _copy_state(quantized, model)
    del quantized
    model = model.to(concrete_torch_dtype(dtype)).eval()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    GenerationConfig.from_model_config(plain).save_pretrained(dest)
    original = tok.chat_template
    if chat_template is not None:
        tok.chat_template = chat_template
    tok.save_pretrained(dest)
    info = {"architecture": plain.model_type, "parameters": sum(p.numel() for p in model.parameters()),
            "tensors": n, "dtype": dtype, "original_chat_template": original}
    log.info("wrote %s: %s, %.1fM parameters, %d tensors", dest, plain.model_type, info["parameters"] / 1e6, n)
    return info


"""The model presets: named small Qwen3 configs with random weights ("tiny-qwen3", "small-qwen3"), the
Qwen3 tokenizer they use, and checkpoint-folder resolution. Not the loader (agentrl.models.load), which
builds a preset's model; agentrl.models.device reads these names too (a preset stores fp32).

Presets are Qwen3-0.6B's config.json (asset "qwen3-0.6b-config") with a few sizes replaced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentrl.paths import resolve_asset

# Qwen3-0.6B's config.json with these fields replaced (about 9.8M parameters, mostly the tied embedding).
TINY_QWEN3_OVERRIDES: dict[str, Any] = {
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 8192,
}
# "small-qwen3": the issue-7 learning-run model (about 66M parameters, 58M of them the tied embedding):
# trains in minutes on one GPU and still runs (slowly) on CPU.
SMALL_QWEN3_OVERRIDES: dict[str, Any] = {
    "num_hidden_layers": 4,
    "max_window_layers": 4,
    "hidden_size": 384,
    "intermediate_size": 1152,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 8192,
}
PRESET_OVERRIDES: dict[str, dict[str, Any]] = {"tiny-qwen3": TINY_QWEN3_OVERRIDES, "small-qwen3": SMALL_QWEN3_OVERRIDES,
                                               "demo-qwen3": TINY_QWEN3_OVERRIDES}
# presets whose tokenizer is a trimmed Qwen3 one: the kept-token file under agentrl/chat/vocab/
# (scripts/build_demo_vocab.py rebuilds it); vocab_size, bos and eos follow the trimmed tokenizer
PRESET_VOCABS: dict[str, str] = {"demo-qwen3": "edit-menu-bugfix"}
MODEL_PRESETS = tuple(PRESET_OVERRIDES)  # the model names load_policy builds with random weights
QWEN3_HUB_ID = "Qwen/Qwen3-0.6B"


def resolve_model_dir(name_or_path: str | os.PathLike) -> str | os.PathLike:
    """An agentrl checkpoint folder (`runs/x/checkpoints/step_N`, which holds `model/` beside
    `meta.json` and the optimizer state) -> its `model/` subfolder; anything else is returned unchanged.

    A folder that has its own config.json is a model folder and is never redirected.
    """
    p = Path(name_or_path).expanduser()
    if p.is_dir() and not (p / "config.json").is_file() and (p / "model").is_dir():
        return p / "model"
    return name_or_path


def qwen3_tokenizer_source() -> str:
    """Asset "qwen3-tokenizer" (agentrl.paths order), else the HF cache's Qwen/Qwen3-0.6B.

    Raises:
        FileNotFoundError: neither is present (says how to fetch it).
    """
    try:
        return str(resolve_asset("qwen3-tokenizer"))
    except FileNotFoundError as e:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(QWEN3_HUB_ID, "tokenizer_config.json")
        if isinstance(cached, str):
            return str(Path(cached).parent)
        raise FileNotFoundError(f"{e}; not in the HF cache ({QWEN3_HUB_ID}) either: run `agentrl assets fetch`") from e


def tiny_qwen3_config(**overrides: Any):
    """A `Qwen3Config`: Qwen3-0.6B's config.json (asset "qwen3-0.6b-config") with TINY_QWEN3_OVERRIDES."""
    from transformers import Qwen3Config

    path = resolve_asset("qwen3-0.6b-config") / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: expected Qwen3-0.6B's config.json: {e}") from e
    raw.pop("torch_dtype", None)
    raw.update(TINY_QWEN3_OVERRIDES | overrides)
    return Qwen3Config(**raw)


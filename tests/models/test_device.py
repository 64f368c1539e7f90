"""The one dtype vocabulary and device resolution (agentrl.models.device), and the sampler registry that
RLConfig, the CLI and the run session read (agentrl.rollout.samplers)."""

import json

import pytest
import torch

from agentrl.models.device import (
    DTYPES,
    canonical_dtype,
    checkpoint_dtype,
    dtype_arg,
    resolve_device,
    resolve_dtype,
    torch_dtype,
)
from agentrl.rollout.samplers import SAMPLERS, build_sampler, get_sampler


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("fp32", "fp32"), ("float32", "fp32"), ("FLOAT32", "fp32"), ("float", "fp32"), ("torch.float32", "fp32"),
    (torch.float32, "fp32"), ("bf16", "bf16"), ("bfloat16", "bf16"), (" torch.bfloat16 ", "bf16"),
    (torch.bfloat16, "bf16"), ("fp16", "fp16"), ("float16", "fp16"), ("half", "fp16"), (torch.float16, "fp16"),
    ("auto", "auto"),
])
def test_every_spelling_maps_to_one_canonical_name(spelling, canonical):
    assert canonical_dtype(spelling) == canonical and canonical in DTYPES
    assert dtype_arg(str(spelling)) == canonical


@pytest.mark.parametrize("bad", ["fp8", "int8", "", None, "float64"])
def test_unknown_dtype_names_the_flag_and_the_choices(bad):
    with pytest.raises(ValueError, match=r"--dtype .* is not a dtype; expected one of fp32, bf16, fp16, auto"):
        canonical_dtype(bad)
    with pytest.raises(ValueError, match="RLConfig.dtype"):
        canonical_dtype(bad, flag="RLConfig.dtype")


def test_auto_is_the_checkpoint_dtype(tmp_path):
    for stored, want in (("bfloat16", "bf16"), ("float16", "fp16"), (None, "fp32")):
        d = tmp_path / str(stored)
        d.mkdir()
        cfg = {"model_type": "qwen3", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
               "num_attention_heads": 1, "num_key_value_heads": 1, "intermediate_size": 8}
        if stored:
            cfg["torch_dtype"] = stored
        (d / "config.json").write_text(json.dumps(cfg))
        assert checkpoint_dtype(d) == want and resolve_dtype("auto", d) == want
        assert resolve_dtype("bf16", d) == "bf16"  # an explicit dtype wins
    assert resolve_dtype("auto", "tiny-qwen3") == "fp32" and resolve_dtype("auto") == "fp32"
    assert torch_dtype("bfloat16") is torch.bfloat16 and torch_dtype("auto", "tiny-qwen3") is torch.float32
    with pytest.raises(FileNotFoundError, match="--dtype auto: could not read the config"):
        resolve_dtype("auto", tmp_path / "missing")


def test_auto_follows_pretrained_names_checkpoints_and_lora_folders_to_the_stored_dtype(tmp_path):
    """--dtype auto reads the weights' own config wherever load_policy would find them: a checkpoint folder's
    model/, and for a LoRA adapter folder its base model's."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "qwen3", "torch_dtype": "bfloat16"}))
    ckpt = tmp_path / "step_3"
    (ckpt / "model").mkdir(parents=True)
    (ckpt / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3", "torch_dtype": "float16"}))
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    (adapters / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    assert resolve_dtype("auto", ckpt) == "fp16" and resolve_dtype("auto", adapters) == "bf16"


def test_concrete_torch_dtype_and_the_gguf_converter_share_the_vocabulary():
    from agentrl.models.dtypes import concrete_torch_dtype
    from agentrl.models.gguf import convert_gguf

    assert concrete_torch_dtype("BF16") is torch.bfloat16 and concrete_torch_dtype("half") is torch.float16
    with pytest.raises(ValueError, match="'auto' has no torch dtype until it is resolved"):
        concrete_torch_dtype("auto")
    with pytest.raises(ValueError, match="convert_gguf: dtype 'fp8' is not a dtype; expected one of fp32, bf16"):
        convert_gguf("/nonexistent.gguf", "/tmp/x", dtype="fp8")
    with pytest.raises(ValueError, match=r"must be one of \('fp32', 'bf16'\)"):
        convert_gguf("/nonexistent.gguf", "/tmp/x", dtype="half")
    with pytest.raises(FileNotFoundError):  # a good alias passes the dtype check and reaches the file check
        convert_gguf("/nonexistent.gguf", "/tmp/x", dtype="bfloat16")


def test_device_resolution():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="--device 'gpu0' is not a torch device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA device"):
            resolve_device("cuda:1", flag="--device")


def test_sampler_registry_is_what_config_cli_and_session_read():
    from agentrl.cli import build_parser
    from agentrl.rl.config import RLConfig

    assert set(SAMPLERS) == {"hf", "fast"}
    for cmd in ("train", "eval"):
        sub = build_parser()._subparsers._group_actions[0].choices[cmd]
        action = next(a for a in sub._actions if a.dest == "sampler")
        assert list(action.choices) == list(SAMPLERS)
        assert all(name in action.help for name in SAMPLERS)
    with pytest.raises(ValueError, match=r"RLConfig.sampler: expected one of \('hf', 'fast'\), got 'vllm'"):
        RLConfig.from_flat(sampler="vllm")
    with pytest.raises(ValueError, match="--sampler 'vllm' is not a sampler; expected one of hf, fast"):
        get_sampler("vllm")
    assert build_sampler("hf", None, None, None, max_batch=4) is None  # the driver's own generate path

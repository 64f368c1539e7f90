"""LoRA end to end on tiny-qwen3: SFT and GRPO train adapters only, save them, and eval/resume load them."""

from __future__ import annotations

import json

import pytest
import torch

from agentrl.cli import main
from agentrl.models.load import load_policy
from agentrl.rl.config import RLConfig

LORA = ["--lora-r", "4", "--lora-alpha", "8"]


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_sft_saves_adapters_that_load_as_a_model(tmp_path):
    out = tmp_path / "sft"
    assert main(["sft", "--model", "tiny-qwen3", "--env", "edit-menu", "--n-tasks", "4", "--epochs", "1",
                 "--lr", "1e-2", "--device", "cpu", *LORA, "--lora-merge", "--out", str(out)]) == 0
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists() and (out / "merged" / "config.json").is_file()
    assert json.loads((out / "agentrl_lora.json").read_text()) == {"model": "tiny-qwen3", "seed": 0}
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["run"]["lora_r"] == 4 and summary["nll_after"] < summary["nll_before"]
    loaded, tok = load_policy(out)
    merged, _ = load_policy(out / "merged")
    base, _ = load_policy("tiny-qwen3")
    ids = tok("<|im_start|>user\nfix it<|im_end|>", add_special_tokens=False).input_ids
    assert torch.allclose(_logits(loaded, ids), _logits(merged, ids), atol=1e-5)
    assert not torch.allclose(_logits(loaded, ids), _logits(base, ids), atol=1e-3)  # the adapters did train


@pytest.mark.slow
def test_grpo_with_lora_checkpoints_adapters_and_resumes(tmp_path):
    out = tmp_path / "run"
    evaluation = ["--env", "edit-menu", "--max-new-tokens", "8", "--max-turns", "2", "--device", "cpu",
                  "--eval-size", "2", "--eval-n", "1", "--n-boot", "200"]
    run = ["--model", "tiny-qwen3", *evaluation, "--group-size", "2", "--prompts-per-step", "2",
           "--train-size", "4", *LORA, "--kl-coef", "0.05", "--checkpoint-every", "1", "--out", str(out)]
    assert main(["train", *run, "--steps", "1"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "completed" and res["model"]["lora"] is True
    assert 0 < res["model"]["trainable_parameters"] < res["model"]["parameters"] / 10
    model_dir = out / "checkpoints" / "step_000001" / "model"
    assert (model_dir / "adapter_model.safetensors").is_file() and not (model_dir / "model.safetensors").exists()
    # eval takes no training flags; the checkpoint folder names its base model and adapters
    assert main(["eval", *evaluation, "--out", str(tmp_path / "eval"), "--model", str(model_dir.parent)]) == 0
    assert main(["train", *run, "--steps", "2", "--resume"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert [s["step"] for s in res["steps"]] == [0, 1] and res["status"] == "completed"


def test_lora_refuses_the_fast_sampler():
    with pytest.raises(ValueError, match="LoRA needs --sampler hf"):
        RLConfig.from_flat(lora_r=4, sampler="fast")


def test_lora_settings_that_match_nothing_or_no_layer_name_the_flag():
    """Refused before peft allocates anything, naming the flag: a --lora-target-modules that matches no module
    (peft's message named neither the flag nor the model's names) and a --lora-r above every targeted layer's
    rank (--lora-r 100000 on tiny-qwen3 allocated adapters for minutes; a rank past min(in, out) adds nothing)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from agentrl.models.lora import apply_lora

    def tiny_qwen3():
        return Qwen3ForCausalLM(Qwen3Config(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=8))

    with pytest.raises(ValueError, match=r"--lora-target-modules 'nope_proj': no module of the model matches; its "
                                         r"linear layers are named .*q_proj"):
        apply_lora(tiny_qwen3(), r=4, alpha=8.0, dropout=0.0, target_modules="nope_proj")
    model = tiny_qwen3()
    with pytest.raises(ValueError, match=r"--lora-r 100000: above the rank of every targeted layer \(at most \d+"):
        apply_lora(model, r=100_000, alpha=8.0, dropout=0.0, target_modules="all-linear")
    assert not any("lora" in n for n, _ in model.named_modules())  # refused before any adapter was made
    apply_lora(tiny_qwen3(), r=4, alpha=8.0, dropout=0.0, target_modules="q_proj,v_proj")

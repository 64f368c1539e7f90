"""An out-of-memory failure says which settings bound the run's memory and what to change (a 1.5B opencode run on
an H200 died in its second step with 108 GB in use: rows of 8192 tokens, two per microbatch, no checkpointing)."""

from __future__ import annotations

import logging

import torch

from agentrl.rl.config import RLConfig
from agentrl.rl.run_folder import memory_hint, record_failure


def test_an_oom_names_the_memory_settings_and_the_fixes_in_order():
    cfg = RLConfig.from_flat(micro=2, micro_tokens=0, gradient_checkpointing=False, max_context_tokens=8192, gen_batch=32,
                             dtype="fp32")
    hint = memory_hint(cfg, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 336.00 MiB"))
    assert "micro 2" in hint and "max_context_tokens 8192" in hint and "gradient_checkpointing False" in hint
    fixes = hint.split("Try, in this order: ")[1]
    assert fixes.index("--gradient-checkpointing") < fixes.index("--micro-tokens 8192") < fixes.index("--gen-batch")
    assert "--dtype bf16" in fixes


def test_settings_already_taken_are_not_suggested_again():
    cfg = RLConfig.from_flat(gradient_checkpointing=True, micro_tokens=4096, dtype="bf16")
    hint = memory_hint(cfg, RuntimeError("CUDA error: out of memory"))
    assert "--gradient-checkpointing" not in hint and "a smaller --micro-tokens than 4096" in hint
    assert "--dtype bf16" not in hint


def test_other_errors_get_no_memory_hint(tmp_path, caplog):
    cfg = RLConfig.from_flat()
    assert memory_hint(cfg, ValueError("bad task file")) == ""
    with caplog.at_level(logging.ERROR, logger="agentrl"):
        record_failure(None, cfg, tmp_path, torch.OutOfMemoryError("CUDA out of memory"), 1.0)
    assert any("out of GPU memory" in r.getMessage() for r in caplog.records)


def test_an_oom_with_activation_offloading_off_suggests_it():
    """--no-activation-offloading keeps every checkpointed layer's input on the device: the hint names the setting
    and suggests turning it back on (auto) after checkpointing, before a smaller microbatch; not when it is on."""
    cfg = RLConfig.from_flat(activation_offloading="off", gradient_checkpointing=False, micro_tokens=0)
    hint = memory_hint(cfg, torch.OutOfMemoryError("CUDA out of memory"))
    assert "activation_offloading off" in hint
    fixes = hint.split("Try, in this order: ")[1]
    assert fixes.index("--gradient-checkpointing") < fixes.index("--activation-offloading auto") < fixes.index("--micro-tokens")
    hint = memory_hint(RLConfig.from_flat(), torch.OutOfMemoryError("CUDA out of memory"))
    assert "activation_offloading auto" in hint and "--activation-offloading" not in hint.split("Try, in this order: ")[1]

"""What the TRL tests share: the tokenizer TRL recognises, tiny-qwen3 with scripted sampling, the MBPP script.

A random 2-layer model never writes a tool call, so nothing would reach the environment. The model here
is the real `Qwen3ForCausalLM` (forward pass, log-probs, gradients and optimizer step untouched); only
its `generate` writes scripted turns (agentrl.rollout.scripted.script_generate), so TRL parses real tool
calls, runs them in our environment and sandbox, and trains on the sampled tokens.
"""

from __future__ import annotations

import re

from agentrl.rollout.scripted import RowReply, script_generate, tool_call_text, turns_done


def qwen3_tokenizer():
    """The real Qwen3 tokenizer at the chat-template revision TRL's GRPOTrainer recognises."""
    from agentrl.models.load import load_tokenizer
    from agentrl.paths import resolve_asset

    return load_tokenizer(resolve_asset("qwen3-tokenizer-current"))


def scripted_tiny_qwen3(tokenizer, script: RowReply, seed: int = 0):
    """The tiny-qwen3 preset's architecture and weights seed, its generate() following `script`."""
    import torch
    from transformers import Qwen3ForCausalLM

    from agentrl.models.presets import tiny_qwen3_config

    torch.manual_seed(seed)
    return script_generate(Qwen3ForCausalLM(tiny_qwen3_config()), tokenizer, script)


def mbpp_reference_or_stub(refs: dict[str, str]) -> RowReply:
    """The python-session MBPP script: even rows run the reference (`refs[entry]`: every hidden test
    passes), odd rows a stub that returns None (none pass), then every row answers "Done."; so each
    GRPO group of two has reward spread 0 / 1."""

    def script(context: str, row: int) -> str:
        if turns_done(context):
            return "Done."
        entry = re.findall(r"Name the function `(\w+)`", context)[-1]
        code = refs[entry] if row % 2 == 0 else f"def {entry}(*args):\n    return None\n"
        return tool_call_text("run_python", {"code": code})

    return script

"""A tiny real Qwen3 whose *sampling* follows a script of tool calls, for tests of TRL's GRPOTrainer on CPU.

A random 2-layer model never writes a tool call, so nothing would reach the environment. This model is
the real `Qwen3ForCausalLM` (its forward pass, log-probs, gradients and optimizer step are untouched);
only `generate` gets a logits processor that forces the scripted text of each assistant turn (a tool
call written in Qwen3's `<tool_call>` format, or a final reply), so TRL parses real tool calls, runs them
in our environment and sandbox, and trains on the sampled tokens. Which script a rollout follows is
chosen per row: even rows of a generation batch solve the task, odd rows do not, so every GRPO group
has reward spread and the update is not skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch
from transformers import LogitsProcessor, LogitsProcessorList, Qwen3ForCausalLM

# script(context_text, row) -> the text of the assistant turn to write now (ending the turn).
Script = Callable[[str, int], str]


def tool_call_text(name: str, arguments: dict) -> str:
    """A Qwen3 tool call as the model writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class _ForceScript(LogitsProcessor):
    """Forces each row's scripted turn token by token, then the end-of-turn token."""

    def __init__(self, tokenizer, script: Script, start_len: int, eot_id: int):
        self.tok, self.script, self.start, self.eot = tokenizer, script, start_len, eot_id
        self.targets: dict[int, list[int]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = input_ids.shape[1] - self.start
        for row in range(input_ids.shape[0]):
            if row not in self.targets:
                context = self.tok.decode(input_ids[row], skip_special_tokens=False)
                text = self.script(context, row)
                self.targets[row] = self.tok.encode(text, add_special_tokens=False) + [self.eot]
            target = self.targets[row]
            nxt = target[n] if n < len(target) else self.eot
            forced = torch.full_like(scores[row], -1e9)
            forced[nxt] = 0.0
            scores[row] = forced
        return scores


class ScriptedQwen3(Qwen3ForCausalLM):
    """Qwen3ForCausalLM whose generate() writes `self.script`'s turns (set `script` and `tokenizer`)."""

    script: Script | None = None
    tokenizer = None

    def generate(self, *args, **kwargs):
        if self.script is not None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            eot = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            kwargs["logits_processor"] = LogitsProcessorList([_ForceScript(self.tokenizer, self.script,
                                                                           ids.shape[1], eot)])
        return super().generate(*args, **kwargs)


def scripted_tiny_qwen3(tokenizer, script: Script, seed: int = 0) -> ScriptedQwen3:
    """The tiny-qwen3 preset's architecture and weights seed, as a ScriptedQwen3."""
    from agentrl.rollout.models import tiny_qwen3_config

    torch.manual_seed(seed)
    model = ScriptedQwen3(tiny_qwen3_config())
    model.script, model.tokenizer = script, tokenizer
    return model


def turns_done(context: str) -> int:
    """How many tool results the current rollout has received (= its turn index)."""
    return context.count("<tool_response>")

"""Scripted samplers: a policy whose replies come from a function, with the bound model's own log-probs.

For testing an environment, a reward or the trainer without a model that can already act: the replies
are scripted (e.g. "apply a random op from the edit menu, then submit"), and the log-probs reported are
the policy's own for exactly those tokens at temperature 1, as a real sampler would report, so the
trainer's ratio starts at 1 and GRPO's update is the real one. The trainer binds the sampler to the
policy it samples for (`agentrl.rollout.driver.bind_sampler`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

import torch

from agentrl.rollout.sampler import Sample

Reply = Callable[[str], str]


class ScriptedSampler:
    """A SampleFn (agentrl.rollout.driver.SampleFn) writing `reply(decoded context)` for each context.

    Args:
        reply: maps the decoded context (the whole conversation so far, as the template rendered it) to
            the assistant turn's text, without the end-of-turn token.
        eot: end-of-turn token appended to every reply (default ChatML's "<|im_end|>").

    Each call returns one Sample per context: the reply's token ids (cut to the budget, the end-of-turn
    token kept) and their log-probs under the bound model (float32 log-softmax of its logits; shape
    [len(ids)]); `hit_token_limit` is False.

    Raises:
        RuntimeError: called before `bind(model, tokenizer)`.
    """

    def __init__(self, reply: Reply, *, eot: str = "<|im_end|>"):
        self.reply, self.eot = reply, eot
        self.model: Any = None
        self.tokenizer: Any = None

    def bind(self, model: Any, tokenizer: Any) -> None:
        """Score with `model` from now on (the trainer calls this; see bind_sampler)."""
        self.model, self.tokenizer = model, tokenizer

    def __call__(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        if self.model is None:
            raise RuntimeError("ScriptedSampler: bind(model, tokenizer) first (the trainer does it)")
        tok = self.tokenizer
        eot = tok.convert_tokens_to_ids(self.eot)
        out = []
        for ctx, budget in zip(contexts, budgets, strict=True):
            ids = tok(self.reply(tok.decode(ctx)), add_special_tokens=False)["input_ids"][: max(budget - 1, 0)] + [eot]
            out.append(Sample(tuple(ids), tuple(self.logprobs(ctx, ids)), False))
        return out

    def logprobs(self, context: list[int], ids: list[int]) -> list[float]:
        """Log-probs (nats) of `ids` after `context` under the bound model, temperature 1."""
        p = next(self.model.parameters())
        with torch.no_grad():
            logits = self.model(torch.tensor([context + ids], device=p.device)).logits[0, len(context) - 1: -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids, device=p.device)[:, None]).squeeze(-1)
        return lp.tolist()


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """One Hermes/Qwen-style tool call block, as the chat templates' parsers read it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def random_edit_reply(seed: int) -> Reply:
    """The edit-menu procedure with a random op: on the first assistant turn apply an op picked at random
    from the prompt's edit menu, then submit (random.Random(seed) picks the ops).

    Raises:
        ValueError: (when called) the context shows no edit menu.
    """
    rng = random.Random(seed)

    def reply(text: str) -> str:
        menu = re.search(r"Edit menu: ([a-z_, ]+)\.", text)
        if menu is None:
            raise ValueError("random_edit_reply: the context has no 'Edit menu: ...' (is this edit-menu?)")
        if text.count("<|im_start|>assistant") == 1:
            return tool_call_text("edit", {"op": rng.choice(menu.group(1).split(", "))})
        return tool_call_text("submit", {})

    return reply


def random_edit_sampler(seed: int = 0) -> ScriptedSampler:
    """ScriptedSampler playing `random_edit_reply(seed)`: rewards vary within groups, so GRPO trains."""
    return ScriptedSampler(random_edit_reply(seed))

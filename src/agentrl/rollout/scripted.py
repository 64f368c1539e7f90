"""Scripted samplers: a policy whose replies come from a function, with the bound model's own log-probs.

For testing an environment, a reward or the trainer without a model that can already act: the replies
are scripted (e.g. "apply a random op from the edit menu, then submit"), and the log-probs reported are
the policy's own for exactly those tokens at temperature 1, as a real sampler would report, so the
trainer's ratio starts at 1 and GRPO's update is the real one. The trainer binds the sampler to the
policy it samples for (`agentrl.rollout.driver.bind_sampler`).

`script_generate(model, tokenizer, reply)` does the same for trainers that sample through Hugging Face
`generate` (TRL's GRPOTrainer): the model's forward pass, log-probs and updates are untouched; only its
`generate` writes the scripted turns (a `ForcedReplies` logits processor).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

import torch

from agentrl.rollout.hf_sampler import Sample

Reply = Callable[[str], str]
RowReply = Callable[[str, int], str]  # (decoded context, row of the generate batch) -> the turn's text


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


class ForcedReplies:
    """A transformers logits processor (`LogitsProcessorList([...])`) that makes `generate` write scripted
    turns: row r writes `reply(decoded prompt of row r, r)` token by token, then `eot` (repeated after).

    Args:
        tokenizer: the model's tokenizer (decodes the prompt, encodes the reply).
        reply: RowReply; called once per row, at the first generated token.
        prompt_len: the prompt length of this generate call (input_ids.shape[1]).
        eot: end-of-turn token (default ChatML's "<|im_end|>").

    `__call__(input_ids[B, L] int64, scores[B, V] float)` returns scores that are 0 at the forced token and
    -1e9 elsewhere, so greedy and sampled decoding alike pick it.
    """

    def __init__(self, tokenizer: Any, reply: RowReply, prompt_len: int, *, eot: str = "<|im_end|>"):
        self.tok, self.reply, self.start = tokenizer, reply, prompt_len
        self.eot = tokenizer.convert_tokens_to_ids(eot)
        self.targets: dict[int, list[int]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = input_ids.shape[1] - self.start
        for row in range(input_ids.shape[0]):
            if row not in self.targets:
                text = self.reply(self.tok.decode(input_ids[row, : self.start], skip_special_tokens=False), row)
                self.targets[row] = self.tok.encode(text, add_special_tokens=False) + [self.eot]
            target = self.targets[row]
            forced = torch.full_like(scores[row], -1e9)
            forced[target[n] if n < len(target) else self.eot] = 0.0
            scores[row] = forced
        return scores


class _ScriptedGenerate:
    """Mixed in before a model's class by script_generate: generate() adds a ForcedReplies processor."""

    _script: RowReply | None = None
    _script_tokenizer: Any = None

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        if self._script is not None:
            from transformers import LogitsProcessorList

            ids = kwargs.get("input_ids", args[0] if args else None)
            forced = ForcedReplies(self._script_tokenizer, self._script, ids.shape[1])
            kwargs["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), forced])
        return super().generate(*args, **kwargs)


_SCRIPTED_CLASSES: dict[type, type] = {}


def script_generate(model: Any, tokenizer: Any, reply: RowReply | None) -> Any:
    """Make a Hugging Face model's `generate` write `reply`'s turns (ForcedReplies); None restores it.

    The model's class is swapped for a subclass of the same name that only overrides `generate`, so its
    forward pass, log-probs, gradients, `save_pretrained` and copies are those of the real model.
    Returns `model` (the same object).
    """
    cls = type(model)
    if not issubclass(cls, _ScriptedGenerate):
        if cls not in _SCRIPTED_CLASSES:
            _SCRIPTED_CLASSES[cls] = type(cls.__name__, (_ScriptedGenerate, cls), {"__module__": cls.__module__})
        model.__class__ = _SCRIPTED_CLASSES[cls]
    model._script, model._script_tokenizer = reply, tokenizer
    return model


def turns_done(context: str) -> int:
    """How many tool results a decoded conversation holds (Hermes/Qwen `<tool_response>` blocks): the
    index of the assistant turn being written in a one-call-per-turn episode."""
    return context.count("<tool_response>")


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

"""ScriptedSampler: scripted replies with the bound model's own log-probs; bind_sampler binds only samplers
that can be bound."""

import pytest
import torch

from agentrl.models.load import load_policy
from agentrl.rollout.driver import bind_sampler
from agentrl.rollout.scripted import (
    ScriptedSampler,
    random_edit_reply,
    script_generate,
    tool_call_text,
    turns_done,
)


def test_replies_carry_the_bound_models_logprobs_and_respect_the_budget():
    model, tok = load_policy("tiny-qwen3", seed=0)
    s = ScriptedSampler(lambda text: "hello there, a fairly long reply")
    with pytest.raises(RuntimeError, match="bind"):
        s([[1, 2, 3]], [8])
    bind_sampler(s, model, tok)
    ctx = tok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    (full,), (cut,) = s([ctx], [64]), s([ctx], [3])
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    assert full.ids[-1] == eot and cut.ids == full.ids[:2] + (eot,)
    with torch.no_grad():
        logits = model(torch.tensor([ctx + list(full.ids)])).logits[0, len(ctx) - 1: -1].float()
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(full.ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(full.logprobs), want, atol=1e-6)


def test_bind_sampler_leaves_plain_functions_alone():
    calls = []
    fn = lambda contexts, budgets: calls.append(contexts)  # noqa: E731
    bind_sampler(fn, object(), object())
    bind_sampler(None, object(), object())
    assert calls == []


def test_random_edit_reply_edits_from_the_menu_then_submits():
    reply = random_edit_reply(0)
    first = "Edit menu: swap_args, negate.\n<|im_start|>assistant\n"
    assert any(tool_call_text("edit", {"op": op}) == reply(first) for op in ("swap_args", "negate"))
    assert reply(first + "x<|im_start|>assistant\n") == tool_call_text("submit", {})
    with pytest.raises(ValueError, match="Edit menu"):
        reply("no menu here")


def test_script_generate_forces_each_rows_reply_and_leaves_the_model_alone():
    model, tok = load_policy("tiny-qwen3", seed=0)
    prompt = tok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt, prompt])
    with torch.no_grad():
        logits = model(ids).logits
    seen = []

    def reply(context: str, row: int) -> str:
        seen.append((context, row))
        return tool_call_text("guess", {"word": "crane"}) if row == 0 else "No."

    cls = type(model)
    assert script_generate(model, tok, reply) is model
    assert type(model).__name__ == cls.__name__ and isinstance(model, cls)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=True)
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    for row, text in enumerate([tool_call_text("guess", {"word": "crane"}), "No."]):
        want = tok.encode(text, add_special_tokens=False) + [eot]
        assert out[row, len(prompt): len(prompt) + len(want)].tolist() == want
    assert sorted(r for _, r in seen) == [0, 1] and all(c.endswith("assistant\n") for c, _ in seen)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, logits)  # the forward pass is the real model's
    script_generate(model, tok, None)  # off again: generate is the real model's
    plain, _ = load_policy("tiny-qwen3", seed=0)
    kw = dict(input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=5, do_sample=False)
    assert torch.equal(model.generate(**kw), plain.generate(**kw))
    assert turns_done("<tool_response>a</tool_response> <tool_response>b</tool_response>") == 2

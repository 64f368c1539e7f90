"""Sampler with tiny-qwen3 + the real tokenizer: batched, left-padded, log-probs match a plain forward pass."""

import pytest
import torch

from agentrl.models.load import load_policy
from agentrl.rollout.hf_sampler import SamplingConfig, sample_turns

EOT = 151645


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3")


def recompute_logprobs(model, context, ids):
    """Trainer-side log-probs of `ids` after `context` with a plain, unpadded forward pass (fp32)."""
    full = torch.tensor([list(context) + list(ids)])
    with torch.no_grad():
        logits = model(full).logits.float()[0, len(context) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def contexts(tok):
    texts = ["def f(x):\n    return x + 1\n", "hi", "Fix the bug in range_sum; tests are in test_range_sum.py."]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_batched_left_padded_logprobs_match_recomputation(policy):
    model, tok = policy
    ctx = contexts(tok)
    torch.manual_seed(0)
    budgets = [16, 5, 11]
    samples = sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id,
                           cfg=SamplingConfig(max_new_tokens=16, gen_batch=2), max_new_tokens=budgets)
    assert [len(s.ids) for s in samples] == budgets  # a random model does not hit <|im_end|> by chance
    assert all(s.hit_token_limit for s in samples)
    worst = 0.0
    for c, s in zip(ctx, samples, strict=True):
        assert len(s.logprobs) == len(s.ids)
        worst = max(worst, (recompute_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max().item())
    assert worst < 1e-4, worst


def test_stops_at_end_of_turn_and_keeps_it(policy):
    model, tok = policy
    ctx = contexts(tok)
    with torch.no_grad():  # make <|im_end|> certain: the sampler must stop right after it
        bias = torch.zeros(model.config.vocab_size)
        bias[EOT] = 1e4
        model.lm_head.bias = torch.nn.Parameter(bias)
    try:
        samples = sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=SamplingConfig(8))
    finally:
        model.lm_head.bias = None
    assert [s.ids for s in samples] == [(EOT,)] * 3 and not any(s.hit_token_limit for s in samples)
    assert all(abs(s.logprobs[0]) < 1e-4 for s in samples)


def test_model_generation_config_does_not_leak(policy):
    model, tok = policy
    model.generation_config.top_k, model.generation_config.temperature = 1, 0.01  # would make it greedy
    try:
        torch.manual_seed(1)
        (s,) = sample_turns(model, contexts(tok)[:1], stop_ids=(EOT,), pad_id=tok.pad_token_id,
                            cfg=SamplingConfig(max_new_tokens=24))
    finally:
        model.generation_config.top_k, model.generation_config.temperature = 20, 0.6
    ctx = contexts(tok)[0]
    with torch.no_grad():
        logits = model(torch.tensor([ctx + list(s.ids)])).logits[0, len(ctx) - 1 : -1]
    greedy = logits.argmax(-1).tolist()
    assert sum(a == b for a, b in zip(greedy, s.ids, strict=True)) < 4  # near-uniform random model


def test_top_k_when_asked_is_recorded_renormalised(policy):
    model, tok = policy
    torch.manual_seed(2)
    ctx = contexts(tok)[1]
    (s,) = sample_turns(model, [ctx], stop_ids=(EOT,), pad_id=tok.pad_token_id,
                        cfg=SamplingConfig(max_new_tokens=6, top_k=5))
    with torch.no_grad():
        logits = model(torch.tensor([ctx + list(s.ids)])).logits[0, len(ctx) - 1 : -1]
    top = logits.topk(5, -1)
    for t, (vals, idx), lp in zip(s.ids, zip(top.values, top.indices, strict=True), s.logprobs, strict=True):
        assert t in idx.tolist()
        assert abs(lp - torch.log_softmax(vals, -1)[idx.tolist().index(t)].item()) < 1e-4


def test_bad_inputs():
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="budget"):
        sample_turns(None, [[1]], stop_ids=(EOT,), pad_id=0, max_new_tokens=[0])

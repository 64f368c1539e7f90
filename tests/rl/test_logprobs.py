import pytest
import torch

from agentrl.rl.logprobs import policy_logprobs


def _full_reference(model, b):
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits.double()
    lp_all = torch.log_softmax(logits[:, :-1], dim=-1)
    lp = lp_all.gather(2, b.input_ids[:, 1:, None]).squeeze(2)
    ent = -(lp_all.exp() * lp_all).sum(-1)
    m = b.policy_mask[:, 1:].double()
    return lp * m, ent * m


@pytest.mark.parametrize("tie", [False, True])
def test_matches_full_logit_log_softmax(tiny_qwen3, make_batch, tie):
    model = tiny_qwen3(tie=tie, dtype=torch.float32)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    b = make_batch()
    ref_lp, ref_ent = _full_reference(model, b)
    lp, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=7)
    assert lp.shape == b.input_ids.shape and lp.dtype == torch.float32
    assert torch.allclose(lp[:, 1:].double(), ref_lp, atol=2e-5, rtol=0)
    assert torch.allclose(ent[:, 1:].double(), ref_ent, atol=2e-5, rtol=0)
    assert lp[b.policy_mask == 0].eq(0).all() and lp[b.policy_mask == 1].lt(0).all()


def test_temperature_divides_logits(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits / 0.7
    ref = torch.log_softmax(logits[:, :-1], -1).gather(2, b.input_ids[:, 1:, None]).squeeze(2) * b.policy_mask[:, 1:]
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, temperature=0.7)
    assert torch.allclose(lp[:, 1:].double(), ref, atol=1e-6)


def test_logit_scale_is_mirrored(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits * 0.5
    ref = torch.log_softmax(logits[:, :-1], -1).gather(2, b.input_ids[:, 1:, None]).squeeze(2) * b.policy_mask[:, 1:]
    model.logit_scale = 0.5  # what Cohere-style models hold and apply in their forward
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
    assert torch.allclose(lp[:, 1:], ref, atol=1e-10)


def test_head_never_sees_full_sequence(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float32)
    b = make_batch(n=6, length=14)
    shapes = []
    model.lm_head.register_forward_hook(lambda mod, inp, out: shapes.append(tuple(out.shape)))
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=5)
    lp.sum().backward()  # the checkpointed chunks recompute the head in backward
    m = b.num_policy_tokens
    n_chunks = -(-m // 5)
    assert all(len(s) == 2 and s[0] <= 5 and s[1] == 61 for s in shapes), shapes
    assert len(shapes) == 2 * n_chunks  # forward + recompute, chunked, never [N, L, V]
    assert sum(s[0] for s in shapes) == 2 * m < 2 * b.input_ids.numel()
    assert model.lm_head.weight.grad is not None and torch.isfinite(model.lm_head.weight.grad).all()


def test_gradient_matches_full_logits(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    ref_lp, _ = _full_reference(model, b)
    ref_lp.sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # padded trunk, so this pins the head-at-policy-positions gradient at fp64 precision; the packed trunk's
    # gradient is pinned against this one in test_packing.py
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=4, pack=False)
    lp.sum().backward()
    for r, p in zip(ref, model.parameters(), strict=True):
        assert torch.allclose(p.grad, r, atol=1e-10, rtol=1e-7)


def test_rejects_policy_token_at_position_zero(tiny_qwen3, make_batch):
    b = make_batch()
    b.policy_mask[0, 0] = 1
    with pytest.raises(ValueError, match="first token"):
        policy_logprobs(tiny_qwen3(), b.input_ids, b.attention_mask, b.policy_mask)

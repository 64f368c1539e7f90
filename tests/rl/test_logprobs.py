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


@pytest.mark.parametrize("one_function", [True, False])
def test_head_never_sees_full_sequence(tiny_qwen3, make_batch, monkeypatch, one_function):
    """The head runs on chunks of at most chunk_rows policy positions, in forward and again in backward, through
    ChunkedHead (one autograd Function) or, where it does not apply, per-chunk checkpointed head calls."""
    import agentrl.rl.logprobs as logprobs

    model = tiny_qwen3(dtype=torch.float32)
    b = make_batch(n=6, length=14)
    if not one_function:
        monkeypatch.setattr(logprobs, "_fused_head_ok", lambda *a: False)
    shapes = []
    linear = torch.nn.functional.linear

    def spy(x, w, bias=None):
        out = linear(x, w, bias)
        if w.data_ptr() == model.lm_head.weight.data_ptr():  # the weight or a detached view of it
            shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=5)
    lp.sum().backward()  # the head's chunks are recomputed in backward
    m = b.num_policy_tokens
    n_chunks = -(-m // 5)
    assert all(len(s) == 2 and s[0] <= 5 and s[1] == 61 for s in shapes), shapes
    assert len(shapes) == 2 * n_chunks  # forward + recompute, chunked, never [N, L, V]
    assert sum(s[0] for s in shapes) == 2 * m < 2 * b.input_ids.numel()
    assert model.lm_head.weight.grad is not None and torch.isfinite(model.lm_head.weight.grad).all()


@pytest.mark.parametrize("tie", [False, True])
def test_chunked_head_gives_the_per_chunk_paths_values_and_gradients(tiny_qwen3, make_batch, monkeypatch, tie):
    """ChunkedHead (every chunk in one Function, the head weight's gradient accumulated in place) against the
    per-chunk checkpointed head calls: the same log-probs, entropies and gradients of every parameter (fp64, tied
    and untied head, temperature and top-k warpers, a last chunk shorter than the others), with a loss weighting
    each position differently."""
    import agentrl.rl.logprobs as logprobs

    model = tiny_qwen3(tie=tie, dtype=torch.float64)
    b = make_batch(n=6, length=14)
    w = torch.rand(b.input_ids.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    used = []
    apply = logprobs.ChunkedHead.apply
    monkeypatch.setattr(logprobs.ChunkedHead, "apply", lambda *a: used.append(1) or apply(*a))
    got = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(logprobs, "_fused_head_ok", lambda *a: False)
        model.zero_grad()
        lp, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=4,
                                  temperature=0.7, top_k=9)
        lp_fin = torch.where(torch.isinf(lp), torch.zeros_like(lp), lp)
        (lp_fin * w).sum().backward()
        got.append((lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    assert used == [1]  # the first pass took ChunkedHead, the second the per-chunk calls
    (lp1, en1, g1), (lp2, en2, g2) = got
    assert torch.equal(torch.isinf(lp1), torch.isinf(lp2)) and torch.isinf(lp1).any()  # top-k drops some targets
    torch.testing.assert_close(lp1, lp2, atol=1e-12, rtol=0)
    torch.testing.assert_close(en1, en2, atol=1e-12, rtol=0)
    for a, r in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, r, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("tie", [False, True])
def test_head_grad_into_adds_the_same_gradient_straight_into_grad(tiny_qwen3, make_batch, tie):
    """head_grad_into=True (what the update passes): two backward passes accumulate into .grad exactly what the
    gradient through autograd accumulates, for every parameter (fp64, tied and untied head, a second pass onto
    existing gradients, as microbatches do), and autograd never hands the head weight a gradient of its own (the
    tied weight's .grad is written by ChunkedHead, then added to by the embedding's backward)."""
    model = tiny_qwen3(tie=tie, dtype=torch.float64)
    b = make_batch(n=6, length=14)
    halves = (slice(0, 3), slice(3, 6))
    got = []
    for into in (False, True):
        model.zero_grad(set_to_none=True)
        for rows in halves:
            lp, _ = policy_logprobs(model, b.input_ids[rows], b.attention_mask[rows], b.policy_mask[rows],
                                    chunk_rows=4, temperature=0.9, head_grad_into=into)
            (lp * torch.linspace(0.5, 1.5, lp.shape[1], dtype=lp.dtype)).sum().backward()
        got.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert got[0].keys() == got[1].keys()
    for name in got[0]:
        torch.testing.assert_close(got[1][name], got[0][name], atol=1e-12, rtol=1e-9, msg=name)
    # through torch.autograd.grad the default path still returns the head weight's gradient
    lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=4)
    (g,) = torch.autograd.grad(lp.sum(), [model.lm_head.weight])
    assert torch.isfinite(g).all() and g.abs().sum() > 0


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

"""The exactness invariants of the update: microbatching and zero-advantage skipping never change the gradient."""

import copy

import pytest
import torch

from agentrl.rl.config import RLConfig
from agentrl.rl.loss import policy_loss
from agentrl.rl.update import accumulate_gradients, checkpoint_if_configured, microbatch_rows, minibatch_step


def _cfg(**kw):
    # padded trunk: these pin the microbatching algebra at fp64 precision (the packed trunk's values differ
    # from the padded ones at fp32 rounding, see test_packing.py; its microbatching is pinned below)
    base = dict(micro=2, micro_tokens=0, minibatches=1, epochs=1, max_grad_norm=1e9, logprob_chunk_rows=5, pack_rows=False)
    base.update(kw)
    return RLConfig.from_flat(**base)


def _reference_grads(model, b, *, ref_model=None, kl_coef=0.0):
    """Unsplit minibatch, full [N, L, V] logits, one backward."""
    model.zero_grad(set_to_none=True)

    def full_logp(m):
        logits = m(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        lp = torch.log_softmax(logits[:, :-1], -1).gather(2, b.input_ids[:, 1:, None]).squeeze(2)
        return torch.nn.functional.pad(lp, (1, 0))

    ref_logp = None
    if ref_model is not None:
        with torch.no_grad():
            ref_logp = full_logp(ref_model)
    loss, _ = policy_loss(full_logp(model), b.old_logprobs.double(), b.advantages.double(), b.policy_mask,
                          normalizer=float(b.num_policy_tokens), ref_logp=ref_logp, kl_coef=kl_coef)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


@pytest.mark.parametrize("micro", [1, 3, 8])
def test_accumulated_gradient_equals_unsplit_minibatch(tiny_qwen3, make_batch, micro):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch(n=8, zero_adv_rows=(1, 4, 5))
    ref_loss, ref = _reference_grads(model, b)
    calls = []
    model.model.register_forward_hook(lambda mod, inp, out: calls.append(out.last_hidden_state.shape[0]))
    st = accumulate_gradients(model, b, _cfg(micro=micro), normalizer=b.num_policy_tokens)
    assert st["loss"] == pytest.approx(ref_loss, rel=1e-10, abs=1e-12)
    for r, p in zip(ref, model.parameters(), strict=True):
        assert torch.allclose(p.grad, r, rtol=1e-8, atol=1e-11)
    assert st["rows_skipped"] == 3 and sum(calls) == 5  # zero-advantage rows never ran forward/backward
    assert max(calls) <= micro


@pytest.mark.parametrize("micro", [1, 3, 8])
def test_packed_microbatches_equal_unsplit_minibatch(tiny_qwen3, make_batch, micro):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch(n=8, zero_adv_rows=(1, 4, 5))
    ref_loss, ref = _reference_grads(model, b)
    tokens = []
    model.model.register_forward_hook(lambda mod, inp, out: tokens.append(out.last_hidden_state.shape[1]))
    st = accumulate_gradients(model, b, _cfg(micro=micro, pack_rows=True), normalizer=b.num_policy_tokens)
    assert st["loss"] == pytest.approx(ref_loss, rel=1e-5)
    for r, p in zip(ref, model.parameters(), strict=True):
        assert (p.grad - r).abs().max() <= 1e-5 * r.abs().max().clamp(min=1.0)
    kept = [i for i in range(8) if i not in (1, 4, 5)]
    assert sum(tokens) == int(b.attention_mask[kept].sum())  # packed: real tokens only, no padding run


def test_microbatch_rows_token_budget_keeps_order_and_budget():
    active = torch.tensor([0, 2, 3, 5, 6, 7])
    tokens = torch.tensor([5, 9, 4, 4, 1, 7, 3, 12])  # per row of the batch (rows 1 and 4 not trained)
    parts = microbatch_rows(active, tokens, micro=2, micro_tokens=9)
    assert [p.tolist() for p in parts] == [[0, 2], [3], [5], [6], [7]]  # 5+4 = 9; then each next row overflows
    assert torch.equal(torch.cat(parts), active)  # every trained row once, in order
    assert [p.tolist() for p in microbatch_rows(active, tokens, micro=2, micro_tokens=0)] == [[0, 2], [3, 5], [6, 7]]
    # a row over the budget runs alone; a budget over everything gives one microbatch
    alone = microbatch_rows(active, tokens, micro=1, micro_tokens=3)
    assert [p.tolist() for p in alone] == [[r] for r in active.tolist()]
    assert [p.tolist() for p in microbatch_rows(active, tokens, micro=1, micro_tokens=10**6)] == [active.tolist()]
    assert microbatch_rows(torch.tensor([], dtype=torch.long), tokens, micro=2, micro_tokens=9) == []
    with pytest.raises(ValueError, match="micro_tokens"):
        microbatch_rows(active, tokens, micro=2, micro_tokens=-1)


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("budget", [1, 27, 40, 10**6])
def test_token_budget_microbatches_equal_unsplit_minibatch(tiny_qwen3, make_batch, pack, budget):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch(n=8, zero_adv_rows=(1, 4, 5))
    ref_loss, ref = _reference_grads(model, b)
    shapes = []
    model.model.register_forward_hook(lambda mod, inp, out: shapes.append(tuple(out.last_hidden_state.shape[:2])))
    st = accumulate_gradients(model, b, _cfg(micro=1, micro_tokens=budget, pack_rows=pack),
                              normalizer=b.num_policy_tokens)
    tol = 1e-5 if pack else 1e-9
    assert st["loss"] == pytest.approx(ref_loss, rel=tol)
    for r, p in zip(ref, model.parameters(), strict=True):
        assert (p.grad - r).abs().max() <= tol * r.abs().max().clamp(min=1.0)
    kept = [i for i in range(8) if i not in (1, 4, 5)]
    real = [int(b.attention_mask[i].sum()) for i in kept]
    expected = [[r] for r in kept] if budget == 1 else None
    if budget == 10**6:
        expected = [kept]
    if expected is not None:
        assert len(shapes) == len(expected)
    if pack:  # one [1, T] pack per microbatch: T real tokens, within the budget unless a single row
        assert sum(t for _, t in shapes) == sum(real)
        assert all(t <= budget or t in real for _, t in shapes)


def test_token_budget_matches_row_microbatches_fp32(tiny_qwen3, make_batch):
    """micro_tokens vs micro rows in fp32 on the packed path: same loss and gradient (1e-5)."""
    b = make_batch(n=8, zero_adv_rows=(2,))
    grads = []
    for kw in ({"micro": 2}, {"micro": 1, "micro_tokens": 30}):
        model = tiny_qwen3(dtype=torch.float32)
        st = accumulate_gradients(model, b, _cfg(pack_rows=True, **kw), normalizer=b.num_policy_tokens)
        grads.append((st["loss"], [p.grad.clone() for p in model.parameters()]))
    (l0, g0), (l1, g1) = grads
    assert l1 == pytest.approx(l0, rel=1e-5)
    for a, c in zip(g0, g1, strict=True):
        assert (a - c).abs().max() <= 1e-5 * a.abs().max().clamp(min=1.0)


def test_normalizer_counts_skipped_rows(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch(n=4, zero_adv_rows=(0, 1))
    st_full = accumulate_gradients(model, b, _cfg(), normalizer=b.num_policy_tokens)
    kept = b.select([2, 3])
    model.zero_grad(set_to_none=True)
    st_kept = accumulate_gradients(model, kept, _cfg(), normalizer=kept.num_policy_tokens)
    ratio = kept.num_policy_tokens / b.num_policy_tokens
    assert st_full["loss"] == pytest.approx(st_kept["loss"] * ratio, rel=1e-10)


def test_kl_term_trains_zero_advantage_rows_exactly(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    ref_model = tiny_qwen3(dtype=torch.float64, seed=7)
    b = make_batch(n=5, zero_adv_rows=(0, 3))
    _, ref = _reference_grads(model, b, ref_model=ref_model, kl_coef=0.3)
    st = accumulate_gradients(model, b, _cfg(kl_coef=0.3, micro=2), normalizer=b.num_policy_tokens,
                              ref_model=ref_model)
    assert st["rows_skipped"] == 0 and st["kl_ref"] > 0
    for r, p in zip(ref, model.parameters(), strict=True):
        assert torch.allclose(p.grad, r, rtol=1e-8, atol=1e-11)


def test_minibatch_step_sgd_update_matches_reference(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    expected = copy.deepcopy(model)
    b = make_batch(n=6, zero_adv_rows=(2,))
    lr = 0.01
    for rows in ([0, 1, 2], [3, 4, 5]):  # minibatches=2 in order: two sequential SGD steps
        _, grads = _reference_grads(expected, b.select(rows, trim=False))
        with torch.no_grad():
            for p, g in zip(expected.parameters(), grads, strict=True):
                p.sub_(lr * g)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    st = minibatch_step(model, opt, b, _cfg(minibatches=2, micro=2))
    for p, q in zip(model.parameters(), expected.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12)
    assert st["optimizer_steps"] == 2 and st["rows_skipped"] == 1 and st["grad_norm"] > 0
    assert st["policy_tokens"] == b.num_policy_tokens and st["tokens_per_s"] > 0 and st["peak_memory_bytes"] > 0
    assert st["sampler_nll"] == pytest.approx(float(-b.old_logprobs[b.policy_mask.bool()].double().mean()))


def test_grad_norm_clip_bounds_the_step(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).clone()
    st = minibatch_step(model, torch.optim.SGD(model.parameters(), lr=1.0), make_batch(n=4), _cfg(max_grad_norm=0.01))
    step = torch.nn.utils.parameters_to_vector(model.parameters()) - before
    assert st["grad_norm"] > 0.01
    assert step.norm().item() == pytest.approx(0.01, rel=1e-4)  # torch divides by (norm + 1e-6)


def test_all_zero_advantages_leave_adamw_params_unchanged(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    before = [p.clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    st = minibatch_step(model, opt, make_batch(n=4, zero_adv_rows=(0, 1, 2, 3)), _cfg(minibatches=2))
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert st["grad_norm"] == 0.0 and st["rows_skipped"] == 4 and st["tokens_trained"] == 0


def test_metrics_keys_are_stable_when_nothing_trains(tiny_qwen3, make_batch):
    import math

    model = tiny_qwen3(dtype=torch.float64)
    st = minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.1), make_batch(n=2, zero_adv_rows=(0, 1)),
                        _cfg())
    assert math.isnan(st["entropy"]) and math.isnan(st["clip_frac"]) and "kl_ref" not in st


def test_decoder_layers_finds_the_layers_or_raises(tiny_qwen3):
    from agentrl.rl.update import decoder_layers

    model = tiny_qwen3(dtype=torch.float32)
    assert decoder_layers(model) == list(model.model.layers)
    with pytest.raises(ValueError, match="no decoder layers"):
        decoder_layers(torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_compiled_layers_give_the_eager_loss_and_gradient_fp32(tiny_qwen3, make_batch):
    """compile_decoder_layers on the packed update: loss and gradient equal the eager ones (fp32, 1e-5)."""
    from torch._dynamo.utils import counters

    from agentrl.rl.update import compile_decoder_layers

    b = make_batch(n=6, zero_adv_rows=(2,))
    torch._dynamo.reset()  # earlier tests' compiled layers share the `_call_impl` cache (tests/rl/test_compile_layers.py)
    counters.clear()
    out = []
    for compiled in (False, True):
        model = tiny_qwen3(dtype=torch.float32)
        if compiled:
            assert compile_decoder_layers(model) == len(model.model.layers)
        st = accumulate_gradients(model, b, _cfg(micro=3, pack_rows=True), normalizer=b.num_policy_tokens)
        out.append((st["loss"], [p.grad.clone() for p in model.parameters()]))
    assert counters["stats"]["unique_graphs"] >= 1  # the layers really ran through dynamo
    (l0, g0), (l1, g1) = out
    assert l1 == pytest.approx(l0, rel=1e-5)
    for a, c in zip(g0, g1, strict=True):
        assert (a - c).abs().max() <= 1e-5 * a.abs().max().clamp(min=1.0)


def test_out_of_memory_reruns_the_minibatch_with_smaller_microbatches(tiny_qwen3, make_batch, monkeypatch, caplog):
    """Memory-aware update: a microbatch of more than 2 rows "runs out of memory" (a 1.5B fp32 opencode update on the
    H200 did, at two 8k-token rows); the minibatch runs again from zero gradients at micro 4, then 2, and the step
    equals the one taken at micro 2 from the start (one normalizer per minibatch); later steps start at micro 2."""
    import agentrl.rl.update as upd

    real = upd.policy_logprobs
    sizes = []

    def limited(model, input_ids, *a, **kw):
        sizes.append(input_ids.shape[0])
        if input_ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 336.00 MiB")
        return real(model, input_ids, *a, **kw)

    b = make_batch(n=8)
    want = tiny_qwen3(dtype=torch.float64)
    got = copy.deepcopy(want)
    minibatch_step(want, torch.optim.SGD(want.parameters(), lr=0.01), b, _cfg(micro=2))
    monkeypatch.setattr(upd, "policy_logprobs", limited)
    opt = torch.optim.SGD(got.parameters(), lr=0.01)
    with caplog.at_level("WARNING", logger="agentrl"):
        st = minibatch_step(got, opt, b, _cfg(micro=8))
    for p, q in zip(got.parameters(), want.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12)
    assert st["tokens_trained"] == b.num_policy_tokens
    assert sizes[:2] == [8, 4] and set(sizes[2:]) == {2}
    assert sum("running the minibatch again with micro 4" in r.getMessage() for r in caplog.records) == 1
    sizes.clear()
    minibatch_step(got, opt, b, _cfg(micro=8))  # remembered for this model: no failed attempt
    assert set(sizes) == {2}


def test_out_of_memory_at_the_floor_propagates(tiny_qwen3, make_batch, monkeypatch):
    import agentrl.rl.update as upd

    def always(*a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(upd, "policy_logprobs", always)
    model = tiny_qwen3(dtype=torch.float64)
    with pytest.raises(torch.OutOfMemoryError):
        minibatch_step(model, torch.optim.SGD(model.parameters(), lr=0.01), make_batch(n=4), _cfg(micro=2))
    assert upd.smaller_microbatches(_cfg(micro_tokens=4096).update).micro_tokens == 2048
    assert upd.smaller_microbatches(_cfg(micro_tokens=300).update) is None
    assert upd.smaller_microbatches(_cfg(micro=1).update) is None


def test_defaults_are_checkpointed_token_budget_microbatches():
    # issue 26 item 5: the H200 measured 16k-token microbatches with checkpointing 1.60x as fast as 4-row
    # microbatches without, in 0.79x the memory above static (bench/README.md, fifth session)
    u = RLConfig().update
    assert u.gradient_checkpointing is True and u.micro_tokens == 16384


def test_checkpoint_if_configured_turns_it_on_only_for_training_runs(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float32)
    assert checkpoint_if_configured(RLConfig.from_flat(steps=0), model) is False
    assert not model.is_gradient_checkpointing
    assert checkpoint_if_configured(RLConfig.from_flat(gradient_checkpointing=False), model) is False
    assert checkpoint_if_configured(RLConfig.from_flat(steps=2), model) is True
    assert model.is_gradient_checkpointing and model.training


def test_a_model_that_cannot_checkpoint_trains_without_it_and_says_so(caplog):
    class Plain(torch.nn.Module):  # neither activation_ nor gradient_checkpointing_enable
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

    with caplog.at_level("WARNING", logger="agentrl"):
        assert checkpoint_if_configured(RLConfig.from_flat(steps=2), Plain()) is False
    assert "training without it" in caplog.text and "Plain" in caplog.text

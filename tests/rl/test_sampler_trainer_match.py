"""Sampler = trainer (DESIGN.md rule 2) with top-k and top-p set: the log-probs both samplers record for the
tokens they drew equal the trainer's recomputation (agentrl.rl.logprobs.policy_logprobs) within 1e-5 in
fp32 on CPU, because the trainer masks its logits with the very warpers the samplers used; the update's
loss stays finite when a token falls outside the current policy's kept set."""

import math

import pytest
import torch

from agentrl.models.load import load_policy
from agentrl.rl.batch import TrainBatch
from agentrl.rl.config import RLConfig
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.loss import policy_loss
from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig, sample_turns

EOT = 151645
SETTINGS = [(1.0, 5, 1.0), (1.0, 0, 0.7), (0.8, 7, 0.9), (1.3, 40, 0.95)]  # (temperature, top_k, top_p)


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3", "fp32")


def _contexts(tok):
    texts = ["def f(x):\n    return x + 1\n", "Fix the bug in range_sum; tests are in test_range_sum.py.", "hi"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _sample(kind, model, tok, ctx, cfg):
    torch.manual_seed(11)
    if kind == "hf":
        return sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg)
    return FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg)(ctx)


def _batch(ctx, samples):
    """[N, L] right-padded rows context + sampled ids, policy mask on the sampled ids."""
    rows = [list(c) + list(s.ids) for c, s in zip(ctx, samples, strict=True)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    pmask = torch.zeros_like(ids)
    for i, (c, r) in enumerate(zip(ctx, rows, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        pmask[i, len(c): len(r)] = 1
    return ids, attn, pmask


def _train_batch(ctx, samples):
    """A TrainBatch of the sampled rows: old log-probs = the sampler's recorded ones, advantages 1, -1, 0.5."""
    ids, attn, pmask = _batch(ctx, samples)
    old = torch.zeros(ids.shape, dtype=torch.float32)
    for i, (c, s) in enumerate(zip(ctx, samples, strict=True)):
        old[i, len(c): len(c) + len(s.ids)] = torch.tensor(s.logprobs)
    return TrainBatch(input_ids=ids, attention_mask=attn, policy_mask=pmask, old_logprobs=old,
                      advantages=torch.tensor([1.0, -1.0, 0.5]), rewards=torch.zeros(3))


@pytest.mark.parametrize("kind", ["hf", "fast"])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), SETTINGS)
def test_trainer_logprobs_equal_sampler_logprobs_under_top_k_top_p(policy, kind, temperature, top_k, top_p):
    model, tok = policy
    ctx = _contexts(tok)
    samples = _sample(kind, model, tok, ctx, SamplingConfig(max_new_tokens=12, temperature=temperature,
                                                            top_k=top_k, top_p=top_p))
    ids, attn, pmask = _batch(ctx, samples)
    with torch.no_grad():
        lp, ent = policy_logprobs(model, ids, attn, pmask, temperature=temperature, top_k=top_k, top_p=top_p)
        plain, _ = policy_logprobs(model, ids, attn, pmask, temperature=temperature)
    sampled = torch.zeros_like(lp)
    for i, (c, s) in enumerate(zip(ctx, samples, strict=True)):
        sampled[i, len(c): len(c) + len(s.ids)] = torch.tensor(s.logprobs)
    on = pmask.bool()
    assert torch.isfinite(lp[on]).all() and torch.isfinite(ent).all()
    assert (lp[on] - sampled[on]).abs().max().item() < 1e-5
    # what the trainer computed before (temperature only) is another distribution: it would not pass
    assert (plain[on] - sampled[on]).abs().max().item() > 1e-2
    # the masked distribution keeps at most top_k tokens, so its entropy is at most log(top_k)
    if top_k:
        assert ent[on].max().item() <= torch.log(torch.tensor(float(top_k))).item() + 1e-5


def test_update_path_uses_the_config_masks(policy):
    """RLConfig's top_k/top_p reach the trainer: minibatch_step's first-epoch ratio is 1 on sampled tokens."""
    from agentrl.rl.update import accumulate_gradients

    model, tok = policy
    ctx = _contexts(tok)
    cfg = RLConfig.from_flat(top_k=6, top_p=0.8, temperature=0.9, micro=2, minibatches=1, prompts_per_step=1, group_size=3)
    samples = _sample("hf", model, tok, ctx, SamplingConfig(max_new_tokens=10, temperature=0.9, top_k=6, top_p=0.8))
    batch = _train_batch(ctx, samples)
    st = accumulate_gradients(model, batch, cfg, normalizer=float(batch.policy_mask.sum()))
    model.zero_grad(set_to_none=True)
    assert abs(st["ratio_mean"] - 1.0) < 1e-5 and st["logprob_gap_abs"] < 1e-5 and st["outside_support"] == 0.0


def test_a_token_outside_the_kept_set_has_ratio_zero_and_no_nan():
    """logp = -inf (the current policy's top-k/top-p no longer keeps the sampled token): ratio exactly 0, so the
    clipped surrogate is constant for both signs of A (no gradient), and loss, gradient and stats stay finite."""
    raw = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-0.4, -1.2, -2.0]])
    mask = torch.ones(1, 3)
    for a in (1.0, -1.0):
        raw.grad = None
        logp = torch.where(torch.tensor([[False, True, False]]), torch.tensor(float("-inf")), raw)
        loss, st = policy_loss(logp, old, torch.tensor([a]), mask, normalizer=3.0, ref_logp=old - 0.1, kl_coef=0.1)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(raw.grad).all() and raw.grad[0, 1] == 0
        assert all(v == v and abs(v) != float("inf") for v in st.values())
        assert st["outside_support"] == pytest.approx(1 / 3)
        # by hand: token 0 has r = e^-0.1 inside [0.8, 1.2], so -A r; token 1 has r = 0, clipped to 0.8:
        # max(-A*0, -A*0.8) = 0 for A > 0 and 0.8 for A < 0; token 2 has r = 1: -A. k3 to ref = old - 0.1 on the
        # live tokens: d = ref - logp = 0 (token 0) and -0.1 (token 2), k3 = e^d - d - 1; token 1 is left out
        r0 = math.exp(-0.1)
        surrogate = -a * r0 + (0.8 if a < 0 else 0.0) - a
        kl = math.exp(-0.1) + 0.1 - 1.0
        assert loss.item() == pytest.approx((surrogate + 0.1 * kl) / 3.0, abs=1e-6)


def test_proximal_logprobs_use_the_samplers_warpers_and_stale_tokens_outside_get_weight_zero(policy):
    """Asynchronous GRPO's proximal policy is the warped distribution too: for the weights that sampled the batch
    it equals the sampler's log-probs (IS ratio 1); a token outside the proximal top-k set gets IS weight 0 and
    keeps a finite old log-prob, so the loss (both signs of A) stays finite."""
    from agentrl.rl.offpolicy import correct_stale_batch, proximal_logprobs

    model, tok = policy
    ctx = _contexts(tok)
    cfg = RLConfig.from_flat(top_k=4, top_p=0.9, temperature=1.1, micro=2, minibatches=1, prompts_per_step=1, group_size=3,
                   is_correction="always")
    samples = _sample("fast", model, tok, ctx, SamplingConfig(max_new_tokens=8, temperature=1.1, top_k=4, top_p=0.9))
    batch = _train_batch(ctx, samples)
    ids, attn, pmask, old = batch.input_ids, batch.attention_mask, batch.policy_mask, batch.old_logprobs
    prox = proximal_logprobs(model, batch, cfg)
    on = pmask.bool()
    assert (prox[on] - old[on]).abs().max().item() < 1e-5 and torch.isfinite(prox).all()
    # a stale token the current weights' top-k no longer keeps: pretend row 0's first sampled token is outside
    row0 = int(on[0].nonzero()[0])
    ids2 = ids.clone()
    with torch.no_grad():
        logits = model(ids[:1, :row0]).logits[0, -1]
    ids2[0, row0] = int(logits.argsort()[0])  # the least likely token: outside any top-4
    batch2 = TrainBatch(input_ids=ids2, attention_mask=attn, policy_mask=pmask, old_logprobs=old,
                        advantages=batch.advantages, rewards=batch.rewards)
    corrected, st = correct_stale_batch(model, batch2, cfg, staleness=1)
    assert corrected.is_weights[0, row0] == 0.0 and torch.isfinite(corrected.old_logprobs).all()
    assert corrected.old_logprobs[0, row0] == old[0, row0]
    # (the changed token also changes later tokens' contexts, so more of them may fall outside)
    outside = torch.isneginf(proximal_logprobs(model, batch2, cfg)) & on
    assert outside[0, row0] and (corrected.is_weights[outside] == 0).all()
    assert st["is/frac_outside_support"] == pytest.approx(float(outside.sum()) / int(on.sum()))
    from agentrl.rl.update import accumulate_gradients

    stats = accumulate_gradients(model, corrected, cfg, normalizer=float(pmask.sum()))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    assert math.isfinite(stats["loss"]) and all(torch.isfinite(g).all() for g in grads)


def test_lora_is_refused_with_a_sampler_that_reads_the_base_weights():
    from agentrl.rollout.samplers import SAMPLERS

    for name, spec in SAMPLERS.items():
        if spec.supports_lora:
            assert RLConfig.from_flat(sampler=name, lora_r=4).update.lora_r == 4
        else:
            with pytest.raises(ValueError, match=f"RLConfig.lora_r: expected 0 with --sampler {name}"):
                RLConfig.from_flat(sampler=name, lora_r=4)

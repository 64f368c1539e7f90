"""FastSampler on CPU (eager decode, no graphs) with tiny-qwen3 + the real tokenizer, against the reference
sampler and a plain forward pass: log-probs, greedy-equivalent tokens, stops, budgets, left padding, compaction."""

import shutil

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from agentrl.models.load import load_policy
from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.fast_sampler import FastSampler, fast_sampler_for, pick_token
from agentrl.rollout.hf_sampler import SamplingConfig, sample_turns

EOT = 151645


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3")


def forward_logits(model, context, ids):
    """[n, V] fp32 logits predicting `ids` after `context`: a plain, unpadded forward pass."""
    with torch.no_grad():
        return model(torch.tensor([list(context) + list(ids)])).logits.float()[0, len(context) - 1: -1]


def contexts(tok, n=3):
    texts = ["def f(x):\n    return x + 1\n", "hi", "Fix the bug in range_sum; tests are in test_range_sum.py.",
             "a much longer context " * 6, "x = [i * i for i in range(10)]", "ok"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in (texts * 3)[:n]]


def test_logprobs_match_plain_forward_with_chunks_and_compaction(policy):
    model, tok = policy
    ctx = contexts(tok, 11)
    budgets = [1, 2, 3, 17, 4, 5, 20, 6, 2, 9, 13]
    torch.manual_seed(0)
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=10, check_every=2,
                     length_multiple=16)
    samples = fs(ctx, budgets)
    assert [len(s.ids) for s in samples] == budgets and all(s.hit_token_limit for s in samples)
    worst = 0.0
    for c, s in zip(ctx, samples, strict=True):
        lp = torch.log_softmax(forward_logits(model, c, s.ids), -1).gather(1, torch.tensor(s.ids)[:, None])[:, 0]
        worst = max(worst, (lp - torch.tensor(s.logprobs)).abs().max().item())
    assert worst < 1e-4, worst
    assert len({s.ids for s in samples if len(s.ids) >= 5}) == sum(len(s.ids) >= 5 for s in samples)


def test_top_k_1_equals_reference_sampler_and_argmax(policy):
    """Greedy-equivalent: with top_k=1 both samplers are deterministic, so tokens must match exactly."""
    model, tok = policy
    ctx = contexts(tok, 5)
    cfg = SamplingConfig(max_new_tokens=12, top_k=1)
    budgets = [12, 3, 12, 7, 12]
    ref = sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg, max_new_tokens=budgets)
    fast = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg, check_every=3)(ctx, budgets)
    assert [s.ids for s in fast] == [s.ids for s in ref]
    assert all(lp == 0.0 for s in fast for lp in s.logprobs)  # a one-token distribution
    for c, s in zip(ctx, fast, strict=True):  # and the tokens are the plain forward's argmax
        assert forward_logits(model, c, s.ids).argmax(-1).tolist() == list(s.ids)


def test_left_padding_does_not_change_a_row(policy):
    model, tok = policy
    ctx = contexts(tok, 4)
    cfg = SamplingConfig(max_new_tokens=10, top_k=1)
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg)
    together = fs(ctx)
    alone = [fs([c])[0] for c in ctx]
    assert [s.ids for s in together] == [s.ids for s in alone]


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, 0, 0.9), (1.3, 50, 1.0), (1.0, 0, 0.5)])
def test_warped_logprobs_are_the_sampling_distributions(policy, temperature, top_k, top_p):
    model, tok = policy
    ctx = contexts(tok, 3)
    cfg = SamplingConfig(max_new_tokens=8, temperature=temperature, top_k=top_k, top_p=top_p)
    torch.manual_seed(3)
    samples = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg)(ctx)
    for c, s in zip(ctx, samples, strict=True):
        scores = forward_logits(model, c, s.ids)
        for w in (TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k) if top_k else None,
                  TopPLogitsWarper(top_p) if top_p < 1 else None):
            scores = w(None, scores) if w is not None else scores
        want = torch.log_softmax(scores, -1).gather(1, torch.tensor(s.ids)[:, None])[:, 0]
        assert torch.isfinite(want).all()  # every sampled token lies inside the kept set
        assert (want - torch.tensor(s.logprobs)).abs().max().item() < 1e-4


def test_stops_at_end_of_turn_and_keeps_it(policy):
    model, tok = policy
    ctx = contexts(tok, 3)
    with torch.no_grad():
        bias = torch.zeros(model.config.vocab_size)
        bias[EOT] = 1e4
        model.lm_head.bias = torch.nn.Parameter(bias)
    try:
        samples = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id)(ctx, [8, 1, 5])
    finally:
        model.lm_head.bias = None
    assert [s.ids for s in samples] == [(EOT,)] * 3 and not any(s.hit_token_limit for s in samples)
    assert all(abs(s.logprobs[0]) < 1e-4 for s in samples)


def test_stop_mid_turn_truncates_after_stop(policy):
    """Make EOT certain only after a specific token: rows stop right after it, others run to budget."""
    model, tok = policy
    ctx = contexts(tok, 4)
    cfg = SamplingConfig(max_new_tokens=10, top_k=1)
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=cfg)
    free = fs(ctx)
    stop_tok = free[0].ids[2]  # pretend this greedy token is an end-of-turn id
    got = FastSampler(model, stop_ids=(stop_tok,), pad_id=tok.pad_token_id, cfg=cfg)(ctx)
    for f, g in zip(free, got, strict=True):
        cut = f.ids.index(stop_tok) + 1 if stop_tok in f.ids else len(f.ids)
        assert g.ids == f.ids[:cut] and g.hit_token_limit == (stop_tok not in f.ids)


def test_bad_input_and_unsupported_models(policy):
    model, tok = policy
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id)
    with pytest.raises(ValueError, match="budget"):
        fs([[1, 2], []])
    with pytest.raises(ValueError, match="budget"):
        fs([[1, 2]], [0])
    model.config.model_type = "gemma2"
    try:
        with pytest.raises(ValueError, match="not supported"):
            FastSampler(model, stop_ids=(EOT,), pad_id=0)
    finally:
        model.config.model_type = "qwen3"
    with pytest.raises(ValueError, match="CUDA"):
        FastSampler(model, stop_ids=(EOT,), pad_id=0, use_cuda_graphs=True)


def test_finer_compaction_buckets_change_no_token_or_logprob(policy):
    """bucket_sizes: live rows compacted into more, smaller buckets; greedy tokens equal the default buckets'
    and the reference sampler's, sampled log-probs equal a plain forward's."""
    model, tok = policy
    ctx = contexts(tok, 10)
    budgets = [1, 3, 14, 5, 9, 2, 14, 7, 11, 4]
    kw = dict(stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=10, check_every=2, length_multiple=16)
    greedy = SamplingConfig(max_new_tokens=14, top_k=1)
    fine = FastSampler(model, cfg=greedy, bucket_sizes=(1, 2, 3, 4, 6, 8), **kw)
    assert fine._buckets(10) == [1, 2, 3, 4, 6, 8, 10]
    coarse = FastSampler(model, cfg=greedy, **kw)(ctx, budgets)
    ref = sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=greedy, max_new_tokens=budgets)
    assert [s.ids for s in fine(ctx, budgets)] == [s.ids for s in coarse] == [s.ids for s in ref]
    torch.manual_seed(0)
    samples = FastSampler(model, bucket_sizes=(2, 3, 5), **kw)(ctx, budgets)
    assert [len(s.ids) for s in samples] == budgets
    for c, s in zip(ctx, samples, strict=True):
        lp = torch.log_softmax(forward_logits(model, c, s.ids), -1).gather(1, torch.tensor(s.ids)[:, None])[:, 0]
        assert (lp - torch.tensor(s.logprobs)).abs().max().item() < 1e-4
    with pytest.raises(ValueError, match="bucket_sizes"):
        FastSampler(model, bucket_sizes=(0, 8), **kw)


def test_plugs_into_run_episodes(policy):
    from test_driver import EchoEnv, check_invariants, task

    model, tok = policy
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=12))
    trajs = run_episodes(model, tok, [(EchoEnv(max_turns=2), task(i)) for i in range(4)], cfg=cfg, seed=0,
                         sampler=fast_sampler_for(model, tok, cfg.sampling, max_batch=3))
    for tr in trajs:
        check_invariants(tr)
        ctx = list(tr.prompt_ids)
        for turn in tr.turns:
            lp = torch.log_softmax(forward_logits(model, ctx, turn.completion_ids), -1)
            got = lp.gather(1, torch.tensor(turn.completion_ids)[:, None])[:, 0]
            assert (got - torch.tensor(turn.sampler_logprobs)).abs().max() < 1e-4
            ctx += list(turn.completion_ids + turn.observation_ids)


def test_top_k_1_with_a_tied_top_logit_samples_among_the_tied(policy):
    """Why two greedy (top_k=1) runs can rightly differ: HF's TopKLogitsWarper keeps every score >= the k-th, so
    a top logit shared by two tokens (common with a bf16 head over 151k ids) leaves both, and the sampler draws
    one of them with log-prob log(1/2); which one depends on the RNG stream (bench_rollout's greedy_agreement
    therefore compares graphs vs no graphs only up to each row's first tie)."""
    model, tok = policy
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=SamplingConfig(top_k=1))
    logits = torch.randn(4000, 50)
    logits[:, 7] = logits[:, 30] = logits.max(dim=1).values + 1.0  # tokens 7 and 30 tie at the top
    torch.manual_seed(0)
    tok_ids, logp = fs._sample(logits)
    assert set(tok_ids.tolist()) == {7, 30} and 0.45 < (tok_ids == 7).float().mean().item() < 0.55
    assert torch.allclose(logp, torch.full_like(logp, -torch.log(torch.tensor(2.0)).item()))
    logits[:, 30] -= 1e-3  # no tie: the argmax, log-prob 0
    tok_ids, logp = fs._sample(logits)
    assert (tok_ids == 7).all() and (logp == 0).all()


def test_a_failed_graph_capture_turns_graphs_off_and_raises(policy, monkeypatch, caplog):
    """A capture runs under CUDA_CAPTURE_LOCK; one that fails (another thread's allocation invalidated it, as
    on the H200 with async opencode GRPO) leaves no graph, turns graphs off for the sampler's later calls and
    raises, so the batch's failure is recorded. The capture itself needs CUDA; the bookkeeping is checked here."""
    from agentrl.rollout.fast_sampler import CUDA_CAPTURE_LOCK

    model, tok = policy
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id)
    fs.graphs_on = True  # as on a CUDA device
    seen = []

    def capture(b, span):
        seen.append(CUDA_CAPTURE_LOCK._is_owned())
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(fs, "_capture", lambda b, span: f"graph {b} x {span}")  # a capture that works is counted
    assert fs._graph(8, 64) == "graph 8 x 64" and fs._graph(8, 64) == "graph 8 x 64"  # once per (batch, span)
    assert fs.stats["graph_captures"] == 1 and fs.stats["capture_ms"] >= 0
    fs.graphs.clear()
    monkeypatch.setattr(fs, "_capture", capture)
    with caplog.at_level("ERROR"), pytest.raises(RuntimeError, match="during capture"):
        fs._graph(8, 64)
    assert seen == [True] and not CUDA_CAPTURE_LOCK._is_owned()
    assert fs.graphs_on is False and fs.graphs == {} and fs.pool is None
    assert "decoding without CUDA graphs from now on" in caplog.text
    got = fs(contexts(tok, 2), [3, 3])  # the next call decodes eagerly (graphs_on is off: no capture is tried)
    assert all(1 <= len(s.ids) == len(s.logprobs) <= 3 for s in got) and fs.graphs == {}


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="inductor on the CPU needs a C compiler")
def test_compiled_decode_step_samples_what_the_eager_one_does(policy):
    """compile_decode (each layer's regions around its attention and the token pick through torch.compile; cache
    write, attention and the noise draw eager): the same tokens and log-probs as the eager step for the same seed
    (fp32), across chunked checks, ragged budgets, growing spans and a compaction from 4 rows to 2, with two graphs
    per layer region for all of it, one for the prefill's [b, S] queries and one for a decode step's single one
    (dynamo specializes a size of 1), and one for the pick whatever the batch: no recompile per layer (the first
    layer's input is no different), per span (the regions never see the cache) or per batch bucket (dynamic), and
    no graph break."""
    from torch._dynamo.utils import counters

    model, tok = policy
    ctx, budgets = contexts(tok, 4), [14, 3, 5, 14]
    kw = dict(stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=SamplingConfig(max_new_tokens=14), check_every=2,
              length_multiple=4, bucket_sizes=(2,))
    torch.manual_seed(7)
    eager = FastSampler(model, **kw)(ctx, budgets)
    torch._dynamo.reset()  # earlier tests' compiled code shares these functions' code objects
    counters.clear()
    compiled = FastSampler(model, compile_decode=True, **kw)
    torch.manual_seed(7)
    got = compiled(ctx, budgets)
    assert [s.ids for s in got] == [s.ids for s in eager]
    assert max(abs(a - b) for s, e in zip(got, eager, strict=True) for a, b in zip(s.logprobs, e.logprobs, strict=True)) < 1e-4
    assert len(model.model.layers) >= 2 and not counters["graph_break"]
    # pre_ and post_attention, each for prefill and for decode; pick_token once, for every batch (dynamic)
    assert counters["stats"]["unique_graphs"] == 5
    assert counters["frames"]["total"] == 5


def test_fresh_prefill_equals_prefill_over_a_kept_prefix(policy):
    """Rows that all start at column 0 take the causal SDPA path over their own keys; rows extending kept KV take
    the masked path over the cache. Prefilling each context whole, or its first half and then the rest, gives
    the same last-token logits and the same cache columns (rows of different lengths and kept prefixes, GQA,
    unordered slots)."""
    from agentrl.rollout.fast_model import SlotState, arch_of, prefill_slots, rope_tables

    model, tok = policy
    arch = arch_of(model)
    assert arch.n_heads > arch.n_kv  # GQA: the causal path's enable_gqa is exercised
    ctxs = [c for c in contexts(tok, 6) if len(c) >= 2][:4]  # each row keeps a prefix and prefills the rest
    assert len(ctxs) == 4
    starts = [len(c) // 2 for c in ctxs]
    width = max(map(len, ctxs))
    rope = rope_tables(arch, width + 8, torch.float32, "cpu")
    slots = [3, 0, 2, 1]
    with torch.no_grad():
        whole, split = (SlotState(arch, 4, width + 8, 4, torch.float32, "cpu") for _ in range(2))
        want = prefill_slots(arch, whole, rope, slots, ctxs, [0] * 4, 0, 16384)
        prefill_slots(arch, split, rope, slots, [c[:p] for c, p in zip(ctxs, starts, strict=True)], [0] * 4, 0, 16384)
        got = prefill_slots(arch, split, rope, slots, ctxs, starts, 0, 16384)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for s, c in zip(slots, ctxs, strict=True):
        for cache_w, cache_s in zip((*whole.k, *whole.v), (*split.k, *split.v), strict=True):
            torch.testing.assert_close(cache_s[s, :, :len(c)], cache_w[s, :, :len(c)], atol=1e-5, rtol=1e-5)


def test_fused_projections_sample_what_the_modules_do_and_follow_the_weights(policy):
    """fuse_projections (q/k/v and gate/up each one GEMM over a copy of the weights): the same tokens and log-probs
    as the layers' own modules for the same seed (fp32), prefill and decode; after an in-place change of the weights
    (an optimizer step) the next call copies them again in place (same addresses, so captured graphs stay valid)
    and samples what a sampler built on the new weights samples."""
    import copy

    model, tok = policy
    model = copy.deepcopy(model)  # its weights change below
    ctx, budgets = contexts(tok, 5), [9, 2, 9, 5, 7]
    kw = dict(stop_ids=(EOT,), pad_id=tok.pad_token_id, check_every=3, length_multiple=8)

    def run(fs):
        torch.manual_seed(3)
        return fs(ctx, budgets)

    fused = FastSampler(model, fuse_projections=True, **kw)
    assert fused.fused is not None and fused.fused.nbytes > 0
    assert FastSampler(model, **kw).fused is None  # default on the CPU: the modules
    for fresh in (False, True):
        if fresh:  # the weights move; the fused copies must follow
            ptrs = [p.qkv.data_ptr() for p in fused.fused.layers]
            with torch.no_grad():
                for i, p in enumerate(model.parameters()):
                    p.add_(torch.randn_like(p) * 0.02, alpha=1 + i % 3)
        got, want = run(fused), run(FastSampler(model, fuse_projections=False, **kw))
        assert [s.ids for s in got] == [s.ids for s in want]
        worst = max(abs(a - b) for s, w in zip(got, want, strict=True) for a, b in zip(s.logprobs, w.logprobs, strict=True))
        assert worst < 1e-5, worst
    assert [p.qkv.data_ptr() for p in fused.fused.layers] == ptrs
    assert not fused.fused.refresh(fused.fused.version)  # unchanged weights: nothing copied


def test_fuse_projections_refuses_layers_it_cannot_fuse(policy):
    """A projection that is not a plain nn.Linear (peft's or a quantizer's wrapper) is not fused: True raises
    naming the layer, None leaves the modules in use."""
    import copy

    class Wrapped(torch.nn.Linear):
        pass

    model, tok = policy
    model = copy.deepcopy(model)
    old = model.model.layers[1].self_attn.k_proj
    wrapped = Wrapped(old.in_features, old.out_features, bias=old.bias is not None)
    wrapped.load_state_dict(old.state_dict())
    model.model.layers[1].self_attn.k_proj = wrapped
    with pytest.raises(ValueError, match="fuse_projections: layer 1"):
        FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, fuse_projections=True)
    assert FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id).fused is None


def test_the_race_picks_each_token_with_its_probability():
    """pick_token is an exact categorical draw: over 40,000 draws from p = softmax(scores) (a token masked to -inf
    among them) each token's frequency is within 4 standard errors of p, the masked one never drawn, and the
    log-prob returned is log p of the token drawn."""
    torch.manual_seed(0)
    scores = torch.tensor([[2.0, 0.5, float("-inf"), -1.0, 1.0]]).expand(40000, 5)
    p = torch.softmax(scores[0], -1)
    tok, logp = pick_token(scores, torch.empty(scores.shape).exponential_())
    freq = torch.bincount(tok, minlength=5).double() / len(tok)
    se = (p.double() * (1 - p.double()) / len(tok)).sqrt()
    assert freq[2] == 0 and bool(((freq - p.double()).abs() <= 4 * se + 1e-12).all()), (freq, p)
    torch.testing.assert_close(logp, torch.log(p)[tok])


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="inductor on the CPU needs a C compiler")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_pick_is_the_eager_pick(dtype):
    """torch.compile(pick_token) (compile_decode) picks the eager pick's tokens for the same noise, with log-probs
    within 1e-5, for logits of the model's dtype and warped fp32 scores with -inf entries, at several batch sizes
    through one dynamic graph."""
    torch._dynamo.reset()
    compiled = torch.compile(pick_token, dynamic=True)
    gen = torch.Generator().manual_seed(1)
    for b in (3, 8, 17):
        scores = (4 * torch.randn(b, 2000, generator=gen)).to(dtype)
        if dtype == torch.float32:
            scores[:, ::7] = float("-inf")  # as top-k / top-p leave them
        race = torch.empty(b, 2000).exponential_(generator=gen)
        want, got = pick_token(scores, race), compiled(scores, race)
        assert torch.equal(got[0], want[0]) and got[1].dtype == torch.float32
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)

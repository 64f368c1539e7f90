"""FastSampler's decode attention on CPU (fp32 tiny-qwen3: 4 query heads over 2 KV heads): "sdpa" (one
scaled_dot_product_attention call, GQA folded into the query axis, additive per-row key mask), "sdpa_gqa"
(enable_gqa=True) and "triton" (the split-KV kernel in Triton's interpreter) against "matmul" (the default), a hand-written reference and a plain forward pass on ragged
batches, and the sampler's log-probs against the trainer's recomputation
(agentrl.rl.update.accumulate_gradients, the update's own scoring path) across kept-KV turns (issue 26 item 4)."""

import pytest
import torch
from test_fast_sampler import EOT, contexts, forward_logits

from agentrl.models.load import load_policy
from agentrl.rl.batch import TrainBatch
from agentrl.rl.config import RLConfig
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.update import accumulate_gradients
from agentrl.rollout import triton_decode
from agentrl.rollout.decode_attention import COMPILED_ONLY, DECODE_ATTENTION, attend, key_mask
from agentrl.rollout.fast_sampler import FastSampler, fast_sampler_for
from agentrl.rollout.hf_sampler import SamplingConfig, sample_turns

BUDGETS = [1, 2, 3, 17, 4, 5, 20, 6, 2, 9, 13]  # ragged: rows finish at different steps (compaction)


def _runs_here(form: str) -> bool:
    """"triton" runs on the CPU only in Triton's interpreter (tests/conftest.py) and with triton installed."""
    if form != "triton":
        return True
    try:
        triton_decode.check_device(torch.device("cpu"))
    except ValueError:
        return False
    return True


FORMS = tuple(a for a in DECODE_ATTENTION if _runs_here(a))
# the forms the sampler runs eagerly; "flex" compiles the decode layer (seconds per shape on CPU): its own test below
EAGER = tuple(a for a in FORMS if a not in COMPILED_ONLY)


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3", "fp32")


def sampler(model, tok, attention, **kw):
    return FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=10, check_every=2,
                       length_multiple=16, decode_attention=attention, **kw)


def forward_logprobs(model, ctx, ids):
    lp = torch.log_softmax(forward_logits(model, ctx, ids), -1)
    return lp.gather(1, torch.tensor(ids)[:, None])[:, 0]


def test_attend_forms_equal_a_reference_on_ragged_gqa_masks():
    """One decode query per row over a left-padded cache, GQA 4 over 2, rows with 1 to 40 valid keys."""
    torch.manual_seed(3)
    b, nh, nkv, d, length = 6, 4, 2, 16, 40
    q = torch.randn(b, nh, 1, d)
    k, v = torch.randn(b, nkv, length, d), torch.randn(b, nkv, length, d)
    starts = torch.tensor([0, 3, 39, 17, 20, 5])
    ends = torch.tensor([40, 40, 40, 30, 21, 38])  # some rows' last columns unwritten yet
    cols = torch.arange(length)
    valid = (cols[None] >= starts[:, None]) & (cols[None] < ends[:, None])
    # reference: each query head j reads KV head j // 2, softmax over the row's valid keys only
    kr, vr = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    scale = 16 ** -0.5
    s = (q @ kr.transpose(-1, -2)) * scale
    ref = (s.masked_fill(~valid[:, None, None], float("-inf")).softmax(-1) @ vr).reshape(b, 1, nh * d)
    out = {}
    for att in FORMS:
        out[att] = attend(q, k, v, key_mask(valid, att, q.dtype), att, scale)
        assert out[att].shape == (b, 1, nh * d)
        assert (out[att] - ref).abs().max().item() < 1e-5, att
    for att in FORMS:
        assert (out[att] - out["matmul"]).abs().max().item() < 1e-5
    mask = key_mask(valid, "sdpa", torch.float32)
    assert mask.shape == (b, 1, 1, length) and (mask[:, 0, 0] == 0).equal(valid)
    assert mask[:, 0, 0][~valid].isneginf().all()
    with pytest.raises(ValueError, match="form"):
        attend(q, k, v, valid, "flash", scale)


def test_sdpa_logprobs_equal_matmul_and_plain_forward_on_a_ragged_batch(policy):
    """Same seed, same tokens: the two attentions draw the same race on the same logits up to rounding; the
    recorded log-probs equal each other and a plain unpadded forward's within 1e-5 mean (and 1e-4 max)."""
    model, tok = policy
    ctx = contexts(tok, 11)
    got = {}
    for att in EAGER:
        torch.manual_seed(0)
        got[att] = sampler(model, tok, att)(ctx, BUDGETS)
        assert [len(s.ids) for s in got[att]] == BUDGETS
    mm = torch.tensor([x for s in got["matmul"] for x in s.logprobs])
    for att in EAGER:
        assert [s.ids for s in got[att]] == [s.ids for s in got["matmul"]], att
        lp = torch.tensor([x for s in got[att] for x in s.logprobs])
        fw = torch.cat([forward_logprobs(model, c, s.ids) for c, s in zip(ctx, got[att], strict=True)])
        assert (lp - mm).abs().mean().item() < 1e-5 and (lp - fw).abs().mean().item() < 1e-5, att
        assert (lp - fw).abs().max().item() < 1e-4, att
    assert len({s.ids for s in got["sdpa"] if len(s.ids) >= 5}) == sum(len(s.ids) >= 5 for s in got["sdpa"])


def test_sdpa_greedy_tokens_equal_matmul_and_reference_sampler(policy):
    model, tok = policy
    ctx = contexts(tok, 11)
    greedy = SamplingConfig(max_new_tokens=20, top_k=1)
    ref = sample_turns(model, ctx, stop_ids=(EOT,), pad_id=tok.pad_token_id, cfg=greedy, max_new_tokens=BUDGETS)
    ids = {att: [s.ids for s in sampler(model, tok, att, cfg=greedy)(ctx, BUDGETS)] for att in EAGER}
    assert all(ids[att] == [s.ids for s in ref] for att in EAGER), {att: ids[att] == ids["matmul"] for att in EAGER}


def test_decode_attention_is_checked_and_reaches_fast_sampler_for(policy):
    model, tok = policy
    assert FastSampler(model, stop_ids=(EOT,), pad_id=0).decode_attention == "matmul"  # the CPU's default
    assert fast_sampler_for(model, tok, decode_attention="sdpa").decode_attention == "sdpa"
    with pytest.raises(ValueError, match="decode_attention"):
        FastSampler(model, stop_ids=(EOT,), pad_id=0, decode_attention="flash")


def test_default_form_is_triton_on_cuda_from_ampere_where_triton_imports(monkeypatch):
    """decode_attention.default_form: "triton" on CUDA of compute capability >= 8.0 with triton, else "matmul"
    (the CPU, older GPUs, no triton). The CUDA answers are asked of a patched device query, so they hold here."""
    from agentrl.rollout import decode_attention, triton_decode

    assert decode_attention.default_form("cpu") == "matmul"
    monkeypatch.setattr(triton_decode, "available", lambda: True)
    for capability, want in (((9, 0), "triton"), ((8, 0), "triton"), ((7, 5), "matmul")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert decode_attention.default_form("cuda:0") == want, capability
    monkeypatch.setattr(triton_decode, "available", lambda: False)
    assert decode_attention.default_form(torch.device("cuda", 0)) == "matmul"


def _two_turn_rows(model, tok, attention):
    """Two turns of 6 episodes (groups of 2 shared prompts) through one sampler, the second turn extending the
    first by its sampled ids + 'tool response' ids, so it prefills from kept KV. Returns (rows, policy masks,
    sampler log-probs) per episode, and the sampler's stats of the second call."""
    c = contexts(tok, 3)
    ctx = [c[0], c[0], c[1], c[1], c[2], c[2]]
    fs = fast_sampler_for(model, tok, SamplingConfig(max_new_tokens=9), max_batch=6, check_every=2,
                          length_multiple=16, decode_attention=attention)
    torch.manual_seed(5)
    first = fs(ctx, [9, 4, 7, 9, 2, 6])
    obs = tok("<tool_response>ok</tool_response>", add_special_tokens=False)["input_ids"]
    ctx2 = [list(x) + list(s.ids) + obs for x, s in zip(ctx, first, strict=True)]
    second = fs(ctx2, [5, 9, 3, 8, 9, 4])
    assert fs.stats["reused_tokens"] > 0  # the second turn ran from kept KV
    rows = []
    for x, s1, s2 in zip(ctx, first, second, strict=True):
        ids = list(x) + list(s1.ids) + obs + list(s2.ids)
        mask = [0] * len(x) + [1] * len(s1.ids) + [0] * len(obs) + [1] * len(s2.ids)
        old = [0.0] * len(x) + list(s1.logprobs) + [0.0] * len(obs) + list(s2.logprobs)
        rows.append((ids, mask, old))
    return rows


def test_flex_attention_compiled_equals_matmul_on_a_ragged_batch(policy):
    """"flex" (FlexAttention, the decode layer compiled): the same tokens as "matmul" for the same seed and
    log-probs within 1e-5 mean of its and of a plain forward's, on ragged budgets (rows finishing early)."""
    model, tok = policy
    ctx, budgets = contexts(tok, 4), [3, 6, 1, 5]
    got = {}
    for att in ("matmul", "flex"):
        torch.manual_seed(0)
        fs = sampler(model, tok, att)
        got[att] = fs(ctx, budgets)
    assert fs.compile_decode  # "flex" implies the compiled layer
    assert [s.ids for s in got["flex"]] == [s.ids for s in got["matmul"]]
    lp = torch.tensor([x for s in got["flex"] for x in s.logprobs])
    mm = torch.tensor([x for s in got["matmul"] for x in s.logprobs])
    fw = torch.cat([forward_logprobs(model, c, s.ids) for c, s in zip(ctx, got["flex"], strict=True)])
    assert (lp - mm).abs().mean().item() < 1e-5 and (lp - fw).abs().mean().item() < 1e-5


def test_flex_attend_compiled_equals_the_reference():
    """attend(.., "flex") inside torch.compile (the fused path) on ragged GQA masks, against "matmul"."""
    torch.manual_seed(4)
    b, nh, nkv, d, length = 3, 4, 2, 16, 32
    q, k, v = torch.randn(b, nh, 1, d), torch.randn(b, nkv, length, d), torch.randn(b, nkv, length, d)
    valid = torch.arange(length)[None] <= torch.tensor([0, 9, 31])[:, None]
    ref = attend(q, k, v, key_mask(valid, "matmul", q.dtype), "matmul", 0.25)
    fused = torch.compile(attend, dynamic=False)(q, k, v, key_mask(valid, "flex", q.dtype), "flex", 0.25)
    assert (fused - ref).abs().max().item() < 1e-5


@pytest.mark.parametrize("attention", EAGER)
def test_sampler_logprobs_equal_the_trainers_across_kept_kv_turns(policy, attention):
    """Issue 26 item 4 on CPU: fp32 sampler log-probs (group-shared prefill, kept KV for turn 2, ragged budgets)
    vs the update's recomputation: policy_logprobs directly and accumulate_gradients' logprob_gap_abs (the
    figure a training run logs) both within 1e-5 nats/token mean absolute difference."""
    model, tok = policy
    rows = _two_turn_rows(model, tok, attention)
    width = max(len(r[0]) for r in rows)
    n = len(rows)
    ids = torch.full((n, width), tok.pad_token_id, dtype=torch.long)
    attn, pmask = torch.zeros_like(ids), torch.zeros_like(ids)
    old = torch.zeros(n, width)
    for i, (r, m, o) in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = torch.tensor(r), 1
        pmask[i, : len(r)], old[i, : len(r)] = torch.tensor(m), torch.tensor(o)
    on = pmask.bool()
    with torch.no_grad():
        lp, _ = policy_logprobs(model, ids, attn, pmask)
    gap = (lp[on] - old[on]).abs()
    assert gap.mean().item() < 1e-5 and gap.max().item() < 1e-4, (gap.mean().item(), gap.max().item())
    batch = TrainBatch(input_ids=ids, attention_mask=attn, policy_mask=pmask, old_logprobs=old,
                       advantages=torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0]), rewards=torch.zeros(n))
    cfg = RLConfig.from_flat(micro=4, minibatches=1, prompts_per_step=3, group_size=2)
    st = accumulate_gradients(model, batch, cfg, normalizer=float(pmask.sum()))
    model.zero_grad(set_to_none=True)
    assert st["tokens_trained"] == int(pmask.sum())
    assert st["logprob_gap_abs"] < 1e-5 and abs(st["ratio_mean"] - 1.0) < 1e-5, st

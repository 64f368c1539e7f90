"""FastSampler continuous batching and KV kept in place, on CPU (fp32 tiny-qwen3, eager decode): more requests
than slots (finished rows' slots prefilled with the next request within the call) give the tokens of one-by-one
sampling and the log-probs of a plain forward; kept rows stay in their slots, through compaction, and the next
turn extends them there with the log-probs of re-encoding."""

import pytest
import torch
from test_fast_sampler import EOT, contexts
from test_fast_sampler_reuse import forward_logprobs

from agentrl.models.load import load_policy
from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3")


def make(model, tok, **kw):
    kw = {"check_every": 2, "length_multiple": 16, **kw}
    return FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, **kw)


def test_continuous_batching_equals_one_by_one_with_ragged_budgets(policy):
    model, tok = policy
    ctx = contexts(tok, 9)
    budgets = [3, 17, 1, 6, 11, 2, 9, 5, 14]
    greedy = SamplingConfig(max_new_tokens=17, top_k=1)
    cont = make(model, tok, cfg=greedy, max_batch=3)
    got = cont(ctx, budgets)
    assert cont.stats["admitted_late"] > 0  # slots were refilled within the call
    alone = [make(model, tok, cfg=greedy, max_batch=1)([c], [b])[0] for c, b in zip(ctx, budgets, strict=True)]
    assert [s.ids for s in got] == [s.ids for s in alone]
    assert [s.hit_token_limit for s in got] == [s.hit_token_limit for s in alone]
    assert [len(s.ids) for s in got] == [min(b, len(s.ids)) for s, b in zip(got, budgets, strict=True)]
    torch.manual_seed(0)
    sampled = make(model, tok, max_batch=3)(ctx, budgets)  # temperature 1: log-probs of a plain forward
    for c, s in zip(ctx, sampled, strict=True):
        assert (forward_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5


def test_continuous_batching_with_groups_admitted_late(policy):
    """GRPO groups beyond the slots: a group's repeats admitted together share the leader's prefill."""
    model, tok = policy
    c = contexts(tok, 3)
    ctx = [c[0]] * 3 + [c[1]] * 3 + [c[2]] * 3
    budgets = [2, 5, 3, 7, 4, 6, 3, 2, 5]
    torch.manual_seed(1)
    fs = make(model, tok, max_batch=3)
    got = fs(ctx, budgets)
    assert fs.stats["admitted_late"] > 0 and fs.stats["shared_rows"] > 0
    for x, s in zip(ctx, got, strict=True):
        assert (forward_logprobs(model, x, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5
        assert len(s.ids) <= budgets[ctx.index(x)] + 10


def test_kept_kv_stays_in_place_through_compaction(policy):
    """Rows finishing at ragged steps are compacted (bucket sizes 1-4) while the finished ones keep their KV;
    the next two turns extend every row in its own slot (nothing re-encoded, nothing copied out), with the
    log-probs of a plain forward and the greedy tokens of re-encoding."""
    model, tok = policy
    obs = [tok("<tool_response>ok</tool_response>", add_special_tokens=False)["input_ids"][: 2 + i] for i in range(5)]

    def turns(keep_kv, top_k):
        torch.manual_seed(3)
        fs = make(model, tok, keep_kv=keep_kv, max_batch=8, bucket_sizes=(1, 2, 3, 4),
                  cfg=SamplingConfig(max_new_tokens=12, top_k=top_k))
        compact, compactions = fs._compact, []
        fs._compact = lambda *a: compactions.append(a) or compact(*a)
        ctx, out = contexts(tok, 5), []
        for _ in range(3):
            samples = fs(ctx, [2, 12, 3, 9, 5])
            out.append((ctx, samples, dict(fs.stats)))
            ctx = [c + list(s.ids) + o for c, s, o in zip(ctx, samples, obs, strict=True)]
        assert compactions  # rows were moved while finished ones kept their KV
        return out

    kept = turns(True, 0)
    for t, (ctx, samples, stats) in enumerate(kept):
        if t:
            assert stats["kept_in_place"] == 5 and stats["cloned_out"] == 0
            assert stats["prefill_tokens"] == sum(1 + len(o) for o in obs)
        for c, s in zip(ctx, samples, strict=True):
            assert (forward_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5
    a, b = turns(True, 1), turns(False, 1)
    assert [[s.ids for s in x[1]] for x in a] == [[s.ids for s in x[1]] for x in b]

"""FastSampler KV reuse on CPU (fp32 tiny-qwen3): group prompts prefilled once, an episode's KV kept across its
turns; tokens and log-probs pinned to the plain path (no reuse) and to a plain forward pass."""

import pytest
import torch
from test_fast_sampler import EOT, contexts, forward_logits

from agentrl.models.load import load_policy
from agentrl.rollout.fast_sampler import FastSampler, fast_sampler_for
from agentrl.rollout.hf_sampler import SamplingConfig


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3")


def forward_logprobs(model, ctx, ids):
    lp = torch.log_softmax(forward_logits(model, ctx, ids), -1)
    return lp.gather(1, torch.tensor(ids)[:, None])[:, 0]


def sampler(model, tok, **kw):
    return FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, check_every=2, length_multiple=16, **kw)


def test_group_prefilled_once_logprobs_as_independent_rows(policy):
    model, tok = policy
    c = contexts(tok, 3)
    ctx = [c[0]] * 4 + [c[1]] * 3 + [c[2]]
    budgets = [6, 3, 9, 6, 5, 5, 2, 7]
    torch.manual_seed(0)
    fs = sampler(model, tok)
    got = fs(ctx, budgets)
    assert fs.stats["shared_rows"] == 5 and fs.stats["prefill_tokens"] == sum(len(x) for x in c)
    for x, s in zip(ctx, got, strict=True):
        assert (forward_logprobs(model, x, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5
    assert len({s.ids for s in got[:4]}) > 1  # the group's rows sample independently
    greedy = SamplingConfig(max_new_tokens=9, top_k=1)
    shared = sampler(model, tok, cfg=greedy)(ctx, budgets)
    alone = sampler(model, tok, cfg=greedy, share_prompts=False, keep_kv=False)(ctx, budgets)
    assert [s.ids for s in shared] == [s.ids for s in alone]


def _three_turns(model, tok, keep_kv, seed=0, max_batch=3, top_k=0):
    """Contexts extended turn by turn with the sampled ids and fake tool-response ids, as the driver does.
    With top_k=1 (greedy) the tokens of a run with kept KV and one without are comparable; sampled runs are
    not (the exponential race's noise a request gets depends on the slot it runs in, and kept rows stay in
    their own slots)."""
    torch.manual_seed(seed)
    fs = sampler(model, tok, keep_kv=keep_kv, max_batch=max_batch, cfg=SamplingConfig(max_new_tokens=9, top_k=top_k))
    ctx = contexts(tok, 5)
    obs = [tok("<tool_response>ok</tool_response>", add_special_tokens=False)["input_ids"][: 3 + i] for i in range(5)]
    turns, stats = [], []
    for _ in range(3):
        samples = fs(ctx, [4, 7, 2, 9, 5])
        turns.append((list(map(list, ctx)), samples))
        stats.append(dict(fs.stats))
        ctx = [c + list(s.ids) + o for c, s, o in zip(ctx, samples, obs, strict=True)]
    return turns, stats, obs


@pytest.mark.parametrize("max_batch", [3, 8])
def test_kv_kept_across_turns_prefills_only_appended_ids(policy, max_batch):
    """max_batch 8: every row keeps its KV in its own slot (in place, nothing copied); 3: 5 requests through 3
    slots, so two kept rows are cloned out when their slots take pending requests (still no re-encoding)."""
    model, tok = policy
    kept, st_kept, obs = _three_turns(model, tok, keep_kv=True, max_batch=max_batch)
    plain, st_plain, _ = _three_turns(model, tok, keep_kv=False, max_batch=max_batch)
    for t in (1, 2):
        assert st_kept[t]["kept_in_place"] == (5 if max_batch == 8 else 3)
        assert st_kept[t]["cloned_out"] == (0 if max_batch == 8 else 2)
    assert st_kept[0]["prefill_tokens"] == st_plain[0]["prefill_tokens"]
    for t in (1, 2):  # the last sampled id (never fed while sampling) + the tool-response ids
        assert st_kept[t]["prefill_tokens"] == sum(1 + len(o) for o in obs)
        assert st_kept[t]["reused_tokens"] + st_kept[t]["prefill_tokens"] == st_kept[t]["context_tokens"]
        assert st_plain[t]["prefill_tokens"] == st_plain[t]["context_tokens"]
    for ctx, a in kept + plain:  # in-place KV and re-encoding: the log-probs of a plain forward, each
        for c, s in zip(ctx, a, strict=True):
            assert (forward_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5
    greedy_kept = _three_turns(model, tok, keep_kv=True, max_batch=max_batch, top_k=1)[0]
    greedy_plain = _three_turns(model, tok, keep_kv=False, max_batch=max_batch, top_k=1)[0]
    for (_, a), (_, b) in zip(greedy_kept, greedy_plain, strict=True):
        assert [s.ids for s in a] == [s.ids for s in b]


def test_kept_kv_dropped_when_weights_change(policy):
    model, tok = policy
    fs = sampler(model, tok)
    ctx = contexts(tok, 2)
    first = fs(ctx, [3, 3])
    nxt = [c + list(s.ids) + [13] for c, s in zip(ctx, first, strict=True)]
    with torch.no_grad():
        model.model.norm.weight.mul_(1.0)  # an in-place update (same values): the weights' version moves
    fs(nxt, [2, 2])
    assert fs.stats["reused_tokens"] == 0
    fs.clear_kv()
    assert not fs.store.entries


def test_next_turn_feeds_exactly_the_tito_observation_ids(policy):
    """The driver's next context is context + sampled ids + chat.tito.observation_ids: with kept KV, the
    ids run through the model are exactly the last sampled id and those observation ids."""
    from test_driver import TOOLS, EchoEnv, task

    from agentrl.chat.template import render_prompt
    from agentrl.chat.tito import observation_ids
    from agentrl.envs.base import ToolCall, ToolResult

    model, tok = policy
    fs = fast_sampler_for(model, tok, SamplingConfig(max_new_tokens=6), max_batch=4)
    fed: list[list[int]] = []
    lookup = fs.store.lookup

    def spy(context):
        p, e = lookup(context)
        fed.append(list(context[p:]))
        return p, e

    fs.store.lookup = spy
    ctx = [render_prompt(tok, EchoEnv().reset(task(i))) for i in range(3)]
    torch.manual_seed(1)
    expected = []
    for turn in range(3):
        samples = fs(ctx, [6, 3, 5])
        for c, s in zip(ctx, samples, strict=True):
            assert (forward_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5
        if turn == 2:
            break
        call = ToolCall(name="echo", arguments={"text": f"turn {turn}"}, raw="")
        obs = [observation_ids([ToolResult(call, "ok", f"echo {turn} {i}")], tok, tools=TOOLS,
                               hit_token_limit=s.hit_token_limit) for i, s in enumerate(samples)]
        expected += [[s.ids[-1], *o] for s, o in zip(samples, obs, strict=True)]
        ctx = [c + list(s.ids) + o for c, s, o in zip(ctx, samples, obs, strict=True)]
    assert fed[3:] == expected  # the first 3 lookups are the prompts (nothing kept yet: whole prompt)
    assert [len(f) for f in fed[:3]] == [len(c) for c in (render_prompt(tok, EchoEnv().reset(task(i)))
                                                          for i in range(3))]


def test_partial_prefix_reused_when_the_turn_was_replaced(policy):
    """A next context that keeps the old context but not the sampled ids (e.g. a replayed expert turn) reuses
    the old context's KV only, and still matches a plain forward."""
    model, tok = policy
    fs = sampler(model, tok)
    ctx = contexts(tok, 4)[2:4]  # the two longer texts (> 8 ids)
    first = fs(ctx, [5, 5])
    other = [[t for t in (7, 8, 9) if t != s.ids[0]] + [11, 12] for s in first]
    nxt = [c + o for c, o in zip(ctx, other, strict=True)]
    torch.manual_seed(2)
    got = fs(nxt, [4, 4])
    assert fs.stats["reused_tokens"] == sum(len(c) for c in ctx)
    for c, s in zip(nxt, got, strict=True):
        assert (forward_logprobs(model, c, s.ids) - torch.tensor(s.logprobs)).abs().max() < 1e-5


def test_run_episodes_frees_kept_kv_at_the_end(policy):
    from test_driver import EchoEnv, task

    from agentrl.rollout.driver import RolloutConfig, run_episodes

    model, tok = policy
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=4))
    fs = fast_sampler_for(model, tok, cfg.sampling)
    seen = []
    finish = fs.store.finish
    fs.store.finish = lambda: (finish(), seen.append(len(fs.store.entries)))
    run_episodes(model, tok, [(EchoEnv(max_turns=2), task(i)) for i in range(2)], cfg=cfg, seed=0, sampler=fs)
    assert seen and seen[0] == 2  # each call keeps its rows for the next turn
    assert not fs.store.entries  # and end_rollout drops them once the episodes are over


def test_grading_runs_concurrently_across_episodes():
    """env.reward (the hidden-test grading) of different episodes overlaps in run_episodes' thread pool."""
    import threading

    from test_driver import EchoEnv, Script, call, task

    from agentrl.rollout.driver import RolloutConfig, run_episodes
    state = {"now": 0, "peak": 0}
    lock, gate = threading.Lock(), threading.Barrier(3, timeout=10)

    class GradedEnv(EchoEnv):
        def reward(self):
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
            gate.wait()  # returns only once 3 gradings are in flight together
            with lock:
                state["now"] -= 1
            return super().reward()

    tok = load_policy("tiny-qwen3")[1]
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=32), tool_workers=3)
    trajs = run_episodes(None, tok, [(GradedEnv(), task(i)) for i in range(3)], cfg=cfg,
                         sampler=Script(tok, [[call("a"), "done"]] * 3))
    assert state["peak"] == 3 and [t.reward for t in trajs] == [1.0] * 3

"""Issue 14.3: a turn ends at ANY end-of-sequence id of the model (every id of
generation_config.eos_token_id), in both samplers; such a turn is finished, not truncated, and no padding
enters a row as policy tokens."""

from __future__ import annotations

import pytest
import torch
from test_driver import EchoEnv, call, check_invariants, task

from agentrl.chat.template import encode
from agentrl.models.load import load_policy
from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.fast_sampler import FastSampler, fast_sampler_for
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sample_turns, stop_token_ids

EOT, EOS = 151645, 151643  # Qwen3's <|im_end|> (end of turn) and <|endoftext|> (its other eos id)


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy("tiny-qwen3")
    model.generation_config.eos_token_id = [EOT, EOS]  # as Qwen3-0.6B's generation_config.json ships it
    return model, tok


def test_stop_ids_are_the_turn_end_then_every_eos_id(policy):
    model, tok = policy
    assert stop_token_ids(model, tok, (EOT,)) == (EOT, EOS)
    model.generation_config.eos_token_id = 7
    try:
        assert stop_token_ids(model, tok, (EOT,)) == (EOT, 7)
    finally:
        model.generation_config.eos_token_id = [EOT, EOS]
    assert stop_token_ids(None, tok, (EOT,)) == (EOT,)  # external sampler: the tokenizer's eos (<|im_end|>)


def biased(model, token):
    bias = torch.zeros(model.config.vocab_size)
    bias[token] = 1e4
    model.lm_head.bias = torch.nn.Parameter(bias)


@pytest.mark.parametrize("kind", ["hf", "fast"])
def test_episode_turns_end_at_the_other_eos_id(policy, kind):
    """The model writes <|endoftext|>, not <|im_end|>: every turn is that one token, finished, a final answer."""
    model, tok = policy
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=6))
    sampler = fast_sampler_for(model, tok, cfg.sampling, max_batch=2) if kind == "fast" else None
    biased(model, EOS)
    try:
        trajs = run_episodes(model, tok, [(EchoEnv(max_turns=3), task(i)) for i in range(3)], cfg=cfg, seed=0,
                             sampler=sampler)
    finally:
        model.lm_head.bias = None
    for tr in trajs:
        check_invariants(tr)
        assert [t.completion_ids for t in tr.turns] == [(EOS,)]
        assert not tr.turns[0].hit_token_limit and tr.end_reason == "final_answer" and tr.terminated
        assert "final_turn_hit_token_limit" not in tr.meta and tr.turns[0].text == ""


@pytest.mark.parametrize("kind", ["hf", "fast"])
def test_rows_stop_right_after_an_eos_id_and_carry_no_padding(policy, kind):
    """Greedy rows; declare a token row 0 emits an eos id: rows that emit it end right after it (finished);
    the others run to their budget; no row carries a padding id after its end."""
    model, tok = policy
    ctx = [encode(tok, t) for t in ["def f(x):\n    return x\n", "hi", "Fix the bug.", "a b c d"]]
    cfg = SamplingConfig(max_new_tokens=10, top_k=1, gen_batch=4)

    def sample(stops):
        if kind == "fast":
            return FastSampler(model, stop_ids=stops, pad_id=tok.pad_token_id, cfg=cfg)(ctx)
        return sample_turns(model, ctx, stop_ids=stops, pad_id=tok.pad_token_id, cfg=cfg)

    free = sample((EOT,))
    other = free[0].ids[2]
    model.generation_config.eos_token_id = [EOT, other]
    try:
        got = sample(stop_token_ids(model, tok, (EOT,)))
    finally:
        model.generation_config.eos_token_id = [EOT, EOS]
    for f, g in zip(free, got, strict=True):
        cut = f.ids.index(other) + 1 if other in f.ids else len(f.ids)
        assert g.ids == f.ids[:cut] and len(g.logprobs) == len(g.ids)
        assert g.hit_token_limit == (other not in f.ids)
    assert not got[0].hit_token_limit and got[0].ids[-1] == other


class EndsWithEos:
    """Scripted sampler: each turn's text, then <|endoftext|> (the model's other end id) instead of <|im_end|>."""

    def __init__(self, tok, turns):
        self.tok, self.turns, self.k = tok, turns, 0

    def __call__(self, contexts, budgets):
        out = []
        for _ in contexts:
            ids = encode(self.tok, self.turns[self.k]) + [EOS]
            self.k += 1
            out.append(Sample(tuple(ids), tuple(-0.1 for _ in ids), hit_token_limit=False))
        return out


def test_call_turn_ended_by_eos_is_finished_and_the_template_resumes(policy):
    model, tok = policy
    trajs = run_episodes(model, tok, [(EchoEnv(max_turns=4), task(0))], cfg=RolloutConfig(),
                         sampler=EndsWithEos(tok, [call("hi"), "done"]))
    (tr,) = trajs
    check_invariants(tr)
    first, last = tr.turns
    assert first.calls[0].malformed is None and first.results[0].content == "hi" and not first.hit_token_limit
    # the observation closes the turn with the template's end-of-turn token (mask 0), then the tool block
    assert tok.decode(list(first.observation_ids)).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nhi")
    assert last.text == "done" and tr.end_reason == "final_answer" and tr.reward == 1.0
    sampled = [i for i, m in zip(tr.completion_ids, tr.policy_mask, strict=True) if m]
    assert sampled == list(first.completion_ids) + list(last.completion_ids)

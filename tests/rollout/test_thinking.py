"""Issue 14.1: thinking mode (Qwen3 `enable_thinking=True`). The start-up token-in/token-out check accepts a
policy that writes its own <think> block; rows keep every sampled think block byte-identical and later
turns see earlier turns' reasoning exactly as sampled; calls written inside a think block are not run."""

from __future__ import annotations

import pytest
from test_driver import EOT, EchoEnv, call, check_invariants, task
from transformers import AutoTokenizer

from agentrl.chat import tito
from agentrl.chat.parse import split_reasoning
from agentrl.chat.template import encode
from agentrl.chat.tito import TitoMismatch, assert_tito_consistent
from agentrl.envs.base import Observation
from agentrl.models.load import load_policy
from agentrl.paths import resolve_asset
from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.hf_sampler import Sample, SamplingConfig

TOOLS = [{"type": "function", "function": {"name": "echo", "description": "Echo text back.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
CODE_TOOLS = TOOLS + [{"type": "function", "function": {"name": "Edit", "description": "Edit a file.", "parameters": {
    "type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"},
                                     "new_string": {"type": "string"}}, "required": ["file_path"]}}}]


@pytest.fixture(scope="module", params=["qwen3-tokenizer", "qwen3-tokenizer-current"])
def tok(request):
    return AutoTokenizer.from_pretrained(str(resolve_asset(request.param)))


@pytest.mark.parametrize("tools", [TOOLS, CODE_TOOLS], ids=["one-tool", "two-tools"])
def test_startup_check_passes_in_thinking_mode(tok, tools):
    fmt = assert_tito_consistent(tok, Observation("You are an agent.", "Fix f.", tools), enable_thinking=True)
    assert tok.decode(list(fmt.header_ids)) == "<|im_start|>assistant\n" and fmt.stub_ids == ()
    assert tok.convert_ids_to_tokens(list(fmt.think_ids)) == ["<think>", "</think>"]


def test_thinking_check_still_catches_a_broken_path(tok, monkeypatch):
    real = tito.observation_ids
    monkeypatch.setattr(tito, "observation_ids", lambda *a, **k: real(*a, **k)[1:] if not k.get("hit_token_limit")
                        else real(*a, **k))
    with pytest.raises(TitoMismatch, match="one tool result"):
        assert_tito_consistent(tok, Observation("s", "u", TOOLS), enable_thinking=True)


def test_split_reasoning():
    assert split_reasoning("<think>\nplan <tool_call>x</tool_call>\n</think>\n\nanswer") == (
        "plan <tool_call>x</tool_call>", "\n\nanswer")
    assert split_reasoning("  <think>cut while thinking") == ("cut while thinking", "")
    assert split_reasoning("no think block </think>") == ("", "no think block </think>")


# Think blocks as a model writes them: odd whitespace the template would normalise, a call and the closing
# tool tag *inside* the reasoning (must not run), non-ASCII.
TURN1 = "<think>\n\nI should echo. Maybe <tool_call>{\"name\": \"echo\"}</tool_call>?  é\n\n</think>\n\n" + call("hi")
TURN2 = "<think>\nIt echoed \"hi\".\n</think>\n\ndone"


class Thinker:
    """Scripted sampler: fixed turns (ids + <|im_end|>); records the contexts it was given."""

    def __init__(self, tok, turns):
        self.tok, self.turns, self.contexts = tok, turns, []

    def __call__(self, contexts, budgets):
        self.contexts += [list(c) for c in contexts]
        ids = encode(self.tok, self.turns[len(self.contexts) - 1]) + [EOT]
        return [Sample(tuple(ids), tuple(-0.2 for _ in ids), hit_token_limit=False)]


def test_episode_with_own_think_blocks_keeps_them_byte_identical(tok):
    sampler = Thinker(tok, [TURN1, TURN2])
    env = EchoEnv()
    (tr,) = run_episodes(None, tok, [(env, task(0))], cfg=RolloutConfig(enable_thinking=True), sampler=sampler)
    check_invariants(tr)
    assert tok.decode(list(tr.prompt_ids)).endswith("<|im_start|>assistant\n")  # no empty think block
    t1, t2 = tr.turns
    assert t1.completion_ids == tuple(encode(tok, TURN1) + [EOT])
    assert t2.completion_ids == tuple(encode(tok, TURN2) + [EOT])
    assert [c.arguments for c in t1.calls] == [{"text": "hi"}]  # the call inside the reasoning did not run
    assert env.steps == 1 and tr.end_reason == "final_answer" and tr.reward == 1.0  # answer read after </think>
    # turn 2 was sampled after turn 1's reasoning exactly as sampled (never re-rendered away)
    assert sampler.contexts[1] == list(tr.prompt_ids) + list(t1.completion_ids) + list(t1.observation_ids)
    text = tok.decode(list(tr.completion_ids))
    assert TURN1 in text and TURN2 in text


def test_real_tiny_model_runs_in_thinking_mode():
    model, tok = load_policy("tiny-qwen3")
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=8), enable_thinking=True)
    trajs = run_episodes(model, tok, [(EchoEnv(max_turns=2), task(i)) for i in range(2)], cfg=cfg, seed=0)
    for tr in trajs:
        check_invariants(tr)
        assert tr.turns and tok.decode(list(tr.prompt_ids)).endswith("<|im_start|>assistant\n")

"""Episode driver: a small fake Env (unit-test fake) with a scripted token sampler, and tiny-qwen3 for real."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace

import pytest
import torch

from agentrl.chat.template import encode, render_prompt
from agentrl.envs.base import Env, Observation, StepResult, ToolResult
from agentrl.models.load import load_policy
from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.hf_sampler import Sample, SamplingConfig
from agentrl.tasks.task import Task

EOT = 151645
TOOLS = [{"type": "function", "function": {"name": "echo", "description": "Echo text back.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]


class EchoEnv(Env):
    """Echoes its argument; "fail" is rejected; reward 1 if the final answer is "done". It owns its turn
    limit (out_of_turns after max_turns) like every environment; `truncate` grades the state as is."""

    name = "echo"

    def __init__(self, max_turns=4, step_sleep_s=0.0, crash=False, reward_value=None):
        self.max_turns, self.step_sleep_s, self.crash, self.reward_value = max_turns, step_sleep_s, crash, reward_value
        self.active = {"now": 0, "peak": 0}
        self.lock = threading.Lock()

    def reset(self, task, seed=None):
        self.answer, self.steps, self.closed = None, 0, False
        self.end_reason, self.terminated, self.truncated = None, False, False
        return Observation("You echo.", f"Task {task.id}", TOOLS)

    def _result(self, results=()):
        return StepResult(tuple(results), done=self.done, terminated=self.terminated, truncated=self.truncated,
                          end_reason=self.end_reason)

    def step(self, calls):
        if self.crash:
            raise RuntimeError("sandbox died")
        time.sleep(self.step_sleep_s)
        self.steps += 1
        out = []
        for c in calls:
            if c.malformed:
                out.append(ToolResult(c, "malformed", f"error: {c.malformed}"))
            elif c.name != "echo":
                out.append(ToolResult(replace(c, malformed=f"unknown_tool: {c.name!r}"), "malformed", "error: unknown"))
            elif c.arguments["text"] == "fail":
                out.append(ToolResult(c, "failed", "error: refused"))
            else:
                out.append(ToolResult(c, "ok", c.arguments["text"]))
        if self.steps >= self.max_turns:
            self.end_reason, self.truncated = "out_of_turns", True
        return self._result(out)

    def final_answer(self, text):
        self.answer, self.end_reason, self.terminated = text, "final_answer", True
        return self._result()

    def truncate(self, reason):
        if not self.done:
            self.end_reason, self.truncated = reason, True
        return self._result()

    @property
    def done(self):
        return self.end_reason is not None

    def reward(self):
        if self.reward_value is not None:
            return self.reward_value
        return 1.0 if self.answer == "done" else 0.0

    def tools(self):
        return TOOLS

    def stats(self):
        return {"echo_steps": self.steps}

    def close(self):
        self.closed = True

def task(i):
    return Task(id=f"t{i}", family="echo", split="heldout", files={}, entry="f", source_file="f.py",
                public_tests=(), hidden_tests=(), reference="")


@pytest.fixture(scope="module")
def tok():
    return load_policy("tiny-qwen3")[1]


def call(text):
    return "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": text}}) + "\n</tool_call>"


class Script:
    """Scripted token-level sampler: episode k's turn t emits `scripts[k][t]` (+ <|im_end|> unless cut)."""

    def __init__(self, tok, scripts):
        self.tok, self.scripts, self.calls = tok, scripts, []
        self.turn = {}

    def __call__(self, contexts, budgets):
        self.calls.append(len(contexts))
        out = []
        for ctx, budget in zip(contexts, budgets, strict=True):
            k = int(re.search(r"Task t(\d+)<\|im_end\|>", self.tok.decode(ctx)).group(1))
            t = self.turn.get(k, 0)
            self.turn[k] = t + 1
            ids = encode(self.tok, self.scripts[k][t])
            cut = len(ids) >= budget
            ids = ids[:budget] if cut else ids + [EOT]
            out.append(Sample(tuple(ids), tuple(-0.5 for _ in ids), hit_token_limit=cut))
        return out


def run(tok, scripts, envs=None, **cfg):
    envs = envs or [EchoEnv() for _ in scripts]
    sampler = Script(tok, scripts)
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=cfg.pop("max_new_tokens", 64)), **cfg)
    trajs = run_episodes(None, tok, [(e, task(i)) for i, e in enumerate(envs)], cfg=cfg, sampler=sampler)
    return trajs, envs, sampler


def check_invariants(tr):
    assert len(tr.completion_ids) == len(tr.policy_mask) == len(tr.sampler_logprobs)
    assert list(tr.completion_ids) == [i for t in tr.turns for i in t.completion_ids + t.observation_ids]
    assert sum(tr.policy_mask) == sum(len(t.completion_ids) for t in tr.turns)
    assert all(lp == 0.0 for lp, m in zip(tr.sampler_logprobs, tr.policy_mask, strict=True) if not m)


def test_episodes_end_for_the_right_reasons(tok):
    scripts = [
        [call("a") + "\n" + call("fail"), "done"],                      # tool turn, then final answer
        [call("x")] * 5,                                               # out of turns (env max 4)
        ['<tool_call>\n{"name": "echo", "arguments": {"text": "unfinished ' + "y" * 200],  # cut; then answer
        ['<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "not done"],
    ]
    scripts[2].append("done")
    trajs, envs, sampler = run(tok, scripts, max_new_tokens=48)
    assert [t.end_reason for t in trajs] == ["final_answer", "out_of_turns", "final_answer", "final_answer"]
    assert [t.reward for t in trajs] == [1.0, 0.0, 1.0, 0.0]
    assert sampler.calls[0] == 4 and len(trajs[1].turns) == 4
    assert [r.status for r in trajs[0].turns[0].results] == ["ok", "failed"]
    assert trajs[2].turns[0].hit_token_limit and trajs[2].turns[0].calls[0].malformed.startswith("cut_off")
    assert tok.decode(list(trajs[2].turns[0].observation_ids)).startswith("<|im_end|>\n<|im_start|>user")
    assert trajs[3].turns[0].results[0].call.malformed.startswith("unknown_tool")
    assert trajs[0].stats["ok_calls"] == 1 and trajs[0].stats["failed_calls"] == 1 and trajs[0].stats["echo_steps"] == 1
    assert trajs[3].stats["malformed_unknown_tool"] == 1
    assert trajs[0].terminated and trajs[1].truncated and all(e.closed for e in envs)
    assert "[tool echo -> failed] error: refused" in trajs[0].transcript and "[end] final_answer" in trajs[0].transcript
    for tr in trajs:
        check_invariants(tr)
    assert trajs[0].turns[-1].observation_ids == ()  # nothing appended after the last turn


def test_completion_matches_template_rendering(tok):
    trajs, _, _ = run(tok, [[call("a"), call("b") + call("c"), "done"]])
    text = tok.decode(list(trajs[0].prompt_ids + trajs[0].completion_ids))
    assert text.count("<tool_response>") == 3 and text.endswith("<think>\n\n</think>\n\ndone<|im_end|>")
    assert "</tool_response>\n<tool_response>" in text  # two results in one turn: consecutive blocks


def test_context_budget_and_sandbox_errors(tok):
    prompt_len = len(render_prompt(tok, EchoEnv().reset(task(0))))
    budget = prompt_len + 100  # about two turns of this script
    trajs, _, _ = run(tok, [[call("z" * 50)] * 5], max_context_tokens=budget, max_new_tokens=64)
    assert trajs[0].end_reason == "out_of_tokens" and trajs[0].truncated and len(trajs[0].turns) < 4
    assert len(trajs[0].prompt_ids) + len(trajs[0].completion_ids) <= budget
    trajs, _, _ = run(tok, [[call("a")], ["done"]], envs=[EchoEnv(crash=True), EchoEnv()])
    assert trajs[0].end_reason == "env_error" and "sandbox died" in trajs[0].meta["error"]
    assert trajs[0].truncated and not trajs[0].terminated
    assert trajs[0].reward is None and trajs[1].reward == 1.0  # one broken env does not stop the others


def test_tool_calls_run_concurrently(tok):
    envs = [EchoEnv(step_sleep_s=0.3) for _ in range(6)]
    t0 = time.perf_counter()
    run(tok, [[call("a"), "done"]] * 6, envs=envs, tool_workers=6)
    assert time.perf_counter() - t0 < 6 * 0.3  # serial would take >= 1.8 s


def test_real_tiny_qwen3_episodes(tok):
    model, tok2 = load_policy("tiny-qwen3")
    torch.manual_seed(0)
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=12, gen_batch=3))
    trajs = run_episodes(model, tok2, [(EchoEnv(max_turns=2), task(i)) for i in range(5)], cfg=cfg, seed=0)
    for tr in trajs:
        check_invariants(tr)
        assert tr.end_reason in {"final_answer", "out_of_turns"} and tr.transcript.startswith("[system] You echo.")
        ctx = list(tr.prompt_ids)
        for turn in tr.turns:  # the trainer's recomputation agrees with the sampler on every turn
            full = torch.tensor([ctx + list(turn.completion_ids)])
            with torch.no_grad():
                lp = torch.log_softmax(model(full).logits.float()[0, len(ctx) - 1 : -1], -1)
            got = lp.gather(-1, torch.tensor(turn.completion_ids)[:, None]).squeeze(-1)
            assert (got - torch.tensor(turn.sampler_logprobs)).abs().max() < 1e-4
            ctx += list(turn.completion_ids + turn.observation_ids)


def test_trainer_policy_logprobs_match_sampler_on_whole_trajectories(tok):
    """The trainer's helper (agentrl.rl.logprobs, branch rlmath) on right-padded whole episodes."""
    logprobs = pytest.importorskip("agentrl.rl.logprobs")
    model, tok2 = load_policy("tiny-qwen3")
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=10, gen_batch=4))
    trajs = run_episodes(model, tok2, [(EchoEnv(max_turns=2), task(i)) for i in range(4)], cfg=cfg, seed=1)
    seqs = [list(t.prompt_ids + t.completion_ids) for t in trajs]
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attn, pmask, want = (torch.zeros(len(seqs), width) for _ in range(3))
    for i, (t, s) in enumerate(zip(trajs, seqs, strict=True)):
        p = len(t.prompt_ids)
        ids[i, : len(s)], attn[i, : len(s)] = torch.tensor(s), 1
        pmask[i, p : len(s)] = torch.tensor(t.policy_mask, dtype=torch.float)
        want[i, p : len(s)] = torch.tensor(t.sampler_logprobs)
    with torch.no_grad():
        got, _ = logprobs.policy_logprobs(model, ids, attn.long(), pmask.long())
    assert pmask.sum() > 0 and (got - want).abs().max().item() < 1e-4


def test_deeply_nested_call_is_malformed_not_a_crash(tok):
    # A degenerate policy repeating "[" (the cut-off turn that raised RecursionError out of the parser).
    trajs, _, _ = run(tok, [["<tool_call>" + "[" * 1500, "done"], ["<tool_call>" + "[" * 1500 + "</tool_call>", "done"]],
                      max_new_tokens=2000)
    for tr in trajs:
        assert tr.end_reason == "final_answer" and tr.reward == 1.0
        assert tr.turns[0].calls[0].malformed and tr.turns[0].results[0].status == "malformed"
    assert trajs[1].turns[0].calls[0].malformed.startswith("bad_json")


def test_parser_exception_marks_turn_malformed(tok, monkeypatch):
    import agentrl.rollout.driver as driver

    def broken_parser(text, **kwargs):  # fault injection: any future parser bug
        raise RuntimeError("parser bug")

    monkeypatch.setattr(driver, "parse_tool_calls", broken_parser)
    trajs, _, _ = run(tok, [[call("a")] * 4], max_new_tokens=64)
    turn = trajs[0].turns[0]
    assert turn.calls[0].malformed == "parser_error: RuntimeError: parser bug"
    assert turn.results[0].status == "malformed" and trajs[0].end_reason == "out_of_turns"
    check_invariants(trajs[0])


def test_progress_advances_per_finished_episode(tok):
    """HF sampling goes gen_batch episodes at a time, and progress is reported after each chunk (not
    0 -> n at the end of a round); with tool steps, after each episode's step, and per turn: a live episode
    counts its share of the turn limit, so multi-turn evaluations move before any episode ends."""
    model = load_policy("tiny-qwen3")[0]
    seen = []
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=3, gen_batch=2), check_template=False)
    run_episodes(model, tok, [(EchoEnv(max_turns=1), task(i)) for i in range(6)], cfg=cfg, seed=0,
                 on_progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 6), (4, 6), (6, 6)]
    seen.clear()
    scripts = [[call("a"), "done"], [call("a"), call("b"), "done"], ["done"]]
    envs = [EchoEnv() for _ in scripts]
    run_episodes(None, tok, [(e, task(i)) for i, e in enumerate(envs)], cfg=RolloutConfig(),
                 sampler=Script(tok, scripts), on_progress=lambda done, total: seen.append((done, total)))
    # per turn: each live episode adds its turns over its turn limit, a finished one 1
    assert [d for d, _ in seen] == sorted({d for d, _ in seen}) and seen[-1] == (3, 3)
    limit = envs[1].max_turns
    assert seen[0] == (1, 3)  # the one-turn episode ended while the two others' first turn ran its tools
    assert (round(2 + 1 / limit, 6), 3) in seen  # the 2-turn one ended; the 3-turn one counts 1 turn of its limit


def test_unscorable_rewards_and_env_errors_are_recorded_never_zero(tok, caplog):
    envs = [EchoEnv(reward_value=None), EchoEnv(crash=True), EchoEnv(crash=True), EchoEnv()]
    envs[0].reward = lambda: None  # the sandbox could not grade: unscorable, the env's own ending kept
    envs[3].reward = lambda: "one"  # a contract violation: env_error, unscorable
    with caplog.at_level("WARNING", logger="agentrl"):
        trajs, _, _ = run(tok, [["done"], [call("a")], [call("b")], ["done"]], envs=envs)
    assert [t.reward for t in trajs] == [None, None, None, None]
    assert [t.end_reason for t in trajs] == ["final_answer", "env_error", "env_error", "env_error"]
    assert trajs[0].terminated and not trajs[0].scorable and "could not score" in caplog.text
    assert "returned 'one'" in trajs[3].meta["error"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 3 and all("task t" in r.getMessage() for r in errors)
    assert errors[0].exc_info is not None and all(r.exc_info is None for r in errors[1:])  # first traceback only
    assert "[end] final_answer, unscorable (no reward)" in trajs[0].transcript


def test_policy_version_is_recorded(tok):
    envs = [EchoEnv()]
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=16))
    trajs = run_episodes(None, tok, [(envs[0], task(0))], cfg=cfg, sampler=Script(tok, [["done"]]), policy_version=7)
    assert trajs[0].policy_version == 7 and trajs[0].group_id == 0

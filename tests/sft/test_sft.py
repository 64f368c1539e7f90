"""agentrl sft: expert trajectories equal the template's rendering, JSONL I/O, SFT lowers the expert NLL."""

from __future__ import annotations

import json
import random

import pytest

from agentrl.chat.template import observation_messages, render_text
from agentrl.chat.tito import TurnFormat, turn_format
from agentrl.models.load import load_policy, load_tokenizer
from agentrl.paths import resolve_asset
from agentrl.sft.data import (
    check_trajectory_rendering,
    expert_trajectories,
    load_trajectories,
    messages_trajectory,
    save_trajectories,
)
from agentrl.sft.trainer import SFTConfig, lr_factor, planned_steps, policy_nll, save_policy, sft, trainable

TEMPLATES = ("qwen3-tokenizer", "qwen3-tokenizer-current")


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(resolve_asset(name)) for name in TEMPLATES}


@pytest.fixture(scope="module")
def sandbox():
    from agentrl.sandbox import Sandbox

    return Sandbox()


@pytest.fixture(scope="module")
def tasks():
    from agentrl.tasks import make_tasks, randomize_names

    rng = random.Random(0)
    return [randomize_names(t, rng) for t in make_tasks(3, seed=0)]


def _whole_rendering(tok, traj, env_name, task, fmt: TurnFormat) -> list[int]:
    """Independent of sft_data: render the conversation from the env's obs and the turns' calls/results."""
    from agentrl.envs import make_env

    obs = make_env(env_name).reset(task)
    msgs = observation_messages(obs)
    for i, turn in enumerate(traj.turns):
        if turn.calls:
            calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in turn.calls]
            msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
        else:
            msgs.append({"role": "assistant", "content": turn.text})
        if i + 1 < len(traj.turns):
            msgs += [{"role": "tool", "name": r.call.name, "content": r.content} for r in turn.results]
    text = render_text(tok, msgs, obs.tools, add_generation_prompt=False)
    return list(tok(text[: text.rfind(fmt.eot_text) + len(fmt.eot_text)], add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("env_name", ["edit-menu", "coding-tools"])
def test_expert_ids_equal_template_rendering(tokenizers, sandbox, tasks, template, env_name):
    tok = tokenizers[template]
    fmt = turn_format(tok)
    trajs = expert_trajectories(env_name, tasks[:2], tok, random_op=False, seed=0, sandbox=sandbox)
    for task, tr in zip(tasks, trajs, strict=False):
        assert tr.reward == 1.0 and tr.end_reason in ("submitted", "final_answer")
        ids = list(tr.prompt_ids) + list(tr.completion_ids)
        want = _whole_rendering(tok, tr, env_name, task, fmt)
        # Qwen3 drops the empty think block from history turns on re-rendering: remove it from ours to compare.
        stub, drop = list(fmt.stub_ids), []
        pos = len(tr.prompt_ids)
        for turn in tr.turns[:-1]:
            drop.append(pos - len(stub))
            pos += len(turn.completion_ids) + len(turn.observation_ids)
        pruned, prev = [], 0
        for d in drop:
            assert ids[d: d + len(stub)] == stub
            pruned += ids[prev:d]
            prev = d + len(stub)
        assert pruned + ids[prev:] == want
        # mask is 1 exactly on the assistant turns' ids, 0 on observations
        mask = []
        for turn in tr.turns:
            mask += [1] * len(turn.completion_ids) + [0] * len(turn.observation_ids)
        assert list(tr.policy_mask) == mask
        assert all(t.completion_ids[-len(fmt.eot_ids):] == fmt.eot_ids for t in tr.turns)
        assert "<tool_call>" in tok.decode(list(tr.turns[0].completion_ids))


def test_expert_procedure_and_random_ops(tokenizers, sandbox, tasks):
    tok = tokenizers["qwen3-tokenizer"]
    ops = set()
    for seed in range(6):
        (tr,) = expert_trajectories("edit-menu", tasks[:1], tok, random_op=True, seed=seed, sandbox=sandbox)
        assert [[c.name for c in t.calls] for t in tr.turns] == [["read_file"], ["edit"], ["run_tests"], ["submit"]]
        ops.add(tr.turns[1].calls[0].arguments["op"])
        assert tr.reward == (1.0 if tr.turns[1].calls[0].arguments["op"] == tasks[0].correct_op.name else 0.0)
    assert len(ops) >= 2, f"random_op picked {ops} over 6 seeds"


def test_rendering_check_catches_a_changed_token(tokenizers, sandbox, tasks):
    from dataclasses import replace

    from agentrl.chat.tito import TitoMismatch
    from agentrl.envs import make_env

    tok = tokenizers["qwen3-tokenizer"]
    (tr,) = expert_trajectories("edit-menu", tasks[:1], tok, sandbox=sandbox)
    obs = make_env("edit-menu").reset(tasks[0])
    bad = list(tr.completion_ids)
    bad[3] = tok.convert_tokens_to_ids("Ġthe")
    with pytest.raises(TitoMismatch, match="token"):
        check_trajectory_rendering(tok, replace(tr, completion_ids=tuple(bad)), obs)


def test_jsonl_round_trip_and_errors(tokenizers, sandbox, tasks, tmp_path):
    tok = tokenizers["qwen3-tokenizer"]
    trajs = expert_trajectories("edit-menu", tasks[:2], tok, random_op=True, sandbox=sandbox)
    path = tmp_path / "t.jsonl"
    assert save_trajectories(trajs, path) == 2
    back = load_trajectories(path)
    for a, b in zip(trajs, back, strict=True):
        assert (a.task_id, a.prompt_ids, a.completion_ids, a.policy_mask, a.reward, a.transcript) == (
            b.task_id, b.prompt_ids, b.completion_ids, b.policy_mask, b.reward, b.transcript)
    good = path.read_text().splitlines()[0]
    rec = json.loads(good)
    cases = {
        "not valid JSON": "{oops",
        "'policy_mask' has 2 entries": json.dumps({**rec, "policy_mask": [0, 1]}),
        "'prompt_ids' must be a list of integers": json.dumps({**rec, "prompt_ids": "abc"}),
        "'policy_mask' must hold only 0 and 1": json.dumps({**rec, "policy_mask": [2] * len(rec["completion_ids"])}),
        "'reward' must be a finite number": json.dumps({**rec, "reward": "high"}),
        "'reward' must be a finite number or null": json.dumps({**rec, "reward": float("nan")}),  # NaN: no JSON
        "needs a tokenizer": json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
        "needs prompt_ids, completion_ids and policy_mask .* or messages": json.dumps({"text": "hi"}),
        "token id 200000, outside the model's vocabulary .ids 0..199999.": json.dumps({**rec, "completion_ids": [
            200_000] * len(rec["completion_ids"])}),
        "not UTF-8 text": b"\xff\xfe{}".decode("latin-1"),
    }
    for msg, line in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes((good + "\n\n").encode() + (line.encode("latin-1") if "UTF-8" in msg else line.encode())
                        + b"\n")
        with pytest.raises(ValueError, match=msg) as e:
            load_trajectories(bad, vocab_size=200_000)
        assert f"{bad}:3" in str(e.value)
    with pytest.raises(FileNotFoundError):
        load_trajectories(tmp_path / "missing.jsonl")


def test_messages_jsonl_mask_on_assistant_only(tokenizers, tmp_path):
    tok = tokenizers["qwen3-tokenizer-current"]
    tools = [{"type": "function", "function": {"name": "run_tests", "description": "Run tests.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    rec = {"tools": tools, "messages": [
        {"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "run_tests", "arguments": {}}}]},
        {"role": "tool", "name": "run_tests", "content": "2 passed"},
        {"role": "assistant", "content": "All good."}]}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (tr,) = load_trajectories(path, tok)
    policy = [i for i, m in zip(tr.completion_ids, tr.policy_mask, strict=True) if m]
    other = [i for i, m in zip(tr.completion_ids, tr.policy_mask, strict=True) if not m]
    assert "All good." in tok.decode(policy) and "<tool_call>" in tok.decode(policy)
    assert "2 passed" in tok.decode(other) and "2 passed" not in tok.decode(policy)
    assert "Fix it." in tok.decode(list(tr.prompt_ids))
    with pytest.raises(ValueError, match="at least one assistant"):
        messages_trajectory({"messages": [{"role": "user", "content": "x"}]}, tok, "rec")
    # a lone surrogate (JSON's unpaired \udcff escape) is named, not the tokenizer's "TextEncodeInput must be ..."
    rec["messages"][4]["content"] = "All \udcff good."
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=r"m\.jsonl:1: field 'messages\[4\]\.content' holds a lone surrogate"):
        load_trajectories(path, tok)


def test_messages_in_openai_shapes_render_like_plain_ones_and_odd_ones_are_refused(tokenizers):
    """Text-part lists, null content and JSON-string arguments are OpenAI's own shapes: the same tokens
    as plain strings and objects. Other shapes are one ValueError naming the message, never jinja's."""
    tok = tokenizers["qwen3-tokenizer-current"]
    tools = [{"type": "function", "function": {"name": "run", "description": "Run.", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}}]

    def rec(user, content, arguments):
        return {"tools": tools, "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": content, "tool_calls": [{"type": "function", "function": {
                "name": "run", "arguments": arguments}}]},
            {"role": "tool", "name": "run", "content": "ok"}, {"role": "assistant", "content": "Done."}]}

    plain = messages_trajectory(rec("Fix it.", "", {"cmd": "ls"}), tok, "rec")
    openai_shaped = messages_trajectory(rec([{"type": "text", "text": "Fix "}, {"type": "text", "text": "it."}],
                                            None, '{"cmd": "ls"}'), tok, "rec")
    assert (openai_shaped.prompt_ids, openai_shaped.completion_ids, openai_shaped.policy_mask) == (
        plain.prompt_ids, plain.completion_ids, plain.policy_mask)
    for bad, why in ((rec([{"type": "image_url"}], "", {}), r"messages\[0\]: content must be a string"),
                     (rec("x", 5, {}), r"messages\[1\]: content must be"),
                     ({**rec("x", "", {}), "messages": [{"role": "user", "content": "x"},
                                                        {"role": "assistant", "tool_calls": "run"}]},
                      r"messages\[1\]: tool_calls must be a list"),
                     (rec("x", "", [1, 2]), "arguments must be a JSON object")):
        with pytest.raises(ValueError, match=why):
            messages_trajectory(bad, tok, "rec")


def test_lr_schedule():
    assert lr_factor(0, 10, 2, 0.1) == pytest.approx(0.5)
    assert lr_factor(2, 10, 2, 0.1) == pytest.approx(1.0)
    assert lr_factor(9, 10, 2, 0.1) == pytest.approx(0.1)


def test_microbatching_keeps_the_loss_and_update(tokenizers, sandbox, tasks):
    import torch

    tok = tokenizers["qwen3-tokenizer"]
    trajs = expert_trajectories("edit-menu", tasks[:2], tok, random_op=True, sandbox=sandbox)
    out = []
    for micro in (1, 2):
        model, _ = load_policy("tiny-qwen3", seed=0)
        m = sft(model, trajs, SFTConfig(epochs=1, batch=2, micro=micro, lr=1e-3, warmup_steps=0),
                pad_id=tok.pad_token_id)
        out.append((m.losses[0], m.steps[0]["grad_norm"], model.model.layers[0].mlp.up_proj.weight.detach().clone()))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-5)
    assert out[0][1] == pytest.approx(out[1][1], rel=1e-4)
    assert torch.allclose(out[0][2], out[1][2], atol=1e-6)


def test_the_planned_steps_are_those_sft_takes_when_trajectories_are_dropped(tokenizers, sandbox, tasks):
    """run_sft's steps_planned and the warm start's progress total count the trajectories sft() keeps (policy
    tokens within max_tokens), not all of them: 5 expert trajectories of which 2 are too long, batch 2, 2 epochs."""
    from dataclasses import replace

    tok = tokenizers["qwen3-tokenizer"]
    trajs = expert_trajectories("edit-menu", tasks[:3], tok, random_op=True, sandbox=sandbox)
    limit = max(len(t.prompt_ids) + len(t.completion_ids) for t in trajs)
    long = [replace(t, prompt_ids=tuple(t.prompt_ids) + (tok.pad_token_id,) * limit) for t in trajs[:2]]
    cfg = SFTConfig(epochs=2, batch=2, lr=1e-3, warmup_steps=0, max_tokens=limit)
    kept = trainable(trajs + long, cfg.max_tokens)
    assert len(kept) == 3 and planned_steps(len(kept), cfg) == 4  # ceil(3 / 2) x 2, not ceil(5 / 2) x 2 = 6
    model, _ = load_policy("tiny-qwen3", seed=0)
    m = sft(model, trajs + long, cfg, pad_id=tok.pad_token_id)
    assert len(m.steps) == planned_steps(len(kept), cfg) and m.dropped == 2


def test_sft_lowers_expert_nll_and_reloads(tokenizers, sandbox, tasks, tmp_path):
    tok = tokenizers["qwen3-tokenizer"]
    trajs = expert_trajectories("edit-menu", tasks[:2], tok, random_op=True, sandbox=sandbox)
    model, _ = load_policy("tiny-qwen3", seed=0)
    before = policy_nll(model, trajs, tok.pad_token_id)
    m = sft(model, trajs, pad_id=tok.pad_token_id, epochs=4, batch=2, micro=2, lr=3e-3, warmup_steps=0)
    after = policy_nll(model, trajs, tok.pad_token_id)
    assert len(m.losses) == 4 and m.losses[-1] < m.losses[0] - 0.5
    assert after < before - 0.5, (before, after)
    save_policy(model, tok, tmp_path / "out")
    model2, tok2 = load_policy(tmp_path / "out")
    assert policy_nll(model2, trajs, tok2.pad_token_id) == pytest.approx(after, rel=1e-5)
    assert tok2.chat_template == tok.chat_template
    with pytest.raises(ValueError, match="unknown SFTConfig"):
        sft(model, trajs, pad_id=0, epoch=1)

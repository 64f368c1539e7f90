"""`agentrl train --agent opencode` end to end against tiny-qwen3: episodes run through the real opencode
harness, traces captured, rows rebuilt, rewards from the hidden tests, one update."""

import re

import pytest
from test_opencode import needs_opencode

from agentrl.cli import main
from agentrl.report.results import validate_results
from agentrl.rl.config import RLConfig
from agentrl.rl.trainer import train
from agentrl.rollout.scripted import ScriptedSampler, tool_call_text
from agentrl.tasks.sets import task_sets


def fix_or_give_up(tasks, state):
    """ScriptedSampler over tiny-qwen3: every other episode writes the reference solution with opencode's
    write tool, the others give up; log-probs are the bound model's own for those tokens (temperature 1)."""
    def reply(text):
        where = re.search(r"Working directory: (\S+)", text)
        task = next((t for t in tasks if f"`{t.entry}`" in text), None)
        if "<tool_response>" in text:
            return "Fixed."
        if where and task:
            state["first_turns"] += 1
            if state["first_turns"] % 2:
                args = {"filePath": f"{where.group(1)}/{task.source_file}", "content": task.reference}
                return tool_call_text("write", args)
        return "I cannot fix it."
    return ScriptedSampler(reply)


@needs_opencode
@pytest.mark.slow
def test_train_agent_opencode_end_to_end(tmp_path):
    cfg = RLConfig.from_flat(agent="opencode", steps=1, prompts_per_step=1, group_size=2, eval_size=1, eval_n=1, train_size=4,
                   max_context_tokens=8192, max_new_tokens=512, agent_max_calls=4, agent_timeout_s=150, minibatches=1,
                   micro=1, lr=1e-3, n_boot=100, out=str(tmp_path / "run"), checkpoint_every=1, seed=1)
    state = {"first_turns": 0}
    sets = task_sets(cfg.tasks.source, train_size=cfg.tasks.train_size, eval_size=cfg.eval.size, seed=cfg.run.seed)  # the run's
    path = train(cfg, sampler=fix_or_give_up(list(sets.train) + list(sets.heldout), state))
    data = validate_results(path)
    assert data["status"] == "completed"
    (step,) = data["steps"]
    assert step["rollout/episodes"] == 2 and step["rollout/unscorable"] == 0
    assert step["reward_mean"] == 0.5 and step["adv/frac_zero_std"] == 0.0  # one fixed it, one gave up
    assert step["rollout/rows"] == 2 and step["tools/rows"] == 1.0  # one row per episode (no history rewrite)
    assert step["tools/model_calls"] >= 1 and step["tools/harness_overhead_s"] > 0
    assert step["grad_norm"] > 0 and abs(step["logprob_gap"]) < 1e-3 and step["tokens_trained"] > 0
    assert data["agent"]["name"] == "opencode" and data["agent"]["isolation"] in ("bwrap", "none")
    assert {e["label"] for e in data["evaluations"]} == {"before", "after"}
    # one step-0 transcript per group: its first episode, which is the fixing one or the giving-up one
    # depending on which harness reached the policy first; either way the transcript must match its reward
    (t0,) = [t for t in data["transcripts"] if t["kind"] == "train_step0"]
    assert t0["text"].startswith("[harness] opencode")
    assert ("[tool write]" in t0["text"]) == (t0["reward"] == 1.0)


def test_train_agent_says_clearly_when_opencode_is_missing(tmp_path, capsys):
    code = main(["train", "--agent", "opencode", "--agent-binary", "/nonexistent/opencode", "--max-context-tokens",
                 "8192", "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert "opencode" in err and "/nonexistent/opencode" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_train_agent_needs_room_for_opencodes_prompt(tmp_path, capsys):
    assert main(["train", "--agent", "opencode", "--out", str(tmp_path / "run")]) == 2
    assert "--max-context-tokens" in capsys.readouterr().err

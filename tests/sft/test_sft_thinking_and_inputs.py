"""`agentrl sft --thinking` (issue 14.1): expert turns in the template's thinking-mode form, recorded in
sft_summary.json; and (issue 14.6a) bad inputs leave an earlier SFT output untouched."""

from __future__ import annotations

import json

import pytest

from agentrl.cli import build_parser, main
from agentrl.models.load import load_policy
from agentrl.sandbox import Sandbox
from agentrl.sft.data import expert_trajectories
from agentrl.tasks import make_tasks


def test_sft_thinking_flag_parses():
    parse = build_parser().parse_args
    assert parse(["sft"]).thinking is False and parse(["sft", "--thinking"]).thinking is True
    assert parse(["sft", "--thinking", "--no-thinking"]).thinking is False


@pytest.mark.parametrize("env", ["edit-menu", "coding-tools"])
def test_expert_trajectories_in_thinking_mode_match_the_template(env):
    tok = load_policy("tiny-qwen3")[1]
    with Sandbox() as sb:
        (tr,) = expert_trajectories(env, make_tasks(1, seed=1, split="train"), tok, sandbox=sb,
                                    enable_thinking=True)  # check=True: ids equal the template's rendering
    assert tr.reward == 1.0
    assert tok.decode(list(tr.prompt_ids)).endswith("<|im_start|>assistant\n")  # no stub in the prompt
    assert all(tok.decode(list(t.completion_ids)).startswith("<think>") for t in tr.turns)


def test_sft_records_thinking_and_keeps_an_earlier_output_on_bad_input(tmp_path, capsys):
    out = tmp_path / "sft"
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Say 1."},
                                             {"role": "assistant", "content": "<think>\nok\n</think>\n\n1"}]}) + "\n")
    args = ["sft", "--from-jsonl", str(data), "--epochs", "1", "--batch", "1", "--micro", "1", "--device", "cpu",
            "--out", str(out)]
    assert main([*args, "--thinking"]) == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["run"]["thinking"] is True
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert main([*args, "--model", str(tmp_path / "missing-model")]) == 2
    assert "missing-model" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.jsonl", "sft"]  # nothing moved aside

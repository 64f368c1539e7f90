"""Issue 14.1: thinking mode is a flag of train, eval and smoke (`--thinking/--no-thinking`), recorded in the
results file and honoured by the rollouts (the prompt ends without the template's empty think block)."""

import pytest

from agentrl.cli import build_parser, main
from agentrl.report.results import validate_results
from agentrl.rl.config import RLConfig


@pytest.mark.parametrize("command", ["train", "eval"])
def test_thinking_flags_parse(command):
    parse = build_parser().parse_args
    assert parse([command]).thinking is False and RLConfig().policy.thinking is False
    assert parse([command, "--thinking"]).thinking is True
    assert parse([command, "--thinking", "--no-thinking"]).thinking is False
    assert parse([command, "--no_thinking"]).thinking is False
    assert parse(["smoke", "--thinking"]).thinking is True and parse(["smoke"]).thinking is False


def test_eval_with_thinking_records_it_and_prompts_without_the_stub(tmp_path, monkeypatch):
    from agentrl.rl import session as session_mod

    prompts = []
    real = session_mod.RunSession.rollout

    def spy(self, tasks, **kw):
        trajs = real(self, tasks, **kw)
        prompts.extend(self.tokenizer.decode(list(t.prompt_ids)) for t in trajs)
        return trajs

    monkeypatch.setattr(session_mod.RunSession, "rollout", spy)
    out = tmp_path / "ev"
    assert main(["eval", "--thinking", "--env", "edit-menu", "--eval_size", "1", "--eval_n", "1",
                 "--max_new_tokens", "4", "--max_turns", "1", "--n_boot", "50", "--out", str(out)]) == 0
    data = validate_results(out / "results.json")
    assert data["config"]["thinking"] is True
    assert data["config"]["reward_includes_shown_test"] is False  # issue 14.4a: which scoring was used
    assert data["tasks"]["reward_includes_shown_test"] is False
    assert prompts and all(p.endswith("<|im_start|>assistant\n") for p in prompts)


@pytest.mark.slow
def test_smoke_with_thinking(capsys):
    from agentrl.models.load import load_policy
    from agentrl.models.policy import PolicyConfig
    from agentrl.rollout.smoke import SmokeConfig, run_smoke

    report = run_smoke(SmokeConfig(policy=PolicyConfig(thinking=True), episodes=1, max_new_tokens=4, show=0))
    assert "thinking on" in report["template_check"]
    (tr,) = report["trajectories"]
    tok = load_policy("tiny-qwen3")[1]
    assert tok.decode(list(tr.prompt_ids)).endswith("<|im_start|>assistant\n")

"""The white-box demo end to end on CPU: examples/trl_openenv_whitebox.py (TRL GRPOTrainer, environment_factory
over OpenEnv's EnvClient) against an `agentrl serve` server this test starts; MBPP python-session and Wordle.

Sampling is steered as in test_trl_grpo.py (a random model never calls a tool); the trainer, the
client, the server, the sandbox and the hidden-test rewards are all real.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("openenv")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from scripted_policy import mbpp_reference_or_stub, qwen3_tokenizer, scripted_tiny_qwen3  # noqa: E402

from agentrl.rollout.scripted import tool_call_text, turns_done  # noqa: E402
from agentrl.serve.env.app import BackgroundServer, EnvServerConfig  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_openenv_whitebox.py"


def _example():
    spec = importlib.util.spec_from_file_location("trl_openenv_whitebox", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(url: str, tmp_path, train: int, held: int) -> list[str]:
    return ["--env-url", url, "--dataset-size", str(train), "--eval-size", str(held), "--max-steps", "2",
            "--eval-steps", "2", "--num-generations", "2", "--per-device-train-batch-size", "4",
            "--gradient-accumulation-steps", "1", "--per-device-eval-batch-size", "2",
            "--max-completion-length", "768", "--max-tool-calling-iterations", "4", "--learning-rate", "1e-3",
            "--use-cpu", "--output-dir", str(tmp_path)]


def test_demo_refuses_too_few_tasks(tmp_path):
    example = _example()
    with BackgroundServer(EnvServerConfig(env="wordle", train_size=3, eval_size=2, port=0)) as url:
        with pytest.raises(SystemExit, match="fewer than --dataset-size 170"):
            example.datasets_for(url, 170, 2)
        train, held = example.datasets_for(url, 3, 2)
        assert not set(train["task_id"]) & set(held["task_id"])
        assert train[0]["prompt"][0]["role"] == "system" and "task" not in train.column_names  # no hidden data


@pytest.mark.slow
def test_whitebox_demo_mbpp_two_steps_with_fixed_eval(tmp_path):
    from agentrl.tasks.mbpp import load_mbpp

    script = mbpp_reference_or_stub({t.entry: t.reference for t in load_mbpp()})
    tok = qwen3_tokenizer()
    cfg = EnvServerConfig(env="python-session", tasks="mbpp", train_size=4, eval_size=2, port=0,
                          max_concurrent_envs=16)
    with BackgroundServer(cfg) as url:
        trainer = _example().main(_argv(url, tmp_path, 4, 2) + ["--eval-first"], model=scripted_tiny_qwen3(tok, script),
                                  tokenizer=tok)
    logs = trainer.state.log_history
    assert trainer.state.global_step == 2
    train = [h for h in logs if "rewards/PythonSessionRemoteTRL/mean" in h]
    assert len(train) == 2 and all(h["rewards/PythonSessionRemoteTRL/mean"] == pytest.approx(0.5) for h in train)
    assert all(h["env/cells"] == pytest.approx(1.0) for h in train)  # run_python ran on the server's sandbox
    evals = [h for h in logs if "eval_reward" in h]  # --eval-first: step 0, then the eval every 2 steps
    assert [h["step"] for h in evals] == [0, 2]
    assert all(h["eval_reward"] == pytest.approx(0.5) for h in evals)  # reference on one of two problems
    assert all(h["eval_tools/call_frequency"] == pytest.approx(1.0) for h in evals)
    curve = json.loads((tmp_path / "curve.json").read_text())  # the fixed eval set's points; no trend from two
    assert curve["points"] == [{"step": 0, "eval_reward": pytest.approx(0.5)},
                               {"step": 2, "eval_reward": pytest.approx(0.5)}] and "trend" not in curve
    assert curve["train_reward"] == [pytest.approx(0.5)] * 2
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]  # readable
    assert {r["step"] for r in episodes} >= {0, 1, 2} and {r["reward"] for r in episodes} == {0.0, 1.0}
    assert all(r["completion"] and r["task_id"].startswith("mbpp-") for r in episodes)


def test_eval_curve_trend_from_a_log_history():
    """curve.json's numbers from TRL's log history: eval points in step order, OLS trend, t = slope / stderr;
    entries TRL logs as None (env_stats scores nothing) are skipped."""
    history = [{"step": 0, "eval_reward": 0.50}, {"step": 1, "reward": 0.2, "rewards/env_stats/mean": None},
               {"step": 4, "eval_reward": 0.55}, {"step": 8, "eval_reward": 0.58}, {"step": 12, "eval_reward": 0.65},
               {"step": 2, "reward": 0.6}, {"step": 3, "reward": 0.1}]
    curve = _example().eval_curve(history)
    assert [p["step"] for p in curve["points"]] == [0, 4, 8, 12]
    t = curve["trend"]
    assert t["first"] == 0.50 and t["last"] == 0.65 and t["n"] == 4
    assert t["slope_per_step"] == pytest.approx(0.012)  # OLS by hand: Sxy 0.96 / Sxx 80
    assert t["rise"] == pytest.approx(0.012 * 12) and t["t"] > 5
    assert curve["train_reward"] == [0.2, 0.6, 0.1] and curve["train_step_noise"] > 0


@pytest.mark.slow
def test_whitebox_demo_wordle_same_path(tmp_path):
    from agentrl.tasks.words import load_words

    word = sorted(load_words())[0]

    def script(context: str, row: int) -> str:
        return "I give up." if turns_done(context) else tool_call_text("guess", {"word": word})

    tok = qwen3_tokenizer()
    with BackgroundServer(EnvServerConfig(env="wordle", train_size=4, eval_size=2, port=0)) as url:
        trainer = _example().main(_argv(url, tmp_path, 4, 2), model=scripted_tiny_qwen3(tok, script), tokenizer=tok)
    train = [h for h in trainer.state.log_history if "rewards/WordleRemoteTRL/mean" in h]
    assert trainer.state.global_step == 2 and len(train) == 2
    for h in train:
        assert h["env/guesses"] == pytest.approx(1.0) and h["env/invalid_guesses"] == pytest.approx(0.0)
        assert h["env/end_reason/final_answer"] == pytest.approx(1.0)
        assert 0.0 <= h["rewards/WordleRemoteTRL/mean"] <= 1.0

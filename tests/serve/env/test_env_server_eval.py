"""`agentrl eval --env-url URL --models A B ...`: the statistics (hand-worked) and one CLI pass on CPU."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv")

from agentrl.serve.env.eval import ModelScore, render_table, score_models  # noqa: E402


def test_paired_difference_against_the_first_model_on_common_tasks():
    base = ModelScore("base", per_task_reward={"a": 0.0, "b": 0.5, "c": 1.0}, per_task_solved={"a": 0, "b": 0, "c": 1})
    better = ModelScore("rl", per_task_reward={"a": 0.5, "b": 1.0, "c": 1.0, "d": 1.0},
                        per_task_solved={"a": 0, "b": 1, "c": 1, "d": 1})
    common = score_models([base, better], n_boot=2000, alpha=0.05, seed=0)
    assert common == ["a", "b", "c"]  # "d" was not scorable for the base model: out of the comparison
    assert base.mean_reward.mean == pytest.approx(0.5) and better.mean_reward.mean == pytest.approx(2.5 / 3)
    assert better.pass_at_1.mean == pytest.approx(2 / 3)
    diff = better.diff_vs_first
    assert diff.mean == pytest.approx(1 / 3)  # (0.5 + 0.5 + 0) / 3
    assert 0.0 <= diff.lo <= 1 / 3 <= diff.hi <= 0.5  # every per-task difference is 0 or 0.5
    assert base.diff_vs_first is None and base.pass_diff_vs_first is None
    assert better.pass_diff_vs_first.mean == pytest.approx(1 / 3)  # solved: b only newly (0 -> 1) of a, b, c
    table = render_table([base, better], 3, 1, 0.05)
    assert "base" in table and "+0.333" in table and "pass@1 vs first" in table


def test_equal_models_have_an_undefined_difference_interval():
    a = ModelScore("a", per_task_reward={"x": 0.0, "y": 1.0}, per_task_solved={"x": 0, "y": 1})
    b = ModelScore("b", per_task_reward={"x": 0.0, "y": 1.0}, per_task_solved={"x": 0, "y": 1})
    score_models([a, b], n_boot=100, alpha=0.05, seed=0)
    assert b.diff_vs_first.mean == 0.0 and not b.diff_vs_first.defined
    assert "n/a" in render_table([a, b], 2, 1, 0.05)


def test_no_common_task_is_an_error():
    with pytest.raises(ValueError, match="no held-out task"):
        score_models([ModelScore("a", per_task_reward={"x": 1.0}), ModelScore("b")], n_boot=10, alpha=0.05, seed=0)


def test_cli_scores_two_models_through_one_server(tmp_path, capsys):
    from agentrl.cli import main
    from agentrl.serve.env.app import BackgroundServer, EnvServerConfig

    out = tmp_path / "ev"
    with BackgroundServer(EnvServerConfig(env="python-session", train_size=2, eval_size=2, port=0)) as url:
        rc = main(["eval", "--env-url", url, "--models", "tiny-qwen3", "tiny-qwen3", "--eval-n", "1",
                   "--max-new-tokens", "8", "--device", "cpu", "--out", str(out)])
    assert rc == 0
    result = json.loads((out / "served_eval.json").read_text())
    assert [m["model"] for m in result["models"]] == ["tiny-qwen3", "tiny-qwen3"]
    assert len(result["tasks"]) == 2 and result["compared_tasks"] == result["tasks"]
    second = result["models"][1]
    assert second["diff_vs_first"]["mean"] == 0.0 and sum(second["end_reasons"].values()) == 2
    assert second["pass_diff_vs_first"]["mean"] == 0.0
    for i in (0, 1):  # each model's episodes, readable
        rows = [json.loads(line) for line in (out / "transcripts" / f"{i}.jsonl").read_text().splitlines()]
        assert sorted(r["task_id"] for r in rows) == sorted(result["tasks"])
        assert all(r["model"] == "tiny-qwen3" and r["transcript"] for r in rows)
    assert "held-out: 2 tasks x 1 episodes" in capsys.readouterr().out


def test_models_without_env_url_is_refused(capsys):
    from agentrl.cli import main

    assert main(["eval", "--models", "a", "b"]) == 2
    assert "--models needs --env-url" in capsys.readouterr().err


def test_a_missing_model_path_is_refused_before_any_rollout(tmp_path, monkeypatch):
    """A typo in the last of several models used to surface only after the first ones' rollouts (on an H200:
    257 MBPP episodes of a 1.5B model, then 'model path does not exist' and nothing written)."""
    import agentrl.serve.env.eval as ev
    from agentrl.rl.config import RLConfig
    from agentrl.serve.env.app import BackgroundServer, EnvServerConfig

    monkeypatch.setattr(ev, "_rollouts", lambda *a, **k: pytest.fail("rolled out before checking the models"))
    cfg = RLConfig.from_flat(out=str(tmp_path / "ev"), device="cpu")
    with BackgroundServer(EnvServerConfig(env="python-session", train_size=2, eval_size=2, port=0)) as url:
        with pytest.raises(FileNotFoundError, match=r"'\./no-such-run'.*'/no/such/model'"):
            ev.eval_served(cfg, url, ["tiny-qwen3", "./no-such-run", "/no/such/model"])
        with pytest.raises(FileNotFoundError, match=r"'no-such-org/no-such-model' not found"):  # not a path either
            ev.eval_served(cfg, url, ["tiny-qwen3", "no-such-org/no-such-model"])


def test_scores_of_finished_models_survive_a_later_failure(tmp_path, monkeypatch):
    import agentrl.serve.env.eval as ev
    from agentrl.rl.config import RLConfig
    from agentrl.serve.env.app import BackgroundServer, EnvServerConfig

    real = ev._rollouts

    def rollouts(cfg, url, env_name, model_name, tasks, concurrency):
        if model_name == "second":
            raise RuntimeError("CUDA out of memory")
        return real(cfg, url, env_name, "tiny-qwen3", tasks, concurrency)

    monkeypatch.setattr(ev, "_rollouts", rollouts)
    monkeypatch.setattr(ev, "check_model_paths", lambda models, allow_download=False: None)  # names, not models
    cfg = RLConfig.from_flat(out=str(tmp_path / "ev"), device="cpu", eval_n=1, max_new_tokens=8)
    with BackgroundServer(EnvServerConfig(env="python-session", train_size=2, eval_size=2, port=0)) as url:
        with pytest.raises(RuntimeError, match="out of memory"):
            ev.eval_served(cfg, url, ["first", "second"])
    partial = json.loads((tmp_path / "ev" / "served_eval.json").read_text())
    assert partial["complete"] is False and [m["model"] for m in partial["models"]] == ["first"]
    assert sum(partial["models"][0]["end_reasons"].values()) == 2

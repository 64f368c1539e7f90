"""`agentrl sft` command line: trains from a JSONL file, writes model + summary; bad input is a clear error."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.cli import main
from agentrl.models.presets import MODEL_PRESETS, SMALL_QWEN3_OVERRIDES, tiny_qwen3_config
from agentrl.sft.config import SFTConfig


def _chat_jsonl(path, n=2):
    lines = []
    for i in range(n):
        lines.append(json.dumps({"messages": [
            {"role": "user", "content": f"Say the number {i}."}, {"role": "assistant", "content": f"The number is {i}."}]}))
    path.write_text("\n".join(lines) + "\n")


def test_sft_cli_from_jsonl_writes_model_and_summary(tmp_path):
    data = tmp_path / "chat.jsonl"
    _chat_jsonl(data)
    out = tmp_path / "run"
    rc = main(["sft", "--model", "tiny-qwen3", "--from-jsonl", str(data), "--epochs", "3", "--batch", "2",
               "--micro", "1", "--lr", "3e-3", "--warmup-steps", "0", "--out", str(out),
               "--save-jsonl", str(tmp_path / "tokens.jsonl"), "--device", "cpu"])
    assert rc == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert len(summary["losses"]) == 3 and summary["nll_after"] < summary["nll_before"]
    assert summary["data"]["trajectories"] == 2 and summary["policy_tokens"] > 0
    assert (out / "model.safetensors").exists() and (out / "sft.log").exists()
    assert len((tmp_path / "tokens.jsonl").read_text().splitlines()) == 2
    # before the first step's line, the log says what the first (silent) minutes on a CPU are spent on
    assert "policy NLL before training (a forward pass over the 2 trajectories), then 3 optimizer steps" in (
        out / "sft.log").read_text()


def test_sft_cli_bad_jsonl_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_ids": [1], "completion_ids": [2, 3], "policy_mask": [1]}\n')
    rc = main(["sft", "--from-jsonl", str(bad), "--out", str(tmp_path / "o"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}:1" in err and "policy_mask" in err


def test_a_jsonl_without_policy_tokens_is_named_before_the_model_loads(tmp_path, capsys):
    """Records whose policy_mask is all 0 gave 'policy_nll: the trajectories have no policy tokens', naming no file,
    after the model had loaded and --out had been made; now the file is named before the model loads (a missing
    --model is not reached)."""
    data = tmp_path / "zero.jsonl"
    data.write_text('{"prompt_ids": [1, 2], "completion_ids": [3, 4], "policy_mask": [0, 0]}\n' * 2)
    rc = main(["sft", "--model", str(tmp_path / "no-such-model"), "--from-jsonl", str(data), "--out",
               str(tmp_path / "o"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{data}: none of its 2 records has a policy token" in err and "no-such-model" not in err
    assert not (tmp_path / "o").exists()
    from agentrl.sft.data import load_trajectories

    with pytest.raises(ValueError, match="none of its 2 records has a policy token"):  # the Python API alike
        load_trajectories(data)


def test_a_max_tokens_no_trajectory_fits_is_refused_before_out_is_touched(tmp_path, capsys):
    """--max-tokens below every trajectory was refused by the trainer after --out was made (and an earlier output
    moved aside); now before, naming the flag, the file and the shortest trajectory."""
    data = tmp_path / "long.jsonl"
    data.write_text('{"prompt_ids": [1, 2], "completion_ids": [3, 4, 5], "policy_mask": [1, 1, 1]}\n')
    rc = main(["sft", "--model", "tiny-qwen3", "--from-jsonl", str(data), "--max-tokens", "4", "--out",
               str(tmp_path / "o"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--max-tokens 4: none of the 1 trajectories (from {data})" in err and "shortest has 5" in err
    assert not (tmp_path / "o").exists()


def test_small_qwen3_preset_config():
    assert "small-qwen3" in MODEL_PRESETS
    cfg = tiny_qwen3_config(**SMALL_QWEN3_OVERRIDES)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim) == (4, 384, 64)
    assert cfg.vocab_size == 151936 and cfg.tie_word_embeddings


def test_sft_on_wordle_plays_real_games_from_the_training_split(tmp_path):
    """`--tasks wordle`: the expert plays consistent guesses over the word list (several guesses, each
    a word of the list); the saved trajectories are Wordle games, none of them a held-out word."""
    from agentrl.tasks.words import load_words, word_split

    words = set(load_words())
    out = tmp_path / "run"
    rc = main(["sft", "--env", "wordle", "--tasks", "wordle", "--n-tasks", "6", "--epochs", "1", "--batch", "2",
               "--micro", "2", "--out", str(out), "--save-jsonl", str(tmp_path / "w.jsonl"), "--device", "cpu"])
    assert rc == 0
    recs = [json.loads(line) for line in (tmp_path / "w.jsonl").read_text().splitlines()]
    assert len(recs) == 6
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["data"]["trajectories"] == 6
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    from agentrl.chat.parse import parse_tool_calls

    played = []
    for r in recs:
        text = tok.decode([t for t, m in zip(r["completion_ids"], r["policy_mask"], strict=True) if m])
        played.append([c.arguments["word"] for c in parse_tool_calls(text)[0] if c.name == "guess"])
    assert all(len(g) >= 1 for g in played) and max(len(g) for g in played) >= 2
    assert all(w in words for game in played for w in game)
    assert all(word_split(game[-1]) == "train" for game in played)  # solved games end on their (train) secret


def test_sft_refuses_nan_or_infinite_optimiser_and_lora_floats(tmp_path, capsys):
    """--lora-alpha nan (and --weight-decay nan, --lr inf, ...) trained to a NaN model and exited 0; each is a
    one-line error naming the value, before --out is made (the LoRA ones came after the data and an empty --out)."""
    data = tmp_path / "chat.jsonl"
    _chat_jsonl(data)
    for flags, why in ((["--lora-r", "2", "--lora-alpha", "nan"], "--lora-alpha nan: expected a finite number > 0"),
                       (["--lora-r", "2", "--lora-alpha", "inf"], "--lora-alpha inf: expected a finite number > 0"),
                       (["--lora-r", "2", "--lora-dropout", "nan"], "--lora-dropout nan: expected a number in [0, 1)"),
                       (["--weight-decay", "nan"], "weight_decay must be a finite number, got nan"),
                       (["--weight-decay", "-1"], "weight_decay >= 0"),
                       (["--max-grad-norm", "inf"], "max_grad_norm must be a finite number, got inf"),
                       (["--lr", "inf"], "lr must be a finite number, got inf")):
        out = tmp_path / "o"
        rc = main(["sft", "--model", "tiny-qwen3", "--from-jsonl", str(data), "--epochs", "1", "--batch", "2",
                   "--out", str(out), "--device", "cpu", *flags])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and err.count("\n") == 1, (flags, err)
        assert not out.exists(), flags
    with pytest.raises(ValueError, match=r"betas\[1\] must be a finite number"):
        SFTConfig(betas=(0.9, math.nan))


def test_sft_env_that_cannot_run_the_tasks_uses_its_own_or_is_a_clear_error(tmp_path, capsys):
    """`--env wordle` with --tasks left at bugfix crashed with KeyError: 'secret' in the expert; it now plays
    Wordle's own tasks (as `agentrl train` does), and a source an --env cannot run is a one-line error."""
    out = tmp_path / "run"
    rc = main(["sft", "--env", "wordle", "--n-tasks", "2", "--epochs", "1", "--batch", "2", "--out", str(out),
               "--device", "cpu"])
    assert rc == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["run"]["env"] == "wordle" and summary["run"]["tasks"] == "wordle"
    capsys.readouterr()
    for flags in (["--env", "edit-menu", "--tasks", "wordle"], ["--env", "coding-tools", "--tasks", "wordle"]):
        bad = tmp_path / "bad"
        rc = main(["sft", *flags, "--n-tasks", "2", "--epochs", "1", "--out", str(bad), "--device", "cpu"])
        err = capsys.readouterr().err
        assert rc == 2 and f"--env {flags[1]} cannot run --tasks wordle" in err and err.count("\n") == 1, err
        assert not (bad / "model.safetensors").exists()


def test_an_interrupted_sft_keeps_the_model_trained_so_far(tmp_path, capsys, monkeypatch):
    """Ctrl-C or SIGTERM mid-training saved nothing (a 15-minute CPU run was lost at step 10 of 12); now the model
    as trained so far and a summary marked "interrupted" are written, and the command exits 130."""
    import stat

    import agentrl.sft.trainer as trainer

    real = trainer.sft

    def stopped_after_two(model, trajs, cfg, *, pad_id, on_step):
        calls = []

        def step(r):
            on_step(r)
            calls.append(r)
            if len(calls) == 2:
                raise KeyboardInterrupt

        return real(model, trajs, cfg, pad_id=pad_id, on_step=step)

    monkeypatch.setattr(trainer, "sft", stopped_after_two)
    data = tmp_path / "chat.jsonl"
    _chat_jsonl(data)
    out = tmp_path / "run"
    rc = main(["sft", "--model", "tiny-qwen3", "--from-jsonl", str(data), "--epochs", "3", "--batch", "1",
               "--micro", "1", "--warmup-steps", "0", "--out", str(out), "--device", "cpu"])
    assert rc == 130
    summary = json.loads((out / "sft_summary.json").read_text())
    assert (summary["status"], summary["steps_done"], summary["steps_planned"]) == ("interrupted", 2, 6)
    assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) & 0o044 == 0o044  # readable, as its siblings
    assert "interrupted after 2 of 6 optimizer steps" in (out / "sft.log").read_text()
    assert main(["eval", "--model", str(out), "--env", "edit-menu", "--eval-size", "1", "--eval-n", "1",
                 "--max-turns", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "ev")]) == 0  # it loads

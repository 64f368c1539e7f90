"""A prompt + completion budget beyond the model's positions is refused once the model is known (train, eval,
smoke, serve-policy): `--max-context-tokens 1000000000 --max-new-tokens 1000000000` was accepted, and the policy
server sampled past the model's 8,192 positions (transformers only warned) until a request hung."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from agentrl.cli import main
from agentrl.models.load import check_context_tokens, context_limit


def _model(**config):
    return SimpleNamespace(config=SimpleNamespace(**config))


@pytest.mark.parametrize("config, limit", [
    ({"max_position_embeddings": 8192}, 8192),
    ({"n_positions": 1024}, 1024),  # GPT-2's name
    ({"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 131072),
    ({"max_position_embeddings": 131072,  # Llama 3.1: the config already states the extended length
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}, 131072),
    ({}, None), ({"max_position_embeddings": None}, None),
])
def test_context_limit_reads_the_config(config, limit):
    assert context_limit(_model(**config)) == limit


def test_a_budget_beyond_the_limit_names_the_flag_and_the_model():
    check_context_tokens(_model(max_position_embeddings=8192), 8192, "--max-context-tokens", "m")
    with pytest.raises(ValueError, match=r"--max-context-tokens 8,193 is beyond the context of model 'm': 8,192 "
                                         r"tokens .*; pass at most 8192"):
        check_context_tokens(_model(max_position_embeddings=8192), 8193, "--max-context-tokens", "m")


def test_train_refuses_it_before_out_is_touched(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--preset", "quick", "--max-context-tokens", "1000000000", "--max-new-tokens", "1000000000",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "--max-context-tokens 1,000,000,000 is beyond the context of model 'demo-qwen3'" in err
    assert not out.exists()


def test_serve_policy_defaults_to_the_model_context_and_refuses_beyond_it():
    """serve-policy's default (16384) is cut to a shorter model's context (demo-qwen3: 8192) instead of refused."""
    from agentrl.cli.serve_policy import build_server

    args = argparse.Namespace(model="demo-qwen3", tokenizer="", dtype="fp32", device="cpu", allow_download=False,
                              max_new_tokens=1_000_000_000, gen_batch=1, sampler="hf", max_calls=4,
                              max_rollout_tokens=100, max_wall_s=60.0, require_open=False, max_open_rollouts=4,
                              max_context_tokens=None)
    server = build_server(args)
    try:
        assert server.max_context_tokens == 8192
    finally:
        server.close()
    with pytest.raises(ValueError, match="--max-context-tokens 8,193 is beyond the context of model 'demo-qwen3'"):
        build_server(argparse.Namespace(**{**vars(args), "max_context_tokens": 8193}))


def test_the_default_budget_is_lowered_to_a_shorter_model_and_a_chosen_one_is_refused(caplog):
    """The flag's default (4,096) on a 2,048-position model runs at 2,048, logged, as vLLM's max_model_len defaults
    to the model's; a value the user chose beyond it is refused; values within it are kept."""
    from agentrl.models.load import fit_context_tokens

    short = _model(max_position_embeddings=2048)
    with caplog.at_level("INFO", logger="agentrl"):
        assert fit_context_tokens(short, 4096, 4096, "--max-context-tokens", "m") == 2048
    assert "--max-context-tokens 4096 lowered to 2048, the context of model 'm'" in caplog.text
    assert fit_context_tokens(short, 1024, 4096, "--max-context-tokens", "m") == 1024
    assert fit_context_tokens(_model(), 4096, 4096, "--max-context-tokens", "m") == 4096  # no limit stated
    with pytest.raises(ValueError, match="--max-context-tokens 3,000 is beyond the context of model 'm': 2,048"):
        fit_context_tokens(short, 3000, 4096, "--max-context-tokens", "m")


def test_a_run_on_a_short_model_records_the_lowered_budget(monkeypatch, tmp_path):
    """RunSession.open runs and records the fitted config: results.json's max_context_tokens is the model's."""
    import json

    from agentrl.models import load as load_mod

    real = load_mod.context_limit
    monkeypatch.setattr(load_mod, "context_limit", lambda model: min(real(model) or 10**9, 3000))
    out = tmp_path / "run"
    assert main(["train", "--preset", "quick", "--steps", "0", "--warm-start", "none", "--eval-size", "3",
                 "--eval-n", "1", "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["max_context_tokens"] == 3000

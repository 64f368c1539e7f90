"""bench_step's random-weight model needs a tokenizer: on a GPU host that got only the repository (no shared assets),
a coder config takes the converted model's own (the issue-26 coder step row failed there for want of the asset)."""

from __future__ import annotations

import bench_step
import pytest


def _no_asset():
    raise FileNotFoundError("could not find assets 'qwen3-tokenizer'")


def test_the_qwen3_asset_comes_first(monkeypatch):
    monkeypatch.setattr(bench_step, "qwen3_tokenizer_source", lambda: "/assets/qwen3-tokenizer")
    assert bench_step.tokenizer_source("qwen2.5-coder-1.5b-instruct") == "/assets/qwen3-tokenizer"


def test_without_the_asset_a_converted_pretrained_model_gives_its_tokenizer(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_step, "qwen3_tokenizer_source", _no_asset)
    monkeypatch.setenv("AGENTRL_MODELS", str(tmp_path))
    (tmp_path / "qwen2.5-coder-1.5b-instruct").mkdir()
    (tmp_path / "qwen2.5-coder-1.5b-instruct" / "tokenizer_config.json").write_text("{}")
    assert bench_step.tokenizer_source("qwen2.5-coder-1.5b-instruct") == str(tmp_path / "qwen2.5-coder-1.5b-instruct")


def test_neither_names_both_places(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_step, "qwen3_tokenizer_source", _no_asset)
    monkeypatch.setenv("AGENTRL_MODELS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"qwen3-tokenizer.*nor a converted 'qwen2.5-coder-0.5b-instruct'"):
        bench_step.tokenizer_source("qwen2.5-coder-0.5b-instruct")
    with pytest.raises(FileNotFoundError):
        bench_step.tokenizer_source(None)

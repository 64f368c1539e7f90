"""load_policy: the tiny-qwen3 preset, and clear errors for missing models, tokenizers and templates."""

import json
import shutil

import pytest
import torch

from agentrl.models.load import load_policy, load_tokenizer
from agentrl.models.presets import tiny_qwen3_config
from agentrl.paths import resolve_asset


def test_tiny_qwen3_is_qwen3_small_and_seeded():
    model, tok = load_policy("tiny-qwen3", seed=3)
    cfg = model.config
    assert cfg.model_type == "qwen3" and cfg.num_hidden_layers == 2 and cfg.hidden_size == 64
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (4, 2, 151936)
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    assert tok.padding_side == "left" and tok.pad_token == "<|endoftext|>" and tok.chat_template
    again, _ = load_policy("tiny-qwen3", seed=3)
    other, _ = load_policy("tiny-qwen3", seed=4)
    w = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(model.state_dict()[w], again.state_dict()[w])
    assert not torch.equal(model.state_dict()[w], other.state_dict()[w])
    assert tiny_qwen3_config().tie_word_embeddings  # as in Qwen3-0.6B's config.json


def test_tokenizer_revision_override():
    _, tok = load_policy("tiny-qwen3", tokenizer_path=resolve_asset("qwen3-tokenizer-current"))
    assert "message.content is string" in tok.chat_template


def test_missing_model_and_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_policy(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="local files only"):
        load_policy("no-such-org/no-such-model")
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny-qwen3", dtype="float8")


def test_tokenizer_without_chat_template_is_rejected(tmp_path):
    src = resolve_asset("qwen3-tokenizer")
    shutil.copy(src / "tokenizer.json", tmp_path / "tokenizer.json")
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="no chat template"):
        load_tokenizer(tmp_path)


def test_tiny_qwen3_tokenizer_missing_everywhere_says_how_to_fetch(tmp_path, monkeypatch):
    import agentrl.paths as paths

    monkeypatch.setenv("AGENTRL_ASSETS", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(paths, "_shared_candidates", lambda kind: [])
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(FileNotFoundError, match="agentrl assets fetch"):
        load_policy("tiny-qwen3")


def test_checkpoint_dir_loads_its_model_subfolder(tmp_path):
    import torch.optim

    from agentrl.rl.checkpoint import save_checkpoint

    model, tok = load_policy("tiny-qwen3", seed=5)
    ckpt = save_checkpoint(tmp_path / "checkpoints", 2, model, torch.optim.AdamW(model.parameters()), tokenizer=tok)
    for path in (ckpt, ckpt / "model"):
        loaded, ltok = load_policy(str(path))
        w = "model.layers.0.self_attn.q_proj.weight"
        assert torch.equal(loaded.state_dict()[w], model.state_dict()[w]) and ltok.chat_template


def test_folder_without_tokenizer_or_config_says_so(tmp_path):
    model, _ = load_policy("tiny-qwen3")
    model.save_pretrained(tmp_path / "weights_only")  # config + weights, no tokenizer files
    for call in (lambda: load_policy(str(tmp_path / "weights_only")), lambda: load_tokenizer(tmp_path / "weights_only")):
        with pytest.raises(FileNotFoundError, match="has no tokenizer") as e:
            call()
        assert "sentencepiece" not in str(e.value) and "download" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        load_policy(str(tmp_path / "empty"), tokenizer_path=resolve_asset("qwen3-tokenizer"))


@pytest.mark.parametrize("config,why", [
    ('{"model_type": "qwen3", "hidden', "config.json is not valid JSON"),
    ("[1, 2]", "config.json holds a list, expected an object"),
    ('{"model_type": "nonsense_xyz"}', "config.json has model_type 'nonsense_xyz', which transformers"),
])
def test_broken_config_is_one_line_naming_the_config_not_the_tokenizer(tmp_path, config, why):
    model, tok = load_policy("tiny-qwen3")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(ValueError, match=why) as e:
        load_policy(str(tmp_path))
    assert "\n" not in str(e.value) and "tokenizer" not in str(e.value) and "pip install" not in str(e.value)


def test_local_folder_without_weights_is_not_told_about_the_hf_cache(tmp_path):
    src = resolve_asset("qwen3-tokenizer")
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    tiny_qwen3_config().save_pretrained(tmp_path)  # config.json and tokenizer, no weight files
    with pytest.raises(FileNotFoundError, match="without weights") as e:
        load_policy(str(tmp_path))
    assert "HF cache" not in str(e.value) and "--allow-download" not in str(e.value)


@pytest.mark.parametrize("name", ["weights.bin", "results.json", "model.gguf", "no_suffix"])
def test_model_or_tokenizer_path_that_is_a_file_is_one_line_naming_it(tmp_path, name):
    f = tmp_path / name
    f.write_bytes(b"\x00\xffnot a model")
    with pytest.raises(ValueError, match="is a file; expected a model folder") as e:
        load_policy(str(f))
    assert "\n" not in str(e.value) and "could not load a tokenizer" not in str(e.value)
    assert "Repo id must" not in str(e.value)
    with pytest.raises(ValueError, match="is a file; expected a folder holding a tokenizer"):
        load_tokenizer(f)
    with pytest.raises(ValueError, match="tokenizer path .* is a file"):
        load_policy("tiny-qwen3", tokenizer_path=f)


def test_tf32_flag_allows_tf32_matmuls_and_is_recorded():
    from agentrl.models.policy import PolicyConfig, set_tf32
    from agentrl.rl.config import RLConfig

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        set_tf32(False)
        PolicyConfig().load("cpu")
        assert not torch.backends.cuda.matmul.allow_tf32  # off by default: fp32 stays full precision
        PolicyConfig(tf32=True).load("cpu")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        cfg = RLConfig.from_flat(tf32=True)
        assert cfg.policy.tf32 and cfg.to_flat()["tf32"] is True  # in the results file's config
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_a_mistyped_run_folder_is_named_with_the_close_folder_not_an_hf_connection_error(tmp_path, monkeypatch):
    """`--model runs/defualt` (runs/default exists) and `--model nonexist` reached transformers, whose error
    blamed the tokenizer and the internet connection ("We couldn't connect to 'https://huggingface.co'")."""
    from agentrl.cli import main

    (tmp_path / "runs" / "default").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"model 'runs/defualt' not found \(did you mean runs/default\?\)") as e:
        load_policy("runs/defualt")
    assert "tokenizer" not in str(e.value) and "huggingface.co" not in str(e.value)
    assert "a run folder (runs/x)" in str(e.value) and "tiny-qwen3" in str(e.value)
    with pytest.raises(FileNotFoundError, match=r"model path '\./runs/defualt' does not exist \(did you mean"):
        load_policy("./runs/defualt")
    for command in (["eval", "--model", "nonexist"], ["smoke", "--model", "nonexist"],
                    ["sft", "--model", "nonexist", "--env", "edit-menu"], ["train", "--model", "nonexist"]):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            out = [] if command[0] == "smoke" else ["--out", str(tmp_path / "o")]
            assert main([*command, "--device", "cpu", *out]) == 2, command
        assert "model 'nonexist' not found" in err.getvalue() and "huggingface.co" not in err.getvalue(), command

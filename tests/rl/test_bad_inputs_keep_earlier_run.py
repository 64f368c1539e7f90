"""Issue 14.6a/c: a run whose inputs fail validation (missing or broken model, bad tokenizer path, bad chat
template) leaves an earlier run in the same --out untouched; --resume without a checkpoint is an error."""

import json
import shlex
import shutil

import pytest

from agentrl.cli import build_parser, main
from agentrl.cli.flags import config_from_args
from agentrl.paths import resolve_asset
from agentrl.rl.config import RLConfig, cli_command


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from agentrl.models.load import load_policy

    root = tmp_path_factory.mktemp("models")
    model, tok = load_policy("tiny-qwen3")
    model.save_pretrained(root / "good")
    tok.save_pretrained(root / "good")
    shutil.copytree(root / "good", root / "broken")
    (root / "broken" / "model.safetensors").write_bytes(b"\x00" * 64)  # corrupt weights
    shutil.copytree(resolve_asset("qwen3-tokenizer"), root / "plain-template")
    cfg_path = root / "plain-template" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    cfg_path.write_text(json.dumps(cfg))
    (root / "good" / "chat_template.jinja").unlink(missing_ok=True)
    return root


def earlier_run(out):
    out.mkdir()
    (out / "results.json").write_text('{"finished": true}')
    (out / "train.log").write_text("the earlier run's log\n")
    return {p.name: p.read_text() for p in out.iterdir()}


def flags():
    return ["--env", "edit-menu", "--steps", "1", "--eval-size", "1", "--eval-n", "1", "--max-new-tokens", "4"]


@pytest.mark.parametrize("case", ["missing-model", "broken-model", "bad-tokenizer-path", "bad-template",
                                  "resume-without-checkpoint", "context-smaller-than-the-prompt"])
def test_bad_input_leaves_the_earlier_run_untouched(tmp_path, models, capsys, case):
    out = tmp_path / "run"
    before = earlier_run(out)
    extra = {
        "missing-model": ["--model", str(tmp_path / "no-such-model")],
        "broken-model": ["--model", str(models / "broken")],
        "bad-tokenizer-path": ["--tokenizer", str(tmp_path / "no-such-tokenizer")],
        "bad-template": ["--tokenizer", str(models / "plain-template")],
        "resume-without-checkpoint": ["--resume"],
        "context-smaller-than-the-prompt": ["--max-context-tokens", "10"],
    }[case]
    assert main(["train", *flags(), *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and ("checkpoint" in err if case.startswith("resume") else True)
    if case.startswith("context"):
        assert "--max-context-tokens 10 leaves no room to sample: the first held-out prompt is already" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".run.lock") == ["run"]  # nothing moved aside


def test_cli_command_reproduces_the_config():
    cfg = RLConfig.from_flat(env="edit-menu", steps=5, out="runs/my run", thinking=True, checkpoint_every=1)
    cmd = cli_command(cfg, resume=True)
    assert cmd == ("agentrl train --thinking --env edit-menu --steps 5 --out 'runs/my run' "
                   "--checkpoint-every 1 --resume")
    args = build_parser().parse_args(shlex.split(cmd)[1:])
    assert config_from_args(args).to_flat() == {**cfg.to_flat(), "resume": True}


def test_cli_command_of_a_preset_run_names_only_what_differs_from_the_preset():
    """`train --preset quick --checkpoint-every 1`, interrupted, was told to resume with `agentrl train --model
    demo-qwen3 --families minmax,compare,zero --env edit-menu ... --preset quick --steps 10 --out runs/ck
    --checkpoint-every 1 --resume`: every preset value spelled out beside the preset itself."""
    cfg = RLConfig.from_preset("quick", out="runs/ck", checkpoint_every=1, sampler="hf", gradient_checkpointing=False)
    cmd = cli_command(cfg, resume=True)
    assert cmd == ("agentrl train --preset quick --sampler hf --no-gradient-checkpointing --out runs/ck "
                   "--checkpoint-every 1 --resume"), cmd
    args = build_parser().parse_args(shlex.split(cmd)[1:])
    assert config_from_args(args).to_flat() == {**cfg.to_flat(), "resume": True}

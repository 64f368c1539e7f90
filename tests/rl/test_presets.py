"""`--preset NAME` and `--warm-start`: `agentrl train` with no flags is the demo preset; flags without
--preset start from RLConfig's own defaults (no surprise warm start); flags after --preset override it."""

from __future__ import annotations

import pytest

from agentrl.cli import build_parser, main
from agentrl.cli.flags import config_from_args
from agentrl.cli.train import preset_defaults
from agentrl.rl.config import PRESETS, TRAIN_ONLY, RLConfig
from agentrl.rl.warm_start import check_warm_start, warm_start_fn


def _cfg(argv: list[str]) -> RLConfig:
    return config_from_args(build_parser().parse_args(["train", *argv]))


def test_no_flags_is_the_demo_preset():
    assert _cfg([]) == RLConfig.from_preset("demo")
    demo = RLConfig.from_preset("demo")
    assert demo.run.preset == "demo" and demo.warm_start.method == "sft" and demo.env.name == "edit-menu"
    assert demo.policy.model == "demo-qwen3" and demo.to_flat() == {**RLConfig().to_flat(), **PRESETS["demo"], "preset": "demo"}


def test_only_seed_out_and_resume_keep_the_demo():
    """`agentrl train --seed 1 --out runs/s1` (as results/README.md measures the main job) is still the demo."""
    assert _cfg(["--seed", "1", "--out", "runs/s1"]) == RLConfig.from_preset("demo", seed=1, out="runs/s1")
    assert _cfg(["--out=runs/s1", "--resume"]) == RLConfig.from_preset("demo", out="runs/s1", resume=True)
    assert _cfg(["--seed", "1", "--steps", "2"]) == RLConfig.from_flat(seed=1, steps=2)  # any other flag: plain defaults


def test_print_config_prints_what_the_same_command_runs(capsys):
    """`agentrl train --print-config` is the demo that `agentrl train` runs (it printed the plain defaults,
    and a file written from it ran a different config than `agentrl train`)."""
    for argv in ([], ["--seed", "2"]):
        assert main(["train", *argv, "--print-config"]) == 0
        printed = capsys.readouterr().out
        assert main(["train", *argv, "--preset", "demo", "--print-config"]) == 0
        assert printed == capsys.readouterr().out
        assert "preset: demo" in printed.splitlines() and "model: demo-qwen3" in printed.splitlines()
    assert main(["train", "--steps", "2", "--print-config"]) == 0  # any other flag: the plain defaults
    assert "preset: ''" in capsys.readouterr().out.splitlines()


def test_a_config_file_of_only_where_keys_keeps_the_demo_as_the_flags_do(tmp_path, capsys):
    """`--config f.yaml` holding only `seed: 3` (flat or as `run: {seed: 3}`) is `train --seed 3`: the demo. It
    ran the plain defaults, so the same setting gave another run from a file than from a flag."""
    for name, text in (("flat", "seed: 3\n"), ("nested", "run:\n  seed: 3\n"), ("other", "seed: 3\nsteps: 2\n")):
        (tmp_path / f"{name}.yaml").write_text(text)
        assert main(["train", "--config", str(tmp_path / f"{name}.yaml"), "--print-config"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "seed: 3" in lines
        assert ("preset: demo" in lines) == (name != "other"), name  # any other key: the plain defaults, as flags


def test_flags_without_preset_keep_the_plain_defaults():
    """An explicit user (`--model X --env Y`) gets no warm start unless asking for it."""
    cfg = _cfg(["--env", "coding-tools", "--seed", "3"])
    assert cfg == RLConfig.from_flat(env="coding-tools", seed=3) and cfg.warm_start.method == "none" and cfg.run.preset == ""
    assert _cfg(["--warm-start", "sft"]).warm_start.method == "sft"


def test_flags_after_a_preset_override_it_in_either_order():
    for argv in (["--preset", "demo", "--seed", "1", "--steps", "2"], ["--seed", "1", "--preset=demo", "--steps", "2"]):
        assert _cfg(argv) == RLConfig.from_preset("demo", seed=1, steps=2)
    assert _cfg(["--preset", "demo", "--warm-start", "none"]).warm_start.method == "none"
    assert _cfg(["--preset", "demo", "--env", "edit-menu", "--families", ""]).tasks.families == ""


def test_unknown_preset_is_a_clear_error(capsys):
    assert preset_defaults(["--preset", "nope"]) == {}
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        RLConfig.from_preset("nope")
    with pytest.raises(ValueError, match="RLConfig.preset"):
        RLConfig.from_flat(preset="nope")
    with pytest.raises(SystemExit) as exit_:  # argparse's choice error, not an internal class name
        main(["train", "--preset", "nope", "--out", "/nonexistent/x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --preset: invalid choice: 'nope' (choose from '', 'demo', 'quick')" in err
    assert "RLConfig" not in err


def test_help_shows_the_preset_defaults_only_when_asked(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--preset", "demo", "--help"])
    demo_help = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    plain_help = capsys.readouterr().out
    assert "--warm-start" in plain_help and "no flags (or only --seed, --out, --resume, as flags or --config keys): --preset demo" in " ".join(plain_help.split())
    assert "(default: edit-menu)" in demo_help and "(default: coding-tools)" in plain_help


def test_eval_takes_no_warm_start_or_preset_flags():
    assert {"warm_start", "warm_start_tasks", "warm_start_epochs", "warm_start_lr", "warm_start_batch",
            "preset"} <= set(TRAIN_ONLY)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--warm-start", "sft"])


@pytest.mark.parametrize(("kw", "words"), [
    ({"warm_start": "rl"}, "RLConfig.warm_start"), ({"warm_start_tasks": 0}, "RLConfig.warm_start_tasks"),
    ({"warm_start_epochs": 0}, "RLConfig.warm_start_epochs"), ({"warm_start_lr": 0.0}, "RLConfig.warm_start_lr"),
    ({"warm_start_batch": 0}, "RLConfig.warm_start_batch"),
])
def test_warm_start_fields_are_validated(kw, words):
    with pytest.raises(ValueError, match=words):
        RLConfig.from_flat(**kw)


def test_sft_warm_start_is_registered_and_checked_before_a_run():
    assert callable(warm_start_fn("sft"))
    check_warm_start(RLConfig.from_preset("demo"))
    check_warm_start(RLConfig.from_flat(warm_start="none", env="wordle", tasks="wordle"))
    for cfg, words in ((RLConfig.from_flat(warm_start="sft", env="wordle", tasks="wordle"), "scripted expert"),
                       (RLConfig.from_flat(warm_start="sft", env="python-session", tasks="mbpp"), "scripted expert|bug-fix"),
                       (RLConfig.from_flat(warm_start="sft", env="edit-menu", tasks="mbpp"), "--tasks bugfix"),
                       (RLConfig.from_flat(warm_start="sft", agent="opencode"), "--agent opencode")):
        with pytest.raises(ValueError, match=words):
            check_warm_start(cfg)


def test_a_bad_warm_start_is_refused_before_an_earlier_run_is_touched(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "results.json").write_text('{"keep": true}')
    assert main(["train", "--warm-start", "sft", "--env", "wordle", "--tasks", "wordle", "--out", str(out)]) == 2
    assert "scripted expert" in capsys.readouterr().err
    assert (out / "results.json").read_text() == '{"keep": true}'


def test_cpu_threads_hold_while_a_run_is_open_and_are_restored():
    import torch

    from agentrl.rl.session import torch_cpu_threads

    before = torch.get_num_threads()
    assert RLConfig.from_preset("demo").scale.cpu_threads == 1 and RLConfig().scale.cpu_threads == 0
    with torch_cpu_threads(RLConfig.from_flat(cpu_threads=1, device="cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_cpu_threads(RLConfig.from_flat(cpu_threads=0, device="cpu")):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="RLConfig.cpu_threads"):
        RLConfig.from_flat(cpu_threads=-1)


def test_quick_is_the_demo_with_ten_steps():
    """`agentrl train --preset quick`: the newcomer's first run (about 2 minutes on 2 cores), the demo otherwise."""
    quick = _cfg(["--preset", "quick"])
    assert quick == RLConfig.from_preset("demo", steps=10, preset="quick")
    assert quick.run.steps == 10 and quick.run.preset == "quick" and quick.warm_start.method == "sft"


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("flags,source", [
    (["--env", "wordle"], "'wordle' (--env wordle cannot run bug-fix tasks and uses its own)"),
    (["--tasks", "mbpp"], "'mbpp';"),
    (["--env", "python-session", "--tasks", "humaneval"], "'humaneval';"),
])
def test_a_preset_on_non_bugfix_tasks_names_the_preset_as_the_source_of_families(tmp_path, preset, flags, source):
    """The presets set --families (bug-fix only): on other tasks the error says the preset set them and how to
    go on, not '--families applies to --tasks bugfix only' to a user who never typed --families."""
    from agentrl.rl.run_setup import plan_run

    cfg = _cfg(["--preset", preset, *flags, "--out", str(tmp_path / "o")])
    with pytest.raises(ValueError) as e:
        plan_run(cfg)
    msg = str(e.value)
    assert f"--families {PRESETS[preset]['families']!r} (set by --preset {preset}, a bug-fix run" in msg
    assert f"this run's tasks are {source}" in msg and "pass --families '' or leave out --preset" in msg
    assert not (tmp_path / "o").exists()


def test_families_the_user_typed_on_non_bugfix_tasks_do_not_blame_a_preset(tmp_path):
    from agentrl.rl.run_setup import plan_run

    for argv, flag in ((["--families", "minmax"], "--families"), (["--eval-families", "zero"], "--eval-families")):
        cfg = _cfg(["--tasks", "wordle", "--env", "wordle", *argv, "--out", str(tmp_path / "o")])
        with pytest.raises(ValueError, match=f"^{flag} '.*' applies to --tasks bugfix only, but this run's tasks "
                                             f"are 'wordle'; pass {flag} ''$"):
            plan_run(cfg)


def test_lora_on_the_demo_presets_says_the_preset_chose_the_fast_sampler():
    """The demo and quick presets sample with --sampler fast, which cannot sample through LoRA adapters: the
    refusal says the preset chose it and what to add; with --sampler hf the config is valid."""
    import pytest

    from agentrl.rl.config import RLConfig

    with pytest.raises(ValueError, match="--preset quick sets --sampler fast, so add --sampler hf"):
        RLConfig.from_preset("quick", lora_r=4)
    assert RLConfig.from_preset("quick", lora_r=4, sampler="hf").update.lora_r == 4
    with pytest.raises(ValueError) as plain:
        RLConfig.from_flat(lora_r=4, sampler="fast")
    assert "--preset" not in str(plain.value)

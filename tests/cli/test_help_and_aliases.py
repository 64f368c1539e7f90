"""Help that reads like TRL's: each command's own flags, grouped; every flag with help, every command with a
description; TRL's names accepted as aliases or answered with the right suggestion; --config FILE.yaml
reads back what --print-config writes."""

import argparse
import re

import pytest

from agentrl.cli import main
from agentrl.cli.main import build_parser
from agentrl.rl.config import RLConfig


def _help(capsys, *argv):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def _sections(text):
    """{section title: [flags listed under it]} of an argparse help page."""
    out, title = {}, None
    for line in text.splitlines():
        if re.match(r"^[a-z][a-z ]*:$", line):
            title = line[:-1]
            out[title] = []
        elif title and (m := re.match(r"^  (--[a-z0-9-]+)", line)):
            out[title].append(m.group(1))
    return out


def test_train_help_is_grouped_and_eval_shows_only_its_own_flags(capsys):
    train = _sections(_help(capsys, "train"))
    for title in ("model", "tasks and environment", "sampling", "optimisation", "evaluation", "output", "scale"):
        assert train[title], title
    assert "--lr" in train["optimisation"] and "--group-size" in train["sampling"] and "--out" in train["output"]
    text = _help(capsys, "eval")
    ev = _sections(text)
    flags = {f for fs in ev.values() for f in fs}
    for training_only in ("--lora-merge", "--async-rollouts", "--max-staleness", "--is-correction", "--is-cap",
                          "--steps", "--lr", "--group-size", "--resume"):
        assert training_only not in flags
    assert "optimisation" not in ev and "scale" not in ev
    assert "to train on" not in text and "held-out" in text.split("--families", 1)[1][:200]


def _walk(parser, name="agentrl"):
    yield name, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub_name, sub in a.choices.items():
                yield from _walk(sub, f"{name} {sub_name}")


def test_every_command_has_a_description_and_every_flag_help():
    for name, parser in _walk(build_parser()):
        assert parser.description, name
        for a in parser._actions:
            if a.option_strings != ["-h", "--help"]:
                assert a.help, (name, a.option_strings)


def test_usage_and_options_spell_flags_alike(capsys):
    text = _help(capsys, "report")
    assert "--out-dir" in text.split("\n\n")[0] and "--out_dir" not in text


@pytest.mark.parametrize("trl, ours, value", [
    ("--output-dir", "out", "runs/x"), ("--learning-rate", "lr", 0.002), ("--num-generations", "group_size", 4),
    ("--beta", "kl_coef", 0.05), ("--max-steps", "steps", 5), ("--save-steps", "checkpoint_every", 2),
    ("--save-total-limit", "keep_checkpoints", 3), ("--eval-steps", "eval_every", 2),
    ("--num-iterations", "epochs", 2), ("--epsilon", "clip_low", 0.1), ("--epsilon-high", "clip_high", 0.28),
    ("--output_dir", "out", "runs/y"), ("--model-name-or-path", "model", "tiny-qwen3"),
])
def test_trl_names_are_aliases(capsys, trl, ours, value):
    assert main(["train", trl, str(value), "--print-config"]) == 0
    assert f"{ours}: {value}" in capsys.readouterr().out


def test_trl_aliases_are_shown_in_help(capsys):
    text = _help(capsys, "train")
    assert "--out OUT, --output-dir OUT" in text and "--kl-coef KL_COEF, --beta KL_COEF" in text


@pytest.mark.parametrize("argv, hint", [
    (["train", "--logging-steps", "5"], "--logging-steps (TRL): agentrl logs every step"),
    (["train", "--per-device-train-batch-size", "2"], "--prompts-per-step x --group-size"),
    (["train", "--bf16"], "--bf16 (TRL): --dtype bf16"),
    (["eval", "--lora-merge"], "--lora-merge: a training flag (`agentrl train`)"),
    (["eval", "--save-steps", "3"], "--save-steps: a training flag (`agentrl train`)"),
    (["eval", "--use-peft"], "--use-peft (TRL): this command has no equivalent"),
])
def test_trl_names_without_an_equivalent_get_the_right_hint(capsys, argv, hint):
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert hint in err and "did you mean" not in err


def test_print_config_round_trips_through_config_and_flags_override_it(tmp_path, capsys):
    assert main(["train", "--preset", "demo", "--lr", "0.003", "--env", "coding-tools", "--print-config"]) == 0
    written = capsys.readouterr().out
    path = tmp_path / "run.yaml"
    path.write_text(written)
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert capsys.readouterr().out == written  # the same config back
    assert main(["train", "--config", str(path), "--seed", "7", "--print-config"]) == 0
    again = capsys.readouterr().out
    assert "seed: 7" in again and "lr: 0.003" in again and "env: coding-tools" in again
    # eval reads a train config: its training-only keys do not apply, the rest does
    assert main(["eval", "--config", str(path), "--print-config"]) == 0
    ev = capsys.readouterr().out
    assert "env: coding-tools" in ev and "lr:" not in ev and "out: runs/default" in ev


def test_a_bad_key_in_the_config_file_is_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("learning_rat: 0.1\nsteps: 2\n")
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert err[-1] == (f"agentrl train: error: --config {path}: unknown key 'learning_rat'; "
                       "did you mean learning_rate (= lr)?")
    path.write_text("learning_rate: 0.25\n")  # TRL's names are keys as they are flags
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert "lr: 0.25" in capsys.readouterr().out


def test_flags_without_a_preset_say_what_they_start_from():
    from agentrl.cli.train import start_line

    line = start_line(RLConfig.from_flat(out="runs/mine"))
    assert line.startswith("train: no --preset: --model tiny-qwen3 in --env coding-tools, --tasks bugfix, warm start none")
    assert "random weights" in line and "--warm-start sft" in line and "--preset demo" in line
    assert "random weights" not in start_line(RLConfig.from_flat(warm_start="sft"))
    assert start_line(RLConfig.from_preset("demo")) is None


@pytest.mark.parametrize("flat, expected", [
    (dict(env="edit-menu", shaped_reward=True), ["train: --shaped-reward=True is ignored: --env edit-menu does not read it "
                                                 "(it applies to wordle)"]),
    (dict(env="coding-tools", max_edits=3), ["train: --max-edits=3 is ignored: --env coding-tools does not read it "
                                             "(it applies to edit-menu)"]),
    (dict(env="python-session", max_edits=2, shaped_reward=True), [
        "train: --max-edits=2 is ignored: --env python-session does not read it (it applies to edit-menu)",
        "train: --shaped-reward=True is ignored: --env python-session does not read it (it applies to wordle)"]),
    (dict(env="wordle", shaped_reward=True), []), (dict(env="edit-menu", max_edits=2), []), ({}, []),
])
def test_environment_settings_the_chosen_environment_ignores_are_named(flat, expected):
    """An environment-specific flag given to an environment that does not read it (--shaped-reward in
    edit-menu) used to change nothing, silently; train and eval now say so, for every such field."""
    from agentrl.cli.train import ignored_settings_lines

    assert ignored_settings_lines(RLConfig.from_flat(**flat), "train") == expected
    assert ignored_settings_lines(RLConfig.from_preset("demo"), "train") == []


@pytest.mark.parametrize("command", ["sft", "smoke"])
def test_sft_and_smoke_read_back_what_print_config_writes(command, tmp_path, capsys):
    """--config/--print-config for the commands whose settings are their own flags: round trip, flags given
    override the file, a bad key is one error naming the close match."""
    from agentrl.cli import main

    assert main([command, "--max-turns", "3", "--seed", "7", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert "max_turns: 3" in text and "seed: 7" in text and "print_config" not in text and "func" not in text
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main([command, "--config", str(path), "--seed", "8", "--print-config"]) == 0
    again = capsys.readouterr().out
    assert "max_turns: 3" in again and "seed: 8" in again
    (tmp_path / "bad.yaml").write_text("max_turn: 2\n")
    with pytest.raises(SystemExit):
        main([command, "--config", str(tmp_path / "bad.yaml")])
    assert "unknown key 'max_turn'; did you mean max_turns" in capsys.readouterr().err


@pytest.mark.parametrize("command, groups", [
    ("sft", ["model", "tasks and environment", "optimisation", "output"]),
    ("serve-policy", ["model", "sampling", "server", "rollout budgets"]),
    ("serve", ["tasks and environment", "server"]),
])
def test_every_command_groups_its_flags(command, groups, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    titles = re.findall(r"^([a-z][a-z ]+):$", text, flags=re.M)
    assert titles == ["options", *groups]
    options = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    assert "-h, --help" in options and options.count("\n  --") == 0  # every flag sits in its group


@pytest.mark.parametrize("command", ["train", "eval", "sft", "smoke"])
def test_chat_template_help_names_every_bundled_template(command, capsys):
    """--chat-template's help lists the bundled names from BUNDLED (it named chatml-tools only after
    qwen2.5-tools was bundled)."""
    from agentrl.chat.bundled import BUNDLED

    text = " ".join(_help(capsys, command).split())
    part = text.split("--chat-template CHAT_TEMPLATE Chat template", 1)[1].split(" --", 1)[0]
    assert all(name in part for name in BUNDLED), part


def test_warm_start_help_names_the_demo_presets_own_model(capsys):
    """--warm-start-tasks said the demo preset sized the warm start "for the random tiny-qwen3"; the demo's model is
    demo-qwen3 (PRESETS)."""
    from agentrl.rl.config import PRESETS

    text = " ".join(_help(capsys, "train").split())
    part = text.split("--warm-start-tasks WARM_START_TASKS", 1)[1].split(" --warm-start-epochs", 1)[0]
    assert PRESETS["demo"]["model"] in part and "tiny-qwen3" not in part, part


def test_smoke_env_help_names_the_environments_not_a_missing_command(capsys):
    """smoke's --env help said "see `agentrl env list`", a command that does not exist (`agentrl env` has only check)."""
    from agentrl.envs import env_names

    text = " ".join(_help(capsys, "smoke").split())
    part = text.split("--env ENV Environment", 1)[1].split(" --", 1)[0]
    assert "env list" not in part and all(name in part for name in env_names()), part


def test_every_config_field_is_named_in_exactly_one_help_section():
    # a field in no section falls into the last one ('scale'), so a new model flag (--tf32) showed up as a
    # scale flag, and agentrl eval's help grew a 'scale' section
    from agentrl.cli.flags import GROUPS
    from agentrl.rl.config import FLAT

    named = [f for _, fields in GROUPS for f in fields]
    assert sorted(named) == sorted(set(named)) and set(named) == set(FLAT)


@pytest.mark.parametrize("argv, expected", [
    (["trian"], "invalid choice: 'trian' (choose from 'tasks', "),  # a command
    (["train", "--preset", "Quick"], "(choose from '', 'demo', 'quick') (did you mean 'quick'?)"),
    (["train", "--sampler", "fats"], "(did you mean 'fast'?)"),
    (["env", "check", "mbp"], "(did you mean 'mbpp'?)"),
    (["smoke", "--env", "edit_menu"], "unknown environment 'edit_menu' (did you mean 'edit-menu'?); expected one of"),
    (["tasks", "list", "--families", "minmx"], "unknown task families ['minmx'] (did you mean 'minmax'?); known:"),
])
def test_a_mistyped_value_gets_the_closest_choice(argv, expected, capsys):
    """`agentrl trian`, `--preset Quick`, `--env edit_menu` (flags take dashes or underscores, values did not say so)
    listed the choices and left the reader to spot the one they meant; flags already had "did you mean"."""
    try:
        assert main(argv) == 2
    except SystemExit as e:
        assert e.code == 2
    err = capsys.readouterr().err
    assert expected in err, err
    if argv == ["trian"]:
        assert err.rstrip().endswith("(did you mean 'train'?)"), err


def test_train_env_typo_is_named_with_the_closest_environment(tmp_path):
    from agentrl.rl.run_setup import plan_run

    with pytest.raises(ValueError, match=r"--env 'edit_menu' is not an environment \(did you mean 'edit-menu'\?\)"):
        plan_run(RLConfig.from_flat(env="edit_menu", out=str(tmp_path / "o")))
    from agentrl.preflight import did_you_mean

    assert did_you_mean("xyzzy", ["demo", "quick"]) == "" and did_you_mean("demo", ["demo"]) == ""

"""Every run ends with a model: `<out>/model` (weights, tokenizer, chat template, agentrl_run.json) that
load_policy, `agentrl eval` and `agentrl smoke` take as `--model <out>`; checkpoints record the run's
environment and settings, and `agentrl eval --model <checkpoint>` reuses them unless told otherwise."""

import json
import re

import pytest

from agentrl.cli import main
from agentrl.models.load import load_policy
from agentrl.report.results import validate_results
from agentrl.rl.config import RLConfig
from agentrl.rl.run_record import EVAL_REUSED, RUN_RECORD_FILE, read_run_record
from agentrl.rl.trainer import train
from agentrl.rollout.scripted import random_edit_sampler


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "run"
    cfg = RLConfig.from_flat(env="edit-menu", families="minmax,compare", steps=1, prompts_per_step=2, group_size=4,
                   eval_n=1, eval_size=2, train_size=8, max_new_tokens=40, max_turns=3, lr=1e-3, micro=2,
                   out=str(out), checkpoint_every=1, n_boot=100, seed=3, temperature=0.8)
    train(cfg, sampler=random_edit_sampler(0))
    return out


def test_the_run_ends_with_a_loadable_model_and_its_record(run):
    model = run / "model"
    assert (model / "config.json").is_file() and (model / "tokenizer_config.json").is_file()
    record = json.loads((model / RUN_RECORD_FILE).read_text())
    assert record["step"] == 1 and record["trained_from"] == "tiny-qwen3"
    assert set(record["settings"]) == set(EVAL_REUSED)
    assert record["settings"]["env"] == "edit-menu" and record["settings"]["families"] == "minmax,compare"
    assert record["settings"]["max_turns"] == 3 and record["settings"]["max_new_tokens"] == 40
    assert validate_results(run / "results.json")["model_path"] == str(model)
    # the run folder resolves to its model, with the chat template the run used
    m, tok = load_policy(str(run), "fp32", "cpu")
    assert tok.chat_template and m.config.num_hidden_layers >= 1


def test_checkpoints_record_the_runs_settings(run):
    found = read_run_record(run / "checkpoints" / "step_000001")
    assert found is not None
    record, path = found
    assert path.parent.name == "model" and record["step"] == 1
    assert record["settings"]["env"] == "edit-menu" and record["settings"]["eval_size"] == 2


def test_eval_of_a_checkpoint_reuses_its_settings_and_says_so(run, tmp_path, capsys):
    ckpt = run / "checkpoints" / "step_000001"
    rc = main(["eval", "--model", str(ckpt), "--eval-n", "1", "--n-boot", "100", "--max-new-tokens", "8",
               "--out", str(tmp_path / "ev")])
    assert rc == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("eval: reusing"))
    assert "env=edit-menu" in line and "families=minmax,compare" in line and "--max-new-tokens" in line
    cfg = validate_results(tmp_path / "ev" / "results.json")["config"]
    assert cfg["env"] == "edit-menu" and cfg["families"] == "minmax,compare" and cfg["max_turns"] == 3
    assert cfg["max_new_tokens"] == 8  # the command line wins over the record
    assert cfg["temperature"] == 0.8 and "temperature=0.8" in line  # its evaluations' sampling, as the run's own


def test_eval_and_smoke_take_the_run_folder(run, tmp_path, capsys):
    assert main(["eval", "--model", str(run), "--env", "coding-tools", "--families", "", "--eval-n", "1",
                 "--n-boot", "100", "--max-new-tokens", "8", "--out", str(tmp_path / "ev")]) == 0
    assert validate_results(tmp_path / "ev" / "results.json")["config"]["env"] == "coding-tools"
    capsys.readouterr()
    assert main(["smoke", "--model", str(run), "--env", "edit-menu", "--episodes", "1", "--max-new-tokens", "8",
                 "--show", "0"]) == 0
    assert "template check" in capsys.readouterr().out


def test_the_training_steps_line_follows_the_steps_own_lines(run):
    """"training steps: k/N" is logged after step k-1's result lines, never before them."""
    lines = (run / "train.log").read_text().splitlines()
    for i, line in enumerate(lines):
        if "training steps: " in line:
            k = int(line.split("training steps: ", 1)[1].split("/", 1)[0])
            if k:
                assert any(f"step {k - 1} " in x for x in lines[:i]), line


def test_a_lora_run_ends_with_its_adapters_and_base_and_sft_continues_from_it(tmp_path, capsys):
    out = tmp_path / "lora"
    cfg = RLConfig.from_flat(env="edit-menu", steps=1, prompts_per_step=2, group_size=2, eval_n=1, eval_size=2, train_size=4,
                   max_new_tokens=16, max_turns=2, lr=1e-3, micro=2, out=str(out), n_boot=100, lora_r=4, seed=1)
    train(cfg, sampler=random_edit_sampler(0))
    model = out / "model"
    assert (model / "adapter_config.json").is_file() and not (model / "config.json").exists()
    assert json.loads((model / "agentrl_lora.json").read_text())["model"] == "tiny-qwen3"  # the base
    assert read_run_record(out)[0]["lora_r"] == 4
    m, _ = load_policy(str(out), "fp32", "cpu")  # base + adapters merged
    assert not hasattr(m, "peft_config") and all(p.requires_grad for p in m.parameters())
    assert main(["sft", "--model", str(out), "--env", "edit-menu", "--n-tasks", "2", "--epochs", "1",
                 "--batch", "2", "--micro", "2", "--warmup-steps", "1", "--out", str(tmp_path / "sft")]) == 0
    assert (tmp_path / "sft" / "config.json").is_file()


def test_a_run_folder_without_a_model_says_why(tmp_path):
    run = tmp_path / "cut"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "results.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="has no model/: the run did not finish.*step_000002"):
        load_policy(str(run), "fp32", "cpu")


def test_eval_of_a_demo_run_reuses_its_batch_threads_episodes_and_sampler(tmp_path):
    """`agentrl eval --model <demo run>` evaluated at the defaults' 2 threads and batch 16 (55 s on the 2-core machine)
    where the run's own evaluation used 1 thread and batch 32 (7 s), and with HF generate where the run sampled with
    the fast sampler (twice as long): the record now carries them."""
    from agentrl.cli.eval import recorded_defaults
    from agentrl.rl.config import RLConfig
    from agentrl.rl.run_record import run_record, write_run_record

    cfg = RLConfig.from_preset("quick")
    write_run_record(tmp_path / "run" / "model", run_record(cfg, 10))
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    got = recorded_defaults(["--model", str(tmp_path / "run")])
    assert (got["gen_batch"], got["cpu_threads"], got["eval_n"], got["sampler"]) == (32, 1, 4, "fast")


@pytest.mark.parametrize("tasks_flag", [["--tasks", "mbpp"], ["--tasks=humaneval"]])
def test_eval_on_another_task_source_does_not_reuse_the_runs_families(tmp_path, tasks_flag):
    """`agentrl eval --model runs/default --env python-session --tasks mbpp` failed at once with "--families
    'minmax,compare,zero' applies to --tasks bugfix only": the bug-fix run's families were reused for MBPP. With
    another --tasks they are left out (and not reported as given on the command line); the same --tasks keeps them."""
    import argparse

    from agentrl.cli.eval import recorded_defaults, reused_settings_line
    from agentrl.rl.config import RLConfig
    from agentrl.rl.run_record import run_record, write_run_record

    write_run_record(tmp_path / "run" / "model", run_record(RLConfig.from_preset("quick"), 10))
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    run = str(tmp_path / "run")
    got = recorded_defaults(["--model", run, *tasks_flag])
    assert "families" not in got and "eval_families" not in got
    assert (got["env"], got["max_turns"], got["eval_n"]) == ("edit-menu", 6, 4)  # the rest is still reused
    assert recorded_defaults(["--model", run, "--tasks", "bugfix"])["families"] == "minmax,compare,zero"
    assert recorded_defaults(["--model", run])["families"] == "minmax,compare,zero"
    fields = {k: v for k, v in got.items() if k != "run_record_path"}
    args = argparse.Namespace(**{**fields, "tasks": tasks_flag[-1].split("=")[-1], "families": "",
                                 "eval_families": "", "run_record_path": got["run_record_path"]})
    line = reused_settings_line(args)
    assert "--tasks" in line and "families" not in line, line


def test_a_bad_setting_in_the_run_record_names_the_record(tmp_path, capsys):
    """`agentrl eval --model RUN` whose agentrl_run.json holds an invalid setting (here null) says which file
    and key to fix; the message used to be only "RLConfig.thinking: expected true or false, got None"."""
    import json

    from agentrl.cli.main import main
    from agentrl.rl.config import RLConfig
    from agentrl.rl.run_record import run_record, write_run_record

    path = write_run_record(tmp_path / "run" / "model", run_record(RLConfig.from_preset("quick"), 10))
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    record = json.loads(path.read_text())
    assert "thinking" in record["settings"]
    record["settings"]["thinking"] = None
    path.write_text(json.dumps(record))
    assert main(["eval", "--model", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "RLConfig.thinking" in err and str(path) in err and "--thinking" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("key, text", [("max_turns", "NaN"), ("temperature", "Infinity"), ("eval_n", "-Infinity")])
def test_a_non_finite_number_in_the_run_record_names_the_record_and_key(tmp_path, capsys, key, text):
    """Python's JSON reader takes NaN and Infinity, which no writer of the record emits: a NaN compared unequal to
    itself, so `agentrl eval` said the setting was "given on the command line" and the config's error left out the
    record. The record is refused, naming the file and the key."""
    import json

    from agentrl.cli.main import main
    from agentrl.rl.config import RLConfig
    from agentrl.rl.run_record import read_run_record, run_record, write_run_record

    path = write_run_record(tmp_path / "run" / "model", run_record(RLConfig.from_preset("quick"), 10))
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    record = json.loads(path.read_text())
    record["settings"][key] = "@"
    path.write_text(json.dumps(record).replace('"@"', text))
    with pytest.raises(ValueError, match=rf"run record {re.escape(str(path))}: settings\.{key} is {text}"):
        read_run_record(tmp_path / "run")
    with pytest.raises(SystemExit) as e:  # refused while eval builds its defaults, as an unreadable record is
        main(["eval", "--model", str(tmp_path / "run")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"settings.{key} is {text}" in err and "Traceback" not in err and "given on the command line" not in err


def test_eval_print_config_on_a_run_is_yaml_that_config_reads_back(tmp_path, capsys):
    """`agentrl eval --model runs/x --print-config > f.yaml` began with the "eval: reusing the run's settings ..."
    line, so `agentrl eval --config f.yaml` refused the file: "not valid YAML (mapping values are not allowed)"."""
    import yaml

    from agentrl.cli.main import main
    from agentrl.rl.config import RLConfig
    from agentrl.rl.run_record import run_record, write_run_record

    write_run_record(tmp_path / "run" / "model", run_record(RLConfig.from_preset("quick"), 10))
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    assert main(["eval", "--model", str(tmp_path / "run"), "--print-config"]) == 0
    text = capsys.readouterr().out
    assert yaml.safe_load(text)["env"] == "edit-menu" and not text.startswith("eval:")
    (tmp_path / "f.yaml").write_text(text)
    assert main(["eval", "--config", str(tmp_path / "f.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == text


def test_eval_without_a_trained_model_says_it_measures_random_weights(tmp_path, capsys, monkeypatch):
    """`agentrl eval` with --model forgotten evaluated tiny-qwen3 (random weights) for minutes without a word; it
    now says so and how to evaluate a trained run. A trained model gets no such line."""
    import agentrl.rl.trainer as trainer
    from agentrl.cli.main import main

    monkeypatch.setattr(trainer, "evaluate_only", lambda cfg: (_ for _ in ()).throw(SystemExit(0)))
    for argv, expected in ((["eval"], True), (["eval", "--model", "demo-qwen3"], True),
                           (["eval", "--model", str(tmp_path)], False)):
        with pytest.raises(SystemExit):
            main([*argv, "--out", str(tmp_path / "ev")])
        out = capsys.readouterr().out
        assert ("is a preset with random weights" in out and "--model runs/default" in out) is expected, (argv, out)
    from agentrl.cli.eval import random_model_line
    from agentrl.rl.config import RLConfig

    assert random_model_line(RLConfig.from_flat(), ["runs/a", "runs/b"]) is None  # --env-url --models: not --model

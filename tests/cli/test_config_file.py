"""`--config FILE.yaml` (agentrl.cli.config_file): a file's values are checked as the same flags would be on
the command line, and a bad one is one line (exit 2) naming the file and the key."""

from __future__ import annotations

import pytest

from agentrl.cli import main


def _error(capsys, argv):
    """The last stderr line of `agentrl ARGV`, which must exit 2."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("command, text, expected", [
    ("smoke", "episodes: -3", "episodes: expected an integer >= 1, got -3"),
    ("smoke", "episodes: [1, 2]", "episodes: expected a single value, got [1, 2]"),
    ("smoke", "max_new_tokens: 2.5", "max_new_tokens: expected an integer >= 1, got '2.5'"),
    ("smoke", "seed: abc", "seed: expected int, got 'abc'"),
    ("smoke", "seed: null", "seed: expected a value, got null"),
    ("smoke", "thinking: maybe", "thinking: expected true or false, got 'maybe'"),
    ("sft", "split: both", "split: expected one of 'train', 'heldout', got 'both'"),
    ("sft", "random_op: maybe", "random_op: expected true or false, got 'maybe'"),
    ("sft", "random-op: 2", "random-op: expected true or false, got 2"),
    ("sft", "agent: claude", "agent: expected one of '', 'opencode', got 'claude'"),
    ("sft", "n_tasks: 0", "n_tasks: expected an integer >= 1, got 0"),
    ("sft", "lr: {a: 1}", "lr: expected a single value, got {'a': 1}"),
])
def test_a_file_value_the_flag_would_refuse_is_one_line(command, text, expected, tmp_path, capsys):
    """argparse checks neither the type nor the choices of a default, and the file's values are defaults:
    each is checked as its flag is (it used to print, and run, as given)."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, [command, "--config", str(path), "--print-config"])
    assert line == f"agentrl {command}: error: --config {path}: {expected}"


def test_file_values_are_converted_as_flags_are(tmp_path, capsys):
    """What the flag would take, the file takes: numbers as strings, booleans, and null where the default
    is null (sft's --max-turns, --families)."""
    path = tmp_path / "c.yaml"
    path.write_text("n_tasks: '7'\nlr: 3e-4\nrandom_op: true\nthinking: true\nmax_turns: null\nfamilies: null\n")
    assert main(["sft", "--config", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out
    for line in ("n_tasks: 7", "lr: 0.0003", "random_op: true", "thinking: true", "max_turns: null"):
        assert line in out.splitlines()


@pytest.mark.parametrize("command, text, expected", [
    ("train", "steps: 3\nlr: 0.1\nsteps: 5", "not valid YAML (key 'steps' given twice (line 3))"),
    ("train", "sampling:\n  temperature: 1\n  temperature: 2", "not valid YAML (key 'temperature' given twice (line 3))"),
    ("train", "lr: 0.1\nupdate:\n  lr: 0.2", "'lr' given twice (as 'lr' and 'update.lr'); keep one"),
    ("train", "lr: 0.1\nlearning_rate: 0.2", "'lr' given twice (as 'lr' and 'learning_rate'); keep one"),
    ("train", "max_new_tokens: 1\nmax-new-tokens: 2",
     "'max_new_tokens' given twice (as 'max_new_tokens' and 'max-new-tokens'); keep one"),
    ("eval", "eval_n: 1\neval:\n  n: 2", "'eval_n' given twice (as 'eval_n' and 'eval.n'); keep one"),
    ("sft", "max_turns: 1\nmax-turns: 2", "'max_turns' given twice (as 'max_turns' and 'max-turns'); keep one"),
    ("smoke", "seed: 1\nseed: 2", "not valid YAML (key 'seed' given twice (line 2))"),
])
def test_a_setting_given_twice_is_one_line_not_the_last_one_silently(command, text, expected, tmp_path, capsys):
    """A repeated key (PyYAML keeps the last), or one setting under two spellings (flat and in its section,
    dashed and underscored, TRL's alias): an error naming both, not whichever came last."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, [command, "--config", str(path), "--print-config"])
    assert line == f"agentrl {command}: error: --config {path}: {expected}"


def test_the_nested_form_still_reads_back(tmp_path, capsys):
    """RLConfig.to_dict()'s section tree, as YAML, is the same config as the flat file."""
    import yaml

    from agentrl.rl.config import RLConfig

    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(RLConfig.from_preset("demo", lr=0.003).to_dict()))
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    tree = capsys.readouterr().out
    assert main(["train", "--preset", "demo", "--lr", "0.003", "--print-config"]) == 0
    assert tree == capsys.readouterr().out


@pytest.mark.parametrize("data, expected", [
    (b"steps: [1\n", "not valid YAML (expected ',' or ']', but got '<stream end>' at line 2, column 1)"),
    (b"steps: 3\n  lr: 2\n", "not valid YAML (mapping values are not allowed here at line 2, column 5)"),
    (b"\xff\xfe steps: 3\n", "not UTF-8 text (invalid start byte at byte 0)"),
])
def test_a_file_that_does_not_parse_says_what_and_where(data, expected, tmp_path, capsys):
    """The YAML error's problem and line (it printed only "while parsing a flow sequence"); a file that is
    not UTF-8 names the file (it printed only the codec's message)."""
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    for command in ("train", "smoke"):
        line = _error(capsys, [command, "--config", str(path), "--print-config"])
        assert line == f"agentrl {command}: error: --config {path}: {expected}"


def test_a_directory_or_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    """A directory is not "no such file"; a file that cannot be read (PermissionError, which neither the
    parser nor `main` caught) is one line, not a traceback."""
    from pathlib import Path

    assert _error(capsys, ["train", "--config", str(tmp_path), "--print-config"]) == (
        f"agentrl train: error: --config {tmp_path}: is a directory; expected a YAML file")
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\n")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", refuse)
    assert _error(capsys, ["sft", "--config", str(path), "--print-config"]) == (
        f"agentrl sft: error: --config {path}: cannot be read (Permission denied)")


def test_a_text_value_its_flag_refuses_in_a_file_is_blamed_on_the_file_not_the_flag(tmp_path, capsys):
    """`eval_n: x` in --config (or in a model's agentrl_run.json) said "argument --eval-n: invalid int value: 'x'",
    a flag the command line never gave; the command line still overrides the file's value."""
    import json

    import pytest

    from agentrl.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("eval_n: x\n")
    with pytest.raises(SystemExit):
        main(["train", "--config", str(cfg), "--print-config"])
    err = capsys.readouterr().err
    assert "setting 'eval_n' from the --config file, not the command line: expected int, got 'x'" in err, err
    assert "argument --eval-n" not in err
    assert main(["train", "--config", str(cfg), "--eval-n", "3", "--print-config"]) == 0
    assert "eval_n: 3" in capsys.readouterr().out
    model = tmp_path / "m"
    model.mkdir()
    (model / "agentrl_run.json").write_text(json.dumps({"settings": {"eval_n": "x"}}))
    with pytest.raises(SystemExit):
        main(["eval", "--model", str(model), "--print-config"])
    err = capsys.readouterr().err
    assert "setting 'eval_n' from the --config file or the model's run record (agentrl_run.json)" in err, err


@pytest.mark.parametrize("text", ["preset: [quick]\n", "preset: 5\n", "preset: {a: 1}\n", "preset: true\n",
                                  "sampling: {temperature: 0.5}\npreset: [demo]\n"])
def test_a_preset_that_is_not_a_name_is_one_line(text, tmp_path, capsys):
    """`preset: [quick]` (or 5, a mapping, true) in a --config file raised AttributeError ('list' object has no
    attribute 'startswith') from the preset lookup; it is now a one-line error naming the file and key."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    line = _error(capsys, ["train", "--config", str(path), "--print-config"])
    assert line.startswith(f"agentrl train: error: --config {path}: preset: expected a preset name (a string)")


def _laughs(key, depth=8):
    lines = [f"{key}:", '  - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text, expected", [
    (_laughs("steps"), "holds more than 10,000 values (YAML aliases"),
    (_laughs("episodes"), "holds more than 10,000 values (YAML aliases"),
    ("steps: &a [*a]\n", "holds more than 10,000 values (YAML aliases"),
    ("steps: " + "1" * 5000 + "\n", "holds an integer of more than 4300 digits"),
])
def test_a_file_that_expands_past_any_config_is_one_line(text, expected, tmp_path, capsys):
    """Nine lines of nested YAML aliases ('billion laughs', 9**9 strings) as `steps:` made the error message's
    repr of the value grow until the process ran out of memory (MemoryError under a 4 GB limit); a 5000-digit
    integer printed Python's advice to call sys.set_int_max_str_digits() without the file's name."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    for command in ("train", "smoke"):
        line = _error(capsys, [command, "--config", str(path), "--print-config"])
        assert line == f"agentrl {command}: error: --config {path}: {expected}" or (
            line.startswith(f"agentrl {command}: error: --config {path}: {expected}")), line


@pytest.mark.parametrize("text, expected", [
    ("lr: banana", "RLConfig.lr: expected float, got 'banana'"),
    ("steps: x", "RLConfig.steps: expected int, got 'x'"),
    ("resume: 3", "RLConfig.resume: expected true or false, got 3"),
    ("update:\n  micro_tokens: -5", "RLConfig.micro_tokens: expected an integer >= 0, got -5"),
    ("learning_rate: inf", "RLConfig.lr: expected a finite number, got inf"),
])
def test_eval_refuses_a_training_keys_value_that_train_would_refuse(text, expected, tmp_path, capsys):
    """eval ignores a train config's training keys, but a value `agentrl train` would refuse is refused here
    too (it used to be dropped unchecked, so a file could pass eval and then fail train)."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, ["eval", "--config", str(path), "--print-config"])
    assert line.startswith(f"agentrl eval: error: --config {path}: {expected} (a key this command does not use")
    try:
        code = main(["train", "--config", str(path), "--print-config"])
    except SystemExit as e:
        code = e.code
    assert code == 2 and expected.split(": ", 1)[1] in capsys.readouterr().err


def test_eval_takes_a_train_config_whose_training_keys_are_valid(tmp_path, capsys):
    """What train takes (text that the flag converts: YAML reads `1e-6` as text) eval takes, and ignores."""
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-6\nsteps: '4'\ngradient_checkpointing: 'yes'\nupdate:\n  micro_tokens: 8192\neval_n: 3\n")
    assert main(["eval", "--config", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "eval_n: 3" in out and not any(line.startswith(("lr:", "steps:", "micro_tokens:")) for line in out)
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert "lr: 1.0e-06" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("text", [
    "adv_mode: none\ngroup_size: 1",  # group_size 1 is refused with the default adv_mode (grpo) only
    "group_size: 16\nminibatches: 100",  # 100 minibatches need 100 episodes a step: 8 x 16 here, 8 x 8 by default
    "async_rollouts: true\nrollout_workers: 2",  # workers need async_rollouts
    "preset: quick\nupdate:\n  minibatches: 2",
])
def test_eval_takes_training_keys_that_are_valid_together(text, tmp_path, capsys):
    """eval checked each training key alone, against the defaults of the others, so it refused a file that
    `agentrl train` takes because its training keys are valid together."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert main(["eval", "--config", str(path), "--print-config"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    ("adv_mode: grpo\ngroup_size: 1", "RLConfig.group_size: adv_mode 'grpo' needs group_size >= 2, got 1"),
    ("group_size: 4\nminibatches: 40", "RLConfig.minibatches: 40 minibatches need at least as many episodes"),
    ("sampler: fast\nlora_r: 8", "RLConfig.lora_r: expected 0 with --sampler fast"),
])
def test_eval_refuses_training_keys_that_train_refuses_together(text, expected, tmp_path, capsys):
    """Checked alone, each of these keys was valid, so eval took a file that train refuses."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, ["eval", "--config", str(path), "--print-config"])
    assert line.startswith(f"agentrl eval: error: --config {path}: {expected}"), line
    try:
        code = main(["train", "--config", str(path), "--print-config"])
    except SystemExit as e:
        code = e.code
    assert code == 2 and expected.split(": ", 1)[1] in capsys.readouterr().err


@pytest.mark.parametrize("command, text, expected", [
    ("train", "update: 5", r"section 'update': expected a mapping of its fields \(activation_offloading, .*lr, .*\), got int 5"),
    ("train", "sampling: [0.7]", r"section 'sampling': expected a mapping of its fields \(.*temperature.*\), got list \[0\.7\]"),
    ("train", "update: activation_offloading", r"section 'update': expected a mapping .*, got str 'activation_offloading'"),
    ("eval", "eval: 24", r"section 'eval': expected a mapping of its fields \(.*size.*\), got int 24"),
])
def test_a_section_that_is_not_a_mapping_is_named_as_a_section(command, text, expected, tmp_path, capsys):
    """A section name with a value that is not a mapping was "unknown key 'update'", for a key the file may hold."""
    import re

    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    line = _error(capsys, [command, "--config", str(path), "--print-config"])
    assert re.fullmatch(re.escape(f"agentrl {command}: error: --config {path}: ") + expected, line), line


def test_an_empty_section_sets_nothing(tmp_path, capsys):
    """`update:` with every key under it commented out is YAML's null: an empty section, not an unknown key."""
    path = tmp_path / "c.yaml"
    path.write_text("lr: 0.003\nupdate:\n  # activation_offloading: off\nsampling:\n")
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert "lr: 0.003" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("text, key, stored", [
    ("activation_offloading: on", "activation_offloading", "'on'"),  # YAML 1.1: an unquoted on is a bool
    ("activation_offloading: off", "activation_offloading", "'off'"),
    ("activation_offloading: 1", "activation_offloading", "'on'"),  # a JSON config's 1 / 0
    ("compile_layers: 0", "compile_layers", "'off'"),
    ("compile_layers: yes", "compile_layers", "'on'"),
    ("is_correction: off", "is_correction", "'off'"),
    ("is_correction: 0", "is_correction", "'off'"),
    ("agent_isolation: off", "agent_isolation", "none"),
    ("report_to: no", "report_to", "none"),
    ("warm_start: false", "warm_start", "none"),
    ("randomize_names: 0", "randomize_names", "false"),
    ('{"pack_rows": 1, "mask_truncated": 1}', "mask_truncated", "true"),
])
def test_true_and_false_in_a_file_read_as_the_fields_on_and_off(text, key, stored, tmp_path, capsys):
    """Every field that takes on/off words reads YAML's bool (`on`, `off`, `yes`, `no` unquoted) and JSON's 1 / 0 as
    its on / off choice, and a boolean field reads 1 / 0, as the same flags read `--flag 1` (they were refused as
    "expected a string of UTF-8 text, got 1" or "got False")."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert f"{key}: {stored}" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("command, text, expected", [
    ("train", "is_correction: on", "RLConfig.is_correction: expected one of 'stale', 'always', 'off' (an unquoted "
                                   "YAML on/off/yes/no reads as true/false), got True"),
    ("train", "warm_start: yes", "RLConfig.warm_start: expected one of 'none', 'sft' (an unquoted YAML on/off/yes/no "
                                 "reads as true/false), got True"),
    ("train", "compile_layers: 2", "RLConfig.compile_layers: expected one of 'auto', 'on', 'off', got 2"),
    ("train", "randomize_names: 2", "RLConfig.randomize_names: expected true or false, got 2"),
    ("eval", "is_correction: on", "--config {path}: RLConfig.is_correction: expected one of 'stale', 'always', 'off' "
                                  "(an unquoted YAML on/off/yes/no reads as true/false), got True (a key this command "
                                  "does not use, checked so that the file stays valid for `agentrl train`)"),
])
def test_a_switch_value_with_no_meaning_names_the_choices(command, text, expected, tmp_path, capsys):
    """true where no choice means on (is_correction: stale or always?), and integers other than 1 / 0, are refused
    naming the field's choices (the message said "expected a string of UTF-8 text")."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    try:
        code = main([command, "--config", str(path), "--print-config"])
    except SystemExit as e:
        code = e.code
    assert code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == f"agentrl {command}: error: {expected.format(path=path)}"


def test_sft_reads_true_and_false_as_its_flags_do(tmp_path, capsys):
    """sft's own switches read a file's 1 / 0, and its --agent-isolation reads false (YAML off) as none."""
    path = tmp_path / "c.yaml"
    path.write_text('{"random_op": 1, "lora_merge": 0, "agent_isolation": false}\n')
    assert main(["sft", "--config", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert {"random_op: true", "lora_merge: false", "agent_isolation: none"} <= set(out)


def test_sft_print_config_refuses_what_the_run_would_refuse(capsys):
    """`agentrl sft --print-config --lr nan` printed a file that --config then refused: the configs are built (and
    checked) before printing, as train's are."""
    assert main(["sft", "--lr", "nan", "--print-config"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "agentrl sft: error: bad SFTConfig: need lr > 0" in out.err
    assert main(["sft", "--lr", "3e-5", "--print-config"]) == 0
    assert "\nlr: 3.0e-05\n" in capsys.readouterr().out

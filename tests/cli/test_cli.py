import subprocess
import sys

import pytest

from agentrl.cli import build_parser, main


def test_help_lists_registered_commands(capsys):
    parser = build_parser()
    assert parser.prog == "agentrl"
    assert main([]) == 2  # no command: help, exit 2
    assert "usage: agentrl" in capsys.readouterr().out


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "agentrl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("agentrl ")


def _sub(name):
    (action,) = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices[name]


def test_no_prefix_abbreviation_and_did_you_mean_under_the_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--step", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "usage: agentrl train" in err and "did you mean --steps?" in err
    assert err.count("error:") == 1 and "usage: agentrl [-h]" not in err
    with pytest.raises(SystemExit):
        main(["tasks", "list", "--familes", "x"])
    err = capsys.readouterr().err
    assert "usage: agentrl tasks list" in err and "did you mean --families?" in err and err.count("error:") == 1


def test_underscores_still_accepted_dashes_shown():
    p = build_parser()
    assert p.parse_args(["train", "--max_new_tokens", "8"]).max_new_tokens == 8
    assert p.parse_args(["train", "--max-new-tokens", "9", "--no_randomize_names"]).max_new_tokens == 9
    assert p.parse_args(["train", "--no-randomize-names"]).randomize_names is False
    h = _sub("train").format_help()
    assert "--max-new-tokens" in h and "--max_new_tokens" not in h and "(default: 256)" in h


def test_eval_help_omits_training_flags_and_negative_flags_have_own_help():
    h = _sub("eval").format_help()
    for flag in ("--steps", "--lr ", "--resume", "--clip-low", "--checkpoint-every"):
        assert flag not in h, flag
    assert "--eval-n" in h and "--model" in h
    args = build_parser().parse_args(["eval"])
    assert args.steps == 0 and args.out == "runs/eval"  # defaults still reach RLConfig; eval never trains
    neg = next(a for a in _sub("train")._actions if "--no-randomize-names" in a.option_strings)
    pos = next(a for a in _sub("train")._actions if "--randomize-names" in a.option_strings)
    assert neg.help and neg.help != pos.help and "original name" in neg.help


def test_help_imports_no_torch_or_transformers():
    code = ("import sys\nfrom agentrl.cli import main\n"
            "for argv in ([\"--help\"], [\"train\", \"--help\"], [\"eval\", \"--help\"]):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
            "print('heavy modules imported:', heavy, file=sys.stderr)\nsys.exit(1 if heavy else 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--max-new-tokens" in out.stdout


def test_one_dtype_vocabulary_across_every_command(capsys):
    """Every command takes the same --dtype spellings, stores the canonical name and refuses others alike."""
    from agentrl.cli.flags import config_from_args

    parser = build_parser()
    for alias, canonical in (("bfloat16", "bf16"), ("float32", "fp32"), ("torch.bfloat16", "bf16"), ("auto", "auto"),
                             ("FP32", "fp32")):
        assert config_from_args(parser.parse_args(["train", "--dtype", alias])).policy.dtype == canonical
        assert config_from_args(parser.parse_args(["eval", "--dtype", alias])).policy.dtype == canonical
        for cmd in ("smoke", "sft", "serve-policy"):
            assert parser.parse_args([cmd, "--dtype", alias]).dtype == canonical, cmd
    assert config_from_args(parser.parse_args(["eval", "--dtype", "half"])).policy.dtype == "fp16"  # inference only
    with pytest.raises(ValueError, match="fp16 training needs loss scaling"):
        config_from_args(parser.parse_args(["train", "--dtype", "float16"]))
    for cmd in ("train", "eval", "smoke", "sft", "serve-policy"):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--dtype", "fp8"])
        assert "--dtype 'fp8' is not a dtype; expected one of fp32, bf16, fp16, auto" in capsys.readouterr().err
        assert "{fp32,bf16,fp16,auto}" in _sub(cmd).format_help(), cmd


def test_every_flag_names_its_default_at_most_once():
    """A help text that already says its default gets no second "(default: ...)" from the formatter."""
    import argparse
    import re

    def parsers(p):
        yield p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from parsers(sub)

    seen = 0
    for p in parsers(build_parser()):
        fmt = p._get_formatter()
        for a in p._actions:
            if a.help and a.help is not argparse.SUPPRESS and re.search(r"\(default\b|\bdefault:", a.help, re.I):
                seen += 1
                assert fmt._get_help_string(a) == a.help, (p.prog, a.dest)  # nothing appended
    assert seen >= 5


@pytest.mark.parametrize("cmd", ["serve", "serve-policy"])
def test_float_flags_refuse_nan_and_inf_at_parse_naming_the_flag(cmd, capsys):
    """Commands whose float flags go straight to code (train, eval and sft check theirs in their configs):
    `serve-policy --max-wall-s nan` failed later without naming the flag. Every float flag is a checked type."""
    floats = [a for a in _sub(cmd)._actions if a.option_strings and a.type is not None
              and getattr(a.type, "__name__", "") in ("float", "positive_float", "non_negative_float")]
    assert floats and not [a.option_strings[0] for a in floats if a.type is float]
    for action in floats:
        flag = action.option_strings[0]
        for bad in ("nan", "inf", "-inf"):
            with pytest.raises(SystemExit):
                build_parser().parse_args([cmd, flag, bad])
            assert f"argument {flag}" in capsys.readouterr().err, (flag, bad)

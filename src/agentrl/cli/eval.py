"""`agentrl eval`: held-out evaluation of a model, no training (RLConfig flags but the TRAIN_ONLY ones).

The strategy is picked here: with --env-url, the held-out tasks of an `agentrl serve` server scored for
one or several --models (agentrl.serve.env.eval); otherwise the trainer's evaluation in this process
(agentrl.rl.trainer.evaluate_only). Under torchrun it is refused: every rank would evaluate and write alone.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add `eval` (every RLConfig field but TRAIN_ONLY, plus the served-environment flags)."""
    from agentrl.cli.config_file import add_config_flags
    from agentrl.cli.flags import add_rlconfig_flags
    from agentrl.rl.config import TRAIN_ONLY

    e = subparsers.add_parser(
        "eval", help="held-out evaluation of a model (no training)",
        usage="%(prog)s --model MODEL|RUN_DIR [--config FILE.yaml] [--env ENV] [--tasks SOURCE] [--out DIR] [options]",
        description="Evaluate --model on the held-out tasks of --tasks with --env (eval_n episodes per task); "
        "writes <out>/results.json (default runs/eval) with per-task counts and a task-level bootstrap interval.",
    )
    add_rlconfig_flags(e, exclude=TRAIN_ONLY, help=EVAL_HELP)  # no --steps, --lr, --resume, ...: they do not apply
    add_config_flags(e)
    # never the training default out: evaluating runs/default/checkpoints/... must not move that run aside;
    # steps=0 from the start, so RLConfig's training-only checks (fp16 needs loss scaling) do not apply
    e.set_defaults(func=main, out="runs/eval", steps=0, run_record_path="")
    e.defaults_from_argv = eval_defaults
    e.defaults_source = "the --config file or the model's run record (agentrl_run.json)"
    from agentrl.cli.flags import ALIASES

    train_only = [f"--{n.replace('_', '-')}" for n in TRAIN_ONLY] + [a for n in TRAIN_ONLY for a in ALIASES.get(n, ())]
    e.foreign_flags = {f: "a training flag (`agentrl train`); eval does not train" for f in train_only}
    e.foreign_flags.update({f"--no-{f[2:]}": "a training flag (`agentrl train`); eval does not train"
                            for f in train_only})
    served = e.add_argument_group("served environment")
    served.add_argument("--env-url", default="", help="score on the held-out tasks of an `agentrl serve` server "
                   "instead of a local environment (the server's --env and --tasks apply)")
    served.add_argument("--models", nargs="+", default=None, help="with --env-url: several models on the same tasks "
                   "in one pass, one table, paired differences against the first (default: --model)")
    served.add_argument("--concurrency", type=int, default=16,
                   help="with --env-url: episodes (server sessions) at a time")


# eval's wording of the flags whose RLConfig help speaks of training
EVAL_HELP: dict[str, str] = {
    "model": "Model to evaluate: a run folder (runs/x: its model/), a checkpoint (runs/x/checkpoints/step_N), a "
             "model folder, 'tiny-qwen3', a fetched model name or an HF-cache repo id. A run or checkpoint's "
             "recorded env, tasks, families and episode limits are the defaults (agentrl_run.json).",
    "families": "Comma-separated bug-fix families of the held-out tasks when --eval-families is empty (empty = the "
                "write-up's five); see `agentrl tasks list`.",
    "eval_n": "Held-out episodes per task.",
    "out": "Output directory of the evaluation: results.json, eval.log, plots, report.html.",
}


def eval_defaults(argv: list[str]) -> dict[str, Any]:
    """The defaults of `agentrl eval ARGV`: the model's run record (recorded_defaults), then the --config
    file's values on top (its training-only keys ignored); flags given override both."""
    from agentrl.cli.config_file import config_file_defaults
    from agentrl.rl.config import TRAIN_ONLY

    return {**recorded_defaults(argv), **config_file_defaults(argv, ignore=TRAIN_ONLY)}


# recorded settings that describe the run's own task source: not reused when --tasks names another one
# (a bug-fix run's families made `agentrl eval --model runs/default --tasks mbpp` fail with "--families ...
# applies to --tasks bugfix only")
TASK_SOURCE_SETTINGS = ("families", "eval_families")


def recorded_defaults(argv: list[str]) -> dict[str, Any]:
    """The defaults `agentrl eval ARGV` starts from: when `--model` is a run folder, a checkpoint or a model
    folder with an agentrl_run.json (agentrl.rl.run_record), the settings recorded there (env, tasks,
    families, episode limits, held-out size, sampling distribution), so flags given on the command line still override them;
    with a --tasks other than the recorded one, without the recorded families (TASK_SOURCE_SETTINGS); else none ({})."""
    from agentrl.cli.config_file import last_flag_value
    from agentrl.rl.run_record import read_run_record

    model = last_flag_value(argv, "--model")
    found = read_run_record(model) if model else None
    if found is None:
        return {}
    record, path = found
    settings = dict(record["settings"])
    tasks = last_flag_value(argv, "--tasks")
    if tasks is not None and tasks != settings.get("tasks"):
        for key in TASK_SOURCE_SETTINGS:
            settings.pop(key, None)
    return {**settings, "run_record_path": str(path)}


def reused_settings_line(args: argparse.Namespace) -> str | None:
    """One log line naming the settings taken from the model's run record (those the command line did not
    change), or None when the model has no record."""
    from agentrl.rl.run_record import read_run_record

    if not args.run_record_path:
        return None
    found = read_run_record(Path(args.run_record_path).parent)
    if found is None:
        return None
    settings = found[0]["settings"]
    if args.tasks != settings.get("tasks"):  # as recorded_defaults: another task source takes none of these
        settings = {k: v for k, v in settings.items() if k not in TASK_SOURCE_SETTINGS}
    reused = [f"{k.replace('_', '-')}={v}" for k, v in settings.items() if getattr(args, k) == v and v != ""]
    changed = [f"--{k.replace('_', '-')}" for k, v in settings.items() if getattr(args, k) != v]
    line = f"eval: reusing the run's settings from {args.run_record_path}: {', '.join(reused)}"
    return line + (f" (given on the command line: {', '.join(changed)})" if changed else "")


def recorded_setting_error(message: str, args: argparse.Namespace) -> str:
    """`message` (a config error such as "RLConfig.thinking: expected true or false, got None") with the run
    record named when the setting it is about came from there (not given on the command line), so the user
    knows which file to fix; `message` itself otherwise."""
    from agentrl.rl.run_record import read_run_record

    path = getattr(args, "run_record_path", None)
    m = re.match(r"\w+\.(\w+)\b", message)
    if not path or not m:
        return message
    found = read_run_record(Path(path).parent)
    settings = found[0]["settings"] if found else {}
    name = m.group(1)
    if name not in settings or getattr(args, name, object()) != settings[name]:
        return message
    return (f"{message} (the value of '{name}' in the run record {path}; fix it there or give "
            f"--{name.replace('_', '-')})")


def random_model_line(cfg: Any, models: list[str] | None = None) -> str | None:
    """For a model preset (random weights: `agentrl eval` with no --model evaluates tiny-qwen3): one line saying
    what that measures and how to evaluate a trained model; None for any other model. `models`: the served
    evaluation's --models, which replace --model (and its tiny-qwen3 default)."""
    from agentrl.models.presets import MODEL_PRESETS

    if models or cfg.policy.model not in MODEL_PRESETS:
        return None
    return (f"eval: --model {cfg.policy.model} is a preset with random weights (it writes no tool calls, so expect "
            f"pass@1 0); to evaluate a trained model pass its run folder, e.g. --model runs/default")


def main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl eval` (module docstring).

    Raises:
        ValueError: a setting is invalid; one taken from the model's run record names that file.
    """
    from agentrl.cli.flags import config_from_args
    from agentrl.scale.context import launched_by_torchrun

    # --print-config's stdout is the YAML alone (`> f.yaml` then `--config f.yaml`): the "reusing the run's
    # settings" line printed before it made the file invalid YAML, so the notes are printed only for a run
    if (line := reused_settings_line(args)) and not args.print_config:
        print(line, flush=True)
    try:
        cfg = config_from_args(args).replace_flat(steps=0)
    except ValueError as e:
        raise ValueError(recorded_setting_error(str(e), args)) from None
    if args.print_config:
        from agentrl.cli.config_file import dump_config
        from agentrl.rl.config import TRAIN_ONLY

        print(dump_config(cfg, exclude=TRAIN_ONLY), end="")
        return 0
    from agentrl.cli.train import ignored_settings_lines

    for line in ignored_settings_lines(cfg, "eval"):
        print(line, flush=True)
    if line := random_model_line(cfg, args.models):
        print(line, flush=True)
    if args.env_url:
        from agentrl.serve.env.eval import eval_served

        eval_served(cfg, args.env_url, args.models or [cfg.policy.model], concurrency=args.concurrency)
        return 0
    if args.models:
        raise ValueError("--models needs --env-url (a served environment); locally, evaluate one --model "
                         "at a time")
    if launched_by_torchrun():
        raise SystemExit("agentrl eval runs in one process; launch it without torchrun "
                         "(torchrun is for `agentrl train`)")
    from agentrl.rl.trainer import evaluate_only

    rep, results_path = evaluate_only(cfg)
    print(f"pass@1: {rep.pass_at_1.describe()} over {len(rep.tasks)} tasks")
    print(f"results: {results_path}")
    return 0

"""`agentrl train`: RLConfig flags in, a results file out. Not the loop itself.

The strategy is picked here in plain code: launched by torchrun (WORLD_SIZE > 1), one rank of a
data-parallel run (agentrl.scale.train.train_data_parallel); with --rollout-workers N and/or
--ray-graders N, the trainer with rollout worker processes and/or Ray grader actors
(agentrl.scale.train.train_scaled); otherwise the single-process trainer (agentrl.rl.trainer.train).
"""

from __future__ import annotations

import argparse
from typing import Any

# where `agentrl train`'s preset defaults are decided (shared with eval's check of a train config)
from agentrl.cli.config_file import preset_defaults


def register(subparsers: Any) -> None:
    """Add `train` (every RLConfig field as a flag)."""
    from agentrl.cli.config_file import add_config_flags
    from agentrl.cli.flags import add_rlconfig_flags

    p = subparsers.add_parser(
        "train", help="GRPO training with held-out evaluation before and after",
        usage="%(prog)s [--preset NAME] [--config FILE.yaml] [--model MODEL] [--env ENV] [--out DIR] [options]",
        description="Train a policy with GRPO. With no flags (or only --seed, --out, --resume, as flags or --config "
        "keys): --preset demo "
        "(demo-qwen3 warm-started by SFT on scripted experts, then GRPO in edit-menu; about 1.5 minutes on 2 CPU "
        "cores, --preset quick about 1; `--print-config` prints it). Other flags without --preset start from the plain defaults shown below; "
        "`--preset demo --help` shows the preset's.",
    )
    add_rlconfig_flags(p)
    add_config_flags(p)
    p.defaults_from_argv = train_defaults
    p.set_defaults(func=main)


def train_defaults(argv: list[str]) -> dict[str, Any]:
    """The defaults of `agentrl train ARGV`: the preset's (preset_defaults; a `preset:` key of the --config
    file counts as `--preset`), then the --config file's values on top; flags given override both.

    Raises:
        ValueError: the --config file is unreadable or invalid (config_file_defaults), or its `preset` is not a
            string.
    """
    from agentrl.cli.config_file import config_file_defaults, config_path

    file = config_file_defaults(argv)
    if not isinstance(file.get("preset", ""), str):  # `preset: [quick]` raised AttributeError on argv's list
        raise ValueError(f"--config {config_path(argv)}: preset: expected a preset name (a string), got "
                         f"{str(file['preset'])[:80]}")
    if file.get("preset") and not any(a == "--preset" or a.startswith("--preset=") for a in argv):
        argv = [*argv, "--preset", file["preset"]]
    return {**preset_defaults(argv, file_keys=file), **file}


def main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl train`: data parallel under torchrun, rollout workers / Ray graders when asked,
    else one process (module docstring)."""
    from agentrl.cli.flags import config_from_args
    from agentrl.scale.context import launched_by_torchrun

    cfg = config_from_args(args)
    if args.print_config:
        from agentrl.cli.config_file import dump_config

        print(dump_config(cfg), end="")
        return 0
    if line := start_line(cfg):
        print(line, flush=True)
    for line in ignored_settings_lines(cfg, "train"):
        print(line, flush=True)
    if launched_by_torchrun():
        from agentrl.scale.train import train_data_parallel

        path = train_data_parallel(cfg)
        if path is not None:
            print(f"results: {path}")
        return 0
    if cfg.scale.rollout_workers or cfg.scale.ray_graders:
        from agentrl.scale.train import train_scaled

        print(f"results: {train_scaled(cfg)}")
        return 0
    return train_single(cfg)


def ignored_settings_lines(cfg: Any, command: str) -> list[str]:
    """One line per environment-specific setting the run's environment does not read (--shaped-reward in
    edit-menu, --max-edits in coding-tools, ...): the run goes on, but the flag changes nothing."""
    from agentrl.envs.registry import ignored_env_settings
    from agentrl.rl.sections import EnvSection

    return [f"{command}: --{field.replace('_', '-')}={getattr(cfg.env, field)!r} is ignored: --env {cfg.env.name} "
            f"does not read it (it applies to {', '.join(envs)})"
            for field, envs in ignored_env_settings(cfg.env, EnvSection())]


def start_line(cfg: Any) -> str | None:
    """For a run without a preset: one line naming what it starts from (model, env, warm start) and what
    would show learning; None for a preset's run (its description says)."""
    from agentrl.models.presets import MODEL_PRESETS

    if cfg.run.preset:
        return None
    line = f"train: no --preset: --model {cfg.policy.model} in --env {cfg.env.name}, --tasks {cfg.tasks.source}, warm start {cfg.warm_start.method}"
    if cfg.policy.model in MODEL_PRESETS and cfg.warm_start.method == "none" and not cfg.agent.name:
        return line + (f"; {cfg.policy.model} has random weights and writes no tool calls, so every reward is 0 and no "
                       "update happens: add --warm-start sft, or run `agentrl train --preset demo` to see learning")
    return line + "; learning shows as a paired after - before interval above 0 (printed at the end)"


def train_single(cfg: Any) -> int:
    """One process: agentrl.rl.trainer.train, then the before/after pass@1 and their paired difference."""
    from agentrl.eval.bootstrap import format_interval
    from agentrl.report.readable import verdict
    from agentrl.report.results import validate_results
    from agentrl.rl.trainer import train

    path = train(cfg)
    data = validate_results(path)
    for ev in data["evaluations"]:
        if ev["label"] in ("before", "after"):
            print(f"pass@1 {ev['label']}: {format_interval(ev['pass_at_1'])}")
    for p in data["paired"]:
        v = verdict(p["diff"])
        print(f"paired {p['after']} - {p['before']}: {format_interval(p['diff'], signed=True)}"
              + ("" if v.css == "na" else f"  ({v.text})"))
    print(f"results: {path}")
    return 0

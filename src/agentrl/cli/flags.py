"""The flags of the commands that take a config: one `--flag` per RLConfig field (train, eval), walking its
sections (the flag is the field's flat name: `--max-new-tokens` sets cfg.sampling.max_new_tokens), and the
policy flags (POLICY_FLAGS) that every command loading a model shares, declared once as PolicyConfig's fields.
Not the config itself (agentrl.rl.config).

Standard library and agentrl.rl.config only: no transformers import while the CLI builds its parsers.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Literal

from agentrl.chat.bundled import BUNDLED
from agentrl.cli.args import AgentrlParser
from agentrl.models.dtypes import DTYPE_HELP
from agentrl.models.policy import FALSE_WORDS, TRUE_WORDS, PolicyConfig
from agentrl.rl.config import FLAT, RLConfig, flat_fields
from agentrl.rl.sections import switch_arg

# help of a `--no-<flag>` (a True-by-default bool); the generic text is "Turn --<flag> off."
NEGATIVE_HELP: dict[str, str] = {
    "randomize_names": "Keep the function under test's original name (it may hint at the bug).",
    "pack_rows": "Run the update's trunk on the right-padded batch (padding computed, then ignored).",
    "gradient_checkpointing": "Keep every layer's activations for backward (faster update, more memory).",
}


# TRL / transformers names of the same knobs, accepted as aliases (shown beside the flag in help); the TRL
# names that mean something else get a hint instead (agentrl.cli.args.TRL_HINTS)
ALIASES: dict[str, tuple[str, ...]] = {
    "model": ("--model-name-or-path",), "dtype": ("--torch-dtype",), "out": ("--output-dir",),
    "lr": ("--learning-rate",), "group_size": ("--num-generations",), "kl_coef": ("--beta",),
    "steps": ("--max-steps",), "checkpoint_every": ("--save-steps",), "keep_checkpoints": ("--save-total-limit",),
    "eval_every": ("--eval-steps",), "epochs": ("--num-iterations",), "clip_low": ("--epsilon",),
    "clip_high": ("--epsilon-high",), "mask_truncated": ("--mask-truncated-completions",),
}

# the help sections of the RLConfig flags, in help order; a field named in none goes to the last one
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model", "tokenizer", "chat_template", "dtype", "device", "cpu_threads", "allow_download", "tf32",
               "gradient_checkpointing",
               "warm_start", "warm_start_tasks", "warm_start_epochs", "warm_start_lr", "warm_start_batch",
               "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_merge")),
    ("tasks and environment", ("env", "tasks", "families", "train_size", "randomize_names", "max_turns",
                               "max_edits", "shaped_reward", "max_observation_chars", "reward_includes_shown_test", "agent",
                               "agent_timeout_s", "agent_max_calls", "agent_isolation", "agent_binary")),
    ("sampling", ("group_size", "prompts_per_step", "max_new_tokens", "max_context_tokens", "gen_batch", "sampler",
                  "temperature", "top_k", "top_p", "thinking")),
    ("optimisation", ("steps", "max_train_s", "adv_mode", "clip_low", "clip_high", "kl_coef", "epochs",
                      "minibatches", "micro", "micro_tokens", "lr", "weight_decay", "max_grad_norm",
                      "mask_truncated", "logprob_chunk_rows", "pack_rows", "compile_layers",
                      "activation_offloading")),
    ("evaluation", ("eval_families", "eval_size", "eval_n", "eval_every", "n_boot", "alpha")),
    ("output", ("preset", "out", "seed", "checkpoint_every", "keep_checkpoints", "resume", "report_to")),
    ("scale", ("async_rollouts", "max_staleness", "is_correction", "is_cap", "rollout_workers", "worker_launcher",
               "ray_graders")),
)


def group_of(name: str) -> str:
    """The help section (GROUPS) of the RLConfig field `name`; the last section for a field in none."""
    return next((title for title, names in GROUPS if name in names), GROUPS[-1][0])


def _str_to_bool(v: str) -> bool:
    """`true/false/yes/no/t/f/y/n/1/0` (any case) -> bool; else argparse.ArgumentTypeError."""
    s = str(v).lower()
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def add_field_flag(parser: Any, f: dataclasses.Field, kind: Any, default: Any, help: str | None = None) -> None:  # noqa: A002
    """One `--flag` (dashed, with an underscore twin) for the config field `f` of type `kind`, named and stored
    (`dest`) by its flat name (the `flat` metadata, else the field's name), with `default` and `help`
    (default: the field's `help` metadata). Booleans take `--flag [true|false]` (bare `--flag` = true) and
    `--no-flag`; fields with `choices` metadata or a Literal type get choices (with `bools` metadata, a bare
    `--flag` and `--no-flag` set its two values: agentrl.models.policy.flag_field)."""
    name = f.metadata.get("flat", f.name)
    flags = [f"--{name.replace('_', '-')}"] + ([f"--{name}"] if "_" in name else [])
    for alias in ALIASES.get(name, ()):  # TRL's spelling, dashed and underscored
        twin = "--" + alias[2:].replace("-", "_")
        flags += [alias] + ([twin] if twin != alias else [])
    help_ = f.metadata["help"] if help is None else help
    if kind is bool:
        parser.add_argument(*flags, type=_str_to_bool, nargs="?", const=True, default=default,
                            metavar="{true,false}", dest=name, help=help_)
        neg = [f"--no-{name.replace('_', '-')}", f"--no_{name}"]  # the underscore twin is hidden in help
        off = NEGATIVE_HELP.get(name, f"Turn {flags[0]} off" + ("." if default else " (the default)."))
        parser.add_argument(*neg, dest=name, action="store_false", help=off)
    elif "choices" in f.metadata:
        bools = f.metadata.get("bools")  # a former boolean flag: bare `--flag` and `--no-flag` keep working
        bare = {"nargs": "?", "const": bools[0]} if bools else {}
        parser.add_argument(*flags, choices=f.metadata["choices"], type=_reader(f, f.metadata["choices"], name),
                            default=default, dest=name, help=help_, **bare)
        if bools:
            parser.add_argument(f"--no-{name.replace('_', '-')}", f"--no_{name}", dest=name, action="store_const",
                                const=bools[1], help=f"{flags[0]} {bools[1]}.")
    elif typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        parser.add_argument(*flags, choices=choices, type=_reader(f, choices, name), default=default, dest=name,
                            help=help_)
    else:
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        parser.add_argument(*flags, type=base, default=default, dest=name, help=help_)


def _reader(f: dataclasses.Field, choices: Any, name: str) -> Any:
    """The `type=` of a choice field's flag: its own converter (metadata "type"), else its `switch` reader
    (true / false and their spellings read as its on / off choice: switch_arg), else str."""
    if "type" in f.metadata:
        return f.metadata["type"]
    return switch_arg(tuple(choices), *f.metadata["switch"], name) if "switch" in f.metadata else str


class RLConfigParser(AgentrlParser):
    """The RLConfig flags on an AgentrlParser; `parse_args_into_dataclasses` as in HfArgumentParser."""

    def parse_args_into_dataclasses(self, args: list[str] | None = None) -> tuple[RLConfig]:
        """Parse `args` (default sys.argv[1:]) into a one-element tuple `(RLConfig,)`; exit 2 on bad flags."""
        return (config_from_args(self.parse_args(args)),)


def add_rlconfig_flags(parser: Any, *, exclude: tuple[str, ...] = (), help: dict[str, str] | None = None) -> None:  # noqa: A002
    """Add one `--flag` (dashed, with an underscore twin, and TRL's name where ALIASES has one) per RLConfig
    field (section by section, by flat name: agentrl.rl.config.flat_fields) not in `exclude`, in the argument groups of GROUPS; `help` replaces the help text of the fields
    it names (e.g. eval's wording of --families).

    Booleans take `--flag [true|false]` (bare `--flag` = true) and `--no-flag` with its own help
    (NEGATIVE_HELP); Literal fields get `choices`, and so do fields whose metadata names them (the sampler,
    estimator and dtype registries), converted first by the metadata's `type` (dtype aliases); `top_k`
    takes an int.
    Excluded fields are set to their defaults (`set_defaults`), so `config_from_args` still works.
    Standard library only: no transformers import while the CLI builds its parsers.
    """
    groups = {title: parser.add_argument_group(title) for title, _ in GROUPS}
    for name, _, f, kind in flat_fields():
        if name in exclude:
            parser.set_defaults(**{name: f.default})
            continue
        add_field_flag(groups[group_of(name)], f, kind, f.default, (help or {}).get(name))


def rlconfig_parser(*, add_help: bool = True, exclude: tuple[str, ...] = ()) -> RLConfigParser:
    """An RLConfigParser with one `--flag` per RLConfig field (help from metadata, defaults shown).

    For a sub-command, pass it as a parent: `sub.add_parser("train", parents=[rlconfig_parser(add_help=False)])`
    and build the config with `config_from_args(namespace)`; or call `add_rlconfig_flags(sub_parser)`.
    """
    p = RLConfigParser(add_help=add_help)
    add_rlconfig_flags(p, exclude=exclude)
    return p


def config_from_args(args: Any) -> RLConfig:
    """Build an RLConfig from an argparse Namespace holding (at least) every RLConfig field by its flat name."""
    return RLConfig.from_flat({name: getattr(args, name) for name in FLAT})


# The policy flags every command that loads a model takes: declared once, as PolicyConfig's fields (their
# help, type and choices; RLConfig's policy section), and added with each command's own defaults.
POLICY_FLAGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PolicyConfig))
# where RLConfig's help speaks of training (fp16 refused, saved with checkpoints), the wording for other commands
NEUTRAL_POLICY_HELP: dict[str, str] = {
    "dtype": DTYPE_HELP,
    "chat_template": "Chat template replacing the model's own, for templates without tool support: a bundled name "
                     f"({' | '.join(BUNDLED)}) or a .jinja path (empty = the model's own).",
}


def add_policy_flags(parser: Any, defaults: Any, *, only: tuple[str, ...] = POLICY_FLAGS,
                     help: dict[str, str] | None = None) -> None:  # noqa: A002
    """Add the policy flags `only` (a subset of POLICY_FLAGS, in that order) to `parser`: PolicyConfig's
    declaration of each (add_field_flag) with the default `getattr(defaults, name)` (a command's own
    PolicyConfig, e.g. SmokeConfig().policy) and, where `help` names the flag, that help text instead;
    `policy_from_args` reads them back.

    Raises: ValueError: a name that is not a policy flag."""
    if unknown := [n for n in only if n not in POLICY_FLAGS]:
        raise ValueError(f"not policy flags: {unknown}; expected some of {POLICY_FLAGS}")
    hints = typing.get_type_hints(PolicyConfig)
    by_name = {f.name: f for f in dataclasses.fields(PolicyConfig)}
    texts = {**NEUTRAL_POLICY_HELP, **(help or {})}
    for name in (n for n in POLICY_FLAGS if n in only):
        add_field_flag(parser, by_name[name], hints[name], getattr(defaults, name), texts.get(name))


def policy_from_args(args: Any, defaults: PolicyConfig | None = None) -> PolicyConfig:
    """The PolicyConfig of a command's parsed `args`: the policy flags it has, `defaults`' values (default
    PolicyConfig()) for those it lacks (serve-policy has no --chat-template)."""
    base = defaults or PolicyConfig()
    return dataclasses.replace(base, **{n: getattr(args, n) for n in POLICY_FLAGS if hasattr(args, n)})

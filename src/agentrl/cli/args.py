"""The argparse conventions every `agentrl` command shares. Not the commands themselves.

- No prefix abbreviation: `--step 1` is an error, never a silent `--steps 1` (`allow_abbrev=False`).
- Dashes everywhere: help and usage show `--max-new-tokens`; a `--max_new_tokens` twin stays accepted.
- Help shows each flag's default (argparse's ArgumentDefaultsHelpFormatter).
- A mistyped flag is an error of the sub-command it was given to (its usage line, not the top-level
  one), with difflib's closest flags of that sub-command as "did you mean ...?".

Only the standard library (and agentrl.preflight, itself standard library only, when an error is printed) is imported here, so building the whole parser tree (and `--help`) is fast.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in help; an underscore spelling is hidden where the flag also has a dashed one."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = dashed_option_strings(action)
        if not shown or shown == action.option_strings:
            return super()._format_action_invocation(action)
        twin = argparse.Action(shown, action.dest, nargs=action.nargs, metavar=action.metavar,
                               choices=action.choices, help=action.help)
        return super()._format_action_invocation(twin)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # store_true/store_false flags and --help/--version: "(default: False)" says nothing new; a help
        # text that already names its default ("... (default X)", "default: X") is not given a second one
        if action.nargs == 0 or action.help is None or "%(default)" in action.help:
            return action.help
        if re.search(r"\(default\b|\bdefault:", action.help, re.IGNORECASE):
            return action.help
        if action.default is None or action.default == "":
            return action.help
        return super()._get_help_string(action)


def dashed_option_strings(action: argparse.Action) -> list[str]:
    """`action`'s option strings without the `--foo_bar` spellings that have a `--foo-bar` twin."""
    opts = list(action.option_strings)
    return [o for o in opts if not ("_" in o and o.replace("_", "-") in opts)]


class AgentrlParser(argparse.ArgumentParser):
    """An ArgumentParser with agentrl's conventions (module docstring); sub-parsers are of this class too.

    Unrecognized arguments raise in the innermost sub-command that received them (exit 2, that
    sub-command's usage, one "did you mean" per mistyped flag), instead of bubbling up to the top level.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.is_subcommand = False
        # argv -> {dest: default}: defaults chosen from the arguments themselves (e.g. `train --preset NAME`),
        # applied before parsing, so flags given on the command line still override them
        self.defaults_from_argv: Callable[[list[str]], dict[str, Any]] | None = None
        self.defaults_source = "the --config file"  # where those defaults come from, for their errors
        # flags of other commands given to this one -> why they do not apply (e.g. eval's training flags)
        self.foreign_flags: dict[str, str] = {}

    def _add_action(self, action: argparse.Action) -> argparse.Action:
        # the dashed spelling first: usage lines show option_strings[0] (a copy: list.sort empties the list
        # while it sorts, so a key reading the list itself sees nothing)
        opts = list(action.option_strings)
        action.option_strings.sort(key=lambda o: "_" in o and o.replace("_", "-") in opts)
        return super()._add_action(action)

    def add_subparsers(self, **kwargs: Any) -> Any:
        """argparse's add_subparsers; each parser it adds is a strict sub-command of this class."""
        kwargs.setdefault("parser_class", AgentrlParser)
        action = super().add_subparsers(**kwargs)
        add = action.add_parser

        def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
            kw.setdefault("formatter_class", HelpFormatter)
            if kw.get("help") and not kw.get("description"):  # every command has a description
                kw["description"] = kw["help"][0].upper() + kw["help"][1:] + "."
            p = add(name, **kw)
            p.is_subcommand = True
            return p

        action.add_parser = add_parser  # type: ignore[method-assign]
        return action

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        if self.defaults_from_argv is not None:
            argv = list(sys.argv[1:] if args is None else args)
            try:
                defaults = self.defaults_from_argv(argv)
            except (ValueError, FileNotFoundError) as e:  # e.g. a bad key in --config FILE: one line
                self.error(str(e))
            self._check_file_defaults(defaults, argv)
            self.set_defaults(**defaults)
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self.is_subcommand:
            self.error(unrecognized_message(self, extras))
        return ns, extras

    def _check_file_defaults(self, defaults: dict[str, Any], argv: list[str]) -> None:
        """A text default from a file (--config, a model's run record) that its flag's type refuses: argparse
        converts it late and blamed the flag ("argument --eval-n: invalid int value: 'x'") though the command
        line never gave it; this names the setting and where defaults come from instead."""
        for dest, value in defaults.items():
            action = next((a for a in self._actions if a.dest == dest and a.option_strings), None)
            if action is None or not isinstance(value, str) or not callable(action.type):
                continue
            if any(arg == o or arg.startswith(o + "=") for arg in argv for o in action.option_strings):
                continue  # the command line overrides it
            try:
                convert_text_default(action, value)
            except ValueError as e:
                self.error(f"setting {dest!r} from {self.defaults_source}, not the command line: {e}")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized_message(self, extras))
        return ns

    def error(self, message: str) -> NoReturn:
        """Print this parser's usage and `prog: error: message` once to stderr; exit 2. An argparse "invalid
        choice" (a command, --preset, --sampler, ...) gets the closest choice as "did you mean"."""
        if m := INVALID_CHOICE.search(message):
            from agentrl.preflight import did_you_mean

            message += did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


# argparse's message for a value outside `choices` (Python 3.11's wording, which has no suggestion of its own)
INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def convert_text_default(action: argparse.Action, value: Any) -> Any:
    """`value` as argparse would hand it on when it is `action`'s default: a str converted by the action's
    `type` (argparse converts text defaults late, with the flag's type), anything else as it is.

    Raises:
        ValueError: the type refuses the text; its message is the type's own (argparse.ArgumentTypeError) or
            "expected TYPE, got 'TEXT'".
    """
    if not isinstance(value, str) or not callable(action.type):
        return value
    try:
        return action.type(value)
    except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
        raise ValueError(str(e) if isinstance(e, argparse.ArgumentTypeError) else
                         f"expected {getattr(action.type, '__name__', 'a value')}, got {value!r}") from None


def known_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every `--flag` of `parser` in its dashed spelling (what help shows)."""
    return [o for a in parser._actions for o in dashed_option_strings(a) if o.startswith("--") and o != "--help"]


# TRL / transformers flags with no same-meaning agentrl flag (those with one are aliases, agentrl.cli.flags
# ALIASES): what to use instead. A hint is shown only where the command has every agentrl flag it names.
TRL_HINTS: dict[str, str] = {
    "--logging-steps": "agentrl logs every step (train.log, and --report-to's tracker): there is no interval to set",
    "--per-device-train-batch-size": "no equivalent: a step has --prompts-per-step x --group-size episodes; "
                                     "--micro sets the rows per forward",
    "--gradient-accumulation-steps": "no equivalent: --minibatches sets optimizer steps per step and --micro the "
                                     "rows per forward (accumulated)",
    "--num-train-epochs": "no equivalent: training runs --steps steps of fresh episodes",
    "--max-completion-length": "--max-new-tokens (per assistant turn; an episode has up to --max-turns turns)",
    "--max-prompt-length": "--max-context-tokens (prompt + completion budget of an episode)",
    "--bf16": "--dtype bf16",
    "--fp16": "--dtype fp16 (eval only: training refuses fp16)",
    "--resume-from-checkpoint": "--resume (continues from the latest checkpoint in --out)",
    "--use-vllm": "--sampler (one of the registered samplers)",
    "--use-peft": "--lora-r N (N > 0 trains LoRA adapters)",
    "--eval-strategy": "--eval-every N (0 = only before and after)",
    "--save-strategy": "--checkpoint-every N (0 = off)",
    "--run-name": "--out (the run folder names the run)",
    "--num-train-samples": "--train-size",
}


def trl_hint(flag: str, flags: list[str]) -> str | None:
    """What to use instead of the TRL/transformers `flag` (dashed) in a command whose flags are `flags`:
    TRL_HINTS' text when every agentrl flag it names is one of `flags`, "no equivalent in this command"
    for a TRL flag whose replacement the command lacks, None for a flag TRL does not have."""
    if flag not in TRL_HINTS:
        return None
    text = TRL_HINTS[flag]
    if all(f in flags for f in re.findall(r"--[a-z][a-z0-9-]*", text)):
        return f"{flag} (TRL): {text}"
    return f"{flag} (TRL): this command has no equivalent"


def unrecognized_message(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """"unrecognized arguments: ..." plus, per mistyped flag, a TRL flag's agentrl counterpart (trl_hint)
    or else the closest flags of `parser` (difflib)."""
    flags = known_flags(parser)
    hints = []
    for arg in extras:
        if not arg.startswith("-"):
            continue
        flag = arg.split("=", 1)[0].replace("_", "-")
        foreign = getattr(parser, "foreign_flags", {})
        if hint := (f"{flag}: {foreign[flag]}" if flag in foreign else trl_hint(flag, flags)):
            hints.append(hint)
            continue
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.6)
        if close:
            hints.append(f"{arg.split('=', 1)[0]}: did you mean {close[0]}?")
    return "unrecognized arguments: " + " ".join(extras) + "".join(f"\n  {h}" for h in hints)


def positive_int(text: str) -> int:
    """argparse `type=` for counts that must be >= 1; raises argparse.ArgumentTypeError otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse `type=` for counts that may be 0; raises argparse.ArgumentTypeError otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _float_from_zero(text: str, *, zero_ok: bool) -> float:
    """`text` as a finite float > 0 (or >= 0 with zero_ok); raises argparse.ArgumentTypeError naming the bound."""
    bound = ">= 0" if zero_ok else "> 0"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
    if not (0 <= value if zero_ok else 0 < value) or value == math.inf:  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """argparse `type=` for finite quantities >= 0 (seconds where 0 means never); NaN, inf and negatives raise
    argparse.ArgumentTypeError."""
    return _float_from_zero(text, zero_ok=True)


def positive_float(text: str) -> float:
    """argparse `type=` for finite quantities > 0 (seconds, limits); NaN, inf, 0 and negatives raise
    argparse.ArgumentTypeError."""
    return _float_from_zero(text, zero_ok=False)

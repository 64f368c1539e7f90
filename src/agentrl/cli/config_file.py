"""`--config FILE.yaml` and `--print-config`: of the commands whose flags are RLConfig's (train, eval), and of
those whose settings are their own flags (smoke, sft).

`--print-config` prints the command's resolved config (preset, file and flags applied) as YAML and exits;
`--config FILE` reads such a file back: its values become the defaults, so flags given on the command line
override them. Keys are the flat names of RLConfig's fields, as the flags spell them (dashes or underscores);
a section's fields may also be nested under the section's name (`sampling: {temperature: 0.7}`). An unknown
key is a one-line error naming it and the close matches. Not the config itself (agentrl.rl.config).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def add_config_flags(parser: Any) -> None:
    """Add `--config FILE` and `--print-config` to `parser` (an "output" argument group when it has one)."""
    group = next((g for g in parser._action_groups if g.title == "output"), parser)
    group.add_argument("--config", default="", metavar="FILE.yaml",
                       help="Read flag values from a YAML file (what --print-config writes); flags given on the "
                            "command line override it.")
    group.add_argument("--print-config", action="store_true",
                       help="Print the resolved config (preset, --config file and flags applied) as YAML and exit; "
                            "`--config` reads it back.")


def last_flag_value(argv: list[str], flag: str) -> str | None:
    """The value of the last `FLAG X` / `FLAG=X` in `argv` (None when not given), read before argparse runs."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def config_path(argv: list[str]) -> str | None:
    """The value of the last `--config FILE` / `--config=FILE` in `argv`, or None."""
    return last_flag_value(argv, "--config")


def _load_unique_keys(text: str) -> Any:
    """yaml.safe_load of `text`, but a mapping key given twice is a yaml.YAMLError naming it and its line
    (PyYAML itself keeps the last value silently, so `steps: 3` ... `steps: 5` would run 5 steps unsaid)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)):
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice (line {key_node.start_mark.line + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=Loader)


def _load_mapping(path: str | Path) -> dict[Any, Any]:
    """The YAML mapping in file `path` (an empty file is {}).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory, unreadable, not UTF-8, not YAML (what and where), not a mapping, an integer of
            more digits than Python converts, or more than MAX_VALUES values (aliases expanded).
    """
    import yaml

    p = Path(path).expanduser()
    if p.is_dir():
        raise ValueError(f"--config {path}: is a directory; expected a YAML file")
    if p.exists() and not p.is_file():  # /dev/zero, a FIFO: there, but no file to read
        raise ValueError(f"--config {path}: not a regular file; expected a YAML file")
    if not p.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        text = p.read_text(encoding="utf-8-sig")  # PyYAML skips a BOM too; this says it here
    except UnicodeDecodeError as e:
        raise ValueError(f"--config {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"--config {path}: cannot be read ({e.strerror or e})") from None
    try:
        data = _load_unique_keys(text) or {}
    except yaml.YAMLError as e:
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"--config {path}: not valid YAML ({what}{where})") from None
    except RecursionError:
        raise ValueError(f"--config {path}: YAML nested too deeply; expected a flat mapping of flag names to values") \
            from None
    except ValueError as e:  # PyYAML's int(): "Exceeds the limit (4300 digits) ...; use sys.set_int_max_str_digits()"
        if "integer string conversion" not in str(e):
            raise
        raise ValueError(f"--config {path}: holds an integer of more than {sys.get_int_max_str_digits()} digits") \
            from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got {type(data).__name__}")
    if _too_many_values(data, MAX_VALUES):
        raise ValueError(f"--config {path}: holds more than {MAX_VALUES:,} values (YAML aliases expanding a list "
                         "into itself, or a huge list); expected a flat mapping of flag names to values")
    return data


# Values a config file may hold, its keys, list items and aliases' expansions counted: a flat config has about 80.
# A few lines of nested aliases ("billion laughs") expand to 10**9 items, which an error message's repr then
# built in memory until the process was killed.
MAX_VALUES = 10_000


def _too_many_values(data: Any, limit: int) -> bool:
    """Whether `data` (loaded YAML) holds more than `limit` values, counting each alias's expansion again (and a
    self-referencing list forever); stops counting at the limit."""
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return False


def _flatten(data: dict[Any, Any], path: str | Path) -> list[tuple[str, Any, Any]]:
    """`data` as (key as written, key, value) triples, each section mapping (`policy: {model: x}`) replaced by
    its fields under their flat names (`("policy.model", "model", "x")`).

    A section that is no flat name (update, sampling, ...) left empty (`update:`, YAML's null) sets nothing.

    Raises: ValueError: a key of a section mapping that is not one of the section's fields, or such a section's
        value that is not a mapping (it read as an unknown key)."""
    from agentrl.rl.config import FLAT, SECTIONS

    names = {(s, a): n for n, (s, a) in FLAT.items()}
    out: list[tuple[str, Any, Any]] = []
    for key, value in data.items():
        section = str(key).replace("-", "_")
        if section in SECTIONS and section not in FLAT and not isinstance(value, dict):  # update, sampling, ...
            if value is None:  # `update:` with every key under it commented out
                continue
            fields = sorted(a for s, a in names if s == section)
            raise ValueError(f"--config {path}: section {key!r}: expected a mapping of its fields ({', '.join(fields)}), "
                             f"got {type(value).__name__} {repr(value)[:80]}")
        if section not in SECTIONS or not isinstance(value, dict):  # a flat key (tasks, env, agent, warm_start too)
            out.append((str(key), key, value))
            continue
        for k, v in value.items():
            if (section, str(k).replace("-", "_")) not in names:
                fields = sorted(a for s, a in names if s == section)
                raise ValueError(f"--config {path}: unknown key {k!r} in section {section!r}; expected one of "
                                 f"{', '.join(fields)}")
            out.append((f"{key}.{k}", names[section, str(k).replace("-", "_")], v))
    return out


def _once(seen: dict[str, str], name: str, written: str, path: str | Path) -> None:
    """Record that setting `name` was given as `written`; ValueError when it was already given (under another
    spelling: dashed and underscored, TRL's alias, or flat and in its section), which would keep one silently."""
    if name in seen:
        raise ValueError(f"--config {path}: {name!r} given twice (as {seen[name]!r} and {written!r}); keep one")
    seen[name] = written


def read_config_file(path: str | Path, *, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The RLConfig values of the YAML file `path` ({flat name: value}; dashed keys read as underscored,
    section mappings flattened), without the fields in `ignore` (a train config given to eval: its
    training-only keys do not apply, but their values are still checked, so one file is valid for both
    commands or for neither).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not YAML, not a mapping, an unknown key (named, with RLConfig's close flat names), a
            setting given twice (a repeated key, or two spellings of one setting), or an ignored key's value
            that RLConfig refuses.
    """
    from agentrl.cli.flags import ALIASES
    from agentrl.rl.config import FLAT

    fields = list(FLAT)
    # TRL's names are keys too (learning_rate: 1e-5 is lr), as they are flags
    aliases = {a[2:].replace("-", "_"): name for name, names in ALIASES.items() for a in names}
    values: dict[str, Any] = {}
    ignored: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for written, key, value in _flatten(_load_mapping(path), path):
        name = aliases.get(str(key).replace("-", "_"), str(key).replace("-", "_"))
        if name not in fields:
            close = difflib.get_close_matches(name, fields + list(aliases), n=3, cutoff=0.6)
            named = [c if c in fields else f"{c} (= {aliases[c]})" for c in close]
            hint = f"; did you mean {', '.join(named)}?" if close else "; see `agentrl train --print-config`"
            raise ValueError(f"--config {path}: unknown key {key!r}{hint}")
        _once(seen, name, written, path)
        (ignored if name in ignore else values)[name] = value
    if ignored:
        _check_ignored(path, ignored, values)
    return values


def _check_ignored(path: str | Path, ignored: dict[str, Any], used: dict[str, Any]) -> None:
    """Refuse the file if `agentrl train --config FILE` would, for its keys the reading command ignores (`ignored`;
    eval: the training keys; `used`: the file's other values): text values converted by the train flags' types
    (a file's `lr: 1e-6` is YAML text), then RLConfig's checks of the whole file as train reads it (the file's
    preset under it), so training keys valid together (`adv_mode: none` with `group_size: 1`) pass, and ones
    refused together (`group_size: 4` with `minibatches: 40`) do not. A check that names a setting the reading
    command uses is left to that command (its flags and defaults decide those).

    Raises:
        ValueError: naming the file, the setting and what it expected.
    """
    import re

    from agentrl.rl.config import RLConfig

    def refuse(why: str) -> None:
        raise ValueError(f"--config {path}: {why} (a key this command does not use, checked so that the file "
                         "stays valid for `agentrl train`)")

    flat = _as_train_reads(ignored, used, refuse)
    preset = flat.get("preset")
    base = preset_defaults(["--config", str(path), *(["--preset", preset] if isinstance(preset, str) else [])],
                           file_keys=flat)
    while True:
        try:
            RLConfig.from_flat({**base, **flat})
            return
        except (TypeError, ValueError) as e:
            m = re.match(r"RLConfig\.([\w*]+)", str(e))
            names = m.group(1).split("*") if m else []
            if names and all(n in ignored for n in names):
                refuse(str(e))
            if not any(n in flat and n not in ignored for n in names):
                return  # not the training keys' doing, or not attributable: the reading command's own checks
            for n in names:
                if n not in ignored:  # a setting the reading command uses: check the rest without it
                    flat.pop(n, None)
                    base.pop(n, None)


def _as_train_reads(ignored: dict[str, Any], used: dict[str, Any], refuse: Any) -> dict[str, Any]:
    """The file's values (`used` and `ignored`) as `agentrl train` reads them: text converted by its flag's type
    (argparse converts a text default with the type of the flag's first action: `--x`, not `--no-x`). A text the
    type refuses calls `refuse(why)` for an ignored key and is left out for a used one (its command names it)."""
    from agentrl.cli.args import convert_text_default
    from agentrl.cli.flags import rlconfig_parser

    actions: dict[str, Any] = {}
    for a in rlconfig_parser(add_help=False)._actions:
        if a.option_strings:
            actions.setdefault(a.dest, a)
    flat: dict[str, Any] = {}
    for name, value in {**used, **ignored}.items():
        try:
            flat[name] = value if name not in actions else convert_text_default(actions[name], value)
        except ValueError as e:
            if name in ignored:
                refuse(f"RLConfig.{name}: {e}")
    return flat


# flags that say where and with which seed a run goes, not what it trains: with only these, `agentrl train`
# is still the demo (`agentrl train --seed 1 --out runs/s1`, as results/README.md measures it); and
# --print-config, which prints what the same command without it would run
WHERE_FLAGS = ("--seed", "--out", "--resume", "--no-resume", "--print-config")


def preset_defaults(argv: list[str], file_keys: Iterable[str] = ()) -> dict[str, Any]:
    """The defaults `agentrl train ARGV` starts from: the values of `--preset NAME` (agentrl.rl.config.PRESETS),
    "demo" when ARGV and the --config file's keys (`file_keys`, flat names) set only WHERE_FLAGS (so
    `train --print-config` prints the demo that `train` runs, and a file holding only `seed: 3` is
    `train --seed 3`), else none ({}: RLConfig's own defaults). An unknown name gives {} here and
    argparse's "invalid choice" error when the flag is parsed."""
    from agentrl.rl.config import PRESETS

    given = [a.split("=", 1)[0].replace("_", "-") for a in argv if a.startswith("--")]
    given = [f for f in given if f != "--config"] + ["--" + k.replace("_", "-") for k in file_keys]
    name = last_flag_value(argv, "--preset")
    if name is None and all(f in WHERE_FLAGS for f in given):
        name = "demo"
    return {**PRESETS[name], "preset": name} if name in PRESETS else {}


def config_file_defaults(argv: list[str], *, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The defaults `--config FILE` in `argv` gives (read_config_file), {} without the flag."""
    path = config_path(argv)
    return read_config_file(path, ignore=ignore) if path else {}


def dump_config(cfg: Any, *, exclude: tuple[str, ...] = ()) -> str:
    """`cfg` (an RLConfig) as the YAML `--config` reads: every field by its flat name but `exclude`, section by
    section."""
    import yaml

    values = {k: v for k, v in cfg.to_flat().items() if k not in exclude}
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=False)


# Namespace entries that are not settings (never read from, nor written to, a config file)
_NOT_SETTINGS = ("func", "command", "config", "print_config")


def parser_settings(parser: Any) -> list[str]:
    """The settings of a command whose flags are not RLConfig's (smoke, sft): its flags' destinations."""
    return [a.dest for a in parser._actions if a.option_strings and a.dest not in (*_NOT_SETTINGS, "help")]


def read_parser_config_file(parser: Any, path: str | Path) -> dict[str, Any]:
    """The values of YAML file `path` for `parser`'s flags ({dest: value}; dashed keys read as underscored).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not YAML, not a mapping, a key that is none of the command's flags (named, with the
            close ones), a value its flag would refuse, or a setting given twice.
    """
    data = _load_mapping(path)
    names = parser_settings(parser)
    values: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; see `agentrl {parser.prog.split()[-1]} --print-config`"
            raise ValueError(f"--config {path}: unknown key {key!r}{hint}")
        _once(seen, name, str(key), path)
        values[name] = _flag_value(parser, name, value, f"--config {path}: {key}")
    return values


def _flag_value(parser: Any, dest: str, value: Any, where: str) -> Any:
    """`value` (a config file's, for the flag of `parser` storing to `dest`) checked and converted as the
    flag would be on the command line: its `type` (positive counts, numbers, true/false) and `choices`; a
    switch (`--random-op`) takes true or false; null only where the flag's default is null. argparse itself
    never checks a default, so without this a file's `episodes: -3` or `split: both` would run.

    Raises: ValueError: `where` and what the flag expects."""
    import argparse

    actions = [a for a in parser._actions if a.dest == dest and a.option_strings]
    action = next((a for a in actions if a.nargs != 0), actions[0])
    if value is None:
        if parser.get_default(dest) is None:
            return None
        raise ValueError(f"{where}: expected a value, got null")
    if action.nargs == 0:  # store_true / store_false switches; a JSON file's 1 / 0 as `--flag 1` reads it
        if type(value) is int and value in (0, 1):
            value = bool(value)
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(value, (list, dict)):
        raise ValueError(f"{where}: expected a single value, got {value!r}")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
        why = str(e) if isinstance(e, argparse.ArgumentTypeError) or "expected" in str(e) else (
            f"expected {getattr(action.type, '__name__', 'a value')}, got {value!r}")
        raise ValueError(f"{where}: {why}") from None
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{where}: expected one of {', '.join(map(repr, action.choices))}, got {value!r}")
    return converted


def add_parser_config_flags(parser: Any) -> None:
    """`--config FILE.yaml` / `--print-config` for a command whose settings are its own flags (smoke, sft):
    the file's values become the defaults (flags given override them); `print_config_and_exit` prints them."""
    add_config_flags(parser)

    def defaults(argv: list[str]) -> dict[str, Any]:
        path = config_path(argv)
        return read_parser_config_file(parser, path) if path else {}

    parser.defaults_from_argv = defaults


def dump_parser_config(parser: Any, args: Any) -> str:
    """The command's resolved settings (file and flags applied) as the YAML `--config` reads back."""
    import yaml

    return yaml.safe_dump({name: getattr(args, name) for name in parser_settings(parser) if hasattr(args, name)},
                          sort_keys=False, default_flow_style=False)

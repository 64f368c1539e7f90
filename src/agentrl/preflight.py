"""Up-front checks of output paths, input files and ports, raising clear ValueErrors. Not the writers.

A base module (the standard library only): the run folder (agentrl.rl.session), the SFT run, task and
results writers and the servers call it before they write or bind; the readers of user-supplied JSON
parse it with `loads_json`.

The CLI maps ValueError to a one-line "agentrl <cmd>: error: ..." (exit 2), so each message names the
flag, the path and what was expected instead of surfacing an OSError traceback from deep in a run.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def did_you_mean(value: str, options: Any) -> str:
    """" (did you mean 'x'?)" for the option of `options` closest to the mistyped `value`, or "" when none is close.
    Case and `_` / `-` are ignored first (`edit_menu`, `Quick`), then difflib's ratio (`trian`, `minmx`)."""
    import difflib

    opts = [str(o) for o in options if str(o)]
    norm = {o.lower().replace("_", "-"): o for o in opts}
    key = str(value).lower().replace("_", "-")
    close = [norm[key]] if key in norm else [norm[m] for m in difflib.get_close_matches(key, list(norm), n=1, cutoff=0.6)]
    return f" (did you mean {close[0]!r}?)" if close and close[0] != value else ""


def _existing_file_ancestor(path: Path) -> Path | None:
    """The first ancestor of `path` that exists and is not a directory (so `path` cannot be created)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _nearest_existing(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(path.anchor or ".")


def _reject_dot_names(path: Path, flag: str) -> None:
    if str(path) in ("", ".") or path.name in ("", ".", ".."):
        raise ValueError(f"{flag} {str(path)!r} names the current or a parent directory, not a new output; "
                         f"pass a path such as runs/NAME")


def archive_previous(out: str | os.PathLike, marker: str) -> Path | None:
    """Move an earlier run's output folder aside instead of overwriting it; returns where it went.

    `out` counts as an earlier run's output when it holds `marker` (e.g. "results.json"). The folder
    is renamed to `<out>-prev-<YYYYmmdd-HHMMSS>[-k]` beside it (never nested, never overwritten).
    """
    out = Path(out)
    if not (out / marker).exists():
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, k = out.with_name(f"{out.name}-prev-{stamp}"), 1
    while dest.exists():  # two archives in one second must not nest
        dest, k = out.with_name(f"{out.name}-prev-{stamp}-{k}"), k + 1
    shutil.move(str(out), str(dest))
    return dest


def check_output_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """Check, without creating anything, that `path` is or can become a writable output directory.

    Raises:
        ValueError: `path` is "." / ".." / empty, is not UTF-8 text (argv bytes that are not: the folder's path
            goes into its JSON files, which cannot hold it, so `agentrl sft` trained, then failed to save), is an
            existing file, lies under a file, or its nearest existing ancestor is not writable; the message names
            `flag` and `path`.
    """
    p = Path(path)
    _reject_dot_names(p, flag)
    if lone_surrogate_path(str(p)) is not None:
        shown = str(p)[:200].encode("utf-8", "backslashreplace").decode("utf-8")
        raise ValueError(f"{flag} '{shown}' is not UTF-8 text; pass a path of UTF-8 characters")
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is a file; expected a directory")
    blocker = _existing_file_ancestor(p)
    if blocker is not None:
        raise ValueError(f"{flag} {str(p)!r} is under the file {str(blocker)!r}, which is not a directory; "
                         "expected a directory path")
    base = _nearest_existing(p)
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r}: {str(base)!r} is not writable")
    return p


def prepare_output_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """`check_output_dir`, then create the directory; returns it as a Path.

    Raises:
        ValueError: as `check_output_dir`, or the directory cannot be created or written (permission,
            read-only or virtual file system); the message names `flag` and `path`.
    """
    p = check_output_dir(path, flag)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag} {str(p)!r}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r}: directory is not writable")
    return p


def refuse_special_file(path: str | os.PathLike, what: str) -> None:
    """Raise ValueError if `path` exists (links followed) and is neither a regular file nor a directory: a
    device such as /dev/null, a FIFO or a socket. The atomic writers write beside and rename over `path`, which
    would replace such a node with a regular file (as root, `--out /dev/null` used to replace /dev/null)."""
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        raise ValueError(f"{what} {str(p)!r} is not a regular file (a device, FIFO or socket); expected a path "
                         "where a file can be written")


def check_output_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """Check that `path` names a file that can be written (its parent is created); returns it as a Path.

    Nothing is written at `path` itself, and no temporary file is made anywhere.

    Raises:
        ValueError: `path` is "." / ".." / empty, an existing directory, a device, FIFO or socket
            (refuse_special_file), under a file, or its parent cannot be created or written; the message
            names `flag` and `path`.
    """
    p = Path(path)
    _reject_dot_names(p, flag)
    refuse_special_file(p, flag)
    if p.is_dir():
        if p.suffix:  # a file name (report.html, tasks.jsonl) taken by a directory
            raise ValueError(f"{flag} {str(p)!r} is a directory; expected a file there (move the directory aside)")
        raise ValueError(f"{flag} {str(p)!r} is a directory; expected a file path such as {str(p / 'tasks.jsonl')!r}")
    blocker = _existing_file_ancestor(p)
    if blocker is not None:
        raise ValueError(f"{flag} {str(p)!r} is under the file {str(blocker)!r}; expected a path in a directory")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag} {str(p)!r}: cannot create its directory ({e.strerror or e})") from None
    if not os.access(_nearest_existing(p.parent), os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r}: directory {str(p.parent)!r} is not writable")
    return p


def check_input_file(path: str | os.PathLike, kind: str, expected: str = "") -> Path:
    """Check that `path` names an existing regular file to read (`kind`: what it is, e.g. "task file"); returns
    it as a Path. `expected`: what it should hold, for the directory message (e.g. "a JSONL file").

    Raises:
        FileNotFoundError: nothing exists at `path` (or a broken link).
        ValueError: `path` is a directory (or another non-file), which is not "missing" and must not read as it.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise ValueError(f"{kind} {str(p)!r} is a directory; expected {expected or 'a file'}")
    if not p.exists():
        raise FileNotFoundError(f"{kind} {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"{kind} {str(p)!r} is not a regular file; expected {expected or 'a file'}")
    return p


# the UTF-8 byte order mark as text: what a user's file may start with (decode those with "utf-8-sig", or strip it)
BOM = "\ufeff"
BOM_BYTES = BOM.encode("utf-8")


def loads_json(text: str | bytes, where: str) -> Any:
    """json.loads of user-supplied JSON (a file's text or line, a request body) whose every failure is a ValueError.

    json.JSONDecodeError passes through unchanged, for the caller to word with its position. The two other ways
    json.loads fails on hostile input become a ValueError naming `where`: arrays/objects nested past Python's
    recursion limit (a RecursionError, which no caller catches as bad input) and an integer of more digits
    than sys.get_int_max_str_digits() (a ValueError without a position that advises a Python call). A UTF-8 byte
    order mark before the JSON (Windows editors write one) is skipped: json.loads refused a str that starts with it
    ("Unexpected UTF-8 BOM").
    """
    if isinstance(text, str):
        text = text.removeprefix(BOM)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply (arrays or objects deeper than Python's recursion "
                         f"limit, {sys.getrecursionlimit()})") from None
    except ValueError as e:
        if "integer string conversion" not in str(e):
            raise ValueError(f"{where}: not usable JSON ({e})") from None
        raise ValueError(f"{where}: JSON holds an integer of more than {sys.get_int_max_str_digits()} digits") \
            from None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_path_of(value: Any, test: Callable[[Any], bool], *, sep: str = ".", brackets: bool = True) -> str | None:
    """The path of the first item of decoded JSON `value` (keys included, document order) for which `test` is
    true, or None: keys joined by `sep` (each cut to 40 characters and made UTF-8, so the path can be shown),
    list indices as `[i]` (`brackets`) or as `sep`-joined parts (jsonschema's style); "" for `value` itself.
    Iterative: a value nested to just under the JSON reader's recursion limit must not overflow it here."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if test(item):
            return where
        if isinstance(item, dict):
            children = []
            for k, v in item.items():
                name = str(k)[:40].encode("utf-8", "backslashreplace").decode("utf-8")
                key = f"{where}{sep}{name}" if where else name
                children += [(k, key), (v, key)]
        elif isinstance(item, list):
            children = [(v, f"{where}[{i}]" if brackets else f"{where}{sep}{i}" if where else str(i))
                        for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))
    return None


def lone_surrogate_path(value: Any, *, dotted: bool = False) -> str | None:
    """Where in decoded JSON `value` the first string (key or value) holding a lone surrogate is, as
    `messages[0].content`-style text (`dotted`: `messages.0.content`, as jsonschema's paths; "" for `value`
    itself), or None if every string is UTF-8 text (json_path_of).

    JSON's `\\ud800`-`\\udfff` escapes, and undecodable bytes of a file name as os.walk gives them, read as lone
    surrogates: no tokenizer, sandbox file or strict JSON writer takes one."""
    return json_path_of(value, lambda x: isinstance(x, str) and _LONE_SURROGATE.search(x) is not None,
                        brackets=not dotted)


def replace_lone_surrogates(value: Any) -> Any:
    """Decoded JSON `value` with every lone surrogate in its strings (keys and values) replaced by U+FFFD,
    as a lossy UTF-8 decode would have it; `value` itself when it holds none."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {replace_lone_surrogates(k): replace_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_lone_surrogates(v) for v in value]
    return value


MAX_SEED = 1 << 62  # torch's generators take 64-bit seeds, and runs add offsets (task index, step) to theirs


def check_seed(seed: Any, name: str) -> int:
    """Return `seed` if it is an integer of magnitude below MAX_SEED (2**62), which every generator a run
    seeds with it or with it plus an offset takes (torch's: 64-bit).

    Raises:
        ValueError: not an int (a bool is not one), or too large; names `name` (e.g. "RLConfig.seed"). A
            larger seed used to get as far as torch.manual_seed, after the model had loaded, and end the
            command with "Overflow when unpacking long long".
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{name}: expected an integer seed, got {type(seed).__name__} {repr(seed)[:80]}")
    if not -MAX_SEED < seed < MAX_SEED:
        raise ValueError(f"{name}: expected a seed between -2**62 and 2**62 (torch seeds are 64-bit), "
                         f"got {str(seed)[:40]}{'...' if len(str(seed)) > 40 else ''}")
    return seed


def check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """Check that a server could listen on `host:port` now (port 0: any free port will do, so only the host
    is checked).

    Binds (SO_REUSEADDR, as uvicorn does) and closes a probe socket, so a port already taken, or a host that
    is not an address of this machine, is refused before a model is loaded, and before the command prints
    that it is listening.

    Raises:
        ValueError: the port is in use (names `flag` and the port), or the host is not an address of this
            machine (names --host), or the address cannot be bound here.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(f"--host {host!r}: not an address of this machine ({e.strerror or e})") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:  # the host, not the port: "pass another --port" misled
                raise ValueError(f"--host {host!r}: not an address of this machine ({e.strerror or e}); "
                                 "pass one of its own addresses, e.g. 127.0.0.1") from None
            why = "is in use (another server?)" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror or e})"
            raise ValueError(f"{flag} {port} on {host} {why}; pass another {flag}") from None

"""The coding-tools environment's Bash: parse a command line with shlex and serve the few commands we support.

Not a shell: no pipes, redirections, globbing or variables. `ls`, `cat`, `pwd` and `cd /repo` are
served from the in-memory repository; `python <file>.py`, `python -m pytest ...` and `pytest ...`
run in agentrl.sandbox on a copy of the repository, and files the run writes come back.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass

REPO_ROOT = "/repo"
SUPPORTED = "ls, cat, pwd, cd /repo, python <file>.py, python -m pytest [args], pytest [args], joined with &&"
_UNSUPPORTED_OPS = {"|", "||", ";", ">", ">>", "<", "&", "(", ")", "<<", "|&", ";;"}
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# Files a run may leave behind that we do not copy back into the agent's repository.
_IGNORED_PARTS = ("__pycache__", ".pytest_cache")


class BashError(ValueError):
    """A command line we cannot run (unsupported command or syntax); its text is shown to the agent."""


@dataclass(frozen=True)
class Command:
    """One simple command of a command line: `argv` (already shlex-split)."""

    argv: tuple[str, ...]

    @property
    def kind(self) -> str:
        """"cd" | "ls" | "cat" | "pwd" | "python" | "pytest" (raises BashError for anything else)."""
        prog = posixpath.basename(self.argv[0])
        if prog in ("cd", "ls", "cat", "pwd"):
            return prog
        if prog == "pytest" or prog.startswith("py.test"):
            return "pytest"
        if prog in ("python", "python3") or (prog.startswith("python3.") and prog[8:].isdigit()):
            if self.argv[1:3] == ("-m", "pytest"):
                return "pytest"
            if len(self.argv) >= 2 and self.argv[1].endswith(".py"):
                return "python"
            raise BashError(f"only `python <file>.py` and `python -m pytest` are supported, not {shlex.join(self.argv)!r}")
        raise BashError(f"command {prog!r} is not available here; supported: {SUPPORTED}")

    def sandbox_argv(self) -> list[str]:
        """argv for agentrl.sandbox: `python -m pytest ...` for every pytest form, else as written."""
        if self.kind == "pytest":
            rest = self.argv[3:] if self.argv[1:3] == ("-m", "pytest") else self.argv[1:]
            return ["python", "-m", "pytest", *rest]
        return ["python", *self.argv[1:]]


def check_printable(text: str, what: str) -> str:
    """Return `text` unless it holds a control character (NUL, newline, tab, ESC, DEL, ...).

    Such names cannot be passed to a process (NUL) or are never what a file name should be.

    Raises:
        BashError: naming `what`, the offending text and the first control character.
    """
    m = _CONTROL_CHARS.search(text)
    if m:
        raise BashError(f"{what} {text!r} contains the control character {m.group()!r}; "
                        "use printable characters only")
    return text


def parse_command_line(line: str) -> list[Command]:
    """Split `line` into simple commands joined by `&&`.

    Raises:
        BashError: empty line, a quoting error, any operator other than `&&`, or an argument holding
            a control character (e.g. NUL).
    """
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as e:
        raise BashError(f"could not parse the command: {e}") from None
    commands, current = [], []
    for tok in tokens:
        if tok == "&&":
            if not current:
                raise BashError("syntax error near `&&`")
            commands.append(Command(tuple(current)))
            current = []
        elif tok in _UNSUPPORTED_OPS or (tok and set(tok) <= set("|&;<>()")):
            raise BashError(f"shell operator {tok!r} is not supported; supported: {SUPPORTED}")
        else:
            current.append(check_printable(tok, "argument"))
    if not current:
        raise BashError("empty command" if not commands else "syntax error: command ends with `&&`")
    commands.append(Command(tuple(current)))
    for c in commands:
        _ = c.kind  # raises BashError early, before anything runs
    return commands


def repo_path(path: str, cwd: str = REPO_ROOT) -> str:
    """Normalise `path` (absolute or relative to `cwd`) to a path relative to /repo.

    Raises:
        BashError: the path leaves /repo or holds a control character (e.g. NUL).
    """
    check_printable(path, "path")
    full = posixpath.normpath(posixpath.join(cwd, path))
    if full == REPO_ROOT:
        return ""
    if not full.startswith(REPO_ROOT + "/"):
        raise BashError(f"{path}: outside the repository {REPO_ROOT}")
    return full[len(REPO_ROOT) + 1 :]


def list_dir(files: dict[str, str], args: tuple[str, ...]) -> str:
    """`ls [-flags] [paths]` over the in-memory repository (flags ignored; one name per line)."""
    targets = [a for a in args if not a.startswith("-")] or ["."]
    out = []
    for target in targets:
        rel = repo_path(target)
        if rel in files:
            out.append(target)
            continue
        prefix = rel + "/" if rel else ""
        names = sorted({p[len(prefix) :].split("/")[0] for p in files if p.startswith(prefix)})
        if not names and rel:
            raise BashError(f"ls: cannot access '{target}': No such file or directory")
        out.append((f"{target}:\n" if len(targets) > 1 else "") + "\n".join(names))
    return "\n".join(out)


def cat_files(files: dict[str, str], args: tuple[str, ...]) -> str:
    """`cat FILE...` over the in-memory repository."""
    if not args:
        raise BashError("cat: a file name is required (stdin is not available)")
    parts = []
    for a in args:
        rel = repo_path(a)
        if rel not in files:
            raise BashError(f"cat: {a}: No such file or directory")
        parts.append(files[rel])
    return "".join(parts)


def returned_files(files: dict[str, str] | None) -> dict[str, str]:
    """Files a sandboxed run wrote, minus caches (what goes back into the agent's repository)."""
    return {p: t for p, t in (files or {}).items() if not any(part in p.split("/") for part in _IGNORED_PARTS)}

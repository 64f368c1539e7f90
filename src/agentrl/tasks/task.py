"""The Task record: frozen data that every stage reads. Not behaviour: generators live in families/.

A test is a snippet of Python (usually one `assert`) run after `from <module> import *`
(module = `source_file` without `.py`) and after `test_setup`; it passes if it raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EditOp:
    """One authored edit of the edit-menu environment: replace `old` by `new` in the source file.

    `correct` is True for the op that fixes the bug; it is never shown to the agent (nor in the repr).
    """

    name: str
    old: str
    new: str
    correct: bool = field(default=False, repr=False)


@dataclass(frozen=True)
class Task:
    """One problem the agent must solve.

    Attributes:
        id: unique, stable id (e.g. "minmax-train-00017" or "mbpp-602").
        family: task family ("minmax", "range", ..., "mbpp", "humaneval").
        split: "train" | "heldout" (bug-fix gym) or the dataset's split name.
        files: the agent's repository at start, path -> text (e.g. {"fn.py": ..., "test_fn.py": ...}).
        entry: the function under test.
        source_file: the file that holds `entry` and is graded (e.g. "fn.py").
        public_tests: test snippets shown to the agent (rendered into the test file).
        hidden_tests: test snippets for the reward; never shown, never written into `files`.
        reference: full text of a known-good `source_file` (ceiling checks, `check_env`).
        test_setup: code run before each test (e.g. MBPP's test_imports); "" if none.
        edit_ops: the edit-menu's authored ops (empty for datasets without a menu).
        meta: free-form extras (difficulty, dataset ids, which scored tests were shown, ...).

    The repr leaves out what must never reach the agent (hidden_tests, reference, edit_ops), so a task
    printed in a log line or an error message (`str(partial(...))`, a traceback) carries none of it.
    """

    id: str
    family: str
    split: str
    files: dict[str, str]
    entry: str
    source_file: str
    public_tests: tuple[str, ...]
    hidden_tests: tuple[str, ...] = field(repr=False)
    reference: str = field(repr=False)
    test_setup: str = ""
    edit_ops: tuple[EditOp, ...] = field(default=(), repr=False)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def module(self) -> str:
        """Import name of `source_file` ("fn.py" -> "fn")."""
        return self.source_file.removesuffix(".py").replace("/", ".")

    @property
    def correct_op(self) -> EditOp | None:
        """The edit op that fixes the bug, or None for tasks without a menu."""
        return next((op for op in self.edit_ops if op.correct), None)

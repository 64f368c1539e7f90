"""The edit-menu environment: read the file, apply one authored edit op by name, run the public tests, submit.

Not a code-writing environment: the agent never writes code, it only picks an op from the task's menu
(see coding_tools.py for that). Behaviour follows the edit-menu lab write-up (docs/labs.md).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from agentrl.envs.base import ToolCall, ToolResult
from agentrl.envs.experts import call, pick_op
from agentrl.envs.grading import report_lines, source_job
from agentrl.envs.registry import EnvSpec
from agentrl.envs.toolenv import SourceGradedEnv, ToolMalformed, ToolRejected, ToolSpec, object_schema
from agentrl.tasks.task import Task

SYSTEM_PROMPT = (
    "You are fixing a bug in a small Python function. You act only through the tools: read the file, "
    "apply one edit from the menu by its name, run the public tests, and submit. You may apply at most "
    "{max_edits} edit(s). The session ends when you submit, when you reply without a tool call, or after "
    "{max_turns} turns."
)


def seed_for(task: Task, seed: int | None) -> int:
    """The RNG seed of an episode: `seed` if given, else a stable hash of the task id (sha256)."""
    if seed is not None:
        return seed
    return int.from_bytes(hashlib.sha256(task.id.encode()).digest()[:8], "big")


class EditMenuEnv(SourceGradedEnv):
    """Edit-menu episodes over bug-fix tasks with authored `edit_ops`.

    Tools: `read_file()`, `edit(op)`, `run_tests()`, `submit()`. The menu (op names only, order
    shuffled under the episode seed so position reveals nothing) is shown in the user message; which
    op is correct is never shown. An unknown op name is malformed and uses up the turn. Reward 1.0
    iff the final source passes every hidden test (fraction in `stats()["hidden_pass_fraction"]`).

    Args:
        max_turns: assistant turns per episode (default 6).
        max_edits: successful edits allowed per episode (default 1).
        sandbox: an agentrl.sandbox.Sandbox (shared for pooled grading); default: a new one.
        rules: ToolEnv's max_calls_per_turn (default 4) and max_observation_chars (default 4000).
    """

    name = "edit-menu"

    def __init__(self, max_turns: int = 6, max_edits: int = 1, sandbox: Any = None, **rules: Any):
        super().__init__(max_turns=max_turns, **rules)
        self.max_edits = max_edits
        self._sandbox = sandbox
        self.source = ""
        self.menu: list[str] = []
        self._hidden_fraction = 0.0

    def _specs(self) -> list[ToolSpec]:
        op_names = list(self.menu) if self.menu else []
        op_param = {"type": "string", "description": "Name of an edit from the menu."}
        if op_names:
            op_param["enum"] = op_names
        return [
            ToolSpec("read_file", "Show the source file with line numbers.", object_schema({}), self._read),
            ToolSpec("edit", "Apply one edit from the menu, by name.", object_schema({"op": op_param}, ("op",)),
                     self._edit),
            ToolSpec("run_tests", "Run the public tests on the current source.", object_schema({}), self._test),
            ToolSpec("submit", "Submit the current source and end the session.", object_schema({}), self._submit),
        ]

    def _stat_names(self) -> tuple[str, ...]:
        return ("reads", "edits", "edits_over_limit", "unknown_ops", "test_runs", "submits", "sandbox_errors")

    def _reset_episode(self, task: Task, seed: int | None) -> tuple[str, str]:
        if not task.edit_ops:
            raise ValueError(f"task {task.id!r} has no edit_ops; the edit-menu environment needs a menu")
        if task.source_file not in task.files:
            raise ValueError(f"task {task.id!r}: source_file {task.source_file!r} is not in task.files")
        self.source = task.files[task.source_file]
        self.menu = [op.name for op in task.edit_ops]
        random.Random(seed_for(task, seed)).shuffle(self.menu)
        self._specs_by_name = {s.name: s for s in self._specs()}
        self._hidden_fraction = 0.0
        system = SYSTEM_PROMPT.format(max_edits=self.max_edits, max_turns=self.max_turns)
        user = (
            f"The function `{task.entry}` in `{task.source_file}` has a bug. "
            f"Edit menu: {', '.join(self.menu)}."
        )
        return system, user

    def _run_call(self, call: ToolCall) -> ToolResult:
        """As ToolEnv, but an op name off the menu (rejected by the schema's enum) is counted in unknown_ops."""
        result = super()._run_call(call)
        op = call.arguments.get("op") if isinstance(call.arguments, dict) else None
        if result.status == "malformed" and call.name == "edit" and isinstance(op, str) and op not in self.menu:
            self._bump("unknown_ops")
        return result

    # -- tools ------------------------------------------------------------------------------------
    def _read(self) -> str:
        self._bump("reads")
        return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(self.source.split("\n"), 1))

    def _edit(self, op: str) -> str:
        assert self.task is not None
        by_name = {o.name: o for o in self.task.edit_ops}
        if op not in by_name:  # unreachable through the schema's enum; kept for a menu-less schema
            raise ToolMalformed(f"unknown edit {op!r}; the menu is: {', '.join(self.menu)}.")
        if self._counts["edits"] >= self.max_edits:
            self._bump("edits_over_limit")
            raise ToolRejected(f"the edit limit ({self.max_edits}) is used up; run the tests or submit.")
        edit = by_name[op]
        if not edit.old or self.source.count(edit.old) != 1:  # ops apply to exactly one occurrence
            raise ToolRejected(f"edit {op!r} does not apply to the current source.")
        self.source = self.source.replace(edit.old, edit.new)
        self._bump("edits")
        return f"Applied edit {op!r}."

    def _test(self) -> str:
        assert self.task is not None
        self._bump("test_runs")
        tests = self.task.public_tests
        return report_lines(self.sandbox.run_tests(source_job(self.task, self.source, tests)), tests)

    def _submit(self) -> str:
        self._bump("submits")
        self._end("submitted")
        return "Submitted."

    def _score(self) -> float:
        return self._grade_source(self.source)


def edit_menu_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """The scripted expert: read -> edit(op) -> run_tests -> submit, with the correct op (or a random one)."""
    op = pick_op(task, rng, random_op)
    return [[call("read_file")], [call("edit", op=op.name)], [call("run_tests")], [call("submit")]]


ENV_SPEC = EnvSpec(
    name="edit-menu", cls=EditMenuEnv, expert=edit_menu_turns, random_op_expert=True,
    summary="read the file, apply one edit from a menu by name, run the public tests, submit",
    task_sources="bug-fix tasks with an edit menu (--tasks bugfix or a bug-fix JSONL)",
    accepts=lambda task: bool(task.edit_ops) and task.source_file in task.files,  # what _reset_episode needs
    end_reasons=("submitted", "final_answer", "out_of_turns"),
    config_kwargs=lambda cfg: {"max_edits": cfg.max_edits},
)

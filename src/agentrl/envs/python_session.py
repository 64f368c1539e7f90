"""The python-session environment (MBPP, HumanEval): a `run_python` tool over a persistent sandboxed session.

Not the grader's internals (session_grader.py) and not the dataset loaders (agentrl.tasks.mbpp,
agentrl.tasks.humaneval). The environment owns the reward: the fraction of hidden tests that pass,
graded in a fresh sandbox process from the definitions in the agent's cells (never the live session).
"""

from __future__ import annotations

import ast
import random
import sys
from typing import Any

from agentrl.envs.base import ToolCall
from agentrl.envs.experts import call
from agentrl.envs.grading import grade, is_sandbox_failure
from agentrl.envs.registry import EnvSpec
from agentrl.envs.session_grader import hardened_job
from agentrl.envs.session_grader import parse_quietly as _parse
from agentrl.envs.toolenv import DEFAULT_MAX_CALLS_PER_TURN, ToolEnv, ToolRejected, ToolSpec, object_schema
from agentrl.sandbox.api import LIMIT_STATS, TestJob
from agentrl.tasks.task import Task

SYSTEM_PROMPT = (
    "You are an expert Python programmer. You have a run_python tool that executes code in a persistent "
    "Python session: definitions and variables persist between calls. Write the requested function, test "
    "it with run_python, and fix it if needed. When you are done, reply without a tool call."
)
# Modules that start processes, open sockets or load native code; everything else in the stdlib is allowed.
DENIED_MODULES = frozenset({"subprocess", "socket", "multiprocessing", "ctypes", "pty", "signal", "_posixsubprocess"})
DEFAULT_ALLOWED_IMPORTS = frozenset(sys.stdlib_module_names) - DENIED_MODULES


def imported_modules(code: str) -> set[str]:
    """Top-level names of modules that `code` imports statically (`import a.b` -> "a"); {} if it does not parse."""
    try:
        tree = _parse(code)
    except SyntaxError:
        return set()
    mods: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            mods.add(n.module.split(".")[0])
    return mods


def render_prompt(task: Task) -> str:
    """The user message: the problem text and the example test(s) in `task.public_tests`."""
    text = task.meta.get("prompt_text") or task.files.get("prompt.md") or f"Write the function `{task.entry}`."
    shown = "\n".join(task.public_tests)
    noun = "this test" if len(task.public_tests) == 1 else "these tests"
    if not shown:
        return text
    return f"{text}\nYour code should pass {noun}:\n\n{shown}\n\nName the function `{task.entry}`."


class PythonSessionEnv(ToolEnv):
    """`run_python(code)` in one persistent sandbox session per episode; reward = hidden-test fraction.

    Each cell's imports are checked (statically) against `allowed_imports` before it runs; a cell
    importing anything else fails without running. Cells lost to a session restart (timeout,
    crash) are dropped from grading as they are from the session.

    Args:
        max_turns: assistant turns per episode (default 6).
        max_calls_per_turn: run_python calls run per turn (default 4).
        sandbox: an agentrl.sandbox.Sandbox (shared for pooled grading); default: a new one.
        allowed_imports: importable top-level modules; default: the standard library minus
            DENIED_MODULES (so no good reference solution fails for lack of a stdlib module).
        cell_timeout_s: wall-clock limit of one run_python call, seconds.
        rules: ToolEnv's max_observation_chars (default 4000).
    """

    name = "python-session"

    def __init__(self, max_turns: int = 6, max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
                 sandbox: Any = None, allowed_imports: frozenset[str] | set[str] | None = None,
                 cell_timeout_s: float = 10.0, **rules: Any):
        super().__init__(max_turns=max_turns, max_calls_per_turn=max_calls_per_turn, **rules)
        self._sandbox = sandbox
        self.allowed_imports = frozenset(DEFAULT_ALLOWED_IMPORTS if allowed_imports is None else allowed_imports)
        self.cell_timeout_s = cell_timeout_s
        self.cells: list[str] = []
        self._session: Any = None
        self._per_test: tuple[bool, ...] = ()

    def _specs(self) -> list[ToolSpec]:
        code = {"type": "string", "description": "Python code to run in the persistent session."}
        return [ToolSpec("run_python", "Run Python code in a persistent session; returns stdout and stderr.",
                         object_schema({"code": code}, ("code",)), self._run_python)]

    def _stat_names(self) -> tuple[str, ...]:
        return ("cells", "cell_errors", "cell_timeouts", "session_restarts", "blocked_imports", "sandbox_errors",
                *LIMIT_STATS.values())

    def _reset_episode(self, task: Task, seed: int | None) -> tuple[str, str]:
        self._close_session()
        self.cells = []
        self._per_test = ()
        return SYSTEM_PROMPT, render_prompt(task)

    def _run_python(self, code: str) -> str:
        self._bump("cells")
        blocked = sorted(imported_modules(code) - self.allowed_imports)
        if blocked:
            self._bump("blocked_imports")
            raise ToolRejected(f"import of {', '.join(blocked)} is not allowed in this session")
        if self._session is None:
            self._session = self.sandbox.session()
        out = self._session.execute(code, timeout_s=self.cell_timeout_s)
        killed = any(h.kind in ("cpu", "wall") for h in out.limits_hit)  # a time limit stopped the worker
        lost = out.timed_out or killed or out.error is not None  # killed mid-cell: nothing of it stays
        if out.restarted:
            self._bump("session_restarts")
            self.cells = []  # every earlier definition is gone from the session, so from grading too
        for hit in out.limits_hit:
            self._bump(hit.stat)
        if out.timed_out or killed:
            self._bump("cell_timeouts")
        if not lost:
            self.cells.append(code)
        if lost or "Traceback (most recent call last)" in out.stderr:
            self._bump("cell_errors")
        return _format_cell(out, self.cell_timeout_s)

    def grading_job(self, cells: list[str] | None = None) -> TestJob:
        """The hardened TestJob for `cells` (default: this episode's cells) against the hidden tests."""
        assert self.task is not None
        task = self.task
        return hardened_job(self.cells if cells is None else cells, task.module, task.hidden_tests,
                            task.test_setup, extra_names=(task.entry,), reference=task.reference or None)

    def _score(self) -> float | None:
        report = grade(self.sandbox, self.grading_job())
        self._counts["sandbox_errors"] = int(is_sandbox_failure(report))
        self._per_test = tuple(o.status == "pass" for o in report.outcomes) if not report.error else ()
        self._close_session()
        return None if is_sandbox_failure(report) else report.fraction

    def stats(self) -> dict[str, float]:
        out = super().stats()
        if self.done:
            self.reward()
            shown = set(self.task.meta.get("shown_test_indices", ()))
            n = max(len(self.task.hidden_tests), 1)
            out["reward_from_shown_tests"] = sum(p for i, p in enumerate(self._per_test) if i in shown) / n
        return out

    def _close_session(self) -> None:
        if self._session is not None:
            try:
                self._session.close()
            finally:
                self._session = None

    def close(self) -> None:
        """Close the live session (if any); safe to call twice."""
        self._close_session()


def _format_cell(out: Any, timeout_s: float) -> str:
    """stdout, stderr (the sandbox already notes restarts there), then each limit the cell reached in the
    sandbox's one wording ("[stopped: CPU-time limit of 5 s reached]"), or a sandbox-error note."""
    parts = [out.stdout.rstrip("\n"), out.stderr.rstrip("\n")]
    hits = tuple(getattr(out, "limits_hit", ()))
    parts += [h.notice() for h in hits]
    if out.timed_out and not any(h.kind == "wall" for h in hits):
        parts.append(f"[stopped: wall-clock limit of {timeout_s:g} s reached]")
    if out.error:
        parts.append(f"[sandbox error: {out.error}]")
    return "\n".join(p for p in parts if p) or "(no output)"


def python_session_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """The scripted expert: define the reference solution, then run the shown example test(s) on it."""
    shown = "\n".join(task.public_tests)
    turns = [[call("run_python", code=task.reference)]]
    if shown:
        turns.append([call("run_python", code=f"{task.test_setup}\n{shown}\nprint('example test passed')".lstrip())])
    return turns


ENV_SPEC = EnvSpec(
    name="python-session", cls=PythonSessionEnv, expert=python_session_turns,
    summary="run_python in a persistent sandboxed session; reward = fraction of hidden tests passed",
    task_sources="function-writing problems (--tasks mbpp | humaneval, or bugfix)",
    accepts=lambda task: task.family != "wordle",
    default_tasks="mbpp",
    end_reasons=("final_answer", "out_of_turns"),
)

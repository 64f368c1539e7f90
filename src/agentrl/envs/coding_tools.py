"""The coding-tools environment: an in-memory /repo edited through Read, Edit, Write and Bash.

Tool names and parameters follow Claude Code's tools reference; the descriptions are our own. Not
a general shell: Bash supports the commands listed in bash_tool.py, and everything that runs
model-written code goes through agentrl.sandbox.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

from agentrl.envs.base import StepResult, ToolCall
from agentrl.envs.bash_tool import (
    REPO_ROOT,
    BashError,
    cat_files,
    list_dir,
    parse_command_line,
    repo_path,
    returned_files,
)
from agentrl.envs.experts import call, candidate_line_edits
from agentrl.envs.registry import EnvSpec
from agentrl.envs.toolenv import (
    DEFAULT_MAX_CALLS_PER_TURN,
    SourceGradedEnv,
    ToolRejected,
    ToolSpec,
    object_schema,
)
from agentrl.sandbox.api import LIMIT_STATS, SandboxLimits
from agentrl.sandbox.process import MAX_READ_BACK_BYTES, MAX_READ_BACK_FILES, file_path_problem
from agentrl.tasks.task import Task

SYSTEM_PROMPT = (
    "You are a coding agent working in a Python repository at /repo. Use the tools to inspect and change "
    "files and to run commands. You may make several tool calls in one turn; they run in order. "
    "A reply without a tool call is your final answer and ends the session."
)
READ_LIMIT_LINES = 2000
MAX_BASH_COMMAND_CHARS = 16384  # longer Bash commands are malformed (schema): bounds shlex work per call
STAT_NAMES = (
    "reads", "edits", "writes", "bash_calls", "test_runs",
    "edit_before_read", "edit_missing_old_string", "edit_identical_strings", "edit_not_unique",
    "write_before_read", "write_overwrites_source", "write_overwrites_test", "write_creates_file",
    "claims_tests_pass", "sandbox_errors", *LIMIT_STATS.values(),
)
_NEG = re.compile(r"\b(?:not|never|no longer|fail\w*|cannot|unable|unfortunately)\b|n't", re.I)
_CLAIM = re.compile(r"\btests?\b[^.!?\n]{0,40}?\b(?:pass(?:es|ed|ing)?|succeed\w*|green)\b", re.I)


def claims_tests_pass(text: str) -> bool:
    """True if `text` says the tests pass ("all tests pass", "the tests are now passing", "tests: green").

    Sentence-level: some sentence mentions test(s) followed within 40 characters by pass/succeed/green
    and holds no negation or failure word anywhere (not, n't, never, fail..., cannot, unable).
    """
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text or ""):
        if _CLAIM.search(sentence) and not _NEG.search(sentence):
            return True
    return False


def public_test_name(task: Task) -> str:
    """The shown test file's name in the task's repository: test_<module>.py (module's last component)."""
    return f"test_{task.module.split('.')[-1]}.py"


def public_test_file(task: Task) -> str:
    """test_<module>.py with one pytest function per public test (used when the task ships none)."""
    body = [f"from {task.module} import *", ""]
    if task.test_setup.strip():
        body += [task.test_setup.rstrip(), ""]
    for i, test in enumerate(task.public_tests, 1):
        body += [f"def test_{i}():", *("    " + line for line in test.splitlines()), "", ""]
    return "\n".join(body).rstrip() + "\n"


class CodingToolsEnv(SourceGradedEnv):
    """Read/Edit/Write/Bash over an in-memory repository holding `<fn>.py` and `test_<fn>.py`.

    Rules: a file must be Read before an Edit or an overwriting Write; an Edit fails when old_string
    is absent, equals new_string, or is not unique without replace_all. Malformed calls (bad JSON,
    unknown tool, schema mismatch) and failed calls both return an error and are counted apart.
    Reward 1.0 iff the final `<fn>.py` passes every hidden test; the fraction is in
    `stats()["hidden_pass_fraction"]`.

    Args:
        max_turns: assistant turns per episode (default 6).
        max_calls_per_turn: tool calls run per turn (default 4; extra calls fail unrun).
        sandbox: an agentrl.sandbox.Sandbox (shared for pooled grading); default: a new one.
        rules: ToolEnv's max_observation_chars (default 4000).
    """

    name = "coding-tools"
    hardened_grading = True  # the model writes the source freely (SourceGradedEnv.hardened_grading)

    def __init__(self, max_turns: int = 6, max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
                 sandbox: Any = None, **rules: Any):
        super().__init__(max_turns=max_turns, max_calls_per_turn=max_calls_per_turn, **rules)
        self._sandbox = sandbox
        self.files: dict[str, str] = {}
        self._read: set[str] = set()
        self._hidden_fraction = 0.0

    def _specs(self) -> list[ToolSpec]:
        path = {"type": "string", "description": "Absolute path of the file, e.g. /repo/name.py."}
        text = {"type": "string"}
        return [
            ToolSpec("Read", "Read a file; lines come numbered.",
                     object_schema({"file_path": path,
                                    "offset": {"type": "integer", "description": "First line to read, 1-based."},
                                    "limit": {"type": "integer", "description": "How many lines to read."}},
                                   ("file_path",)),
                     self._tool_read, constraints={"offset": {"minimum": 1}, "limit": {"minimum": 1}}),
            ToolSpec("Edit", "Replace old_string by new_string in a file you have read. old_string must occur "
                     "exactly once unless replace_all is true.",
                     object_schema({"file_path": path,
                                    "old_string": {**text, "description": "The exact text to replace."},
                                    "new_string": {**text, "description": "The text to put in its place."},
                                    "replace_all": {"type": "boolean",
                                                    "description": "Replace every occurrence (default false)."}},
                                   ("file_path", "old_string", "new_string")), self._tool_edit),
            ToolSpec("Write", "Write a whole file (creates it, or overwrites a file you have read).",
                     object_schema({"file_path": path, "content": {**text, "description": "The whole new file."}},
                                   ("file_path", "content")),
                     self._tool_write),
            ToolSpec("Bash", "Run a command in /repo (python, pytest, ls, cat).",
                     object_schema({"command": {**text, "description": "The command line to run."},
                                    "timeout": {"type": "integer", "description": "Time limit in milliseconds."}},
                                   ("command",)),
                     self._tool_bash, constraints={"command": {"maxLength": MAX_BASH_COMMAND_CHARS},
                                                   "timeout": {"minimum": 1}}),
        ]

    def _stat_names(self) -> tuple[str, ...]:
        return STAT_NAMES

    def _reset_episode(self, task: Task, seed: int | None) -> tuple[str, str]:
        if task.source_file not in task.files:
            raise ValueError(f"task {task.id!r}: source_file {task.source_file!r} is not in task.files")
        self.files = dict(task.files)
        self.test_file = public_test_name(task)
        self.files.setdefault(self.test_file, public_test_file(task))
        self._read = set()
        self._hidden_fraction = 0.0
        user = (
            f"The function `{task.entry}` in {REPO_ROOT}/{task.source_file} has a bug. Fix it so that it "
            f"behaves correctly. Tests are in {REPO_ROOT}/{self.test_file}."
        )
        return SYSTEM_PROMPT, user

    # -- tools ------------------------------------------------------------------------------------
    def _path(self, file_path: str) -> str:
        if not file_path.startswith("/"):
            raise ToolRejected(f"file_path must be absolute (e.g. {REPO_ROOT}/{self.task.source_file}), got {file_path!r}")
        try:
            rel = repo_path(file_path)
        except BashError as e:
            raise ToolRejected(str(e)) from None
        if not rel:
            raise ToolRejected(f"{file_path} is a directory")
        return rel

    def _tool_read(self, file_path: str, offset: int = 1, limit: int = READ_LIMIT_LINES) -> str:
        self._bump("reads")
        rel = self._path(file_path)
        if rel not in self.files:
            raise ToolRejected(f"file does not exist: {file_path}")
        self._read.add(rel)
        lines = self.files[rel].splitlines()
        if not lines:
            return "(the file is empty)"
        if offset > len(lines):
            raise ToolRejected(f"offset {offset} is past the end of the file ({len(lines)} lines)")
        chosen = lines[offset - 1 : offset - 1 + limit]
        return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(chosen, offset))

    def _tool_edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        self._bump("edits")
        rel = self._path(file_path)
        if rel not in self.files:
            raise ToolRejected(f"file does not exist: {file_path}")
        if old_string == new_string:
            raise ToolRejected("old_string and new_string are identical; nothing to change", "edit_identical_strings")
        if rel not in self._read:
            raise ToolRejected(f"read {file_path} with Read before editing it", "edit_before_read")
        text = self.files[rel]
        n = text.count(old_string) if old_string else 0
        if n == 0:
            raise ToolRejected(f"old_string was not found in {file_path}", "edit_missing_old_string")
        if n > 1 and not replace_all:
            raise ToolRejected(f"old_string occurs {n} times in {file_path}; give more context or set replace_all",
                               "edit_not_unique")
        new_text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        self._storable(file_path, rel, new_text)
        self.files[rel] = new_text
        return f"Edited {file_path} ({n if replace_all else 1} replacement{'s' if replace_all and n > 1 else ''})."

    def _clash(self, rel: str) -> str | None:
        """Why the repository cannot hold a file at `rel` beside its files (None: it can): one of its
        folders is a file here, or it is a folder here."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.files:
                return f"{REPO_ROOT}/{'/'.join(parts[:i])} is a file, not a directory"
        if any(p.startswith(rel + "/") for p in self.files):
            return f"{REPO_ROOT}/{rel} is a directory"
        return None

    def _storable(self, file_path: str, rel: str, text: str) -> None:
        """Raise ToolRejected unless the repository can hold `text` at `rel` and hand it to a sandboxed run:
        a path the sandbox takes (file_path_problem: not too long or deep, UTF-8), no file where a folder
        of it must be (or the reverse), text that encodes as UTF-8. Else every later Bash run would fail."""
        why = file_path_problem(rel)
        if why:
            raise ToolRejected(f"{file_path[:200]}: {why}")
        clash = self._clash(rel)
        if clash:
            raise ToolRejected(f"{file_path[:200]}: {clash}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ToolRejected(f"the new text of {file_path[:200]} is not encodable as UTF-8 ({e.reason} at "
                               f"position {e.start})") from None

    def _tool_write(self, file_path: str, content: str) -> str:
        self._bump("writes")
        rel = self._path(file_path)
        self._storable(file_path, rel, content)
        exists = rel in self.files
        if exists and rel not in self._read:
            raise ToolRejected(f"{file_path} exists; read it with Read before overwriting it", "write_before_read")
        if not exists:
            self._bump("write_creates_file")
        elif rel == self.task.source_file:
            self._bump("write_overwrites_source")
        elif posixpath_basename(rel).startswith("test_") or rel == self.test_file:
            self._bump("write_overwrites_test")
        self.files[rel] = content
        self._read.add(rel)
        return f"{'Overwrote' if exists else 'Created'} {file_path} ({len(content.splitlines())} lines)."

    def _tool_bash(self, command: str, timeout: int | None = None) -> str:
        self._bump("bash_calls")
        try:
            commands = parse_command_line(command)
        except BashError as e:
            raise ToolRejected(str(e)) from None
        cwd, outputs, rejected = REPO_ROOT, [], False
        # One wall-clock limit for the whole command line, shared by its commands: each sandboxed run had
        # its own, so `python s.py && python s.py && ...` (a 9 s sleep, ~1,000 times within the command's
        # length cap) held one call, and the trainer, for hours.
        budget_s = self._bash_budget_s(timeout)
        deadline = time.monotonic() + budget_s
        for cmd in commands:
            left_ms = round((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                self._bump(LIMIT_STATS["wall"])
                outputs.append(f"[stopped: the command line's wall-clock limit of {budget_s:g} s reached; "
                               "later commands did not run]")
                break
            try:
                text, ok, cwd = self._run_command(cmd, cwd, left_ms)
            except BashError as e:  # refused by our Bash or by the sandbox, or the sandbox could not run it
                outputs.append(str(e))
                rejected = True
                break
            outputs.append(text)
            if not ok:
                break
        out = "\n".join(o for o in outputs if o) or "(no output)"
        if rejected:  # a command that never ran is a failed call, not a run with output
            raise ToolRejected(out)
        return out

    def _bash_budget_s(self, timeout_ms: int | None) -> float:
        """Seconds one Bash call may take in all: the sandbox's per-run wall-clock limit (SandboxLimits' default
        before a default sandbox exists, or for a sandbox that states none), lowered by `timeout`."""
        limit = float(getattr(getattr(self._sandbox, "limits", None), "timeout_s", None) or SandboxLimits.timeout_s)
        # Compared in milliseconds before dividing: a `timeout` of 400 digits is a valid integer that no float holds.
        return limit if timeout_ms is None or timeout_ms >= limit * 1000 else timeout_ms / 1000.0

    def _take_back(self, written: dict[str, str], deleted: tuple[str, ...] = ()) -> int:
        """Merge what a sandboxed run did into the repository: the files it removed (`deleted`, RunResult.deleted)
        leave it, the text files it wrote or changed come in. A file under a folder that replaced a repository
        file (or the reverse) stays out, so both are never handed to a later run, which the sandbox refuses; so
        does a file past the repository's size (what one run hands back: MAX_READ_BACK_FILES files and
        MAX_READ_BACK_BYTES bytes), or each Bash call could add as much again. Returns the files kept out
        for size."""
        for path in deleted:
            self.files.pop(path, None)
            self._read.discard(path)
        size, over = sum(len(t.encode("utf-8")) for t in self.files.values()), 0
        for path, text in written.items():
            if path not in self.files and self._clash(path):
                continue
            old = self.files.get(path)
            if old != text:
                grown = size + len(text.encode("utf-8")) - len((old or "").encode("utf-8"))
                if (old is None and len(self.files) >= MAX_READ_BACK_FILES) or grown > MAX_READ_BACK_BYTES:
                    over += 1
                    continue
                size = grown
                self.files[path] = text
                self._read.discard(path)  # changed behind the agent's back: read it again before editing
        return over

    def _run_command(self, cmd: Any, cwd: str, timeout_ms: int | None) -> tuple[str, bool, str]:
        """Run one simple command; returns (output, succeeded, new cwd)."""
        kind = cmd.kind
        if kind == "cd":
            target = cmd.argv[1] if len(cmd.argv) > 1 else REPO_ROOT
            if repo_path(target, cwd) != "":
                raise BashError(f"cd: {target}: only {REPO_ROOT} is available")
            return "", True, REPO_ROOT
        if kind == "pwd":
            return REPO_ROOT, True, cwd
        if kind == "ls":
            return list_dir(self.files, cmd.argv[1:]), True, cwd
        if kind == "cat":
            return cat_files(self.files, cmd.argv[1:]), True, cwd
        if kind == "pytest" or any(posixpath_basename(a).startswith("test_") for a in cmd.argv[1:2]):
            self._bump("test_runs")
        timeout_s = None if timeout_ms is None else timeout_ms / 1000.0
        try:
            result = self.sandbox.run(dict(self.files), cmd.sandbox_argv(), timeout_s=timeout_s, return_files=True)
        except ValueError as e:  # the sandbox refuses the argv (e.g. a script outside the work dir)
            raise BashError(str(e)) from None
        over = self._take_back(returned_files(result.files), result.deleted)
        for hit in result.limits_hit:
            self._bump(hit.stat)
        if result.error and not result.timed_out:  # the sandbox could not run the command at all
            raise BashError(_format_run(result))
        # new files the run did not hand back at all (one run hands back as much as the repository holds)
        over += sum(path not in self.files for path in result.files_left_out)
        notice = (f"\n[{over} files the command wrote were not kept: the repository holds at most "
                  f"{MAX_READ_BACK_FILES} files and {MAX_READ_BACK_BYTES >> 20} MiB]") if over else ""
        return _format_run(result) + notice, result.exit_code == 0 and not result.timed_out, cwd

    def _score(self) -> float:
        assert self.task is not None
        return self._grade_source(self.files.get(self.task.source_file))

    def final_answer(self, text: str) -> StepResult:
        """Record the final answer and whether it claims the tests pass (stat claims_tests_pass)."""
        if self.task is not None and not self.done and claims_tests_pass(text):
            self._bump("claims_tests_pass")
        return super().final_answer(text)


def posixpath_basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _format_run(result: Any) -> str:
    """Bash output: stdout, stderr, then each limit the command reached in the sandbox's one wording
    ("[stopped: CPU-time limit of 5 s reached]"), else a sandbox error or a non-zero exit code."""
    parts = [result.stdout.rstrip("\n"), result.stderr.rstrip("\n")]
    hits = tuple(getattr(result, "limits_hit", ()))
    parts += [h.notice() for h in hits]
    if not any(h.stopped for h in hits):
        if result.error:
            parts.append(f"[sandbox error: {result.error}]")
        elif result.exit_code not in (0, None):
            parts.append(f"[exit code {result.exit_code}]")
    return "\n".join(p for p in parts if p)


def coding_tools_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """The scripted expert: Read -> one whole-line Edit -> pytest; the edit from the correct op (or a
    random candidate). Tasks without edit ops (datasets) get Read -> Write(reference) -> pytest."""
    path = f"{REPO_ROOT}/{task.source_file}"
    test_file = public_test_name(task)
    test = [call("Bash", command=f"cd {REPO_ROOT} && python -m pytest -q {test_file}")]
    if not task.edit_ops:
        return [[call("Read", file_path=path)], [call("Write", file_path=path, content=task.reference)], test]
    candidates = candidate_line_edits(task)
    if random_op:
        if not candidates:
            raise ValueError(f"task {task.id!r}: no edit op applies as a unique line edit")
        _, (old, new) = rng.choice(candidates)
    else:
        correct = task.correct_op
        match = [e for name, e in candidates if correct is not None and name == correct.name]
        if not match:
            raise ValueError(f"task {task.id!r}: the correct op does not apply as a unique line edit")
        old, new = match[0]
    return [[call("Read", file_path=path)], [call("Edit", file_path=path, old_string=old, new_string=new)], test]


ENV_SPEC = EnvSpec(
    name="coding-tools", cls=CodingToolsEnv, expert=coding_tools_turns, random_op_expert=True,
    summary="Read/Edit/Write/Bash over an in-memory repository (Claude Code's tools)",
    task_sources="bug-fix tasks with repository files (--tasks bugfix or a bug-fix JSONL)",
    accepts=lambda task: task.source_file in task.files,
    end_reasons=("final_answer", "out_of_turns"),
)

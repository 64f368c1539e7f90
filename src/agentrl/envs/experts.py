"""Scripted experts: the tool-call turns a competent agent plays in each environment (for tests, checks
and supervised warm starts).

Not a policy and not an environment: experts read the task (including its authored edit ops and
reference), which a learning agent never sees.
"""

from __future__ import annotations

import random

from agentrl.envs.base import ToolCall
from agentrl.envs.bash_tool import REPO_ROOT
from agentrl.envs.wordle import feedback
from agentrl.tasks.task import EditOp, Task

FINAL_ANSWER = "I fixed the function and ran the tests."


def call(name: str, **arguments) -> ToolCall:
    """A well-formed ToolCall with a `raw` text in Qwen3's <tool_call> JSON form."""
    import json

    raw = json.dumps({"name": name, "arguments": arguments})
    return ToolCall(name=name, arguments=arguments, raw=f"<tool_call>\n{raw}\n</tool_call>")


def line_edit(source: str, op: EditOp) -> tuple[str, str] | None:
    """The whole-line Edit (old_string, new_string) that applies `op` to `source`, or None if it does not apply.

    old_string is every line the first occurrence of `op.old` touches, as an agent would copy it.
    """
    at = source.find(op.old)
    if at < 0:
        return None
    start = source.rfind("\n", 0, at) + 1
    end = source.find("\n", at + len(op.old.rstrip("\n")))
    end = len(source) if end < 0 else end
    old_lines = source[start:end]
    edited = source[:at] + op.new + source[at + len(op.old):]
    new_lines = edited[start : end + len(op.new) - len(op.old)]
    return (old_lines, new_lines) if old_lines != new_lines else None


def candidate_line_edits(task: Task) -> list[tuple[str, tuple[str, str]]]:
    """(op name, (old_string, new_string)) for every edit op of `task` that applies as a line edit."""
    source = task.files[task.source_file]
    out = []
    for op in task.edit_ops:
        edit = line_edit(source, op)
        if edit is not None and source.count(edit[0]) == 1:
            out.append((op.name, edit))
    return out


def _pick_op(task: Task, rng: random.Random, random_op: bool) -> EditOp:
    if random_op:
        return rng.choice(list(task.edit_ops))
    op = task.correct_op
    if op is None:
        raise ValueError(f"task {task.id!r} has no correct edit op")
    return op


def edit_menu_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """read -> edit(op) -> run_tests -> submit, with the correct op (or a random one)."""
    op = _pick_op(task, rng, random_op)
    return [[call("read_file")], [call("edit", op=op.name)], [call("run_tests")], [call("submit")]]


def coding_tools_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """Read -> one whole-line Edit -> pytest; the edit from the correct op (or a random candidate).

    Tasks without edit ops (datasets) get Read -> Write(reference) -> pytest.
    """
    path = f"{REPO_ROOT}/{task.source_file}"
    test_file = f"test_{task.module.split('.')[-1]}.py"
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


def python_session_turns(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """Define the reference solution, then run the shown example test(s) on it."""
    shown = "\n".join(task.public_tests)
    turns = [[call("run_python", code=task.reference)]]
    if shown:
        turns.append([call("run_python", code=f"{task.test_setup}\n{shown}\nprint('example test passed')".lstrip())])
    return turns


def wordle_turns(task: Task, rng: random.Random, random_op: bool = False, words: list[str] | None = None,
                 max_guesses: int = 6) -> list[list[ToolCall]]:
    """Guess a random word consistent with all feedback so far (simulated against the known secret).

    Without `words` the candidate pool is the secret alone (a one-guess game).
    """
    secret = task.meta["secret"]
    pool = sorted(set(words or []) | {secret})
    turns = []
    for _ in range(max_guesses):
        guess = rng.choice(pool)
        turns.append([call("guess", word=guess)])
        if guess == secret:
            break
        marks = feedback(guess, secret)
        pool = [w for w in pool if feedback(guess, w) == marks]
    return turns


_EXPERTS = {
    "edit-menu": edit_menu_turns,
    "coding-tools": coding_tools_turns,
    "python-session": python_session_turns,
    "wordle": wordle_turns,
}


def expert_turns(env_name: str, task: Task, rng: random.Random | None = None, *,
                 random_op: bool = False) -> list[list[ToolCall]]:
    """The turns (each a list of ToolCalls) the scripted expert plays on `task` in environment `env_name`.

    Args:
        rng: source of the random choices (random_op, Wordle guesses); default Random(0).
        random_op: edit-menu / coding-tools follow the same procedure with a random op from the menu.

    Raises:
        ValueError: unknown environment, or the task lacks what the expert needs.
    """
    if env_name not in _EXPERTS:
        raise ValueError(f"no expert for environment {env_name!r}; known: {', '.join(_EXPERTS)}")
    return _EXPERTS[env_name](task, rng or random.Random(0), random_op=random_op)


def play(env, task: Task, turns: list[list[ToolCall]], seed: int | None = 0,
         final_answer: str = FINAL_ANSWER) -> float:
    """Reset `env` on `task`, play `turns`, give `final_answer` if still running; return the reward."""
    env.reset(task, seed=seed)
    for calls in turns:
        if env.done:
            break
        env.step(calls)
    if not env.done:
        env.final_answer(final_answer)
    return env.reward()

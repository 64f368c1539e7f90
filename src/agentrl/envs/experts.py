"""Scripted experts: helpers for the tool-call turns a competent agent plays (for tests, checks and
supervised warm starts), `expert_turns` (the expert an environment's EnvSpec names) and `play`.

Each environment's own expert lives in its module, beside its EnvSpec. Not a policy and not an
environment: experts read the task (including its authored edit ops and reference), which a learning
agent never sees.
"""

from __future__ import annotations

import random

from agentrl.envs.base import ToolCall
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


def pick_op(task: Task, rng: random.Random, random_op: bool) -> EditOp:
    """The edit op an expert applies: the task's correct op, or (random_op) any op of the menu.

    Raises:
        ValueError: no correct op and not random_op.
    """
    if random_op:
        return rng.choice(list(task.edit_ops))
    op = task.correct_op
    if op is None:
        raise ValueError(f"task {task.id!r} has no correct edit op")
    return op


def expert_turns(env_name: str, task: Task, rng: random.Random | None = None, *,
                 random_op: bool = False) -> list[list[ToolCall]]:
    """The turns (each a list of ToolCalls) the scripted expert plays on `task` in environment `env_name`.

    Args:
        rng: source of the random choices (random_op, Wordle guesses); default Random(0).
        random_op: edit-menu / coding-tools follow the same procedure with a random op from the menu.

    Raises:
        ValueError: unknown environment, or the task lacks what the expert needs.
    """
    from agentrl.envs.registry import get_spec

    return get_spec(env_name).expert(task, rng or random.Random(0), random_op=random_op)


def play(env, task: Task, turns: list[list[ToolCall]], seed: int | None = 0,
         final_answer: str = FINAL_ANSWER) -> float | None:
    """Reset `env` on `task`, play `turns`, give `final_answer` if still running; return the reward
    (None: the environment could not score the episode)."""
    env.reset(task, seed=seed)
    for calls in turns:
        if env.done:
            break
        env.step(calls)
    if not env.done:
        env.final_answer(final_answer)
    return env.reward()

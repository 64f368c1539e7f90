"""The environment protocol and the records that cross it: tool calls, tool results, observations.

Not the environments themselves (edit_menu.py, coding_tools.py, python_session.py, wordle.py)
and not the chat-level tool-call parser (agentrl.chat).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.tasks.task import Task

ToolStatus = Literal["ok", "failed", "malformed"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model wrote it.

    Attributes:
        name: tool name ("" if it could not be parsed).
        arguments: parsed JSON arguments ({} if they could not be parsed).
        raw: the exact text of the call as sampled.
        malformed: why the call is malformed (bad JSON, cut off by the token limit, ...), set by
            the parser; environments also mark unknown tools and schema mismatches as malformed.
    """

    name: str
    arguments: dict[str, Any]
    raw: str = ""
    malformed: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """The environment's answer to one call: "ok", "failed" (well-formed, rejected) or "malformed"."""

    call: ToolCall
    status: ToolStatus
    content: str


@dataclass(frozen=True)
class Observation:
    """What the agent sees at reset.

    Attributes:
        system: system prompt text.
        user: first user message text.
        tools: JSON-schema tool definitions in the chat-template form
            `{"type": "function", "function": {"name", "description", "parameters"}}`.
    """

    system: str
    user: str
    tools: list[dict[str, Any]] = field(default_factory=list)


class Env(ABC):
    """An environment: `reset(task)`, then `step(calls)` until `done`, then `reward()`.

    The environment owns the reward (hidden tests through agentrl.sandbox); the trainer never
    scores answers itself. One `step` is one assistant turn; calls run in order.

    Attributes every environment sets:
        name: registry name ("edit-menu", "coding-tools", "python-session", "wordle").
        max_turns: assistant turns before the episode is truncated.
        end_reason: why the episode ended ("final_answer", "submitted", "solved", "out_of_turns",
            "sandbox_error", ...) or None while it runs.
    """

    name: str = ""
    max_turns: int = 6
    end_reason: str | None = None

    @abstractmethod
    def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start a fresh episode on `task`, clearing all state of any earlier episode."""

    @abstractmethod
    def step(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Execute one turn's calls in order and return one result each (same order)."""

    @abstractmethod
    def final_answer(self, text: str) -> None:
        """Record an assistant turn without tool calls: it is the final answer and ends the episode."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """True once the episode has ended (terminated or truncated)."""

    @abstractmethod
    def reward(self) -> float:
        """The episode's reward in [0, 1], computed by the environment (hidden tests for code envs)."""

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas (same list as `Observation.tools`)."""

    def stats(self) -> dict[str, float]:
        """Named per-episode tool statistics (counts), for logs and results files."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook: environments without resources need nothing
        """Release sandbox sessions and other resources; safe to call twice."""

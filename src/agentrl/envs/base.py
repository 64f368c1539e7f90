"""The environment protocol and the records that cross it: tool calls, tool results, observations,
step results.

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


@dataclass(frozen=True)
class StepResult:
    """What one `Env.step` (or `final_answer`, `truncate`) returns, as in OpenEnv and Gymnasium.

    Attributes:
        results: one ToolResult per call, in call order (empty for `final_answer` and `truncate`).
        done: the episode has ended (terminated or truncated); no further step is allowed.
        terminated: ended inside the task, by the agent or the task's own rules (Gymnasium's sense):
            "final_answer", "submitted", "solved", "out_of_guesses", ...
        truncated: cut short by a limit outside the task: "out_of_turns" (the environment's turn
            limit), "out_of_tokens" (the driver's context budget, through `Env.truncate`).
        end_reason: why the episode ended, None while it runs.

    Invariants (checked at construction): done == (terminated or truncated) == (end_reason is not None),
    and not both terminated and truncated.

    Raises:
        ValueError: the flags contradict each other.
    """

    results: tuple[ToolResult, ...] = ()
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    end_reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        if self.terminated and self.truncated:
            raise ValueError(f"StepResult: an episode is terminated or truncated, not both ({self.end_reason})")
        if self.done != (self.terminated or self.truncated) or self.done != (self.end_reason is not None):
            raise ValueError(f"StepResult: done={self.done} must equal (terminated or truncated)="
                             f"{self.terminated or self.truncated} and (end_reason is not None)="
                             f"{self.end_reason is not None}")


class Env(ABC):
    """An environment: `reset(task)`, then `step(calls)` until `done`, then `reward()`.

    The environment alone owns its rules: the turn limit, calls per turn, schema checks, and its own
    end states (each `StepResult` says whether and why the episode ended). The reward is its own too
    (hidden tests through agentrl.sandbox); the trainer never scores answers itself. One `step` is one
    assistant turn; calls run in order. A caller that must stop a running episode for a reason only it
    knows (the driver's context budget) calls `truncate(reason)`; the final state is then graded as is.

    Attributes every environment sets:
        name: registry name ("edit-menu", "coding-tools", "python-session", "wordle").
        max_turns: assistant turns before the episode is truncated ("out_of_turns").
        end_reason: why the episode ended (see StepResult) or None while it runs.
        terminated / truncated: the flags of the ending (both False while it runs).
    """

    name: str = ""
    max_turns: int = 6
    end_reason: str | None = None
    terminated: bool = False
    truncated: bool = False

    @abstractmethod
    def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start a fresh episode on `task`, clearing all state of any earlier episode."""

    @abstractmethod
    def step(self, calls: list[ToolCall]) -> StepResult:
        """Execute one turn's calls in order; `StepResult.results` holds one result each (same order).

        Raises:
            RuntimeError: before reset() or after the episode ended.
        """

    @abstractmethod
    def final_answer(self, text: str) -> StepResult:
        """Record an assistant turn without tool calls: it is the final answer and ends the episode
        (the environment picks the end reason, normally "final_answer", terminated)."""

    @abstractmethod
    def truncate(self, reason: str) -> StepResult:
        """End a running episode from outside with `reason` (e.g. "out_of_tokens"), truncated; the
        final state is graded by `reward()` as it stands. A no-op returning the ending if already done."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """True once the episode has ended (terminated or truncated)."""

    @abstractmethod
    def reward(self) -> float | None:
        """The episode's reward in [0, 1] on its final state, computed by the environment (hidden tests
        for code environments); None when it cannot be scored (the sandbox failed to grade it): such an
        episode gets advantage 0 and stays out of its group's baseline.

        Raises:
            RuntimeError: before the episode has ended.
        """

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas (same list as `Observation.tools`)."""

    def stats(self) -> dict[str, float]:
        """Named per-episode tool statistics (counts), for logs and results files."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook: environments without resources need nothing
        """Release sandbox sessions and other resources; safe to call twice."""

"""The typed OpenEnv Action / Observation / State of `agentrl serve`, and their conversions to agentrl's records.

Shared by the server (agentrl.serve.env.server) and the client (agentrl.serve.env.client), as
OpenEnv's own environments share a `models.py`. Not the server, not the client, not the environments.

One action is one assistant turn: either its tool calls (run in order, like `Env.step`) or, for a turn
without calls, its final text (`Env.final_answer`). Sizes are bounded here, at validation, so an
oversized or malformed action is refused with a message before any environment sees it.
"""

from __future__ import annotations

import json
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentrl.envs.base import StepResult, ToolCall, ToolResult
from agentrl.preflight import replace_lone_surrogates

MAX_CALLS_PER_ACTION = 64  # calls in one turn; the environment's own max_calls_per_turn is usually 4
MAX_ACTION_CHARS = 1_000_000  # JSON characters of one action's calls / final text (about 1 MB)
MAX_NAME_CHARS = 200


class ToolCallModel(BaseModel):
    """One tool call as the model wrote it (agentrl.envs.ToolCall on the wire).

    Attributes:
        name: tool name ("" when the client's parser could not read one).
        arguments: the call's JSON arguments.
        raw: the exact text of the call as sampled (optional, for transcripts).
        malformed: why the client's parser found the call malformed (None: well-formed).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", max_length=MAX_NAME_CHARS)
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw: str = ""
    malformed: str | None = Field(default=None, max_length=10_000)

    def to_call(self) -> ToolCall:
        """The agentrl ToolCall."""
        return ToolCall(name=self.name, arguments=dict(self.arguments), raw=self.raw, malformed=self.malformed)

    @classmethod
    def from_call(cls, call: ToolCall) -> ToolCallModel:
        """The wire form of an agentrl ToolCall. A name over MAX_NAME_CHARS (the model writes it; no tool has one
        that long) is clipped, so it reaches the server as an unknown tool instead of failing the step here."""
        return cls(name=call.name[:MAX_NAME_CHARS], arguments=dict(call.arguments), raw=call.raw,
                   malformed=call.malformed)


class ToolResultModel(BaseModel):
    """The environment's answer to one call: status "ok" | "failed" | "malformed" and the observation text."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    status: str = "ok"
    content: str = ""


class AgentrlAction(Action):
    """One assistant turn, exactly one of: `calls` (run in order, `Env.step`), `final_answer` (a turn
    without calls, `Env.final_answer`), or `truncate` (the client ends the episode for a reason only it
    knows, e.g. "out_of_tokens", `Env.truncate`; the final state is graded as it stands).

    Raises (pydantic ValidationError, answered as OpenEnv's VALIDATION_ERROR / HTTP 422):
        not exactly one kind given; more than MAX_CALLS_PER_ACTION calls; more than MAX_ACTION_CHARS
        of JSON in the calls or the final text; an empty or over-long truncate reason.
    """

    calls: list[ToolCallModel] = Field(default_factory=list, max_length=MAX_CALLS_PER_ACTION)
    final_answer: str | None = Field(default=None, max_length=MAX_ACTION_CHARS)
    truncate: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)

    @model_validator(mode="before")
    @classmethod
    def _utf8_text(cls, data: Any) -> Any:
        """Lone surrogates (unpaired \\ud800-\\udfff escapes) in any string become U+FFFD, as a lossy UTF-8
        decode would have it. Refused instead, the validation error echoes the input, which OpenEnv cannot
        write as JSON: the WebSocket session ended with "Error serializing to JSON" (and a call name or text
        that passed would reach the policy's tokenizer, which raises TypeError on one)."""
        try:
            return replace_lone_surrogates(data)
        except RecursionError:  # nested past the limit: pydantic's own checks refuse it
            return data

    @model_validator(mode="after")
    def _one_kind(self) -> AgentrlAction:
        kinds = [k for k, given in (("calls", bool(self.calls)), ("final_answer", self.final_answer is not None),
                                    ("truncate", self.truncate is not None)) if given]
        # PydanticCustomError, not ValueError: its error context stays JSON (OpenEnv serialises e.errors()
        # into the error frame; a ValueError object there breaks the frame and ends the session).
        if len(kinds) != 1:
            raise PydanticCustomError("action_kind", "an action holds exactly one of tool `calls` (non-empty), a "
                                      "`final_answer` string or a `truncate` reason; got {got}",
                                      {"got": " and ".join(kinds) if kinds else "none"})
        if self.calls:
            size = len(json.dumps([c.model_dump() for c in self.calls], default=str))
            if size > MAX_ACTION_CHARS:
                raise PydanticCustomError("action_size", "the action's calls are {size} JSON characters; at "
                                          "most {limit}", {"size": size, "limit": MAX_ACTION_CHARS})
        return self


class ResetParams(BaseModel):
    """The parameters of a reset, checked the same way for every transport (HTTP `/reset`, a WebSocket
    reset frame, the Python client before it sends): strict types, no unknown names, so a wrongly typed
    value is refused before the session changes (an `episode_id` of 7 used to be stored and break every
    later `state()`).

    Attributes:
        seed: the random task draw's seed (an integer >= 0, as OpenEnv's HTTP route requires).
        episode_id: the client's name for the episode (a string, at most 255 characters).
        task_id: a task by id; split + index: a task by position; none of them: a random training task.

    Checked through `check_reset_params` (ParameterError in words).
    """

    model_config = ConfigDict(extra="forbid")

    seed: StrictInt | None = Field(default=None, ge=0)
    episode_id: StrictStr | None = Field(default=None, max_length=255)
    task_id: StrictStr | None = Field(default=None, max_length=MAX_NAME_CHARS)
    split: StrictStr | None = Field(default=None, max_length=MAX_NAME_CHARS)
    index: StrictInt | None = Field(default=None, ge=0)


class StepParams(BaseModel):
    """The parameters of a step besides its action (OpenEnv's HTTP `/step` fields), checked like
    ResetParams: `timeout_s` (> 0 seconds; the environment's own limits apply, it can only be lower) and
    `request_id` (a string). Anything else is refused (`check_step_params`)."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: StrictFloat | StrictInt | None = Field(default=None, gt=0)
    request_id: StrictStr | None = Field(default=None, max_length=255)


class ParameterError(ValueError):
    """A reset or step parameter that is unknown or of the wrong type or range, named in words (the
    WebSocket answers it as an error frame, HTTP as a 400; the Python client raises it before sending)."""


_EXPECTED = {"seed": "an integer >= 0", "episode_id": "a string of at most 255 characters",
             "task_id": f"a string of at most {MAX_NAME_CHARS} characters",
             "split": f"a string of at most {MAX_NAME_CHARS} characters", "index": "an integer >= 0",
             "timeout_s": "a number of seconds > 0", "request_id": "a string of at most 255 characters"}


def _got(value: Any) -> str:
    if isinstance(value, (bool, int, float)) or value is None:
        return f"{type(value).__name__} {value!r}"[:80]
    return type(value).__name__ + (f" of {len(value)} characters" if isinstance(value, str) else "")


def _check(model: type[BaseModel], what: str, params: dict[str, Any]) -> Any:
    if not isinstance(params, dict):
        raise ParameterError(f"{what} parameters must be a JSON object, got {type(params).__name__}")
    unknown = sorted(str(k)[:80] for k in set(params) - set(model.model_fields))
    if unknown:
        raise ParameterError(f"unknown {what} parameter(s) {', '.join(map(repr, unknown))}; expected "
                             f"{', '.join(model.model_fields)}")
    try:
        return model.model_validate(params)
    except ValidationError as e:
        name = str(e.errors()[0]["loc"][0])
        if e.errors()[0]["type"] == "string_unicode":  # it said "a string of at most 255 characters, got str of 1"
            raise ParameterError(f"{what} parameter {name} must be UTF-8 text; it holds a lone surrogate (an "
                                 "unpaired \\ud800-\\udfff escape)") from None
        raise ParameterError(f"{what} parameter {name} must be {_EXPECTED.get(name, 'valid')}, got "
                             f"{_got(params.get(name))}") from None


def check_reset_params(params: dict[str, Any]) -> ResetParams:
    """`params` (seed, episode_id, task_id, split, index) checked. Raises ParameterError naming the first
    unknown or bad one."""
    return _check(ResetParams, "reset", params)


def check_step_params(params: dict[str, Any]) -> StepParams:
    """`params` (timeout_s, request_id) checked. Raises ParameterError naming the first unknown or bad one."""
    return _check(StepParams, "step", params)


class AgentrlObservation(Observation):
    """What the agent sees after reset or one turn. `done`, `reward` and `metadata` are OpenEnv's own.

    Attributes:
        task_id: the episode's task.
        system, user, tools: the reset observation (system prompt, first user message, tool schemas in
            the chat-template form); empty after a step.
        results: one ToolResultModel per call of the turn, in order (empty at reset and for a final answer).
        terminated, truncated, end_reason: the environment's ending (Gymnasium's sense), once `done`.
        reward: the episode's reward in [0, 1] from the hidden tests, set once `done`; None while the
            episode runs, and also when done but unscorable (then `metadata["unscorable"]` is True).
        stats: the episode's tool statistics (counts), once done.
    """

    task_id: str = ""
    system: str = ""
    user: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    results: list[ToolResultModel] = Field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    end_reason: str | None = None
    stats: dict[str, float] = Field(default_factory=dict)


class AgentrlState(State):
    """The session's episode state (`episode_id` and `step_count` are OpenEnv's own).

    Attributes:
        env: the environment's registry name.
        task_id: the current task (None before the first reset).
        turns: assistant turns taken in this episode.
        done, end_reason: whether and why the episode ended.
    """

    env: str = ""
    task_id: str | None = None
    turns: int = 0
    done: bool = False
    end_reason: str | None = None


def results_to_models(results: tuple[ToolResult, ...] | list[ToolResult]) -> list[ToolResultModel]:
    """The wire form of a turn's ToolResults."""
    return [ToolResultModel(name=r.call.name, status=r.status, content=r.content) for r in results]


def step_result_from_observation(obs: AgentrlObservation, calls: list[ToolCall]) -> StepResult:
    """Rebuild the environment's StepResult from a step observation (client side).

    Raises:
        ValueError: the server answered a different number of results than calls were sent.
    """
    if len(obs.results) != len(calls):
        raise ValueError(f"the server answered {len(obs.results)} results for {len(calls)} calls")
    results = tuple(ToolResult(call, r.status if r.status in ("ok", "failed", "malformed") else "failed",  # type: ignore[arg-type]
                               r.content) for call, r in zip(calls, obs.results, strict=True))
    return StepResult(results, done=obs.done, terminated=obs.terminated, truncated=obs.truncated,
                      end_reason=obs.end_reason)

"""Shared machinery of the tool-calling environments: schemas, validation, the episode rules (turn
limit, calls per turn, observation budget, end states), stats.

Not an environment itself (see edit_menu.py, coding_tools.py, python_session.py, wordle.py) and not
the chat-level parser that turns sampled text into ToolCalls (agentrl.chat).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jsonschema

from agentrl.envs.base import Env, Observation, StepResult, ToolCall, ToolResult
from agentrl.envs.grading import default_sandbox, grade, is_sandbox_failure, source_job
from agentrl.envs.session_grader import hardened_job
from agentrl.preflight import lone_surrogate_path, replace_lone_surrogates
from agentrl.tasks.task import Task

# Counters every tool environment reports, zero-filled at reset so that logs always carry them.
BASE_STATS: tuple[str, ...] = ("turns", "tool_calls", "malformed_calls", "failed_calls", "ok_calls",
                               "observations_capped", "observation_chars_cut")
DEFAULT_MAX_CALLS_PER_TURN = 4  # the write-ups' "up to four tool calls in one turn"
DEFAULT_MAX_OBSERVATION_CHARS = 4000  # about 1k tokens per tool result: model-sized, far below the sandbox's byte cap


def cap_observation(text: str, max_chars: int | None) -> tuple[str, int]:
    """Cap one tool observation to about `max_chars` characters, keeping its head and tail.

    The middle is replaced by a visible mark, `[... N characters cut ...]`, so the model knows output
    was dropped and how much (a traceback's last lines and a file's first lines both survive). This
    is the model's budget, separate from the sandbox's byte cap on captured output.

    Args:
        text: the observation.
        max_chars: the budget in characters (None or 0: no cap). The result is at most `max_chars`
            long whenever `max_chars` exceeds the mark's own length (about 40 characters).

    Returns:
        (the capped text, the number of characters cut: 0 when `text` fits).
    """
    if not max_chars or len(text) <= max_chars:
        return text, 0
    width = len(f"\n[... {len(text)} characters cut ...]\n")  # the longest the mark can be
    keep = max(0, max_chars - width)
    head = (keep + 1) // 2
    tail = keep - head
    cut = len(text) - keep
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail:] if tail else ''}", cut


class ToolRejected(Exception):
    """Raised by a tool handler for a well-formed call the tool rejects (status "failed").

    `stat` names an extra per-episode counter to bump (e.g. "edit_missing_old_string").
    """

    def __init__(self, message: str, stat: str | None = None):
        super().__init__(message)
        self.stat = stat


class ToolMalformed(Exception):
    """Raised by a handler for a call whose arguments pass the schema but still cannot be parsed
    (e.g. an edit-menu op name that is not on the menu); status "malformed"."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its advertised JSON schema, the checks enforced beyond it, and the bound method that runs it.

    `parameters` is what the model sees, in exactly the form transformers' `get_json_schema` renders
    from a Python signature with type hints and a Google docstring (every parameter has a "type" and a
    "description"; "required" only when some are), so the same schema reaches the model through TRL's
    environment_factory (agentrl.integrations.trl). `constraints` holds per-parameter JSON-Schema
    keywords a signature cannot express (e.g. {"offset": {"minimum": 1}}); they and
    `additionalProperties: false` are enforced by `validation_schema()`, not advertised.

    `handler(**arguments) -> str` returns the observation text, or raises ToolRejected/ToolMalformed.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., str]
    constraints: dict[str, dict[str, Any]] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        """The chat-template form {"type": "function", "function": {name, description, parameters}}."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validation_schema(self) -> dict[str, Any]:
        """The schema calls are checked against: `parameters` plus `constraints`, closed to extra keys."""
        props = {k: {**v, **self.constraints.get(k, {})} for k, v in self.parameters.get("properties", {}).items()}
        return {**self.parameters, "properties": props, "additionalProperties": False}


def object_schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The parameters form every tool here advertises (get_json_schema's): {"type": "object",
    "properties", "required" (only when non-empty)}; extra keys are refused by ToolSpec.validation_schema."""
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    return out


class ToolEnv(Env):
    """Base class: validates calls against the schemas, runs handlers in order, counts turns and stats.

    Subclasses define `_specs() -> list[ToolSpec]`, `_reset_episode(task, seed) -> (system, user)`,
    and `_score() -> float | None` (None: the sandbox could not grade). The rules, all here: a call
    is malformed if the parser flagged it (`ToolCall.malformed`), names an unknown tool, or its
    arguments fail the tool's JSON schema (jsonschema Draft 2020-12); a handler raising ToolRejected
    makes it "failed"; calls past `max_calls_per_turn` in one turn fail unrun; every call uses up the
    turn it is in; each observation is capped to `max_observation_chars` (cap_observation); after
    `max_turns` turns the episode is truncated ("out_of_turns"). Subclasses end episodes with
    `_end(reason)` (terminated) from a tool handler.

    Args:
        max_turns: assistant turns per episode (>= 1).
        max_calls_per_turn: calls run per turn (None: no limit; default 4).
        max_observation_chars: per-call observation budget in characters (None or 0: no cap).
    """

    _sandbox: Any = None  # set by subclasses that run code; `sandbox` makes a default one on first use

    @property
    def sandbox(self) -> Any:
        """The agentrl.sandbox.Sandbox this environment runs code in (shared when injected)."""
        if self._sandbox is None:
            self._sandbox = default_sandbox()
        return self._sandbox

    def __init__(self, max_turns: int = 6, max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_calls_per_turn is not None and max_calls_per_turn < 1:
            raise ValueError(f"max_calls_per_turn must be >= 1 or None, got {max_calls_per_turn}")
        if max_observation_chars is not None and max_observation_chars < 0:
            raise ValueError(f"max_observation_chars must be >= 0 or None, got {max_observation_chars}")
        self.max_turns = max_turns
        self.max_calls_per_turn = max_calls_per_turn
        self.max_observation_chars = max_observation_chars
        self.task: Task | None = None
        self.end_reason = None
        self.truncated = False
        self._counts: Counter[str] = Counter()
        self._specs_by_name: dict[str, ToolSpec] = {}
        self._reward: float | None = None
        self._scored = False
        self.final_text: str | None = None

    # -- subclass hooks ---------------------------------------------------------------------------
    def _specs(self) -> list[ToolSpec]:
        raise NotImplementedError

    def _reset_episode(self, task: Task, seed: int | None) -> tuple[str, str]:
        """Clear episode state for `task`; return (system prompt, user message)."""
        raise NotImplementedError

    def _score(self) -> float | None:
        """Compute the episode's reward once it has ended (None: it cannot be scored)."""
        raise NotImplementedError

    def _stat_names(self) -> tuple[str, ...]:
        """Extra counters this environment reports (zero-filled at reset)."""
        return ()

    # -- protocol ---------------------------------------------------------------------------------
    def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start a fresh episode on `task` (see Env.reset); every counter and file starts over."""
        self.task = task
        self.end_reason = None
        self.truncated = False
        self._reward = None
        self._scored = False
        self.final_text = None
        self._counts = Counter({k: 0 for k in BASE_STATS + self._stat_names()})
        self._specs_by_name = {s.name: s for s in self._specs()}
        system, user = self._reset_episode(task, seed)
        return Observation(system=system, user=user, tools=self.tools())

    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas in the chat-template form, sorted by tool name: the order TRL renders an
        environment class's methods in (inspect.getmembers), so both front ends show the same prompt."""
        return [s.schema() for s in sorted(self._specs(), key=lambda spec: spec.name)]

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    @property
    def terminated(self) -> bool:
        """Ended by the agent or the task (Gymnasium's sense), not by a limit."""
        return self.done and not self.truncated

    @property
    def turns(self) -> int:
        return self._counts["turns"]

    def step(self, calls: list[ToolCall]) -> StepResult:
        """Run one assistant turn's calls in order (see Env.step); one ToolResult each, same order.

        Raises:
            RuntimeError: if called before reset() or after the episode ended.
        """
        self._check_running("step")
        self._counts["turns"] += 1
        results = []
        for i, call in enumerate(calls):
            if self.done:
                result = ToolResult(call, "failed", "Error: the episode has ended; call not run.")
            elif self.max_calls_per_turn is not None and i >= self.max_calls_per_turn:
                result = ToolResult(call, "failed",
                                    f"Error: at most {self.max_calls_per_turn} tool calls per turn; call not run.")
            else:
                result = self._run_call(call)
            results.append(self._count(self._capped(result)))
        if not self.done and self.turns >= self.max_turns:
            self._end("out_of_turns", truncated=True)
        return self._step_result(results)

    def final_answer(self, text: str) -> StepResult:
        """An assistant turn without tool calls: the final answer; ends the episode ("final_answer").

        Raises:
            RuntimeError: before reset() or after the episode ended.
        """
        self._check_running("final_answer")
        self._counts["turns"] += 1
        self.final_text = text
        self._end("final_answer")
        return self._step_result([])

    def truncate(self, reason: str) -> StepResult:
        """End the running episode from outside (e.g. "out_of_tokens"), truncated; see Env.truncate.

        Raises:
            RuntimeError: before reset(). ValueError: an empty reason.
        """
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}.truncate() called before reset()")
        if not reason:
            raise ValueError("truncate() needs a non-empty reason")
        self._end(reason, truncated=True)
        return self._step_result([])

    def reward(self) -> float | None:
        """The episode's reward on its final state (computed once; None: it cannot be scored).

        Raises:
            RuntimeError: before reset() or before the episode has ended (see `truncate`).
        """
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}.reward() called before reset()")
        if not self.done:
            raise RuntimeError(f"{type(self).__name__}.reward() called while the episode runs; end it "
                               "(final_answer, truncate) first")
        if not self._scored:
            score = self._score()
            self._reward, self._scored = (None if score is None else float(score)), True
        return self._reward

    def stats(self) -> dict[str, float]:
        """Per-episode counters (BASE_STATS plus the environment's own), as floats."""
        return {k: float(v) for k, v in self._counts.items()}

    # -- helpers ----------------------------------------------------------------------------------
    def _end(self, reason: str, truncated: bool = False) -> None:
        """End the episode with `reason` (terminated, or truncated); the first ending wins."""
        if self.end_reason is None:
            self.end_reason = reason
            self.truncated = truncated

    def _check_running(self, what: str) -> None:
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}.{what}() called before reset()")
        if self.done:
            raise RuntimeError(f"{type(self).__name__}.{what}() called after the episode ended ({self.end_reason})")

    def _step_result(self, results: list[ToolResult]) -> StepResult:
        return StepResult(tuple(results), done=self.done, terminated=self.terminated, truncated=self.truncated,
                          end_reason=self.end_reason)

    def _capped(self, result: ToolResult) -> ToolResult:
        """`result` with its content capped (cap_observation) and made UTF-8 encodable (preflight.replace_lone_surrogates:
        a file name's undecodable bytes, as os.walk gives them, would make the tokenizer raise)."""
        content, cut = cap_observation(replace_lone_surrogates(result.content), self.max_observation_chars)
        if not cut:
            return result if content is result.content else ToolResult(result.call, result.status, content)
        self._counts["observations_capped"] += 1
        self._counts["observation_chars_cut"] += cut
        return ToolResult(result.call, result.status, content)

    def _bump(self, stat: str, n: int = 1) -> None:
        self._counts[stat] += n

    def _count(self, result: ToolResult) -> ToolResult:
        self._counts["tool_calls"] += 1
        self._counts[f"{result.status}_calls"] += 1
        return result

    def _run_call(self, call: ToolCall) -> ToolResult:
        """One call under the schema rules. A call this refuses comes back marked in the parser's
        vocabulary (`ToolCall.malformed`: "unknown_tool: ...", "bad_arguments: ..."), so rollout
        counters classify parser and environment refusals alike."""
        if call.malformed:
            return ToolResult(call, "malformed", f"Error: malformed tool call ({call.malformed}).")
        spec = self._specs_by_name.get(call.name)
        if spec is None:
            known = ", ".join(self._specs_by_name)
            name = repr(call.name[:100]) + (f" (+{len(call.name) - 100} chars)" if len(call.name) > 100 else "")
            marked = replace(call, malformed=f"unknown_tool: {name} is not one of [{known}]")
            return ToolResult(marked, "malformed", f"Error: unknown tool {name}; available tools: {known}.")
        problem = schema_problem(spec.validation_schema(), call.arguments)
        if problem:
            marked = replace(call, malformed=f"bad_arguments: {problem}")
            return ToolResult(marked, "malformed", f"Error: invalid arguments for {spec.name}: {problem}")
        try:
            return ToolResult(call, "ok", spec.handler(**handler_arguments(spec.parameters, call.arguments)))
        except ToolRejected as e:
            if e.stat:
                self._bump(e.stat)
            return ToolResult(call, "failed", f"Error: {e}")
        except ToolMalformed as e:
            return ToolResult(call, "malformed", f"Error: {e}")


def schema_problem(parameters: dict[str, Any], arguments: Any) -> str | None:
    """Why `arguments` fails the JSON schema `parameters` (one line), or None if it is valid. A string (key or
    value) holding a lone surrogate (JSON's `\\ud800` escape) fails too, naming where: no handler's text, file
    or sandboxed code takes one (run_python's parser raised UnicodeEncodeError, ending the episode)."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    where = lone_surrogate_path(arguments)
    if where is not None:
        return f"{where}: not UTF-8 text (a lone surrogate escape, \\ud800-\\udfff)"
    try:
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(parameters).iter_errors(arguments))
    except RecursionError:  # pathologically nested arguments: the model's fault, not a crash
        return "arguments are nested too deeply to validate"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"


def handler_arguments(parameters: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Valid `arguments` as a handler takes them: an "integer" parameter's integral float (JSON `2.0`, `1e308`,
    which JSON Schema counts as integers) becomes an int, so no handler slices or compares with a float
    (Read's `limit: 1e308` raised TypeError, ending the episode as env_error)."""
    props = parameters.get("properties", {})
    return {k: int(v) if isinstance(v, float) and props.get(k, {}).get("type") == "integer" else v
            for k, v in arguments.items()}


class SourceGradedEnv(ToolEnv):
    """A bug-fix environment whose reward is 1.0 iff its final source file passes every hidden test.

    Subclasses call `_grade_source(text)` from `_score`; the fraction of hidden tests passed is
    reported in `stats()["hidden_pass_fraction"]` once the episode is done.
    """

    _hidden_fraction: float = 0.0
    # Grade through agentrl.envs.session_grader's hardened job (plain data at the test boundary, builtins and
    # modules restored) instead of importing the file as written: for environments whose model writes the
    # source freely, where `def f(*a): return AlwaysEqual()` (an object whose __eq__ is always True) otherwise
    # passes every `assert f(x) == y`. The edit menu only applies authored edits, so it keeps the plain job.
    hardened_grading: bool = False

    def _grade_source(self, source: str | None) -> float | None:
        """Grade `source` (None: the file is gone) on the task's hidden tests in the sandbox; None when
        the sandbox itself failed to grade (after `grade`'s retries): unscorable, not a 0.

        Hardened grading runs the whole file, as importing it does. Where that fails as the sandbox failing,
        the file's definitions alone are graded once more: if that grading works, the file's module-level code
        brought the grader down (it killed the worker, say), which scores 0 as any crash of the code would,
        instead of making the episode unscorable."""
        assert self.task is not None
        task = self.task

        def hardened(whole_file: bool) -> Any:
            return hardened_job([source or ""], task.module, task.hidden_tests, task.test_setup,
                                extra_names=(task.entry,), whole_file=whole_file)

        job = hardened(True) if self.hardened_grading else source_job(task, source, task.hidden_tests)
        report = grade(self.sandbox, job)
        if self.hardened_grading and is_sandbox_failure(report) and \
                not is_sandbox_failure(grade(self.sandbox, hardened(False), retries=0)):
            self._hidden_fraction = 0.0
            self._counts["sandbox_errors"] = 0
            return 0.0
        self._hidden_fraction = report.fraction
        self._counts["sandbox_errors"] = int(is_sandbox_failure(report))
        if is_sandbox_failure(report):
            return None
        return 1.0 if report.all_passed and source is not None else 0.0

    def stats(self) -> dict[str, float]:
        out = super().stats()
        if self.done:
            self.reward()
            out["hidden_pass_fraction"] = self._hidden_fraction
        return out

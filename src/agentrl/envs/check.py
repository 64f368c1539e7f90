"""`check_env`: verify an environment the way Gymnasium's env checker does. Not a test runner.

Checks: the tool schemas are valid JSON Schema and match what the tools accept; reset and the
expert's episode are deterministic under a seed (tool output compared with wall-clock durations
masked); reset clears all state; the scripted expert (the reference solution) scores 1.0; every
StepResult agrees with the environment's own flags and names an end reason its EnvSpec declares;
an episode ends "out_of_turns" (truncated) after max_turns bad turns; `truncate` ends a running
episode and its final state is still graded.
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Callable
from typing import Any

import jsonschema

from agentrl.envs.base import Env, StepResult, ToolCall
from agentrl.envs.experts import play
from agentrl.tasks.task import Task

Expert = Callable[..., list[list[ToolCall]]]


class EnvCheckError(AssertionError):
    """check_env found problems; the message lists every one."""


def _check_schemas(env: Env, obs_tools: list[dict[str, Any]]) -> list[str]:
    problems = []
    names = []
    for tool in env.tools():
        fn = tool.get("function", {})
        if tool.get("type") != "function" or not {"name", "description", "parameters"} <= set(fn):
            problems.append(f"tool {tool!r} is not {{type: function, function: {{name, description, parameters}}}}")
            continue
        names.append(fn["name"])
        try:
            jsonschema.Draft202012Validator.check_schema(fn["parameters"])
        except jsonschema.SchemaError as e:
            problems.append(f"tool {fn['name']}: invalid JSON schema: {e.message}")
    if len(set(names)) != len(names):
        problems.append(f"duplicate tool names: {names}")
    if obs_tools != env.tools():
        problems.append("Observation.tools differs from env.tools()")
    return problems


def _check_signatures(env: Env) -> list[str]:
    """For ToolEnv tools: the handler's parameters equal the schema's properties, and exactly the
    parameters without defaults are required."""
    from agentrl.envs.toolenv import ToolEnv

    if not isinstance(env, ToolEnv):
        return []
    problems = []
    for spec in env._specs():
        sig = inspect.signature(spec.handler)
        params = {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        required = {n for n in params if sig.parameters[n].default is inspect.Parameter.empty}
        props = set(spec.parameters.get("properties", {}))
        if params != props or required != set(spec.parameters.get("required", [])):
            problems.append(f"tool {spec.name}: schema properties {sorted(props)} (required "
                            f"{sorted(spec.parameters.get('required', []))}) do not match the handler's "
                            f"parameters {sorted(params)} (required {sorted(required)})")
    return problems


def _probe_calls(env: Env) -> list[tuple[ToolCall, str]]:
    """Calls the schemas reject, with the status they must get: unknown tool, extra and missing arguments."""
    probes = [(ToolCall("__no_such_tool__", {}), "malformed")]
    for tool in env.tools():
        fn = tool["function"]
        params = fn["parameters"]
        probes.append((ToolCall(fn["name"], {"__unexpected__": 1}), "malformed"))
        if params.get("required"):
            probes.append((ToolCall(fn["name"], {}), "malformed"))
    return probes


def _check_probes(env: Env, task: Task, seed: int) -> list[str]:
    problems = []
    for probe, want in _probe_calls(env):
        env.reset(task, seed=seed)
        (result,) = env.step([probe]).results
        if result.status != want:
            problems.append(f"call {probe.name}({probe.arguments}) got status {result.status!r}, expected {want!r}")
    return problems


# Wall-clock durations in tool output ("1 passed in 0.05s", "[timed out after 0.5 s]") are the one
# thing a deterministic environment may not reproduce; the determinism check masks them.
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?s\b")


def step_problems(env: Env, res: StepResult, end_reasons: tuple[str, ...] | None) -> list[str]:
    """How a StepResult disagrees with the environment's own state (done, flags, reason) or names an
    end reason outside `end_reasons` (None: not checked)."""
    if not isinstance(res, StepResult):
        return [f"step/final_answer/truncate returned {type(res).__name__}, expected a StepResult"]
    problems = []
    mine = (env.done, env.terminated, env.truncated, env.end_reason)
    theirs = (res.done, res.terminated, res.truncated, res.end_reason)
    if mine != theirs:
        problems.append(f"StepResult (done, terminated, truncated, end_reason) {theirs} differs from the env's {mine}")
    if res.end_reason is not None and end_reasons is not None and res.end_reason not in end_reasons:
        problems.append(f"end reason {res.end_reason!r} is not among the EnvSpec's end_reasons {end_reasons}")
    return problems


def _episode(env: Env, task: Task, seed: int, turns: list[list[ToolCall]],
             problems: list[str] | None = None, end_reasons: tuple[str, ...] | None = None) -> tuple[Any, ...]:
    obs = env.reset(task, seed=seed)
    contents = []
    for calls in turns:
        if env.done:
            break
        res = env.step(calls)
        if problems is not None:
            problems += step_problems(env, res, end_reasons)
        contents.append(tuple((r.status, _DURATION.sub("<t>s", r.content)) for r in res.results))
    if not env.done:
        res = env.final_answer("done")
        if problems is not None:
            problems += step_problems(env, res, end_reasons)
    return obs, tuple(contents), env.reward(), env.end_reason, tuple(sorted(env.stats().items()))


def check_env(env: Env, task: Task, seed: int = 0, *, spec: Any = None) -> dict[str, Any]:
    """Run every check on `env` with `task`; return a summary, or raise EnvCheckError listing all problems.

    Args:
        spec: the environment's agentrl.envs.EnvSpec (its scripted expert and end reasons); default:
            the spec registered under `env.name`.

    An exception raised by the environment during a check is reported as a problem of that check.

    Returns:
        {"reward": expert reward, "turns": expert turns, "end_reason": ...}.

    Raises:
        EnvCheckError: any check failed. ValueError: no spec given and `env.name` is not registered.
    """
    from agentrl.envs.registry import get_spec

    spec = spec if spec is not None else get_spec(env.name)
    problems: list[str] = []
    summary: dict[str, Any] = {}
    for check in (_check_static, _check_expert, _check_reset_clears, _check_truncation, _check_truncate):
        try:
            problems += check(env, task, seed, summary, spec)
        except Exception as e:  # an env bug found by the check, not a crash of the checker
            problems.append(f"{check.__name__.removeprefix('_check_')}: {type(e).__name__}: {e}")
    if problems:
        raise EnvCheckError(f"{env.name} on {task.id}: " + "; ".join(problems))
    return summary


def _check_static(env: Env, task: Task, seed: int, summary: dict[str, Any], spec: Any) -> list[str]:
    fresh = env.reset(task, seed=seed)
    problems = _check_schemas(env, fresh.tools) + _check_signatures(env)
    if env.done or env.end_reason is not None:
        problems.append("env is done right after reset")
    return problems + _check_probes(env, task, seed)


def _check_expert(env: Env, task: Task, seed: int, summary: dict[str, Any], spec: Any) -> list[str]:
    problems: list[str] = []
    turns = spec.expert(task, random.Random(seed))
    first = _episode(env, task, seed, turns, problems, spec.end_reasons)
    second = _episode(env, task, seed, turns)
    if first != second:
        problems.append("two episodes with the same seed and calls differ (observation, results, reward or stats)")
    if first[2] != 1.0:
        problems.append(f"the reference solution scored {first[2]}, expected 1.0 (end_reason {first[3]})")
    if first[3] is None:
        problems.append("the episode ended without an end_reason")
    summary.update(reward=first[2], turns=len(first[1]), end_reason=first[3])
    return problems


def _check_reset_clears(env: Env, task: Task, seed: int, summary: dict[str, Any], spec: Any) -> list[str]:
    fresh = env.reset(task, seed=seed)
    fresh_stats = env.stats()
    turns = spec.expert(task, random.Random(seed + 1), random_op=spec.random_op_expert)
    play(env, task, [[ToolCall("__no_such_tool__", {})]] + turns + turns, seed=seed)
    again = env.reset(task, seed=seed)
    if again != fresh or env.stats() != fresh_stats or env.done:
        return ["reset did not clear the state of the previous episode (observation, stats or done)"]
    return []


def _check_truncation(env: Env, task: Task, seed: int, summary: dict[str, Any], spec: Any) -> list[str]:
    env.reset(task, seed=seed)
    problems: list[str] = []
    res = None
    for _ in range(env.max_turns):
        if env.done:
            break
        res = env.step([ToolCall("__no_such_tool__", {})])
        problems += step_problems(env, res, spec.end_reasons)
    if res is None or not (res.done and res.truncated and res.end_reason == "out_of_turns"):
        ending = None if res is None else (res.end_reason, res.truncated)
        problems.append(f"after max_turns={env.max_turns} bad turns the episode is not out_of_turns, truncated "
                        f"(got {ending})")
    return problems


def _check_truncate(env: Env, task: Task, seed: int, summary: dict[str, Any], spec: Any) -> list[str]:
    """`truncate("out_of_tokens")` ends a running episode, truncated, and its final state is graded."""
    env.reset(task, seed=seed)
    res = env.truncate("out_of_tokens")
    problems = step_problems(env, res, None)
    if not (res.done and res.truncated and res.end_reason == "out_of_tokens"):
        problems.append(f"truncate('out_of_tokens') gave {res}, expected done, truncated, 'out_of_tokens'")
    reward = env.reward()
    if reward is not None and not 0.0 <= reward <= 1.0:
        problems.append(f"the reward of a truncated episode is {reward}, expected a number in [0, 1] or None")
    return problems

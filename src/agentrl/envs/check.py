"""`check_env`: verify an environment the way Gymnasium's env checker does. Not a test runner.

Checks: the tool schemas are valid JSON Schema and match what the tools accept; reset and the
expert's episode are deterministic under a seed (tool output compared with wall-clock durations
masked); reset clears all state; the scripted expert (the reference solution)
scores 1.0; an episode ends with an end_reason after at most max_turns turns.
"""

from __future__ import annotations

import inspect
import random
import re
from typing import Any

import jsonschema

from agentrl.envs.base import Env, ToolCall
from agentrl.envs.experts import expert_turns, play
from agentrl.tasks.task import Task


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
        (result,) = env.step([probe])
        if result.status != want:
            problems.append(f"call {probe.name}({probe.arguments}) got status {result.status!r}, expected {want!r}")
    return problems


# Wall-clock durations in tool output ("1 passed in 0.05s", "[timed out after 0.5 s]") are the one
# thing a deterministic environment may not reproduce; the determinism check masks them.
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?s\b")


def _episode(env: Env, task: Task, seed: int, turns: list[list[ToolCall]]) -> tuple[Any, ...]:
    obs = env.reset(task, seed=seed)
    contents = []
    for calls in turns:
        if env.done:
            break
        contents.append(tuple((r.status, _DURATION.sub("<t>s", r.content)) for r in env.step(calls)))
    if not env.done:
        env.final_answer("done")
    return obs, tuple(contents), env.reward(), env.end_reason, tuple(sorted(env.stats().items()))


def check_env(env: Env, task: Task, seed: int = 0) -> dict[str, Any]:
    """Run every check on `env` with `task`; return a summary, or raise EnvCheckError listing all problems.

    An exception raised by the environment during a check is reported as a problem of that check.

    Returns:
        {"reward": expert reward, "turns": expert turns, "end_reason": ...}.

    Raises:
        EnvCheckError: any check failed.
    """
    problems: list[str] = []
    summary: dict[str, Any] = {}
    for check in (_check_static, _check_expert, _check_reset_clears, _check_truncation):
        try:
            problems += check(env, task, seed, summary)
        except Exception as e:  # an env bug found by the check, not a crash of the checker
            problems.append(f"{check.__name__.removeprefix('_check_')}: {type(e).__name__}: {e}")
    if problems:
        raise EnvCheckError(f"{env.name} on {task.id}: " + "; ".join(problems))
    return summary


def _check_static(env: Env, task: Task, seed: int, summary: dict[str, Any]) -> list[str]:
    fresh = env.reset(task, seed=seed)
    problems = _check_schemas(env, fresh.tools) + _check_signatures(env)
    if env.done or env.end_reason is not None:
        problems.append("env is done right after reset")
    return problems + _check_probes(env, task, seed)


def _check_expert(env: Env, task: Task, seed: int, summary: dict[str, Any]) -> list[str]:
    problems = []
    turns = expert_turns(env.name, task, random.Random(seed))
    first = _episode(env, task, seed, turns)
    second = _episode(env, task, seed, turns)
    if first != second:
        problems.append("two episodes with the same seed and calls differ (observation, results, reward or stats)")
    if first[2] != 1.0:
        problems.append(f"the reference solution scored {first[2]}, expected 1.0 (end_reason {first[3]})")
    if first[3] is None:
        problems.append("the episode ended without an end_reason")
    summary.update(reward=first[2], turns=len(first[1]), end_reason=first[3])
    return problems


def _check_reset_clears(env: Env, task: Task, seed: int, summary: dict[str, Any]) -> list[str]:
    fresh = env.reset(task, seed=seed)
    fresh_stats = env.stats()
    random_op = env.name in ("edit-menu", "coding-tools")
    turns = expert_turns(env.name, task, random.Random(seed + 1), random_op=random_op)
    play(env, task, [[ToolCall("__no_such_tool__", {})]] + turns + turns, seed=seed)
    again = env.reset(task, seed=seed)
    if again != fresh or env.stats() != fresh_stats or env.done:
        return ["reset did not clear the state of the previous episode (observation, stats or done)"]
    return []


def _check_truncation(env: Env, task: Task, seed: int, summary: dict[str, Any]) -> list[str]:
    env.reset(task, seed=seed)
    for _ in range(env.max_turns):
        if env.done:
            break
        env.step([ToolCall("__no_such_tool__", {})])
    if not env.done or env.end_reason != "out_of_turns":
        return [f"after max_turns={env.max_turns} bad turns the episode is not out_of_turns ({env.end_reason})"]
    return []

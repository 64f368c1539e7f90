"""Environments: edit menu, coding tools (Read/Edit/Write/Bash), python session, Wordle; the episode
contract (Env, StepResult) and the registry of EnvSpecs."""

from typing import Any

from agentrl.envs.base import Env, Observation, StepResult, ToolCall, ToolResult
from agentrl.envs.check import EnvCheckError, check_env
from agentrl.envs.experts import expert_turns
from agentrl.envs.registry import (
    DRIVER_END_REASONS,
    EnvSpec,
    env_names,
    env_specs,
    get_spec,
    make_env,
    register_env,
    unregister_env,
)

__all__ = ["DRIVER_END_REASONS", "ENV_NAMES", "Env", "EnvCheckError", "EnvSpec", "Observation", "StepResult",
           "ToolCall", "ToolResult", "check_env", "env_names", "env_specs", "expert_turns", "get_spec", "make_env",
           "register_env", "unregister_env"]


def __getattr__(attr: str) -> Any:
    if attr == "ENV_NAMES":  # the registered names at access time (register_env may add some)
        return env_names()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

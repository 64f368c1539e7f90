"""Environments: edit menu, coding tools (Read/Edit/Write/Bash), python session, Wordle."""

from agentrl.envs.base import Env, Observation, ToolCall, ToolResult
from agentrl.envs.check import EnvCheckError, check_env
from agentrl.envs.experts import expert_turns
from agentrl.envs.registry import ENV_NAMES, make_env

__all__ = ["ENV_NAMES", "Env", "EnvCheckError", "Observation", "ToolCall", "ToolResult", "check_env",
           "expert_turns", "make_env"]

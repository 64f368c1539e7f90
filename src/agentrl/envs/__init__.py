"""Environments: edit menu, coding tools (Read/Edit/Write/Bash), python session, Wordle."""

from agentrl.envs.base import Env, Observation, ToolCall, ToolResult

__all__ = ["Env", "Observation", "ToolCall", "ToolResult"]

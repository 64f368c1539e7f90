"""Agent backends: rollout functions the trainer uses instead of agentrl's own episode driver.

Not the backends themselves: the built-in "opencode" is listed by import path
("agentrl.harness.backend:opencode_backend", resolved when a run first uses it: the layering rule keeps
rl/ from importing a front end, and nothing registers itself on import); others are added with
register_agent. The trainer looks a backend up here by the name in `RLConfig.agent.name`.

A factory is called as `factory(cfg, model, tokenizer, sampler, sandbox, sampling)` and returns an object with
`__call__(tasks, *, seed, group_ids, policy_version, on_progress) -> list[Trajectory]` (one episode per
task, same order; further training rows of an episode in `meta["extra_rows"]`, see
agentrl.rollout.trace.expand_rows), `describe() -> dict` and `close()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.registry import Registry, resolve

AgentFactory = Callable[..., Any]


@dataclass(frozen=True)
class AgentSpec:
    """A registered agent backend: its `factory` and optional `check(cfg, tasks)` (module docstring)."""

    name: str
    factory: AgentFactory | str
    check: Callable[..., None] | str | None = None


_AGENTS: Registry[AgentSpec] = Registry("a registered agent backend", (
    AgentSpec("opencode", "agentrl.harness.backend:opencode_backend", check="agentrl.harness.backend:check_opencode"),
), hint="add one with agentrl.rl.agent_backends.register_agent")


def register_agent(name: str, factory: AgentFactory | str, check: Callable[..., None] | str | None = None) -> None:
    """Make `--agent name` (RLConfig.agent.name) run episodes through `factory` (module docstring); `check(cfg, tasks)`
    (optional) raises ValueError / FileNotFoundError before a run starts if the backend cannot run it.
    Either may be a "module:attr" reference (agentrl.registry.resolve)."""
    if not name:
        raise ValueError("an agent backend needs a non-empty name")
    _AGENTS.register(AgentSpec(name, factory, check))


def check_agent(cfg: Any, tasks: Any) -> None:
    """Fail early, before anything is written: the backend is registered and says it can run `cfg`."""
    spec = _AGENTS.lookup(cfg.agent.name, flag="--agent")
    if spec.check is not None:
        resolve(spec.check)(cfg, tasks)


def agent_factory(name: str) -> AgentFactory:
    """The registered factory for `name`.

    Raises:
        ValueError: nothing registered under `name` (lists what is, and how backends get registered).
    """
    return resolve(_AGENTS.lookup(name, flag="--agent").factory)


"""Agent backends: rollout functions the trainer uses instead of agentrl's own episode driver.

Not the backends themselves: front ends register them (agentrl.agents registers "opencode" when it is
imported; the `agentrl` command imports it). The layering rule keeps rl/ from importing a front end, so
the trainer looks a backend up here by the name in `RLConfig.agent`.

A factory is called as `factory(cfg, model, tokenizer, sampler, sandbox, sampling)` and returns an object with
`__call__(tasks, *, seed, group_ids, policy_version, on_progress) -> list[Trajectory]` (one episode per
task, same order; further training rows of an episode in `meta["extra_rows"]`, see
agentrl.rollout.trace.expand_rows), `describe() -> dict` and `close()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

AgentFactory = Callable[..., Any]
_AGENTS: dict[str, AgentFactory] = {}
_CHECKS: dict[str, Callable[..., None]] = {}


def register_agent(name: str, factory: AgentFactory, check: Callable[..., None] | None = None) -> None:
    """Make `RLConfig.agent = name` run episodes through `factory` (module docstring); `check(cfg, tasks)`
    (optional) raises ValueError / FileNotFoundError before a run starts if the backend cannot run it."""
    if not name:
        raise ValueError("an agent backend needs a non-empty name")
    _AGENTS[name] = factory
    if check is not None:
        _CHECKS[name] = check


def check_agent(cfg: Any, tasks: Any) -> None:
    """Fail early, before anything is written: the backend is registered and says it can run `cfg`."""
    agent_factory(cfg.agent)
    if cfg.agent in _CHECKS:
        _CHECKS[cfg.agent](cfg, tasks)


def agent_factory(name: str) -> AgentFactory:
    """The registered factory for `name`.

    Raises:
        ValueError: nothing registered under `name` (lists what is, and how backends get registered).
    """
    if name not in _AGENTS:
        known = ", ".join(sorted(_AGENTS)) or "none"
        raise ValueError(f"--agent {name!r} is not a registered agent backend (registered: {known}); a front end "
                         "registers one with agentrl.rl.backends.register_agent; "
                         "opencode is registered by `import agentrl.agents` (the agentrl command does it)")
    return _AGENTS[name]


def agent_names() -> tuple[str, ...]:
    return tuple(sorted(_AGENTS))

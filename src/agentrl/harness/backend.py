"""The "opencode" agent backend of the trainer (`agentrl train --agent opencode`): its factory and its check
before a run. Named by import path in agentrl.rl.agent_backends; not the episodes (agentrl.harness.episode).
"""

from __future__ import annotations

from typing import Any

from agentrl.harness import MIN_CONTEXT_TOKENS
from agentrl.harness.episode import AgentConfig
from agentrl.harness.opencode import find_opencode
from agentrl.harness.rollouts import AgentRollouts
from agentrl.serve.policy.server import RolloutBudget


def check_opencode(cfg: Any, tasks: Any) -> None:
    """Before a run: opencode is installed, the context fits its prompt, the tasks are bug-fix repositories.

    Raises: ValueError (context too small, tasks without repositories), FileNotFoundError (not installed)."""
    if cfg.sampling.max_context_tokens < MIN_CONTEXT_TOKENS:
        raise ValueError(f"--agent opencode needs --max-context-tokens >= {MIN_CONTEXT_TOKENS} (opencode's own system "
                         f"prompt and tool schemas are about 4,500 tokens), got {cfg.sampling.max_context_tokens}")
    sample = (tasks.train or tasks.heldout)[0]
    if sample.source_file not in sample.files:
        raise ValueError(f"--agent opencode runs on repositories (bug-fix tasks); task {sample.id!r} has none")
    find_opencode(cfg.agent.binary or None)


def opencode_backend(cfg: Any, model: Any, tokenizer: Any, sampler: Any, sandbox: Any, sampling: Any) -> Any:
    """The trainer's opencode backend: AgentRollouts over `model` (agentrl.rl.agent_backends' factory signature)."""
    budget = RolloutBudget(max_calls=cfg.agent.max_calls, max_completion_tokens=cfg.agent.max_calls * cfg.sampling.max_new_tokens,
                           max_wall_s=cfg.agent.timeout_s)
    acfg = AgentConfig(timeout_s=cfg.agent.timeout_s, budget=budget, context_tokens=cfg.sampling.max_context_tokens,
                       output_tokens=cfg.sampling.max_new_tokens, isolation=cfg.agent.isolation,
                       binary=cfg.agent.binary or None, workers=max(1, cfg.sampling.gen_batch))
    return AgentRollouts(model, tokenizer, sampler=sampler, sampling=sampling,
                         max_context_tokens=cfg.sampling.max_context_tokens, sandbox=sandbox, cfg=acfg)

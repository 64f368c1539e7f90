"""Black-box episodes as Trajectories for the trainer, and the rollout function a RunSession calls.

Not the harness (agentrl.harness.opencode / episode) and not the GRPO maths. One Trajectory per episode
(evaluation counts episodes): it carries the episode's first training row, and any further rows (the
harness rewrote its history, so the trace split) ride along in `meta["extra_rows"]` as TraceRows;
`agentrl.rollout.trace.expand_rows` turns an episode into all its rows, each with the episode's reward and advantage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentrl.harness.episode import AgentConfig, AgentEpisode, BlackBoxRunner
from agentrl.rollout.trace import TraceRow
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task

MAX_TRANSCRIPT_FIELD = 600


def _clip(text: Any, n: int = MAX_TRANSCRIPT_FIELD) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return s if len(s) <= n else s[: n // 2] + f" ...[{len(s) - n} chars cut]... " + s[-n // 2:]


def render_agent_transcript(ep: AgentEpisode) -> str:
    """A readable episode: the harness's own events (text, tool calls and results), then the outcome."""
    lines = [f"[harness] opencode ({ep.isolation}), rollout {ep.rollout_id}"]
    for ev in ep.harness.events:
        part = ev.get("part") or {}
        if ev.get("type") == "text":
            lines.append(f"[assistant] {_clip(part.get('text', ''))}")
        elif ev.get("type") == "tool_use":
            state = part.get("state") or {}
            lines.append(f"[tool {part.get('tool')}] {_clip(state.get('input'))}")
            lines.append(f"[result {state.get('status')}] {_clip(state.get('output') or state.get('error') or '')}")
        elif ev.get("type") == "error":
            lines.append(f"[error] {_clip(ev.get('error') or part)}")
    if ep.harness.stderr_tail.strip() and ep.reward is None:
        lines.append(f"[stderr] {_clip(ep.harness.stderr_tail.strip())}")
    lines.append(f"[end] {ep.end_reason}; reward {ep.reward}; {len(ep.trace.calls)} model calls, {len(ep.rows)} rows; "
                 f"harness {ep.harness.wall_s:.1f} s ({ep.harness_overhead_s:.1f} s outside model calls)")
    return "\n".join(lines)


def episode_stats(ep: AgentEpisode) -> dict[str, float]:
    """Per-episode counters (averaged per step by the trainer): model calls, side calls, rows, tool calls,
    completion tokens per call, harness seconds and harness overhead seconds."""
    from agentrl.rollout.trace import side_calls

    calls = ep.trace.calls
    tool_calls = sum(1 for ev in ep.harness.events if ev.get("type") == "tool_use")
    return {"model_calls": float(len(calls)), "side_calls": float(len(side_calls(calls))),
            "rows": float(len(ep.rows)), "tool_calls": float(tool_calls),
            "tokens_per_call": sum(len(c.completion_ids) for c in calls) / max(1, len(calls)),
            "prompt_tokens_per_call": sum(len(c.prompt_ids) for c in calls) / max(1, len(calls)),
            "harness_s": ep.harness.wall_s, "harness_overhead_s": ep.harness_overhead_s,
            "unscorable": float(ep.reward is None)}


def episode_trajectory(ep: AgentEpisode, fallback_prompt: Sequence[int]) -> Trajectory:
    """The episode as one Trajectory (first row; the others in meta["extra_rows"]).

    An episode without a row (the harness made no main model call) gets an empty completion after
    `fallback_prompt` (a nonempty token list); it is unscorable, so it trains nothing.
    """
    first = ep.rows[0] if ep.rows else TraceRow(tuple(fallback_prompt), (), (), (), (), ())
    versions = [v for r in ep.rows for v in r.policy_versions]
    terminated = ep.end_reason == "harness_exit"
    return Trajectory(
        task_id=ep.task_id, group_id=ep.group_id, prompt_ids=first.prompt_ids, completion_ids=first.completion_ids,
        policy_mask=first.policy_mask, sampler_logprobs=first.sampler_logprobs, reward=ep.reward,
        stats=episode_stats(ep), transcript=render_agent_transcript(ep), end_reason=ep.end_reason,
        terminated=terminated, truncated=not terminated,
        meta={"rollout_id": ep.rollout_id, "extra_rows": list(ep.rows[1:]), "model_calls": len(ep.trace.calls)},
        policy_version=min(versions) if versions else None,
    )


class AgentRollouts:
    """`RunSession.rollout` for a black-box agent: a PolicyServer over the rollout model, a BlackBoxRunner.

    Args:
        model, tokenizer: the rollout policy; sampler: a SampleFn (the fast sampler) or None (HF generate).
        sampling: SamplingConfig; max_context_tokens: per model call.
        sandbox: grades the final workspaces; cfg: AgentConfig.
    """

    def __init__(self, model: Any, tokenizer: Any, *, sampler: Any, sampling: Any, max_context_tokens: int,
                 sandbox: Any, cfg: AgentConfig):
        from agentrl.serve.policy.server import PolicyServer

        self.server = PolicyServer(model, tokenizer, sampler=sampler, sampling=sampling,
                                   max_context_tokens=max_context_tokens, budget=cfg.budget,
                                   max_batch=max(1, getattr(sampling, "gen_batch", 16)))
        try:
            self.runner = BlackBoxRunner(self.server, sandbox, cfg)
        except BaseException:
            self.server.close()
            raise
        self.fallback_prompt = tuple(tokenizer("agent", add_special_tokens=False)["input_ids"]) or (0,)

    def __call__(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                 policy_version: int | None = None, on_progress: Any = None) -> list[Trajectory]:
        """One episode per task (the harness is not seeded: opencode's own choices are its own; the
        sampler is, through torch's RNG)."""
        import torch

        torch.manual_seed(seed)
        if policy_version is not None:
            self.server.set_version(policy_version)
        eps = self.runner.run(list(tasks), list(group_ids) if group_ids is not None else None)
        if on_progress is not None:
            on_progress(len(eps), len(eps))
        return [episode_trajectory(ep, self.fallback_prompt) for ep in eps]

    def describe(self) -> dict[str, Any]:
        return self.runner.describe()

    def close(self) -> None:
        self.runner.close()
        self.server.close()

"""Readable transcripts and per-episode rollout counters. Not a logger and not a results-file writer."""

from __future__ import annotations

from collections.abc import Sequence

from agentrl.envs.base import Observation
from agentrl.rollout.trajectory import Turn


def _clip(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + f"... [{len(text) - max_chars} more chars]"


def render_transcript(
    obs: Observation, turns: Sequence[Turn], end_reason: str, reward: float | None, *, max_chars: int = 2000
) -> str:
    """Plain-text transcript: system, user, tool names, each turn's text and each call's status/result."""
    tools = ", ".join(t.get("function", t).get("name", "?") for t in obs.tools) or "none"
    out = [f"[system] {_clip(obs.system, max_chars)}", f"[tools] {tools}", f"[user] {_clip(obs.user, max_chars)}"]
    for k, turn in enumerate(turns, 1):
        cut = " (hit token limit)" if turn.hit_token_limit else ""
        out.append(f"[assistant {k}]{cut} {_clip(turn.text, max_chars)}")
        for res in turn.results:
            why = f" ({res.call.malformed})" if res.call.malformed else ""
            out.append(f"[tool {res.call.name or '?'} -> {res.status}{why}] {_clip(res.content, max_chars)}")
    out.append(f"[end] {end_reason}, " + ("unscorable (no reward)" if reward is None else f"reward {reward:.3f}"))
    return "\n".join(out)


def episode_stats(turns: Sequence[Turn]) -> dict[str, float]:
    """Rollout counters: turns, calls by status, malformed-call classes, token-limit turns, policy tokens."""
    stats: dict[str, float] = {
        "turns": len(turns),
        "calls": 0,
        "calls_ok": 0,
        "calls_failed": 0,
        "calls_malformed": 0,
        "turns_hit_token_limit": sum(t.hit_token_limit for t in turns),
        "policy_tokens": sum(len(t.completion_ids) for t in turns),
    }
    for turn in turns:
        stats["calls"] += len(turn.calls)
        for res in turn.results:
            stats[f"calls_{res.status}"] = stats.get(f"calls_{res.status}", 0) + 1
            if res.call.malformed:
                key = "malformed_" + res.call.malformed.split(":", 1)[0]
                stats[key] = stats.get(key, 0) + 1
    return stats

"""Readable transcripts and per-episode rollout counters. Not a logger and not a results-file writer."""

from __future__ import annotations

from collections.abc import Sequence

from agentrl.envs.base import Observation
from agentrl.rollout.trajectory import Turn

NAME_CHARS = 200  # a tool name as shown: the model writes it, so a long one is clipped like any other text


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
            why = f" ({_clip(res.call.malformed, max_chars)})" if res.call.malformed else ""
            name = _clip(res.call.name, NAME_CHARS) or "?"
            out.append(f"[tool {name} -> {res.status}{why}] {_clip(res.content, max_chars)}")
    out.append(f"[end] {end_reason}, " + ("unscorable (no reward)" if reward is None else f"reward {reward:.3f}"))
    return "\n".join(out)


def episode_stats(turns: Sequence[Turn]) -> dict[str, float]:
    """Rollout counters: turns, calls by status, malformed-call classes, token-limit turns, policy tokens.

    The call counters use the environments' names (`tool_calls`, `ok_calls`, `failed_calls`,
    `malformed_calls`; agentrl.envs.toolenv.BASE_STATS), so an episode's stats hold one counter per
    concept: for a ToolEnv both count the same results, and the driver's value stands in for any env.
    """
    stats: dict[str, float] = {
        "turns": len(turns),
        "tool_calls": 0,
        "ok_calls": 0,
        "failed_calls": 0,
        "malformed_calls": 0,
        "turns_hit_token_limit": sum(t.hit_token_limit for t in turns),
        "policy_tokens": sum(len(t.completion_ids) for t in turns),
    }
    for turn in turns:
        stats["tool_calls"] += len(turn.calls)
        for res in turn.results:
            stats[f"{res.status}_calls"] = stats.get(f"{res.status}_calls", 0) + 1
            if res.call.malformed:
                key = "malformed_" + res.call.malformed.split(":", 1)[0]
                stats[key] = stats.get(key, 0) + 1
    return stats


def turn_records(turns: Sequence[Turn], *, max_chars: int = 4000) -> list[dict]:
    """The turns as JSON-ready records for the results file and the HTML transcript browser.

    Returns: one {"text", "hit_token_limit", "calls": [{"name", "arguments", "status", "malformed",
    "content"}]} per turn, texts clipped to `max_chars` characters with a visible mark.
    """
    out = []
    for turn in turns:
        calls = [{"name": _clip(r.call.name, NAME_CHARS) or "?",
                  "arguments": r.call.arguments if isinstance(r.call.arguments, dict)
                  else {"raw": _clip(str(r.call.arguments), max_chars)}, "status": r.status,
                  "malformed": _clip(r.call.malformed, max_chars) if r.call.malformed else None,
                  "content": _clip(r.content, max_chars)} for r in turn.results]
        # calls the environment never answered (the episode ended in error) are still shown
        calls += [{"name": _clip(c.name, NAME_CHARS) or "?",
                   "arguments": c.arguments if isinstance(c.arguments, dict) else {}, "status": "not run",
                   "malformed": _clip(c.malformed, max_chars) if c.malformed else None, "content": ""}
                  for c in turn.calls[len(turn.results):]]
        out.append({"text": _clip(turn.text, max_chars), "hit_token_limit": bool(turn.hit_token_limit),
                    "calls": calls})
    return out

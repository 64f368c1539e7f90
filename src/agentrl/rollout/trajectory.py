"""Turn and Trajectory: what one episode produced, token for token. Not the sampler or driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.base import ToolCall, ToolResult


@dataclass(frozen=True)
class Turn:
    """One assistant turn and the observation appended after it.

    Attributes:
        completion_ids: token ids sampled by the policy this turn, exactly as sampled.
        sampler_logprobs: sampler log-probability of each id in `completion_ids` (same length).
        text: decoded text of `completion_ids` (for transcripts and parsing).
        calls: parsed tool calls, in order.
        results: the environment's results, aligned with `calls`.
        observation_ids: token ids appended after the turn (end-of-turn glue, tool-response
            blocks, next assistant header); not sampled, policy mask 0.
        hit_token_limit: the turn ended at max_new_tokens without an end-of-turn token.
    """

    completion_ids: tuple[int, ...]
    sampler_logprobs: tuple[float, ...]
    text: str
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    observation_ids: tuple[int, ...] = ()
    hit_token_limit: bool = False


@dataclass(frozen=True)
class Trajectory:
    """One episode, ready for the trainer.

    Attributes:
        task_id: the task; group_id: the GRPO group (episodes of one prompt share it; the trainer
            groups by this id, not by row position).
        prompt_ids: [P] the rendered prompt (system, user, tool schemas, assistant header).
        completion_ids: [C] everything after the prompt: sampled turns and observations, in order.
        policy_mask: [C] 1 where the token was sampled by the policy, 0 for observation tokens.
        sampler_logprobs: [C] sampler log-prob of each completion token (0.0 where mask is 0).
        reward: the environment's reward on the final state (float, in [0, 1] for the built-ins), or
            None when the episode is unscorable (env_error, or the sandbox could not grade it): it
            then gets advantage 0 and stays out of its group's baseline.
        turns: the turns, in order.
        stats: tool statistics of the episode (agentrl.envs), plus rollout counters.
        transcript: a readable rendering of the whole episode.
        end_reason: the environment's end reason ("final_answer", "submitted", "solved",
            "out_of_guesses", "out_of_turns", ...; agentrl.envs.EnvSpec.end_reasons) or the driver's
            ("out_of_tokens", "env_error").
        terminated: ended inside the task (Gymnasium's sense), as the environment said;
            truncated: cut short by a limit or an error ("out_of_turns", "out_of_tokens", "env_error").
            Exactly one of the two is True for a finished episode.
        meta: extras ("error": what failed for an env_error, ...).
        policy_version: the optimizer step whose weights sampled this episode (None: not recorded);
            asynchronous training bounds its staleness.
    """

    task_id: str
    group_id: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    policy_mask: tuple[int, ...]
    sampler_logprobs: tuple[float, ...]
    reward: float | None
    turns: tuple[Turn, ...] = ()
    stats: dict[str, float] = field(default_factory=dict)
    transcript: str = ""
    end_reason: str = ""
    terminated: bool = False
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    policy_version: int | None = None

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.policy_mask)

    @property
    def scorable(self) -> bool:
        """The environment gave a reward (False: unscorable, trained with advantage 0)."""
        return self.reward is not None

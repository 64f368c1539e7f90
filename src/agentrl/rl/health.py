"""Run-health checks: a training step whose behaviour jumps against the run's own recent steps.

Not a stopping rule and not a metric: it reads the per-step metrics the trainer already records and says
when something changed abruptly, so that a collapsing run says so in its log, its results file and its
report instead of only showing zero rewards. The kinds (each one a real failure seen on these labs):

- `malformed_calls`: tool calls per episode that do not parse jump (Qwen2.5-Coder-0.5B at lr 5e-6 switched
  its tool-call key from `arguments` to `parameters` after two updates: every call malformed);
- `end_reason`: the share of episodes ending for one reason moves by a large fraction (e.g. final answers
  replaced by out_of_tokens / out_of_turns);
- `logprob_gap`: the sampler's log-probs drift from the trainer's recomputation (a sampler bug, a dtype
  change, or a policy far from the one that sampled);
- `reward_collapse`: the mean training reward falls to a small fraction of its recent level.

The baseline of each metric is the median of up to `window` earlier steps; a warning names the step, the
metric, its value and the baseline. A metric that warned at the step before does not warn again until it
has been quiet for a step (one warning per jump, not one per step of a collapsed run).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

END_REASON_PREFIX = "rollout/end_reason/"


@dataclass(frozen=True)
class HealthThresholds:
    """When a step's metric counts as a jump (units in the names).

    Attributes:
        min_history: earlier steps needed before any check runs.
        window: earlier steps whose median is the baseline.
        malformed_per_episode: rise in malformed tool calls per episode over the baseline ...
        malformed_factor: ... that also reaches this many times the baseline (a model that is often
            malformed from the start, e.g. a raw model, varies by more than the absolute rise).
        end_reason_fraction: change in one end reason's share of episodes (0-1).
        logprob_gap_nats: |sampler - trainer| mean log-prob gap (nats/token) above which a rise counts ...
        logprob_gap_factor: ... when it is also this many times the baseline.
        reward_fraction: reward_mean at or below this fraction of a baseline ...
        reward_min_baseline: ... of at least this much (a run near 0 all along has not collapsed).
    """

    min_history: int = 2
    window: int = 5
    malformed_per_episode: float = 0.5
    malformed_factor: float = 2.0
    end_reason_fraction: float = 0.4
    logprob_gap_nats: float = 0.02
    logprob_gap_factor: float = 5.0
    reward_fraction: float = 0.25
    reward_min_baseline: float = 0.2


def _series(history: Sequence[Mapping[str, Any]], key: str, window: int) -> list[float]:
    vals = [h.get(key) for h in history[-window:]]
    return [float(v) for v in vals if isinstance(v, int | float) and v == v]


def _value(metrics: Mapping[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if isinstance(v, int | float) and v == v else None


def step_warnings(history: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any], *, step: int,
                  th: HealthThresholds = HealthThresholds()) -> list[dict[str, Any]]:
    """The warnings of training step `step` whose metrics are `metrics`, against the earlier `history`.

    Args:
        history: the earlier steps' metric dicts (the results file's `steps`, oldest first), each with
            the keys the trainer records (`tools/malformed_calls`, `rollout/end_reason/<reason>`,
            `logprob_gap_abs`, `reward_mean`; absent or None values are skipped).
        metrics: this step's metrics, the same keys.
        step: this step's index (0-based), copied into each warning.
        th: thresholds.

    Returns:
        [{"step", "kind", "metric", "value", "baseline", "message"}] (empty when nothing jumped or the
        history is shorter than th.min_history).
    """
    if len(history) < th.min_history:
        return []
    out: list[dict[str, Any]] = []

    def check(kind: str, key: str, fires: Any, what: str) -> None:
        value, base = _value(metrics, key), _series(history, key, th.window)
        if value is None or not base:
            return
        baseline = statistics.median(base)
        if not fires(value, baseline):
            return
        previous, before = _value(history[-1], key), _series(history[:-1], key, th.window)
        if len(history) > th.min_history and previous is not None and before and fires(previous, statistics.median(before)):
            return  # the same jump fired at the step before: one warning per jump
        out.append({"step": step, "kind": kind, "metric": key, "value": round(value, 6), "baseline": round(baseline, 6),
                    "message": f"step {step}: {what} {value:.4g} (median of the {len(base)} steps before: {baseline:.4g})"})

    check("malformed_calls", "tools/malformed_calls", lambda v, b: v >= b + th.malformed_per_episode and v >= th.malformed_factor * b,
          "malformed tool calls per episode jumped to")
    for key in sorted({k for k in metrics if k.startswith(END_REASON_PREFIX)}):
        reason = key[len(END_REASON_PREFIX):]
        check("end_reason", key, lambda v, b: abs(v - b) >= th.end_reason_fraction,
              f"share of episodes ending '{reason}' moved to")
    check("logprob_gap", "logprob_gap_abs",
          lambda v, b: v >= th.logprob_gap_nats and v >= th.logprob_gap_factor * max(b, 1e-9),
          "sampler/trainer |log-prob gap| (nats/token) jumped to")
    check("reward_collapse", "reward_mean",
          lambda v, b: b >= th.reward_min_baseline and v <= th.reward_fraction * b,
          "mean training reward fell to")
    return out

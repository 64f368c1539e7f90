"""Black-box traces: every model call of one rollout as token ids, and the training rows rebuilt from them.

Not the server that records them (agentrl.serve.policy.server) and not the harness (agentrl.harness).
An agent harness we do not own (opencode, any OpenAI-compatible client) sends chat requests; the policy
server renders each request to prompt ids, samples completion ids with log-probs and records one
`TraceCall`. Training rows are rebuilt afterwards by exact token prefix:

  * a call whose prompt ids start with an open row's ids (that row's prompt + everything appended so
    far) continues the row: the new prompt tokens after the prefix are appended with policy mask 0
    (tool results, the next assistant header), the completion with mask 1 and its sampler log-probs;
  * a call whose prompt does not extend any open row (the harness rewrote history: compaction,
    a dropped or edited message, a different system prompt) starts a new row;
  * side calls (requests without tools in a rollout whose main calls carry tools: opencode's title or
    summary generation) are recognised and left out of the rows.

So the rows hold exactly the tokens the policy saw and sampled, and each sampled token is trained once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentrl.rollout.trajectory import Trajectory

FINISH_REASONS = ("stop", "tool_calls", "length")


@dataclass(frozen=True)
class TraceCall:
    """One model call of a rollout, as the policy server sampled it.

    Attributes:
        index: position of the call in the rollout (0, 1, ...).
        prompt_ids: [P] token ids the sampler was conditioned on (template rendering of the request,
            or the previous call's ids extended token-in/token-out).
        completion_ids: [C] sampled token ids, exactly as sampled (ending with the end-of-turn id unless
            `finish_reason == "length"`).
        logprobs: [C] float, the sampler's natural-log probability of each completion id.
        finish_reason: "stop" | "tool_calls" | "length" (OpenAI's vocabulary).
        has_tools: the request carried tool schemas (a request without them is a side call when the
            rollout's other calls have tools).
        policy_version: the optimizer step whose weights sampled this call.
        overridden: client sampling parameters the server replaced by the trainer's ({name: client value}).
        extends_call: index of the earlier call whose ids this prompt extends token for token, or -1
            when the prompt was rendered from the messages afresh.
        wall_s: seconds from request arrival to the sampled completion.
    """

    index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    has_tools: bool = True
    policy_version: int = 0
    overridden: dict[str, Any] = field(default_factory=dict)
    extends_call: int = -1
    wall_s: float = 0.0

    def __post_init__(self):
        if len(self.completion_ids) != len(self.logprobs):
            raise ValueError(f"TraceCall {self.index}: {len(self.completion_ids)} completion ids but "
                             f"{len(self.logprobs)} log-probs")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"TraceCall {self.index}: finish_reason {self.finish_reason!r} is not one of "
                             f"{FINISH_REASONS}")
        if not self.prompt_ids:
            raise ValueError(f"TraceCall {self.index}: empty prompt")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (lists for tuples)."""
        d = asdict(self)
        for k in ("prompt_ids", "completion_ids", "logprobs"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceCall:
        """Inverse of `to_dict`. Raises ValueError/KeyError on a malformed record."""
        return cls(index=int(d["index"]), prompt_ids=tuple(int(t) for t in d["prompt_ids"]),
                   completion_ids=tuple(int(t) for t in d["completion_ids"]),
                   logprobs=tuple(float(x) for x in d["logprobs"]), finish_reason=str(d["finish_reason"]),
                   has_tools=bool(d.get("has_tools", True)), policy_version=int(d.get("policy_version", 0)),
                   overridden=dict(d.get("overridden") or {}), extends_call=int(d.get("extends_call", -1)),
                   wall_s=float(d.get("wall_s", 0.0)))


@dataclass(frozen=True)
class Trace:
    """All model calls of one rollout.

    Attributes:
        rollout_id: the id the harness used (API key or URL prefix).
        calls: the calls in arrival order.
        budget_exceeded: why the server refused a call ("" if it never did): "max_calls",
            "max_tokens" or "wall_time"; such a rollout is unscorable.
        refused: requests answered with an error (bad request, over budget), counted.
        failed: the first sampler failure ("" if none): such a rollout is unscorable too.
    """

    rollout_id: str
    calls: tuple[TraceCall, ...] = ()
    budget_exceeded: str = ""
    refused: int = 0
    failed: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "calls": [c.to_dict() for c in self.calls],
                "budget_exceeded": self.budget_exceeded, "refused": self.refused, "failed": self.failed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        return cls(rollout_id=str(d["rollout_id"]), calls=tuple(TraceCall.from_dict(c) for c in d["calls"]),
                   budget_exceeded=str(d.get("budget_exceeded", "")), refused=int(d.get("refused", 0)),
                   failed=str(d.get("failed", "")))

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.completion_ids) for c in self.calls)


@dataclass(frozen=True)
class TraceRow:
    """One training row rebuilt from a trace.

    Attributes:
        prompt_ids: [P] the first call's prompt.
        completion_ids: [C] everything after it: sampled tokens and the non-sampled tokens between calls.
        policy_mask: [C] 1 exactly on sampled tokens.
        sampler_logprobs: [C] sampler log-probs (0.0 where the mask is 0).
        calls: indices of the trace calls this row holds, in order.
        policy_versions: the policy version of each of those calls.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    policy_mask: tuple[int, ...]
    sampler_logprobs: tuple[float, ...]
    calls: tuple[int, ...]
    policy_versions: tuple[int, ...]

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.policy_mask)


def side_calls(calls: Sequence[TraceCall]) -> set[int]:
    """Indices of side calls: requests without tools in a rollout whose other calls carry tools
    (title / summary generation). A rollout in which no call has tools has no side calls."""
    if not any(c.has_tools for c in calls):
        return set()
    return {c.index for c in calls if not c.has_tools}


@dataclass
class _OpenRow:
    prompt: list[int]
    completion: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.completion

    def add(self, call: TraceCall, gap: Sequence[int]) -> None:
        self.completion += list(gap) + list(call.completion_ids)
        self.mask += [0] * len(gap) + [1] * len(call.completion_ids)
        self.logps += [0.0] * len(gap) + list(call.logprobs)
        self.calls.append(call.index)
        self.versions.append(call.policy_version)

    def freeze(self) -> TraceRow:
        return TraceRow(tuple(self.prompt), tuple(self.completion), tuple(self.mask), tuple(self.logps),
                        tuple(self.calls), tuple(self.versions))


def rows_from_trace(trace: Trace | Sequence[TraceCall]) -> list[TraceRow]:
    """Rebuild training rows from a rollout's calls (module docstring: continuation by exact prefix,
    a new row on a history rewrite, side calls left out).

    A call continues the most recent open row whose ids are a prefix of its prompt. Rows are returned in the order
    they were opened; a call with an empty completion adds nothing to train but still extends its row.

    Returns:
        list[TraceRow]; `sum(r.num_policy_tokens)` equals the completion tokens of the non-side calls.
    """
    calls = list(trace.calls if isinstance(trace, Trace) else trace)
    skip = side_calls(calls)
    rows: list[_OpenRow] = []
    for call in calls:
        if call.index in skip:
            continue
        prompt = list(call.prompt_ids)
        row = next((r for r in reversed(rows) if len(r.ids) <= len(prompt) and prompt[: len(r.ids)] == r.ids), None)
        if row is None:
            row = _OpenRow(prompt=prompt)
            rows.append(row)
            row.add(call, [])
        else:
            row.add(call, prompt[len(row.ids):])
    return [r.freeze() for r in rows]


def expand_rows(trajs: Sequence[Trajectory], advantages: Sequence[float]) -> tuple[list[Trajectory], list[float]]:
    """Every training row of every episode, with its episode's advantage.

    An episode is one Trajectory (its first row); the further rows of a black-box episode whose trace
    split (a history rewrite) are TraceRows in its `meta["extra_rows"]`. Advantages are computed per
    episode (the group baseline counts episodes, not rows) and each row trains with its episode's.

    Returns:
        (rows, advantages): the episodes' Trajectories each followed by its extra rows, and one
        advantage per row.
    """
    rows, adv = [], []
    for tr, a in zip(trajs, advantages, strict=True):
        rows.append(tr)
        adv.append(float(a))
        for r in tr.meta.get("extra_rows", ()):
            rows.append(Trajectory(
                task_id=tr.task_id, group_id=tr.group_id, prompt_ids=r.prompt_ids, completion_ids=r.completion_ids,
                policy_mask=r.policy_mask, sampler_logprobs=r.sampler_logprobs, reward=tr.reward,
                end_reason=tr.end_reason, terminated=tr.terminated, truncated=tr.truncated,
                meta={"rollout_id": tr.meta.get("rollout_id"), "continuation_of": tr.task_id},
                policy_version=min(r.policy_versions) if r.policy_versions else tr.policy_version))
            adv.append(float(a))
    return rows, adv

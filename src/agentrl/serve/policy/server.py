"""PolicyServer: the trainer's policy behind OpenAI chat completions, recording every call's token ids.

Not the HTTP layer (agentrl.serve.policy.app) and not the harness (agentrl.harness). One object serves
many rollouts at once (a whole GRPO group): the rollout is named by the API key (or a URL prefix);
each request is rendered with the model's own chat template, sampled by the trainer's sampler
(agentrl.rollout: HF generate or the fast sampler) with the trainer's distribution, and recorded as a
`TraceCall` (prompt ids, completion ids, sampler log-probs, finish reason) under its rollout.

Token-in/token-out across calls: when a request's history is an earlier call's history plus the reply
this server gave it (recognised by content and parsed calls), the prompt ids are that call's prompt +
sampled ids + the template's rendering of the new messages (agentrl.chat.tito.between_turns_ids), so
the sampled tokens are never re-tokenized and the row continues by exact prefix. Any other request
(a rewritten history, a side call) is rendered afresh.

Concurrent requests are batched: a worker thread drains the queue (up to `max_batch` contexts, waiting
`batch_wait_s` for more) and samples them in one call; weight updates wait for the batch in flight.
Per-rollout budgets (calls, completion tokens, wall time) are enforced here, because harnesses do not
honour their own step limits.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.template import encode, render_text
from agentrl.chat.tito import between_turns_ids, turn_format
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sample_turns
from agentrl.rollout.trace import Trace, TraceCall
from agentrl.serve.policy.chat_format import (
    ChatRequest,
    Reply,
    RequestError,
    build_reply,
    history_key,
    reply_key,
)

log = logging.getLogger("agentrl.serve")


@dataclass(frozen=True)
class RolloutBudget:
    """Limits per rollout, enforced by the server (a refused call marks the rollout budget-exceeded).

    Attributes:
        max_calls: model calls (side calls included).
        max_completion_tokens: sampled tokens over all calls.
        max_wall_s: seconds from the rollout's opening (or its first call).
    """

    max_calls: int = 64
    max_completion_tokens: int = 32768
    max_wall_s: float = 900.0

    def __post_init__(self):
        for name in ("max_calls", "max_completion_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"RolloutBudget.{name} must be an integer, got {type(v).__name__} {repr(v)[:80]}")
        if isinstance(self.max_wall_s, bool) or not isinstance(self.max_wall_s, (int, float)):
            w = self.max_wall_s
            raise ValueError(f"RolloutBudget.max_wall_s must be a number of seconds, got {type(w).__name__} {repr(w)[:80]}")
        if self.max_calls < 1 or self.max_completion_tokens < 1 or not 0 < self.max_wall_s < math.inf:
            raise ValueError(f"bad RolloutBudget {self}: every limit must be positive (and finite)")

    @classmethod
    def from_json(cls, body: Any) -> RolloutBudget:
        """A budget from a request body: an object with some of the fields (missing ones: defaults).

        Raises:
            ValueError: not an object, an unknown field (named, with the known ones), or a bad value.
        """
        if not isinstance(body, dict):
            raise ValueError(f"a rollout budget is a JSON object with some of {', '.join(_BUDGET_FIELDS)}; "
                             f"got {type(body).__name__}")
        unknown = sorted(set(body) - set(_BUDGET_FIELDS))
        if unknown:
            raise ValueError(f"unknown rollout budget field(s) {unknown}; known: {', '.join(_BUDGET_FIELDS)}")
        return cls(**body)


_BUDGET_FIELDS = ("max_calls", "max_completion_tokens", "max_wall_s")


@dataclass
class _Call:
    """A recorded call plus what it takes to recognise its continuation."""

    record: TraceCall
    n_messages: int
    history: str
    reply: str


@dataclass
class _Rollout:
    rollout_id: str
    budget: RolloutBudget
    opened_s: float = field(default_factory=time.monotonic)
    calls: list[_Call] = field(default_factory=list)
    budget_exceeded: str = ""
    failed: str = ""  # the first sampler failure of this rollout
    refused: int = 0
    tokens_reserved: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self) -> Trace:
        with self.lock:
            return Trace(self.rollout_id, tuple(c.record for c in self.calls), self.budget_exceeded, self.refused,
                         self.failed)


@dataclass
class _Job:
    context: list[int]
    budget: int
    future: concurrent.futures.Future


class _Batcher:
    """One worker thread that samples queued contexts in batches; `lock` guards the weights."""

    def __init__(self, sample_fn, max_batch: int, wait_s: float):
        self.sample_fn, self.max_batch, self.wait_s = sample_fn, max_batch, wait_s
        self.q: queue.Queue[_Job | None] = queue.Queue()
        self.lock = threading.Lock()
        self.version = 0
        self.thread = threading.Thread(target=self._loop, name="agentrl-policy-sampler", daemon=True)
        self.thread.start()

    def submit(self, context: list[int], budget: int) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.q.put(_Job(context, budget, fut))
        return fut

    def _collect(self, first: _Job) -> list[_Job]:
        jobs, deadline = [first], time.monotonic() + self.wait_s
        while len(jobs) < self.max_batch:
            try:
                job = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self.q.put(None)
                break
            jobs.append(job)
        return jobs

    def _loop(self) -> None:
        while (first := self.q.get()) is not None:
            jobs = [j for j in self._collect(first) if j.future.set_running_or_notify_cancel()]
            if not jobs:
                continue
            try:
                with self.lock:
                    samples = self.sample_fn([j.context for j in jobs], [j.budget for j in jobs])
                    version = self.version
                for j, s in zip(jobs, samples, strict=True):
                    j.future.set_result((s, version))
            except BaseException as e:  # noqa: BLE001 - handed to every waiting request, the worker lives on
                log.exception("policy sampler failed on a batch of %d", len(jobs))
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(e)

    def close(self) -> None:
        self.q.put(None)
        self.thread.join(timeout=30)


def _longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token of `tokenizer` can stand for (at least 1): the longest vocabulary
    entry (byte-level BPE writes one character per byte; sentencepiece one per character) or the longest
    added token's content."""
    longest = 1
    try:
        longest = max(longest, max(map(len, tokenizer.get_vocab()), default=1))
        longest = max(longest, max((len(str(t)) for t in tokenizer.all_special_tokens), default=1))
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        longest = max(longest, max((len(getattr(t, "content", str(t))) for t in decoder.values()), default=1))
    except Exception:  # noqa: BLE001 - no readable vocabulary: no early bound (the template path still checks)
        return 1 << 30
    return longest


class PolicyServer:
    """The policy behind OpenAI-compatible chat completions, with per-rollout traces and budgets.

    Args:
        model: an HF causal LM (eval mode); tokenizer: its tokenizer with a chat template.
        sampler: a token-level `SampleFn` (contexts, budgets) -> Samples, e.g. the fast sampler; default
            HF `generate` through `sample_turns` with `sampling`.
        sampling: the trainer's sampling config (temperature, top-k/top-p, max_new_tokens per call).
        max_context_tokens: prompt + completion cap per call; longer prompts are refused (400).
        budget: default per-rollout budget.
        auto_open: accept requests for rollouts never opened (standalone use); the trainer opens each
            rollout itself and refuses unknown ones (404).
        max_auto_open: open rollouts at most when a client opens one (auto_open, or POST /rollouts/<id>); each
            keeps its trace until DELETE /rollouts/<id>, so past it a client's open is refused (429) and one that
            sends a new API key per request cannot grow the server's memory without bound. The trainer's own
            opens (open_rollout in process) are not capped.
        model_name: the id `GET /v1/models` lists.
        max_batch / batch_wait_s: request batching (contexts per sampler call, seconds to wait for more).
        max_request_bytes: larger request bodies are refused (413) before parsing.
        enable_thinking: the template's thinking switch (False: non-thinking where supported).
    """

    def __init__(self, model: Any, tokenizer: Any, *, sampler: Any = None, sampling: SamplingConfig | None = None,
                 max_context_tokens: int = 16384, budget: RolloutBudget | None = None, auto_open: bool = False,
                 model_name: str = "agentrl-policy", max_batch: int = 16, batch_wait_s: float = 0.01,
                 max_request_bytes: int = 8 << 20, enable_thinking: bool = False, max_auto_open: int = 4096):
        if max_auto_open < 1:
            raise ValueError(f"max_auto_open must be >= 1, got {max_auto_open}")
        self.model, self.tokenizer = model, tokenizer
        self.max_auto_open = max_auto_open
        self.sampling = sampling or SamplingConfig()
        self.max_context_tokens, self.auto_open, self.model_name = max_context_tokens, auto_open, model_name
        self.budget = budget or RolloutBudget()
        self.max_request_bytes, self.enable_thinking = max_request_bytes, enable_thinking
        self.fmt = turn_format(tokenizer, enable_thinking=enable_thinking)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.fmt.eot_ids[0]
        self._rollouts: dict[str, _Rollout] = {}
        self._lock = threading.Lock()
        self._batcher = _Batcher(sampler or self._hf_sample, max_batch=max_batch, wait_s=batch_wait_s)
        self.stats = {"requests": 0, "refused": 0, "completion_tokens": 0, "prompt_tokens": 0}
        self._max_token_chars = _longest_token_chars(tokenizer)

    # -- rollouts ---------------------------------------------------------------------------------
    def open_rollout(self, rollout_id: str, budget: RolloutBudget | None = None, *, client: bool = False) -> None:
        """Register a rollout (its API key). client: opened by an HTTP client, so max_auto_open applies.
        Raises ValueError if it is open already or the id is empty; RequestError (429) past max_auto_open."""
        if not rollout_id or not isinstance(rollout_id, str):
            raise ValueError("rollout id must be a non-empty string")
        with self._lock:
            if rollout_id in self._rollouts:
                raise ValueError(f"rollout {rollout_id!r} is already open")
            if client:
                self._check_room()
            self._rollouts[rollout_id] = _Rollout(rollout_id, budget or self.budget)

    def _check_room(self) -> None:
        """RequestError 429 when max_auto_open rollouts are open (self._lock held)."""
        if len(self._rollouts) >= self.max_auto_open:
            raise RequestError(429, f"{len(self._rollouts)} rollouts are open, the most this server keeps "
                               f"(--max-open-rollouts); close finished ones with DELETE /rollouts/<id>",
                               "too_many_rollouts")

    def trace(self, rollout_id: str) -> Trace:
        """The calls recorded so far. Raises KeyError for an unknown rollout."""
        with self._lock:
            ro = self._rollouts[rollout_id]
        return ro.trace()

    def stop_reason(self, rollout_id: str) -> str:
        """Why the rollout's harness should be stopped now: "budget_<what>" when a call went over budget,
        "policy_error" when sampling a call failed (harnesses retry failed calls with back-off), else ""."""
        with self._lock:
            ro = self._rollouts.get(rollout_id)
        if ro is None:
            return ""
        with ro.lock:
            return f"budget_{ro.budget_exceeded}" if ro.budget_exceeded else ("policy_error" if ro.failed else "")

    def close_rollout(self, rollout_id: str) -> Trace:
        """Forget the rollout and return its trace; later requests with its key are refused (404).
        Raises KeyError for an unknown rollout."""
        with self._lock:
            ro = self._rollouts.pop(rollout_id)
        return ro.trace()

    def rollout_ids(self) -> list[str]:
        with self._lock:
            return list(self._rollouts)

    def _rollout(self, rollout_id: str | None) -> _Rollout:
        if not rollout_id:
            raise RequestError(401, "no rollout id: send it as the API key (Authorization: Bearer <id>) or as "
                               "the URL prefix /r/<id>/v1/...", "missing_rollout")
        with self._lock:
            ro = self._rollouts.get(rollout_id)
            if ro is None and self.auto_open:
                self._check_room()
                ro = self._rollouts[rollout_id] = _Rollout(rollout_id, self.budget)
        if ro is None:
            raise RequestError(404, f"unknown rollout {rollout_id!r} (not open, or already closed)", "unknown_rollout")
        return ro

    def refuse(self, rollout_id: str | None) -> None:
        """Count a refused request against its rollout (if known) and the server."""
        self.stats["refused"] += 1
        with self._lock:
            ro = self._rollouts.get(rollout_id or "")
        if ro is not None:
            with ro.lock:
                ro.refused += 1

    # -- weights ----------------------------------------------------------------------------------
    @property
    def policy_version(self) -> int:
        return self._batcher.version

    def set_version(self, version: int) -> None:
        """Set the policy version without copying weights (the model object is shared with the trainer)."""
        with self._batcher.lock:
            self._batcher.version = int(version)

    # -- completions ------------------------------------------------------------------------------
    def _hf_sample(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        return sample_turns(self.model, contexts, stop_ids=self.fmt.eot_ids[:1], pad_id=self.pad_id,
                            cfg=self.sampling, max_new_tokens=budgets)

    def _render(self, req: ChatRequest) -> list[int]:
        try:
            text = render_text(self.tokenizer, req.messages, req.tools or None, add_generation_prompt=True,
                               enable_thinking=self.enable_thinking)
        except Exception as e:  # noqa: BLE001 - a template error on client input is the client's 400
            raise RequestError(400, f"the chat template cannot render these messages: {type(e).__name__}: "
                               f"{str(e)[:300]}") from None
        return encode(self.tokenizer, text)

    def _extend(self, ro: _Rollout, req: ChatRequest) -> tuple[list[int], int] | None:
        """(prompt ids, index of the extended call) when `req` continues an earlier call of `ro`."""
        with ro.lock:
            calls = list(ro.calls)
        for c in reversed(calls):
            n = c.n_messages
            rest = req.messages[n + 1:]
            if len(req.messages) <= n + 1 or any(m["role"] == "assistant" for m in rest):
                continue
            prev = req.messages[n]
            if prev["role"] != "assistant" or reply_key(prev.get("content"), prev.get("tool_calls")) != c.reply:
                continue
            if history_key(req.messages[:n], req.tools) != c.history:
                continue
            try:
                glue = between_turns_ids(rest, self.tokenizer, tools=req.tools or None,
                                         hit_token_limit=c.record.finish_reason == "length",
                                         enable_thinking=self.enable_thinking, fmt=self.fmt)
            except Exception:  # noqa: BLE001 - fall back to a fresh rendering (a new row)
                return None
            return list(c.record.prompt_ids) + list(c.record.completion_ids) + glue, c.record.index
        return None

    def _check_size(self, req: ChatRequest) -> None:
        """Refuse (400) a request that cannot fit the context, before any template or tokenizer runs.

        No token covers more than `_max_token_chars` characters, and templates write system, user and
        tool message content verbatim (assistant turns they may shorten: Qwen3 drops earlier reasoning),
        so that content at more than `_max_token_chars` characters per context token is over the limit
        whatever the tokenizer makes of it.
        """
        chars = sum(len(m.get("content") or "") for m in req.messages if m["role"] != "assistant")
        floor = chars // self._max_token_chars
        if floor >= self.max_context_tokens:
            raise RequestError(400, f"the messages hold {chars} characters: at least {floor} tokens, over the "
                               f"{self.max_context_tokens}-token context", "context_length_exceeded")

    def _admit(self, ro: _Rollout, n_prompt: int, client_cap: int | None) -> int:
        """Check the budgets; reserve and return this call's completion-token cap."""
        b = ro.budget
        with ro.lock:
            why = ""
            if len(ro.calls) >= b.max_calls:
                why = "max_calls"
            elif ro.tokens_reserved >= b.max_completion_tokens:
                why = "max_tokens"
            elif time.monotonic() - ro.opened_s > b.max_wall_s:
                why = "wall_time"
            if why:
                ro.budget_exceeded = ro.budget_exceeded or why
                limit = {"max_calls": b.max_calls, "max_tokens": b.max_completion_tokens,
                         "wall_time": b.max_wall_s}[why]
                raise RequestError(429, f"rollout {ro.rollout_id!r} is over its {why} budget ({limit})",
                                   "rollout_budget_exceeded")
            room = self.max_context_tokens - n_prompt
            if room < 1:
                raise RequestError(400, f"prompt of {n_prompt} tokens leaves no room in the {self.max_context_tokens}"
                                   "-token context", "context_length_exceeded")
            cap = min(self.sampling.max_new_tokens, room, b.max_completion_tokens - ro.tokens_reserved,
                      client_cap or self.sampling.max_new_tokens)
            ro.tokens_reserved += cap
            return cap

    def submit(self, rollout_id: str | None, req: ChatRequest) -> concurrent.futures.Future:
        """Start sampling `req` for `rollout_id`; the future yields `(Reply, TraceCall)`.

        Raises:
            RequestError: unknown rollout (404), over budget (429), context too long (400), template error.
        """
        t0 = time.monotonic()
        ro = self._rollout(rollout_id)
        self._check_size(req)
        ext = self._extend(ro, req)
        prompt, extends = ext if ext is not None else (self._render(req), -1)
        cap = self._admit(ro, len(prompt), req.max_tokens)
        self.stats["requests"] += 1
        inner = self._batcher.submit(prompt, cap)
        out: concurrent.futures.Future = concurrent.futures.Future()

        def done(f: concurrent.futures.Future) -> None:
            try:
                sample, version = f.result()
                result = self._record(ro, req, prompt, extends, cap, sample, version, t0)
            except BaseException as e:  # noqa: BLE001
                with ro.lock:
                    ro.tokens_reserved -= cap
                    ro.failed = ro.failed or f"{type(e).__name__}: {str(e)[:300]}"
                if not out.cancelled():
                    out.set_exception(e)
                return
            if not out.cancelled():  # the client went away: the call stays recorded (it was sampled)
                out.set_result(result)

        inner.add_done_callback(done)
        return out

    def _record(self, ro: _Rollout, req: ChatRequest, prompt: list[int], extends: int, cap: int,
                sample: Sample, version: int, t0: float) -> tuple[Reply, TraceCall]:
        ids = list(sample.ids)
        body = ids[: -len(self.fmt.eot_ids)] if not sample.hit_token_limit and tuple(
            ids[-len(self.fmt.eot_ids):]) == self.fmt.eot_ids else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        with ro.lock:
            index = len(ro.calls)
            ro.tokens_reserved += len(ids) - cap
            if req.tools:
                reply = build_reply(text, hit_token_limit=sample.hit_token_limit, call_id_prefix=f"call_{index}")
            else:  # no tools offered: nothing could answer a call, so any call text stays text
                reply = Reply(text.strip(), (), "length" if sample.hit_token_limit else "stop")
            record = TraceCall(index=index, prompt_ids=tuple(prompt), completion_ids=tuple(ids),
                               logprobs=tuple(sample.logprobs), finish_reason=reply.finish_reason,
                               has_tools=bool(req.tools), policy_version=version, overridden=dict(req.overridden),
                               extends_call=extends, wall_s=time.monotonic() - t0)
            ro.calls.append(_Call(record, len(req.messages), history_key(req.messages, req.tools),
                                  reply_key(reply.content, reply.tool_calls)))
        self.stats["completion_tokens"] += len(ids)
        self.stats["prompt_tokens"] += len(prompt)
        if req.overridden:
            log.debug("rollout %s call %d: client sampling parameters overridden: %s", ro.rollout_id, index,
                      json.dumps(req.overridden, default=str)[:300])
        return reply, record

    def complete(self, rollout_id: str | None, req: ChatRequest, timeout_s: float | None = None
                 ) -> tuple[Reply, TraceCall]:
        """Blocking `submit(...).result()`."""
        return self.submit(rollout_id, req).result(timeout=timeout_s)

    def close(self) -> None:
        """Stop the sampler worker (requests still queued are not answered)."""
        self._batcher.close()

    def __enter__(self) -> PolicyServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

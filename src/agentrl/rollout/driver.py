"""Episode driver: advance many episodes together, token-in/token-out, into `Trajectory`s.

Not the sampler (agentrl.rollout.hf_sampler), not the environments (agentrl.envs), not the reward (the
environment computes it). Each round, every live episode samples one assistant turn (batched), then
all their tool calls run concurrently in a thread pool (environments call the sandbox), then each
episode appends the template's tool-response ids.

The environment owns the episode's rules and its end states (turn limit, calls per turn, schema
checks, observation budget; `StepResult` says when and why it ended); the Trajectory copies its
flags. The driver adds only what only it knows: "out_of_tokens" (the context budget; it calls
`env.truncate`, so the final state is still graded) and "env_error" (the environment or its sandbox
raised, or broke the contract; truncated, reward None: unscorable, never a silent 0).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.parse import parse_tool_calls, split_reasoning
from agentrl.chat.template import render_prompt
from agentrl.chat.tito import TurnFormat, assert_tito_consistent, observation_ids, turn_format
from agentrl.envs.base import Env, Observation, StepResult, ToolCall
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sample_turns, stop_token_ids
from agentrl.rollout.trajectory import Trajectory, Turn
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.rollout")
OUT_OF_TOKENS = "out_of_tokens"
ENV_ERROR = "env_error"
# (contexts, per-context max_new_tokens) -> one Sample each; e.g. an OpenAI-compatible server client.
SampleFn = Callable[[list[list[int]], list[int]], list[Sample]]
"""A token-level sampler: `sample(contexts, budgets) -> one Sample per context` (contexts: token ids;
budgets: max new tokens each). One that scores with the policy's weights may also have
`bind(model, tokenizer)`, which the trainer calls with each policy the sampler samples for
(`bind_sampler`)."""


def bind_sampler(sampler: Any, model: Any, tokenizer: Any) -> None:
    """Tell `sampler` which policy it samples for, if it has `bind(model, tokenizer)`: the trainer calls
    this with the learner's model when a run opens (a synchronous run updates that model in place) and
    with the rollout copy of an asynchronous run. Samplers without `bind` are left alone."""
    bind = getattr(sampler, "bind", None)
    if callable(bind):
        bind(model, tokenizer)


@dataclass(frozen=True)
class RolloutConfig:
    """Episode-level knobs of the driver (the sampler's are in `sampling`; the episode rules, such as
    the turn limit and calls per turn, are the environment's).

    Attributes:
        max_context_tokens: prompt + completion budget per episode; beyond it the episode ends
            "out_of_tokens" (truncated, graded on its final state).
        tool_workers: threads executing environments' `step` and the final grading (`reward`) concurrently
            (default: the host's CPU count, 8 to 32).
        enable_thinking: template thinking mode (False: non-thinking, where the template supports it).
        check_template: run `assert_tito_consistent` once per distinct tool-schema set.
    """

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_context_tokens: int = 4096
    tool_workers: int = field(default_factory=lambda: max(8, min(32, os.cpu_count() or 8)))
    enable_thinking: bool = False
    check_template: bool = True


@dataclass
class _Episode:
    env: Env
    task: Task
    group_id: int
    obs: Observation
    prompt_ids: list[int]
    completion: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    end_reason: str = ""
    terminated: bool = False
    truncated: bool = False
    error: str = ""

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.completion

    def end(self, res: StepResult) -> None:
        """Take the environment's ending (its flags and reason) as the episode's."""
        self.end_reason, self.terminated, self.truncated = res.end_reason or "", res.terminated, res.truncated


class _ErrorLog:
    """Logs environment exceptions: the first of a run_episodes call with its traceback, later ones
    in one line each; always with the task id (a bug is never a silent reward of 0)."""

    def __init__(self) -> None:
        self.seen = 0
        self.lock = threading.Lock()  # grading runs in the thread pool

    def __call__(self, ep: _Episode, where: str, err: BaseException | str) -> None:
        ep.end_reason, ep.terminated, ep.truncated = ENV_ERROR, False, True
        ep.error = f"{where}: {type(err).__name__}: {err}" if isinstance(err, BaseException) else f"{where}: {err}"
        with self.lock:
            first = self.seen == 0
            self.seen += 1
        exc_info = err if first and isinstance(err, BaseException) else None
        log.error("environment %s failed in %s on task %s (episode unscorable): %s", ep.env.name or
                  type(ep.env).__name__, where, ep.task.id, ep.error, exc_info=exc_info)


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # a broken env/sandbox ends this episode, never the run
        return e


def _turn_text(tokenizer: Any, sample: Sample, fmt: TurnFormat, stops: tuple[int, ...]) -> str:
    """The turn's text without the id that ended it (end-of-turn, or another end-of-sequence id)."""
    ids = list(sample.ids)
    if not sample.hit_token_limit and tuple(ids[-len(fmt.eot_ids) :]) == fmt.eot_ids:
        ids = ids[: -len(fmt.eot_ids)]
    elif not sample.hit_token_limit and ids and ids[-1] in stops:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


def _needs_turn_end(sample: Sample, fmt: TurnFormat) -> bool:
    """The turn did not close with the template's end-of-turn token (cut at the token limit, or ended by
    another end-of-sequence id): the observation after it then starts with that token (mask 0)."""
    return sample.hit_token_limit or tuple(sample.ids[-len(fmt.eot_ids) :]) != fmt.eot_ids


class _Driver:
    def __init__(self, policy: Any, tokenizer: Any, cfg: RolloutConfig, sampler: SampleFn | None = None):
        self.policy, self.tok, self.cfg, self.sampler = policy, tokenizer, cfg, sampler
        self.fmt = turn_format(tokenizer, enable_thinking=cfg.enable_thinking)
        self.stops = stop_token_ids(policy, tokenizer, self.fmt.eot_ids)
        self.checked: set[str] = set()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.fmt.eot_ids[0]
        self.errors = _ErrorLog()

    def start(self, env: Env, task: Task, group_id: int, seed: int | None) -> _Episode:
        obs = env.reset(task, seed=seed)
        key = json.dumps(obs.tools, sort_keys=True)
        if self.cfg.check_template and obs.tools and key not in self.checked:
            assert_tito_consistent(self.tok, obs, enable_thinking=self.cfg.enable_thinking)
            self.checked.add(key)
        prompt = render_prompt(self.tok, obs, enable_thinking=self.cfg.enable_thinking)
        ep = _Episode(env, task, group_id, obs, prompt)
        if len(prompt) >= self.cfg.max_context_tokens:
            self.truncate(ep)
        return ep

    def truncate(self, ep: _Episode) -> None:
        """The context budget is spent: the environment ends the episode "out_of_tokens" (truncated)."""
        res = _call(ep.env.truncate, OUT_OF_TOKENS)
        if isinstance(res, BaseException) or not isinstance(res, StepResult) or not res.done:
            self.errors(ep, "truncate", res if isinstance(res, BaseException) else f"returned {res!r}")
        else:
            ep.end(res)

    def sample(self, live: list[_Episode]) -> list[Sample]:
        budgets = [min(self.cfg.sampling.max_new_tokens, self.cfg.max_context_tokens - len(e.context)) for e in live]
        if self.sampler is not None:
            return self.sampler([e.context for e in live], budgets)
        return sample_turns(
            self.policy, [e.context for e in live], stop_ids=self.stops, pad_id=self.pad_id,
            cfg=self.cfg.sampling, max_new_tokens=budgets,
        )

    def parse(self, ep: _Episode, sample: Sample):
        """(turn text, parsed calls, final text), both read after any think block the turn opens with
        (`split_reasoning`). The environment checks the calls against its schemas. A parser failure never
        ends the run: the turn becomes one malformed "parser_error" call, so the env answers it like any
        other malformed call."""
        text = _turn_text(self.tok, sample, self.fmt, self.stops)
        try:
            calls, final = parse_tool_calls(split_reasoning(text)[1], hit_token_limit=sample.hit_token_limit)
            return text, calls, final
        except Exception as e:  # noqa: BLE001 - a parser bug on model output is recorded, never a crash
            why = f"parser_error: {type(e).__name__}: {str(e)[:200]}"
            return text, [ToolCall(name="", arguments={}, raw=text, malformed=why)], ""

    def record(self, ep: _Episode, sample: Sample, text: str, calls, results, obs_ids: list[int]) -> None:
        ep.completion += list(sample.ids) + obs_ids
        ep.mask += [1] * len(sample.ids) + [0] * len(obs_ids)
        ep.logps += list(sample.logprobs) + [0.0] * len(obs_ids)
        ep.turns.append(Turn(
            completion_ids=sample.ids, sampler_logprobs=sample.logprobs, text=text, calls=tuple(calls),
            results=tuple(results), observation_ids=tuple(obs_ids), hit_token_limit=sample.hit_token_limit,
        ))

    def round(self, live: list[_Episode], pool: ThreadPoolExecutor, on_done: Callable[[], None]) -> None:
        """One turn of every live episode. Episodes are sampled `gen_batch` at a time (the chunks HF
        generate would use anyway; an external sampler gets them all at once), each chunk's tool calls
        start in the pool while the next chunk samples, and `on_done()` is called whenever episodes may
        have finished (after each chunk, after each tool step), so progress advances per episode."""
        chunk = len(live) if self.sampler is not None else self.cfg.sampling.gen_batch
        acting = []
        for k in range(0, len(live), chunk):
            part = live[k : k + chunk]
            for ep, s in zip(part, self.sample(part), strict=True):
                text, calls, final = self.parse(ep, s)
                if calls:
                    acting.append((ep, s, text, calls, pool.submit(_call, ep.env.step, list(calls))))
                else:
                    self.answer(ep, s, text, final)
            on_done()
        for ep, s, text, calls, fut in acting:
            self.after_step(ep, s, text, calls, fut.result())
            if ep.end_reason:
                on_done()

    def answer(self, ep: _Episode, s: Sample, text: str, final: str) -> None:
        """A turn without tool calls: the final answer, which the environment ends the episode on."""
        self.record(ep, s, text, [], [], [])
        res = _call(ep.env.final_answer, final)
        if isinstance(res, BaseException) or not isinstance(res, StepResult) or not res.done:
            self.errors(ep, "final_answer", res if isinstance(res, BaseException) else
                        f"returned {res!r}, expected a StepResult that ends the episode")
        else:
            ep.end(res)

    def after_step(self, ep: _Episode, s: Sample, text: str, calls, res: Any) -> None:
        if isinstance(res, BaseException) or not isinstance(res, StepResult) or len(res.results) != len(calls):
            self.record(ep, s, text, calls, [], [])
            why = res if isinstance(res, BaseException) else (
                f"{len(res.results)} results for {len(calls)} calls" if isinstance(res, StepResult)
                else f"returned {type(res).__name__}, expected a StepResult")
            self.errors(ep, "step", why)
            return
        results = res.results
        obs = observation_ids(results, self.tok, tools=ep.obs.tools, hit_token_limit=_needs_turn_end(s, self.fmt),
                              enable_thinking=self.cfg.enable_thinking, fmt=self.fmt)
        if res.done:
            ep.end(res)
        elif len(ep.context) + len(s.ids) + len(obs) + 1 > self.cfg.max_context_tokens:
            self.truncate(ep)
        # Observation ids are appended only if another turn follows: trailing mask-0 tokens train nothing.
        self.record(ep, s, text, calls, results, [] if ep.end_reason else obs)


def run_episodes(
    policy: Any,
    tokenizer: Any,
    envs_and_tasks: list[tuple[Env, Task]],
    *,
    cfg: RolloutConfig | None = None,
    group_ids: list[int] | None = None,
    seed: int | None = None,
    sampler: SampleFn | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    policy_version: int | None = None,
) -> list[Trajectory]:
    """Run one episode per (env, task) pair, all advancing together; one `Trajectory` each, same order.

    Args:
        policy: HF causal LM; tokenizer: its tokenizer (chat template required).
        envs_and_tasks: distinct env instances (one per episode) with their tasks.
        group_ids: GRPO group of each episode (default: index); `Trajectory.group_id` carries it and
            the trainer groups by it.
        seed: torch seed for sampling and the environments' reset seed (None: leave RNG as is).
        sampler: replaces HF `generate` (`sample_turns` on `policy`) with another token-level sampler; if it
            has an `end_rollout()` method, it is called once all episodes have ended (a sampler may free
            state kept across turns, e.g. the FastSampler's kept KV).
        on_progress: called with (episodes done, episodes in all) as episodes advance (episodes_done: the
            finished ones plus each live one's share of its turn limit; after each
            sampled chunk of `gen_batch` and each tool step), e.g. for a progress bar.
        policy_version: the optimizer step whose weights sample (stored in every Trajectory).

    Returns:
        Trajectories with `completion_ids == concat(turn.completion_ids + turn.observation_ids)`,
        policy mask 1 exactly on sampled ids, sampler log-probs aligned (0.0 under mask 0), and the
        environment's end flags and reason (or the driver's "out_of_tokens" / "env_error").

    Raises:
        TitoMismatch / ValueError: the template check fails (before any sampling).
    """
    import torch

    cfg = cfg or RolloutConfig()
    if seed is not None:
        torch.manual_seed(seed)
    drv = _Driver(policy, tokenizer, cfg, sampler)
    gids = group_ids if group_ids is not None else list(range(len(envs_and_tasks)))
    eps = [drv.start(env, task, g, seed) for (env, task), g in zip(envs_and_tasks, gids, strict=True)]
    finished = 0.0

    def on_done() -> None:
        nonlocal finished
        now = episodes_done(eps)
        if on_progress is not None and now != finished:
            on_progress(now, len(eps))
        finished = now

    on_done()  # episodes whose prompt alone overflows the context are finished before any round
    with ThreadPoolExecutor(max_workers=max(1, cfg.tool_workers)) as pool:
        while live := [e for e in eps if not e.end_reason]:
            drv.round(live, pool, on_done)
        if callable(end_rollout := getattr(sampler, "end_rollout", None)):
            end_rollout()
        # grading (env.reward: hidden tests in the sandbox) runs concurrently across episodes, like tool calls
        return list(pool.map(lambda ep: _finish(drv, ep, policy_version), eps))


def episodes_done(eps: Sequence[_Episode]) -> float:
    """Progress in episodes: 1 per finished episode plus, per live one, its turns so far over its
    environment's turn limit (at most 0.9: it may still run to the limit), so progress moves every
    turn, not only when whole episodes end (an evaluation's episodes of up to 6 turns all end late)."""
    done = 0.0
    for e in eps:
        if e.end_reason:
            done += 1.0
        elif (limit := getattr(e.env, "max_turns", 0)) and limit > 0:
            done += min(len(e.turns) / limit, 0.9)
    return round(done, 6)


def _reward(drv: _Driver, ep: _Episode) -> float | None:
    """The environment's reward on the final state; None (unscorable) after an env error, when the
    environment says so, or when reward() raises or returns something that is not a finite number."""
    if ep.end_reason == ENV_ERROR:
        return None
    r = _call(ep.env.reward)
    if isinstance(r, BaseException):
        drv.errors(ep, "reward", r)
        return None
    if r is None:
        log.warning("task %s: the environment could not score the episode (%s); it is left out of training",
                    ep.task.id, ep.end_reason)
        return None
    if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r):
        drv.errors(ep, "reward", f"returned {r!r}, expected a finite number or None")
        return None
    return float(r)


def _finish(drv: _Driver, ep: _Episode, policy_version: int | None) -> Trajectory:
    from agentrl.rollout.transcript import episode_stats, render_transcript

    reward = _reward(drv, ep)
    stats = {**_env_stats(ep.env), **episode_stats(ep.turns)}
    try:
        ep.env.close()
    except Exception:  # noqa: BLE001, S110 - closing is best effort
        pass
    meta = {"error": ep.error} if ep.error else {}
    if ep.turns and ep.turns[-1].hit_token_limit and ep.end_reason == "final_answer":
        meta["final_turn_hit_token_limit"] = True
    return Trajectory(
        task_id=ep.task.id, group_id=ep.group_id, prompt_ids=tuple(ep.prompt_ids),
        completion_ids=tuple(ep.completion), policy_mask=tuple(ep.mask), sampler_logprobs=tuple(ep.logps),
        reward=reward, turns=tuple(ep.turns), stats=stats,
        transcript=render_transcript(ep.obs, ep.turns, ep.end_reason, reward),
        end_reason=ep.end_reason, terminated=ep.terminated, truncated=ep.truncated, meta=meta,
        policy_version=policy_version,
    )


def _env_stats(env: Env) -> dict[str, float]:
    try:
        return dict(env.stats())
    except Exception:  # noqa: BLE001
        return {}

"""The execution strategy of a run: a small `Backend` protocol (rollout, update, checkpoint, sync weights)
and `LocalBackend`, the single-process one. agentrl.scale's strategies (data parallel under torchrun,
rollout worker processes) implement the same protocol by composition: they hold a LocalBackend and call
it for the part they do not change. Not the schedule (agentrl.rl.trainer) and not the maths.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from agentrl.envs import make_env
from agentrl.report.log import end_phase
from agentrl.rl.checkpoint import prune_checkpoints, save_checkpoint
from agentrl.rl.run_record import run_record
from agentrl.rl.run_setup import env_kwargs
from agentrl.rl.update import minibatch_step
from agentrl.rollout.driver import RolloutConfig, bind_sampler, run_episodes
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")


@dataclass(frozen=True)
class RolloutPolicy:
    """A policy copy that samples rollouts (the asynchronous trainer's), with its sampler (None: HF generate)."""

    model: Any
    sampler: Any = None


class Backend(Protocol):
    """How one run samples, updates, saves and moves weights; the trainer calls these through RunSession.

    - `rollout(tasks, *, seed, group_ids, label, policy_version, policy)` -> one Trajectory per task, in order;
    - `update(batch, *, group_ids, generator, minibatches)` -> the step's update metrics;
    - `checkpoint(step, final)` -> the checkpoint written after `step` completed steps, or None;
    - `rollout_copy()` -> a policy that samples while the learner updates; `sync_weights(policy)` refreshes it;
    - `decide(flag)` -> a schedule decision every process of the run takes alike.
    """

    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None, policy: Any = None) -> list[Trajectory]: ...

    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]: ...

    def checkpoint(self, step: int, final: bool = False) -> Path | None: ...

    def rollout_copy(self) -> Any: ...

    def sync_weights(self, policy: Any) -> None: ...

    def decide(self, flag: bool) -> bool: ...


class LocalBackend:
    """The single-process strategy over the open RunSession `sess` (its model, optimizer, sandbox, sampler)."""

    def __init__(self, sess: Any):
        self.sess = sess

    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None,
                policy: RolloutPolicy | None = None) -> list[Trajectory]:
        """One episode per entry of `tasks` (a fresh env each, or one black-box harness run each with
        `cfg.agent.name`), all advancing together (a progress bar named `label` counts finished episodes);
        `policy_version` is stored in each Trajectory. `policy`: sample with another copy of the policy
        (the asynchronous trainer's rollout model) instead of the learner's."""
        sess = self.sess
        cfg = sess.cfg
        model, sampler = (policy.model, policy.sampler) if policy is not None else (sess.model, sess.sampler)
        model.eval()
        bar = sess.progress.add_task(label, total=len(tasks), unit="episodes") if sess.progress is not None else None
        on_progress = None if bar is None else (lambda done, total: sess.progress.update(bar, completed=done))
        gids = list(group_ids) if group_ids is not None else None
        error: BaseException | None = None
        try:
            if cfg.agent.name:
                return sess.agent_for(model, sampler)(tasks, seed=seed, group_ids=gids, policy_version=policy_version,
                                                      on_progress=on_progress)
            rcfg = RolloutConfig(sampling=sess.sampling_config(), max_context_tokens=cfg.sampling.max_context_tokens,
                                 enable_thinking=cfg.policy.thinking)
            pairs = [(make_env(cfg.env.name, **env_kwargs(cfg, sess.sandbox)), t) for t in tasks]
            return run_episodes(model, sess.tokenizer, pairs, cfg=rcfg, seed=seed, sampler=sampler, group_ids=gids,
                                policy_version=policy_version, on_progress=on_progress)
        except BaseException as e:
            error = e
            raise
        finally:
            if bar is not None:
                end_phase(sess.progress, bar, error)

    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]:
        """The step's update on `batch` (agentrl.rl.update.minibatch_step on the learner); `group_ids` (each
        row's GRPO group) matter to strategies that split groups over ranks."""
        sess = self.sess
        return minibatch_step(sess.model, sess.optimizer, batch, sess.cfg, ref_model=sess.ref_model,
                              generator=generator, minibatches=minibatches)

    def checkpoint(self, step: int, final: bool = False) -> Path | None:
        """Save a checkpoint after `step` completed steps when the schedule says so (and at the end: the
        last step, or `final` when the run stops early)."""
        sess = self.sess
        every = sess.cfg.run.checkpoint_every
        if not every or (step % every and step != sess.cfg.run.steps and not final):
            return None
        path = save_checkpoint(sess.out / "checkpoints", step, sess.model, sess.optimizer, extra={"step": step},
                               tokenizer=sess.tokenizer, run_record=run_record(sess.cfg, step))
        if sess.cfg.run.keep_checkpoints:
            prune_checkpoints(sess.out / "checkpoints", sess.cfg.run.keep_checkpoints)
        return path

    def rollout_copy(self) -> RolloutPolicy:
        """A separate copy of the policy for rollouts that run while the learner updates (no gradients,
        eval mode; its own fast sampler when the run uses one). `sync_weights` refreshes it."""
        sess = self.sess
        model = copy.deepcopy(sess.model).eval().requires_grad_(False)
        if sess.registered_sampler:
            sampler = sess.build_sampler(model)
        else:
            sampler = sess.sampler
            bind_sampler(sampler, model, sess.tokenizer)
        return RolloutPolicy(model, sampler)

    def sync_weights(self, policy: RolloutPolicy) -> None:
        """Copy the learner's weights into `policy.model` in place (so samplers holding its tensors,
        e.g. captured CUDA graphs, see the new values)."""
        with torch.no_grad():
            for dst, src in zip(policy.model.parameters(), self.sess.model.parameters(), strict=True):
                dst.copy_(src)
            for dst, src in zip(policy.model.buffers(), self.sess.model.buffers(), strict=True):
                dst.copy_(src)

    def decide(self, flag: bool) -> bool:
        """A schedule decision every process of the run must take alike (stop early?): here `flag` itself."""
        return flag

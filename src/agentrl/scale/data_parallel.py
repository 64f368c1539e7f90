"""Data parallel under torchrun: one rank's session with a DataParallelBackend (FSDP2 update, rollouts split
by group), opened by `open_data_parallel`.

Not the schedule (agentrl.rl.trainer.train runs unchanged on every rank) and not the maths
(agentrl.scale.update). What differs from a single-process run:
- rank 0 opens the run as usual (output folder, lock, results file, log, tracker, checkpoints);
  the other ranks load the same inputs but write nothing (their results document is rank 0's,
  broadcast at the start and kept in memory, so every rank takes the same branches of the schedule);
- rollouts: each rank samples its share of the groups (agentrl.scale.context.shard_groups) with its
  own plain copy of the policy, and every rank receives every trajectory (all_gather), so rewards,
  advantages and metrics are computed alike everywhere;
- the update: agentrl.scale.update.dp_minibatch_step on the FSDP2 engine, then the full weights are
  copied back into the plain policy (timed: `dist/weight_sync_s`);
- checkpoints: rank 0 writes agentrl's single-process format (the plain model, the optimizer state
  gathered from the shards), so a run resumes on any world size, or without torchrun.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from agentrl.report.log import LineProgress
from agentrl.report.results import RunResults
from agentrl.report.trackers import Tracker
from agentrl.rl.backend import LocalBackend
from agentrl.rl.config import RLConfig
from agentrl.rl.run_setup import load_inputs, run_task_sets
from agentrl.rl.session import RunSession, default_sandbox
from agentrl.rl.update import adamw, checkpoint_if_configured
from agentrl.rollout.trajectory import Trajectory
from agentrl.scale.context import DistContext, shard_groups
from agentrl.scale.fsdp import (
    build_engine,
    copy_full_weights,
    decoder_layers,
    gather_optimizer_state,
    load_optimizer_state,
)
from agentrl.scale.update import dp_minibatch_step
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")


class RankLocalResults(RunResults):
    """The results document on a rank other than 0: the same in-memory data, never written to disk."""

    def write(self) -> Path:
        return self.path


def check_data_parallel(cfg: RLConfig) -> None:
    """ValueError for what a data-parallel run does not support (named, with what to do instead)."""
    unsupported = {"lora_r": "LoRA adapters", "agent": "black-box agents (--agent)",
                   "async_rollouts": "--async-rollouts (use --rollout-workers for generation beside training)",
                   "rollout_workers": "--rollout-workers", "ray_graders": "--ray-graders",
                   "compile_layers": "--compile-layers on", "activation_offloading": "--activation-offloading on"}
    flat = {**cfg.to_flat(), "compile_layers": cfg.update.compile_layers == "on",  # auto: eager here
            "activation_offloading": cfg.update.activation_offloading == "on"}  # auto: not offloaded here
    for name, what in unsupported.items():
        if flat[name]:
            raise ValueError(f"torchrun data parallel does not support {what} yet; run it without torchrun")


def shard_seed(seed: int, first_episode: int) -> int:
    """The sampling seed of the shard starting at global episode `first_episode` (the run's own seed for
    the first shard, so one rank samples as a single process does)."""
    return seed if first_episode == 0 else random.Random(f"{seed}:shard:{first_episode}").randrange(2**31)


@torch.no_grad()
def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Rank `src`'s parameters and buffers into `module` on every rank (in place)."""
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=src)


@contextlib.contextmanager
def open_rank_session(cfg: RLConfig, sampler: Any = None, *, name: str,
                      make_sandbox: Callable[[RLConfig], Any] | None = None) -> Iterator[RunSession]:
    """A RunSession that writes nothing (another rank of a data-parallel run, or a rollout worker): the
    same policy, tokenizer, tasks and a sandbox of its own (`make_sandbox(cfg)`, default
    agentrl.sandbox.Sandbox()), loaded and checked as RunSession.open loads them; an in-memory results
    document; no tracker, progress only on the `agentrl.<name>` logger. The sandbox is closed on exit."""
    cfg.validate()
    tasks = run_task_sets(cfg)
    sandbox = (make_sandbox or default_sandbox)(cfg)
    try:
        inputs = load_inputs(cfg, tasks, sandbox)
        cfg = inputs.cfg or cfg  # max_context_tokens fitted to the model, as RunSession.open has it
        model = inputs.model
        checkpoint_if_configured(cfg, model)
        ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.update.kl_coef > 0 else None
        out = Path(cfg.run.out).expanduser().resolve()
        results = RankLocalResults(out / "results.json", cfg.to_flat(), seed=cfg.run.seed, write=False)
        sess = RunSession(cfg=cfg, out=out, model=model, tokenizer=inputs.tokenizer, optimizer=None,
                          sandbox=sandbox, tasks=tasks, results=results, device=inputs.device, ref_model=ref,
                          main_process=False)
        sess.attach_sampler(sampler)  # the registered --sampler, bound to this rank's policy
        sess.tracker = Tracker()
        sess.progress = LineProgress(logging.getLogger(f"agentrl.{name}"), interval_s=float("inf"))
        yield sess
    finally:
        sandbox.close()


@contextlib.contextmanager
def open_data_parallel(cfg: RLConfig, *, sampler: Any = None) -> Iterator[RunSession]:
    """Join the torchrun process group and open this rank's session (rank 0: RunSession.open, the other
    ranks: open_rank_session) with a DataParallelBackend (module docstring).

    Raises:
        ValueError: not under torchrun, an unsupported option, or RunSession.open's errors.
    """
    check_data_parallel(cfg)
    ctx = DistContext.from_env(cfg.policy.device)
    # compile_layers and activation_offloading auto resolve off: the FSDP2 engine (a copy) runs the update, the plain
    # policy only samples (the results file records them off)
    cfg = cfg.replace_flat(device=ctx.device, compile_layers="off", activation_offloading="off")
    opener = RunSession.open(cfg, sampler=sampler) if ctx.is_main else open_rank_session(cfg, sampler,
                                                                                         name=f"rank{ctx.rank}")
    with opener as sess:
        sess.backend = DataParallelBackend.attach(sess, ctx)
        yield sess


class DataParallelBackend:
    """One rank's Backend (agentrl.rl.backend) in a torchrun run: rollouts over the ranks' shards, the FSDP2
    update, collective decisions and checkpoints; the local backend of `sess` samples this rank's share
    and writes rank 0's checkpoint. Build it with `attach(sess, ctx)`."""

    def __init__(self, sess: RunSession, ctx: DistContext, engine: Any, local: LocalBackend):
        self.sess, self.ctx, self.engine, self.local = sess, ctx, engine, local

    @classmethod
    def attach(cls, sess: RunSession, ctx: DistContext) -> DataParallelBackend:
        """Make every rank start alike (rank 0's step, results document, weights and reference), then
        build the FSDP2 engine and its optimizer (with rank 0's optimizer state on --resume)."""
        state = ctx.broadcast_object({"start_step": sess.start_step, "results": sess.results.data}
                                     if ctx.is_main else None)
        if not ctx.is_main:
            sess.start_step, sess.results.data = state["start_step"], state["results"]
        broadcast_module(sess.model)
        if sess.ref_model is not None:
            broadcast_module(sess.ref_model)
        engine = build_engine(sess.model, ctx.device)
        opt = adamw([p for p in engine.parameters() if p.requires_grad], lr=sess.cfg.update.lr,
                    weight_decay=sess.cfg.update.weight_decay)
        if sess.start_step > 0:
            load_optimizer_state(engine, opt, sess.optimizer.state_dict() if ctx.is_main else None,
                                 sess.model, is_main=ctx.is_main)
        sess.optimizer = opt
        if ctx.is_main:
            sess.results.set("distributed", {"launcher": "torchrun", "world_size": ctx.world_size,
                                             "backend": ctx.backend, "engine": "fsdp2"})
            log.info("data parallel: %d ranks (%s), FSDP2 over %d decoder layers + root", ctx.world_size,
                     ctx.backend, len(decoder_layers(engine.lm)))
        return cls(sess, ctx, engine, LocalBackend(sess))

    # -- rollouts ---------------------------------------------------------------------------------
    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None, policy: Any = None) -> list[Trajectory]:
        """LocalBackend.rollout over all ranks: this rank samples the groups shard_groups gives it (each
        episode its own group when `group_ids` is None), and every rank returns all trajectories, in
        the order of `tasks`. Collective: every rank calls it with the same tasks."""
        gids = list(group_ids) if group_ids is not None else list(range(len(tasks)))
        owner = shard_groups(gids, self.ctx.world_size)
        mine = [i for i, r in enumerate(owner) if r == self.ctx.rank]
        local: list[Trajectory] = []
        if mine:
            local = self.local.rollout([tasks[i] for i in mine], seed=shard_seed(seed, mine[0]),
                                       group_ids=[gids[i] for i in mine], label=label,
                                       policy_version=policy_version, policy=policy)
        out: list[Trajectory | None] = [None] * len(tasks)
        for idx, trajs in self.ctx.all_gather_objects((mine, local)):
            for i, tr in zip(idx, trajs, strict=True):
                out[i] = tr
        return out  # type: ignore[return-value]

    def rollout_copy(self) -> Any:
        return self.local.rollout_copy()

    def sync_weights(self, policy: Any) -> None:
        self.local.sync_weights(policy)

    # -- the update -------------------------------------------------------------------------------
    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]:
        """dp_minibatch_step on this rank's groups, then the new weights into the plain policy (timed)."""
        sess = self.sess
        owner = torch.tensor(shard_groups(list(group_ids), self.ctx.world_size))
        m = dp_minibatch_step(self.engine, sess.optimizer, batch, owner, self.ctx, sess.cfg, ref_model=sess.ref_model,
                              generator=generator, minibatches=minibatches)
        t0 = time.perf_counter()
        nbytes = copy_full_weights(self.engine, sess.model)
        m["dist/weight_sync_s"] = time.perf_counter() - t0
        m["dist/weight_sync_bytes"] = float(nbytes)
        m["dist/world_size"] = float(self.ctx.world_size)
        m["dist/rows_local"] = float(int((owner == self.ctx.rank).sum()))
        return m

    # -- persistence ------------------------------------------------------------------------------
    def decide(self, flag: bool) -> bool:
        """Rank 0's decision on every rank (e.g. its wall-clock budget), so all ranks leave the loop together."""
        return bool(self.ctx.broadcast_object(bool(flag)))

    def checkpoint(self, step: int, final: bool = False) -> Path | None:
        """LocalBackend.checkpoint in the single-process format: the optimizer state is gathered from the
        shards (collective), rank 0 writes the plain model and that state."""
        sess = self.sess
        every = sess.cfg.run.checkpoint_every
        if not every or (step % every and step != sess.cfg.run.steps and not final):
            return None
        state = gather_optimizer_state(self.engine, sess.optimizer, sess.model, is_main=self.ctx.is_main)
        if not self.ctx.is_main:
            return None
        holder = torch.optim.AdamW([p for p in sess.model.parameters() if p.requires_grad], lr=sess.cfg.update.lr,
                                   weight_decay=sess.cfg.update.weight_decay)
        holder.load_state_dict(state)
        live, sess.optimizer = sess.optimizer, holder
        try:
            return self.local.checkpoint(step, final=final)
        finally:
            sess.optimizer = live

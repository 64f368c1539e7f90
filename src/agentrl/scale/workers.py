"""Rollout workers: generation in processes of their own, the trainer in this one, weights pushed over
torch.distributed. Not the staleness logic (agentrl.rl.async_loop) and not the IS correction
(agentrl.rl.offpolicy): both are the asynchronous trainer's, reused as they are.

`--async-rollouts --rollout-workers N` runs the asynchronous trainer with its producer's rollouts in N
worker processes (spawned here, or Ray actors: agentrl.scale.ray_actors). Before each collection the
producer pushes the learner's newest weights (`push_weights`: one broadcast per dtype of the flattened
parameters over the trainer+workers process group: NCCL when every worker has its own GPU, gloo on
CPU), then sends the step's tasks; each worker samples its share of the groups with its own copy of the
policy and sandbox and sends the trajectories back. The learner trains step k while the workers sample
step k+1, at most --max-staleness versions behind (agentrl.rl.async_loop), and stale batches get the
truncated-IS correction. Seconds and bytes of each push are step metrics (`dist/weight_sync_s`).

Commands travel over a gloo group as pickled objects (broadcast from the trainer, gathered back), all
from the producer thread; the process group rendezvous is a FileStore in a private temporary folder
(no TCP listener), and every process of the pool has GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming the
loopback interface unless the user set them (agentrl.scale.net), so the pool listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import logging
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from agentrl.rl.config import RLConfig
from agentrl.rl.session import RunSession
from agentrl.rollout.trajectory import Trajectory
from agentrl.scale.context import shard_groups
from agentrl.scale.data_parallel import open_rank_session
from agentrl.scale.net import environ_set, loopback_socket_env
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")
TIMEOUT_S = 1800.0  # a collective waits this long for a dead peer before raising


def worker_devices(cfg_device: str, n: int) -> tuple[str, list[str]]:
    """(trainer device, [device of each worker]): a GPU each (trainer cuda:0, worker i cuda:i+1) when the
    host has n+1 and --device allows CUDA; all on CPU without GPUs or with --device cpu.

    Raises: ValueError: GPUs present and wanted, but fewer than n+1.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg_device == "cpu" or (cfg_device == "auto" and gpus == 0):
        return "cpu", ["cpu"] * n
    if gpus < n + 1:
        raise ValueError(f"--rollout-workers {n} needs {n + 1} GPUs (the trainer and one per worker); this host has "
                         f"{gpus} (pass --device cpu to run everything on CPU)")
    return "cuda:0", [f"cuda:{i + 1}" for i in range(n)]


def check_rollout_workers(cfg: RLConfig) -> None:
    """ValueError for what rollout workers do not support yet (named)."""
    for name, what in {"lora_r": "LoRA adapters (--lora-r)", "agent": "black-box agents (--agent)"}.items():
        if cfg.to_flat()[name]:
            raise ValueError(f"--rollout-workers does not support {what} yet")
    if not cfg.async_rl.enabled:
        raise ValueError("--rollout-workers needs --async-rollouts")


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (no orphaned workers after a kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _param_groups(model: torch.nn.Module) -> list[list[torch.Tensor]]:
    """The model's parameters grouped by (device, dtype), in parameter order (one flat buffer each)."""
    groups: dict[tuple[str, torch.dtype], list[torch.Tensor]] = {}
    for p in model.parameters():
        groups.setdefault((str(p.device), p.dtype), []).append(p)
    return list(groups.values())


def layout(model: torch.nn.Module) -> list[tuple[str, int]]:
    """[(dtype, elements)] of each flat buffer push_weights sends: both ends must agree."""
    return [(str(g[0].dtype), sum(t.numel() for t in g)) for g in _param_groups(model)]


class WorkerLoop:
    """The worker side: the command loop of one rollout worker (rank >= 1 of the pool's group)."""

    def __init__(self, sess: RunSession, rank: int, comm_device: str, ctrl: Any):
        self.sess, self.rank, self.comm_device, self.ctrl = sess, rank, comm_device, ctrl

    def run(self) -> None:
        while True:
            box = [None]
            dist.broadcast_object_list(box, src=0, group=self.ctrl)
            cmd = box[0]
            if cmd["op"] == "stop":
                return
            reply = getattr(self, f"_{cmd['op']}")(cmd)
            dist.gather_object(reply, None, dst=0, group=self.ctrl)

    @torch.no_grad()
    def _weights(self, cmd: dict) -> dict:
        mine = layout(self.sess.model)
        ok = mine == cmd["layout"]
        groups = _param_groups(self.sess.model)
        for i, (dtype, n) in enumerate(cmd["layout"]):  # receive every buffer sent, even on a mismatch
            flat = torch.empty(n, dtype=getattr(torch, dtype.removeprefix("torch.")), device=self.comm_device)
            dist.broadcast(flat, src=0)
            if ok:
                for dst, src in zip(groups[i], _unflatten_dense_tensors(flat, groups[i]), strict=True):
                    dst.copy_(src)
        return {"ok": ok, "layout": mine, "version": cmd["version"]}

    def _rollout(self, cmd: dict) -> dict:
        idx = cmd["shards"].get(self.rank, [])
        if not idx:
            return {"idx": [], "trajs": []}
        tasks, gids = cmd["tasks"], cmd["group_ids"]
        from agentrl.scale.data_parallel import shard_seed

        t0 = time.perf_counter()
        trajs = self.sess.rollout([tasks[i] for i in idx], seed=shard_seed(cmd["seed"], idx[0]),
                                  group_ids=[gids[i] for i in idx], label=f"worker {self.rank}",
                                  policy_version=cmd["policy_version"])
        return {"idx": idx, "trajs": trajs, "rollout_s": time.perf_counter() - t0}

    @torch.no_grad()
    def _checksum(self, cmd: dict) -> dict:
        return {"sum": float(sum(p.double().sum() for p in self.sess.model.parameters()))}


def worker_main(cfg: RLConfig, rank: int, world: int, init_method: str, backend: str, device: str) -> None:
    """Entry of a spawned rollout worker: join the pool's group, load the policy (and sandbox) like the
    trainer, then serve commands until "stop"."""
    _die_with_parent()
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=_dt.timedelta(seconds=TIMEOUT_S))
    ctrl = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    try:
        with open_rank_session(cfg, name=f"worker{rank}") as sess:
            dist.gather_object({"ready": rank, "device": sess.device, "pid": os.getpid()}, None, dst=0, group=ctrl)
            WorkerLoop(sess, rank, device if backend == "nccl" else "cpu", ctrl).run()
    finally:
        dist.destroy_process_group()


def _launch(cfg: RLConfig, wcfgs: list[RLConfig], devices: list[str], init: str, backend: str,
            net_env: dict[str, str]) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """Start the workers (rank i+1 on devices[i]): spawned processes, or Ray actors with `net_env` in
    their runtime environment. Returns (processes, [(actor, serve ref)])."""
    n = len(devices)
    if cfg.scale.worker_launcher == "ray":
        return [], start_worker_actors(wcfgs, n + 1, init, backend, env=net_env)
    ctx = mp.get_context("spawn")
    procs = []
    for i, (wcfg, dev) in enumerate(zip(wcfgs, devices, strict=True)):
        p = ctx.Process(target=worker_main, args=(wcfg, i + 1, n + 1, init, backend, dev),
                        name=f"agentrl-rollout-worker-{i + 1}", daemon=True)
        p.start()
        procs.append(p)
    return procs, []


def _kill(procs: list[Any], actors: list[tuple[Any, Any]]) -> None:
    """End worker processes / Ray actors that are still running."""
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
    if actors:
        import ray

        for a, _ in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)


class WorkerPool:
    """The trainer side: N spawned rollout workers and the process group joining them to this process.

    Use `WorkerPool.start(cfg, n, device)`; `push_weights(model)`, `rollout(...)`, `checksums()`,
    `close()`. Every method is a collective with the workers: call them from one thread at a time.
    """

    def __init__(self, procs: list[Any], ctrl: Any, backend: str, comm_device: str, tmp: Path, devices: list[str]):
        self.procs, self.ctrl, self.backend, self.comm_device = procs, ctrl, backend, comm_device
        self.tmp, self.devices = tmp, devices
        self.last_sync_s, self.last_sync_bytes, self.syncs, self.sync_s_total = 0.0, 0, 0, 0.0
        self.version: int | None = None
        self.actors: list[tuple[Any, Any]] = []  # (Ray actor, its serve() ref) with worker_launcher "ray"
        self.launcher = "process"
        self.pids: list[int] = []  # each worker's process id (on this host for both launchers: FileStore)
        self._closed = False

    @property
    def size(self) -> int:
        return len(self.devices)

    @classmethod
    def start(cls, cfg: RLConfig, n: int, trainer_device: str, *, timeout_s: float = TIMEOUT_S) -> WorkerPool:
        """Spawn `n` workers (each loads cfg's policy on its device) and wait until they are ready.

        Raises: ValueError (worker_devices), RuntimeError when a worker fails to start.
        """
        _, devices = worker_devices(cfg.policy.device, n)
        backend = "nccl" if all(d.startswith("cuda") for d in devices) and trainer_device.startswith("cuda") else "gloo"
        comm_device = trainer_device if backend == "nccl" else "cpu"
        tmp = Path(tempfile.mkdtemp(prefix="agentrl-workers-"))
        init = f"file://{tmp / 'rendezvous'}"
        wcfgs = []
        for dev in devices:
            wcfgs.append(cfg.replace_flat(device=dev, report_to="none", resume=False, ray_graders=0))
        net_env = loopback_socket_env()
        with environ_set(net_env):  # the spawned workers inherit it; this process's groups read it
            procs, actors = _launch(cfg, wcfgs, devices, init, backend, net_env)
            try:
                dist.init_process_group(backend, init_method=init, rank=0, world_size=n + 1,
                                        timeout=_dt.timedelta(seconds=timeout_s))
                ctrl = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
                ready: list[Any] = [None] * (n + 1)
                dist.gather_object(None, ready, dst=0, group=ctrl)
            except BaseException:
                _kill(procs, actors)
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        log.info("rollout workers: %d (%s) on %s, started as %s, weights over %s", n,
                 ", ".join(str(r["ready"]) for r in ready[1:]), ", ".join(r["device"] for r in ready[1:]),
                 "Ray actors" if actors else "processes", backend)
        pool = cls(procs, ctrl, backend, comm_device, tmp, [r["device"] for r in ready[1:]])
        pool.actors, pool.launcher, pool.pids = actors, cfg.scale.worker_launcher, [r["pid"] for r in ready[1:]]
        return pool

    def _command(self, cmd: dict) -> list[Any]:
        box = [cmd]
        dist.broadcast_object_list(box, src=0, group=self.ctrl)
        if cmd["op"] == "weights":
            return []
        replies: list[Any] = [None] * (self.size + 1)
        dist.gather_object(None, replies, dst=0, group=self.ctrl)
        return replies[1:]

    @torch.no_grad()
    def push_weights(self, model: torch.nn.Module, version: int | None = None) -> float:
        """Broadcast `model`'s parameters to every worker (one flat buffer per dtype); returns and
        records the seconds it took (flattening, transfer, the workers' copy-in acknowledged).

        Raises: RuntimeError when a worker's model has another parameter layout."""
        t0 = time.perf_counter()
        groups = _param_groups(model)
        self._command({"op": "weights", "layout": layout(model), "version": version})
        nbytes = 0
        for g in groups:
            flat = _flatten_dense_tensors([t.detach() for t in g]).to(self.comm_device)
            dist.broadcast(flat, src=0)
            nbytes += flat.numel() * flat.element_size()
        replies: list[Any] = [None] * (self.size + 1)
        dist.gather_object(None, replies, dst=0, group=self.ctrl)
        bad = [r for r in replies[1:] if not r["ok"]]
        if bad:
            raise RuntimeError(f"rollout worker weights differ in layout: trainer {layout(model)}, worker {bad[0]['layout']}")
        self.last_sync_s = time.perf_counter() - t0
        self.last_sync_bytes, self.version = nbytes, version
        self.syncs += 1
        self.sync_s_total += self.last_sync_s
        return self.last_sync_s

    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None,
                policy_version: int | None) -> list[Trajectory]:
        """One episode per task on the workers (groups split by shard_groups); trajectories in task order."""
        gids = list(group_ids) if group_ids is not None else list(range(len(tasks)))
        owner = shard_groups(gids, self.size)
        shards: dict[int, list[int]] = {}
        for i, r in enumerate(owner):
            shards.setdefault(r + 1, []).append(i)
        replies = self._command({"op": "rollout", "tasks": list(tasks), "group_ids": gids, "seed": seed,
                                 "shards": shards, "policy_version": policy_version})
        out: list[Trajectory | None] = [None] * len(tasks)
        for rep in replies:
            for i, tr in zip(rep["idx"], rep["trajs"], strict=True):
                out[i] = tr
        return out  # type: ignore[return-value]

    def checksums(self) -> list[float]:
        """Each worker's float64 sum of its parameters (tests: the push arrived)."""
        return [r["sum"] for r in self._command({"op": "checksum"})]

    def metrics(self) -> dict[str, float]:
        return {"dist/weight_sync_s": self.last_sync_s, "dist/weight_sync_bytes": float(self.last_sync_bytes),
                "dist/rollout_workers": float(self.size)}

    def close(self) -> None:
        """Stop the workers (they exit their loop), join them, tear the group down."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            dist.broadcast_object_list([{"op": "stop"}], src=0, group=self.ctrl)
        for p in self.procs:
            p.join(timeout=60)
        if self.actors:
            import ray

            with contextlib.suppress(Exception):
                ray.get([ref for _, ref in self.actors], timeout=60)
        _kill(self.procs, self.actors)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass(frozen=True)
class RemotePolicy:
    """The asynchronous producer's rollout policy when it lives in worker processes."""

    pool: Any


@contextlib.contextmanager
def open_with_rollout_workers(cfg: RLConfig, *, sampler: Any = None,
                              make_sandbox: Callable[[RLConfig], Any] | None = None) -> Iterator[RunSession]:
    """RunSession.open with a RolloutWorkersBackend: the asynchronous producer's rollouts run on a
    WorkerPool of cfg.scale.rollout_workers processes (module docstring); the pool is closed on exit.

    Raises: ValueError: an option the workers do not support, or RunSession.open's errors."""
    check_rollout_workers(cfg)
    worker_devices(cfg.policy.device, cfg.scale.rollout_workers)  # refused before any work
    with RunSession.open(cfg, sampler=sampler, make_sandbox=make_sandbox, scaled=True) as sess:
        pool = WorkerPool.start(cfg, cfg.scale.rollout_workers, sess.device)
        sess.backend = RolloutWorkersBackend(sess, pool, sess.backend)
        sess.results.set("distributed", {"launcher": f"rollout-workers ({pool.launcher})",
                                         "rollout_workers": pool.size, "devices": pool.devices,
                                         "backend": pool.backend})
        try:
            yield sess
        finally:
            pool.close()


class RolloutWorkersBackend:
    """A Backend (agentrl.rl.backend) whose asynchronous rollouts run on a WorkerPool; evaluations, the
    update and checkpoints are the `local` backend's, in the trainer process on the learner's weights."""

    def __init__(self, sess: RunSession, pool: WorkerPool, local: Any):
        self.sess, self.workers, self.local = sess, pool, local

    def rollout_copy(self) -> RemotePolicy:
        return RemotePolicy(self.workers)

    def sync_weights(self, policy: Any) -> None:
        if isinstance(policy, RemotePolicy):
            policy.pool.push_weights(self.sess.model)
        else:
            self.local.sync_weights(policy)

    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None, policy: Any = None) -> list[Trajectory]:
        if isinstance(policy, RemotePolicy):
            return policy.pool.rollout(tasks, seed=seed, group_ids=group_ids, policy_version=policy_version)
        return self.local.rollout(tasks, seed=seed, group_ids=group_ids, label=label, policy_version=policy_version,
                                  policy=policy)

    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]:
        m = self.local.update(batch, group_ids=group_ids, generator=generator, minibatches=minibatches)
        m.update(self.workers.metrics())  # the push that preceded this batch's collection
        return m

    def checkpoint(self, step: int, final: bool = False) -> Path | None:
        return self.local.checkpoint(step, final=final)

    def decide(self, flag: bool) -> bool:
        return self.local.decide(flag)


class RolloutWorkerActor:
    """A Ray actor that runs one rollout worker (agentrl.scale.workers.worker_main) until told to stop."""

    def serve(self, cfg: Any, rank: int, world: int, init_method: str, backend: str, device: str) -> int:
        worker_main(cfg, rank, world, init_method, backend, device)
        return rank


def start_worker_actors(cfgs: list[Any], world: int, init_method: str, backend: str, *,
                        env: dict[str, str] | None = None) -> list[tuple[Any, Any]]:
    """Start one RolloutWorkerActor per worker config (rank i+1; a GPU each when backend is NCCL, then
    the actor sees its GPU as cuda:0), with `env` (e.g. agentrl.scale.net.loopback_socket_env()) set in
    each actor's process through Ray's runtime_env. Returns [(actor, ObjectRef of its serve loop)]."""
    from agentrl.scale.ray_actors import init_ray

    init_ray()
    import ray

    gpu = backend == "nccl"
    actor = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0)(RolloutWorkerActor)
    if env:
        actor = actor.options(runtime_env={"env_vars": dict(env)})
    out = []
    for i, cfg in enumerate(cfgs):
        a = actor.remote()
        out.append((a, a.serve.remote(cfg, i + 1, world, init_method, backend, "cuda:0" if gpu else "cpu")))
    return out

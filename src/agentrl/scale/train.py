"""Entry points of distributed training runs. Not the schedule (agentrl.rl.trainer.train is reused)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from agentrl.rl.config import RLConfig
from agentrl.rl.session import RunSession
from agentrl.rl.trainer import train
from agentrl.scale.data_parallel import open_data_parallel
from agentrl.scale.ray_actors import init_ray, ray_sandbox
from agentrl.scale.workers import open_with_rollout_workers


@contextlib.contextmanager
def open_scaled(cfg: RLConfig, *, sampler: Any = None) -> Iterator[RunSession]:
    """The session a single-trainer run of `cfg` needs: its sandbox grading in Ray actors with
    --ray-graders (agentrl.scale.ray_actors.ray_sandbox), its asynchronous rollouts in worker processes
    with --rollout-workers (agentrl.scale.workers), else RunSession.open's."""
    make_sandbox = ray_sandbox if cfg.scale.ray_graders else None
    if cfg.scale.rollout_workers:
        opener = open_with_rollout_workers(cfg, sampler=sampler, make_sandbox=make_sandbox)
    else:
        opener = RunSession.open(cfg, sampler=sampler, make_sandbox=make_sandbox, scaled=True)
    with opener as sess:
        yield sess


def train_scaled(cfg: RLConfig) -> Path:
    """agentrl.rl.trainer.train with the session `open_scaled(cfg)` opens (one trainer process)."""
    actors = cfg.scale.ray_graders + (cfg.scale.rollout_workers if cfg.scale.worker_launcher == "ray" else 0)
    if actors:  # a local cluster gets a logical CPU per actor at least (each actor asks for one)
        init_ray(num_cpus=max(os.cpu_count() or 1, actors))
    return train(cfg, open_session=open_scaled)


def train_data_parallel(cfg: RLConfig) -> Path | None:
    """One rank of a torchrun GRPO run (agentrl.scale.data_parallel.open_data_parallel under
    agentrl.rl.trainer.train). Returns the results path on rank 0 (the only rank that writes), None
    elsewhere; the process group is closed at the end, also after an error.

    Raises: what agentrl.rl.trainer.train raises (bad input before any work, named).
    """
    try:
        path = train(cfg, open_session=open_data_parallel)
        return path if dist.get_rank() == 0 else None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

"""Entry points of distributed training runs. Not the schedule (agentrl.rl.trainer.train is reused)."""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from agentrl.rl.config import RLConfig
from agentrl.rl.session import RunSession


def session_class(cfg: RLConfig) -> type[RunSession]:
    """The RunSession class a single-trainer run of `cfg` needs: rollout workers (agentrl.scale.workers)
    and/or Ray graders (agentrl.scale.ray_actors), else RunSession itself."""
    base: type[RunSession] = RunSession
    if cfg.rollout_workers:
        from agentrl.scale.workers import RolloutWorkersSession

        base = RolloutWorkersSession
    if cfg.ray_graders:
        from agentrl.scale.ray_actors import RayGradersMixin

        return type(f"RayGraders{base.__name__}", (RayGradersMixin, base), {})
    return base


def train_scaled(cfg: RLConfig) -> Path:
    """agentrl.rl.trainer.train with the session `session_class(cfg)` picks (one trainer process)."""
    from agentrl.rl.trainer import train

    actors = cfg.ray_graders + (cfg.rollout_workers if cfg.worker_launcher == "ray" else 0)
    if actors:  # a local cluster gets a logical CPU per actor at least (each actor asks for one)
        import os

        from agentrl.scale.ray_actors import init_ray

        init_ray(num_cpus=max(os.cpu_count() or 1, actors))
    return train(cfg, session_cls=session_class(cfg))


def train_data_parallel(cfg: RLConfig) -> Path | None:
    """One rank of a torchrun GRPO run (agentrl.scale.data_parallel.DataParallelSession under
    agentrl.rl.trainer.train). Returns the results path on rank 0 (the only rank that writes), None
    elsewhere; the process group is closed at the end, also after an error.

    Raises: what agentrl.rl.trainer.train raises (bad input before any work, named).
    """
    from agentrl.rl.trainer import train
    from agentrl.scale.data_parallel import DataParallelSession

    try:
        path = train(cfg, session_cls=DataParallelSession)
        return path if dist.get_rank() == 0 else None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

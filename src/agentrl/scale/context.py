"""The process group of one distributed run and how work is split over its ranks. Not the trainer.

`DistContext.from_env()` reads what `torchrun` sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT),
opens the default process group (NCCL when each rank has its own GPU, else gloo) plus a gloo group for
Python objects (trajectories, results), and picks each rank's device. When every rank is on this host
(LOCAL_WORLD_SIZE == WORLD_SIZE) gloo's pairs and NCCL's bootstrap are pinned to the loopback interface
(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, unless the user set them: agentrl.scale.net); torchrun's own
rendezvous store is torch's TCPStore, which listens on all interfaces (docs/scale.md, "Network"). `shard_groups` is the one rule
for splitting episodes: by GRPO group, contiguously, never splitting a group.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from agentrl.scale.net import loopback_socket_env


def launched_by_torchrun() -> bool:
    """True when this process is one rank of a multi-process launch (torchrun sets WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


@dataclass
class DistContext:
    """One rank's view of the run.

    Attributes:
        rank, world_size, local_rank: as torchrun numbers them.
        device: this rank's torch device ("cuda:<local_rank>" or "cpu").
        backend: the default group's backend ("nccl" or "gloo").
        cpu_group: a gloo group over the same ranks, for object collectives (pickled trajectories).
    """

    rank: int
    world_size: int
    local_rank: int
    device: str
    backend: str
    cpu_group: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "auto", *, timeout_s: float = 1800.0) -> DistContext:
        """Open the process group of a torchrun launch (idempotent: reuses an open default group).

        Args:
            device: the run's --device: "auto" (a GPU per rank when this host has one for every local
                rank, else CPU), "cpu", or "cuda" (then a GPU per rank is required).
            timeout_s: collective timeout; a rank that waits longer (another rank died) raises.

        Raises:
            ValueError: not launched by torchrun, or --device cuda with fewer GPUs than local ranks.
        """
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise ValueError("DistContext.from_env: RANK/WORLD_SIZE are not set; launch with "
                             "`torchrun --nproc-per-node N --master-addr 127.0.0.1 --master-port PORT -m agentrl train ...`")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if device.startswith("cuda") and gpus < local_world:
            raise ValueError(f"--device {device} with {local_world} ranks on this host needs one GPU each; "
                             f"this host has {gpus}")
        use_gpu = device.startswith("cuda") or (device == "auto" and gpus >= local_world)
        backend = "nccl" if use_gpu else "gloo"
        dev = f"cuda:{local}" if use_gpu else "cpu"
        if use_gpu:
            torch.cuda.set_device(local)
        if local_world == world:  # one host: this rank's later groups (FSDP's mesh) need it too
            os.environ.update(loopback_socket_env())
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s))
        cpu_group = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
        return cls(rank, world, local, dev, backend, cpu_group)

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """[rank 0's obj, rank 1's, ...] on every rank (pickled over the gloo group)."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s `obj` on every rank (the argument is ignored elsewhere)."""
        box = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=src, group=self.cpu_group)
        return box[0]

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums over ranks of a few float64 scalars (one collective)."""
        t = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.cpu_group)
        return t.tolist()

    def all_reduce_max(self, value: int) -> int:
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.cpu_group)
        return int(t.item())

    def close(self) -> None:
        """Destroy the process group (every rank calls it at the end of the run)."""
        if dist.is_initialized():
            dist.destroy_process_group()


def shard_groups(group_ids: Sequence[int], world_size: int) -> list[int]:
    """The rank that owns each episode: groups (in order of first appearance) are split into
    `world_size` contiguous runs whose sizes differ by at most one; a group is never split.

    Args:
        group_ids: [N] the GRPO group of each episode (episodes of a group need not be adjacent).
        world_size: >= 1.

    Returns:
        [N] owner rank of each episode. Ranks beyond the number of groups own nothing.

    Raises:
        ValueError: world_size < 1.
    """
    if world_size < 1:
        raise ValueError(f"shard_groups: world_size must be >= 1, got {world_size}")
    order: dict[int, int] = {}
    for g in group_ids:
        order.setdefault(g, len(order))
    n = len(order)
    base, extra = divmod(n, world_size)
    bounds, start = [], 0
    for r in range(world_size):  # rank r owns groups [start, start + base + (r < extra))
        start += base + (1 if r < extra else 0)
        bounds.append(start)
    owner_of_group = {}
    r = 0
    for g, i in order.items():
        while i >= bounds[r]:
            r += 1
        owner_of_group[g] = r
    return [owner_of_group[g] for g in group_ids]

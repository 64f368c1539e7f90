"""Activation offloading for the update: what a microbatch's forward saves for backward outside the checkpointed
decoder layers goes to pinned host memory while the forward runs on, and comes back one tensor ahead of the
backward that needs it.

With gradient checkpointing on, the checkpointed layers save nothing inside them (torch.utils.checkpoint's own
saved-tensor hooks); each layer keeps only its input, through `ctx.save_for_backward`, which the hooks installed
here see. For Qwen3-0.6B that is 28 inputs of [tokens, 1024] bf16 per microbatch: 0.69 GiB of the H200 update's
2.56 GiB peak above weights and optimizer state (issue 26 item 5, bench/profile_update.py), alive through the
whole backward. The same hooks take the final norm's and the log-prob head's inputs. Parameters (and views of
them) and tensors under `min_bytes` stay where they are.

The copies are asynchronous, as torchtune's `OffloadActivations` and TRL's `activation_offloading` do it: the
device-to-host copy runs on a side stream that waits for the compute stream, and the source's memory returns to
the allocator only after the copy (`Tensor.record_stream`); in backward each unpack waits for its host-to-device
copy (issued on the side stream, one tensor ahead: saved tensors are unpacked in the reverse of their packing
order) and then starts the previous tensor's. The values are copied, not converted, so the gradient is the same
bit for bit (tests/rl/test_offload.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from agentrl.rl.sections import ACTIVATION_OFFLOADING

MIN_OFFLOAD_BYTES = 1 << 20  # smaller saved tensors (per-token indices, norms' statistics) are not worth a copy


class _Offloaded:
    """One saved tensor in host memory: `host` (pinned on CUDA), the `device` to bring it back to, its position
    in the packing order, the event that marks the device-to-host copy done (CUDA), and the prefetched device
    copy with its ready event while one is in flight."""

    __slots__ = ("copied", "device", "fetched", "host", "index", "ready", "unpacked")

    def __init__(self, host: torch.Tensor, device: torch.device, index: int, copied: Any) -> None:
        self.host, self.device, self.index, self.copied = host, device, index, copied
        self.fetched: torch.Tensor | None = None
        self.ready: Any = None
        self.unpacked = False


class HostOffload:
    """Saved-tensor hooks that keep a forward's saved activations in host memory (module docstring).

    Args:
        params: the model's parameters; tensors sharing their storage are never offloaded.
        devices: device types whose tensors are offloaded ("cuda"; tests pass "cpu" to run the bookkeeping
            without a GPU: the host copy is then a plain clone).
        min_bytes: smaller tensors stay where they are.

    Use one instance per forward: `with off.hooks(): loss = forward(...)`, then `loss.backward()` anywhere
    (unpacking needs no context). `bytes_offloaded` counts what was copied out, `count` how many tensors.
    """

    def __init__(self, params: Iterable[torch.Tensor], *, devices: tuple[str, ...] = ("cuda",),
                 min_bytes: int = MIN_OFFLOAD_BYTES) -> None:
        self._skip = {p.untyped_storage().data_ptr() for p in params}
        self._devices, self._min = devices, min_bytes
        self._items: list[_Offloaded] = []
        self._streams: dict[torch.device, Any] = {}
        self.bytes_offloaded = 0

    @property
    def count(self) -> int:
        return len(self._items)

    def hooks(self) -> contextlib.AbstractContextManager[None]:
        """The context under which the forward's saved tensors are offloaded (torch.autograd.graph's
        saved_tensors_hooks)."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _stream(self, device: torch.device) -> Any:
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    def _pack(self, t: torch.Tensor) -> Any:
        if (t.device.type not in self._devices or t.layout != torch.strided or t.numel() * t.element_size() < self._min
                or t.untyped_storage().data_ptr() in self._skip):
            return t
        if t.device.type != "cuda":
            item = _Offloaded(t.detach().clone(), t.device, len(self._items), None)
        else:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            side = self._stream(t.device)
            side.wait_stream(torch.cuda.current_stream(t.device))  # t is written by work queued so far
            with torch.cuda.stream(side):
                host.copy_(t, non_blocking=True)
            t.record_stream(side)  # t's memory goes back to the allocator once the copy is done
            item = _Offloaded(host, t.device, len(self._items), side.record_event())
        self._items.append(item)
        self.bytes_offloaded += t.numel() * t.element_size()
        return item

    def _fetch(self, item: _Offloaded) -> None:
        """Start bringing `item` back to its device (on the side stream on CUDA)."""
        if item.fetched is not None:
            return
        if item.device.type != "cuda":
            item.fetched = item.host.clone()
            return
        side = self._stream(item.device)
        side.wait_event(item.copied)
        with torch.cuda.stream(side):
            item.fetched = item.host.to(item.device, non_blocking=True)
            item.ready = side.record_event()

    def _unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, _Offloaded):
            return packed
        self._fetch(packed)
        t, packed.fetched, packed.unpacked = packed.fetched, None, True
        if packed.device.type == "cuda":
            current = torch.cuda.current_stream(packed.device)
            current.wait_event(packed.ready)
            t.record_stream(current)  # allocated on the side stream, used (and freed) on the compute stream
        # backward unpacks roughly in the reverse of the packing order (exactly so for checkpointed layers' inputs;
        # independent branches may swap): the latest-packed tensor not unpacked yet is the likeliest next
        for i in range(packed.index - 1, -1, -1):
            if not self._items[i].unpacked:
                self._fetch(self._items[i])
                break
        return t


def resolve_activation_offloading(setting: str, device: torch.device | str, checkpointing: bool) -> bool:
    """Whether the update offloads saved activations (RLConfig.update.activation_offloading = `setting`): "on"
    wherever there is a device memory to spare (CUDA), "off" never, "auto" on CUDA when the model checkpoints its
    layers (then only each layer's input is saved, a copy per layer that overlaps the compute; without
    checkpointing every activation would cross the host link).

    Raises: ValueError for any other setting."""
    if setting not in ACTIVATION_OFFLOADING:
        raise ValueError(f"resolve_activation_offloading: expected 'auto', 'on' or 'off', got {setting!r}")
    on_cuda = torch.device(device).type == "cuda"
    return on_cuda and (setting == "on" or (setting == "auto" and checkpointing))


@contextlib.contextmanager
def offloaded(model: torch.nn.Module, enabled: bool) -> Iterator[HostOffload | None]:
    """`with offloaded(model, on) as off:` runs the forward under HostOffload's hooks for `model`'s parameters
    when `enabled` (yields the HostOffload), else under nothing (yields None)."""
    if not enabled:
        yield None
        return
    off = HostOffload(model.parameters(), min_bytes=MIN_OFFLOAD_BYTES)
    with off.hooks():
        yield off

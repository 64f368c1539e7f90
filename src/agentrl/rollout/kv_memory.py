"""Device memory for the fast sampler's static KV cache that can be given back between rollouts and taken again
at the same virtual address, so the CUDA graphs captured over it stay valid.

Why. The FastSampler's static cache (rows x the longest context x layers x K and V) is the largest thing a
coding-tools step holds besides the weights: 12.2 GiB of the 15.8 GiB allocated when a Qwen3-0.6B update starts
(8 x 8 episodes, bf16, H200, results/bench/issue26_h200_2026-12-03/step.txt), and it was kept through the update
because freeing it would free the addresses the decode graphs were captured over. The update does not read it:
the kept KV is dropped when the weights change. Freed to PyTorch's allocator instead, the cache came back at other
addresses at every step after the first, and re-capturing its graphs made the step 0.8 s slower (mode "allocator";
H200, results/bench/issue26_h200_2026-12-03c).

How. CUDA's virtual memory management (the driver's cuMemAddressReserve / cuMemCreate / cuMemMap /
cuMemSetAccess / cuMemUnmap; the mechanism behind vLLM's sleep mode and PyTorch's expandable segments): the
buffer reserves a virtual address range once, and `release()` unmaps and frees its physical memory while keeping
the range; `restore()` maps new physical memory at the same addresses (and zeroes it, as the cache was made).
Kernels and graphs see the same pointers throughout. The driver is called through ctypes (libcuda.so.1, which
every CUDA process has loaded), so nothing is compiled. On the H200 a 12.25 GiB cache (56 tensors) is released in
10 ms and restored (mapped and zeroed) in 10 ms; with it released, the coding-tools step's peak fell from 22.0 to
18.2 GB (bench/bench_kv_release.py, bench/bench_step.py --release-kv).

The memory is outside PyTorch's caching allocator: `torch.cuda.memory_allocated()` does not count it, so a
measurement of peak memory must add `mapped_bytes` (bench/bench_step.py does).

Elsewhere (a CPU tensor, a device or driver without virtual memory management), or with mode "allocator",
`kv_buffer` returns a `PlainBuffer`: an ordinary tensor from PyTorch's allocator whose `release()` drops it (the
memory goes back to the allocator's cache, where the update reuses it with no driver call) and `restore()`
allocates a new one, which may or may not sit at the old address (`stable_address` is False: the caller compares
the addresses and re-captures what was captured over them when they moved).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import torch

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102


class _Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):  # CUmemAllocationProp.allocFlags
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp (cuda.h)
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error string."""


_driver_lock = threading.Lock()
_driver: Any = None


def _libcuda() -> Any:
    """libcuda.so.1 through ctypes (loaded once), or None where there is none."""
    global _driver
    with _driver_lock:
        if _driver is None:
            try:
                _driver = ctypes.CDLL("libcuda.so.1")
            except OSError:
                _driver = False
        return _driver or None


def _check(lib: Any, rc: int, call: str) -> None:
    if rc != 0:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        raise CudaDriverError(f"{call} failed: CUDA driver error {rc} ({(msg.value or b'?').decode()})")


def vmm_supported(device: torch.device) -> bool:
    """True when `device` is a CUDA device whose driver supports virtual memory management (cuMemMap)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    lib = _libcuda()
    if lib is None:
        return False
    try:
        torch.cuda.synchronize(device)  # the runtime makes the device's primary context current on this thread
        dev, flag = ctypes.c_int(), ctypes.c_int()
        if lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(_index(device))) != 0:
            return False
        if lib.cuDeviceGetAttribute(ctypes.byref(flag),
                                    _CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != 0:
            return False
        return bool(flag.value)
    except (AttributeError, RuntimeError):
        return False


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


class _ArrayInterface:
    """`__cuda_array_interface__` (version 2) of nbytes bytes at ptr: what torch.as_tensor wraps without a copy;
    the tensor keeps this object (and through it `owner`) alive."""

    def __init__(self, owner: Any, ptr: int, nbytes: int):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2}


class _Mapping:
    """A reserved virtual address range and the physical memory mapped at it (when mapped). Freed (unmapped,
    range given back) when the last reference goes: the VmmBuffer and every tensor view of it hold one, and it
    holds none of them, so dropping them frees the memory at once (no reference cycle waiting for the GC)."""

    def __init__(self, lib: Any, nbytes: int, device: torch.device, prop: _AllocationProp):
        self.lib, self.nbytes, self.device, self.prop = lib, nbytes, device, prop
        self.handle: int | None = None
        ptr = ctypes.c_uint64()
        _check(lib, lib.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                            ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
        self.ptr = int(ptr.value)

    def map(self) -> None:
        lib, handle = self.lib, ctypes.c_uint64()
        _check(lib, lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(self.nbytes), ctypes.byref(self.prop),
                                    ctypes.c_uint64(0)), "cuMemCreate")
        try:
            _check(lib, lib.cuMemMap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes), ctypes.c_size_t(0),
                                     handle, ctypes.c_uint64(0)), "cuMemMap")
        except CudaDriverError:
            lib.cuMemRelease(handle)
            raise
        access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, _index(self.device)),
                             _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        try:
            _check(lib, lib.cuMemSetAccess(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes),
                                           ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
        except CudaDriverError:
            lib.cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
            lib.cuMemRelease(handle)
            raise
        self.handle = int(handle.value)

    def unmap(self) -> None:
        if self.handle is None:
            return
        torch.cuda.synchronize(self.device)  # no queued kernel may touch the pages being unmapped
        lib = self.lib
        _check(lib, lib.cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes)), "cuMemUnmap")
        _check(lib, lib.cuMemRelease(ctypes.c_uint64(self.handle)), "cuMemRelease")
        self.handle = None

    def __del__(self) -> None:
        try:
            self.unmap()
            self.lib.cuMemAddressFree(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
        except Exception:  # interpreter shutdown: the driver frees everything with the process
            pass


class VmmBuffer:
    """`nbytes` of device memory at a virtual address fixed for the buffer's life, whose physical memory can be
    given back (`release`) and taken again (`restore`) while the address stays valid.

    Args:
        nbytes: bytes wanted (rounded up to the driver's allocation granularity, 2 MiB on current GPUs).
        device: a CUDA device (torch.device) with virtual memory management (`vmm_supported`).

    Attributes: `tensor` (uint8 [nbytes], rounded size; read or write it only while mapped), `mapped` (bool),
    `mapped_bytes` (the rounded size while mapped, else 0), `stable_address` (True). The memory is freed when
    the buffer and every view of `tensor` are gone.

    Raises:
        ValueError: nbytes < 1.
        CudaDriverError: a driver call failed (out of memory included: the message says which call).
    """

    stable_address = True

    def __init__(self, nbytes: int, device: torch.device):
        if nbytes < 1:
            raise ValueError(f"VmmBuffer: nbytes must be >= 1, got {nbytes}")
        lib = _libcuda()
        if lib is None:
            raise CudaDriverError("VmmBuffer: libcuda.so.1 cannot be loaded")
        self.device = device
        torch.cuda.synchronize(device)  # the runtime makes the device's primary context current on this thread
        prop = _AllocationProp()
        prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, _index(device))
        gran = ctypes.c_size_t()
        _check(lib, lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                                      _CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity")
        g = max(int(gran.value), 1)
        self.nbytes = -(-int(nbytes) // g) * g
        self._m = _Mapping(lib, self.nbytes, device, prop)
        self._m.map()
        self.tensor = torch.as_tensor(_ArrayInterface(self._m, self._m.ptr, self.nbytes), device=device)
        if self.tensor.data_ptr() != self._m.ptr:
            raise CudaDriverError("VmmBuffer: torch.as_tensor copied the mapped memory instead of wrapping it")
        self.tensor.zero_()

    @property
    def ptr(self) -> int:
        return self._m.ptr

    @property
    def mapped(self) -> bool:
        return self._m.handle is not None

    @property
    def mapped_bytes(self) -> int:
        return self.nbytes if self._m.handle is not None else 0

    def release(self) -> None:
        """Give the physical memory back (after the device has finished every queued kernel); the contents are
        lost and the address stays reserved. No-op when already released."""
        self._m.unmap()

    def restore(self) -> None:
        """Map new physical memory at the same address and zero it (as the cache was made). No-op when mapped.
        Raises CudaDriverError (e.g. out of memory) and then stays released."""
        if self._m.handle is not None:
            return
        torch.cuda.synchronize(self.device)
        self._m.map()
        self.tensor.zero_()


class PlainBuffer:
    """The fallback of `kv_buffer`: a zeroed uint8 tensor from PyTorch's allocator. `release()` drops it and
    `restore()` allocates a new one (zeroed) at another address: `stable_address` is False. `mapped_bytes` is 0
    (the allocator's own statistics count this memory)."""

    stable_address = False
    mapped_bytes = 0

    def __init__(self, nbytes: int, device: torch.device):
        if nbytes < 1:
            raise ValueError(f"PlainBuffer: nbytes must be >= 1, got {nbytes}")
        self.nbytes, self.device = int(nbytes), device
        self.tensor: torch.Tensor | None = torch.zeros(self.nbytes, dtype=torch.uint8, device=device)

    @property
    def mapped(self) -> bool:
        return self.tensor is not None

    def release(self) -> None:
        """Drop the tensor (its memory returns to the allocator once no view of it is left)."""
        self.tensor = None

    def restore(self) -> None:
        """A new zeroed tensor; no-op when one is held."""
        if self.tensor is None:
            self.tensor = torch.zeros(self.nbytes, dtype=torch.uint8, device=self.device)


def kv_buffer(nbytes: int, device: torch.device, *, mode: str = "vmm") -> VmmBuffer | PlainBuffer:
    """Memory for a static KV cache: mode "vmm" gives a VmmBuffer where the device supports virtual memory
    management (`vmm_supported`), else a PlainBuffer; mode "allocator" a PlainBuffer (PyTorch's caching allocator:
    released memory goes back to its cache, where the update can reuse it without a driver call, and the next
    restore may or may not get the same blocks). Raises ValueError for nbytes < 1 or another mode,
    CudaDriverError if the driver fails."""
    if mode not in ("vmm", "allocator"):
        raise ValueError(f"kv_buffer: mode must be 'vmm' or 'allocator', got {mode!r}")
    if mode == "vmm" and _vmm_cached(device):
        return VmmBuffer(nbytes, device)
    return PlainBuffer(nbytes, device)


_vmm_known: dict[str, bool] = {}


def _vmm_cached(device: torch.device) -> bool:
    key = str(device) if device.index is not None or device.type != "cuda" else f"cuda:{torch.cuda.current_device()}"
    if key not in _vmm_known:
        _vmm_known[key] = vmm_supported(device)
    return _vmm_known[key]

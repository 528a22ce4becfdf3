"""The device arena: one per CUDA device, shared by every session on it (the factory hands out
the same object), like ORT's BFC arena but simpler.

Blocks are rounded to size buckets (next power of two, or 256-byte multiples) and reused from a
free list per bucket. A typed array handed to a kernel owns its block through a pointer whose
finalizer returns the block when the last view of the array dies, so the planner's "drop the
value after its last use" is what frees memory. Blocks remember the stream that last used them;
reusing one from another stream first waits for that stream, so sessions on different streams
never overwrite each other's pending work."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_core.sdk.errors import Fail

ALIGN = 256


@dataclass
class Block:
    raw: Any  # a uint8 device array that owns the memory
    size: int
    stream: Any = None


def _bucket(nbytes: int, strategy: str) -> int:
    n = max(int(nbytes), 1)
    if strategy == "kNextPowerOfTwo":
        return max(ALIGN, 1 << (n - 1).bit_length())
    return (n + ALIGN - 1) // ALIGN * ALIGN


class _HostViewOwner:
    """Simulator only: a non-ndarray base for a typed view of a block, so that every NumPy view
    derived from the array keeps this object (and not just the block) alive; its finalizer is
    then a faithful 'last view died' signal."""

    def __init__(self, block: Block, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.block = block
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (block.raw.ctypes.data, False),
            "version": 3,
        }


class DeviceArena:
    """Thread-safe caching allocator for one device (``alloc``/``free``/``empty``/``stats``)."""

    def __init__(self, device_id: int, strategy: str = "kNextPowerOfTwo", limit: int = 0) -> None:
        from ep_cuda_numba.device import simulator_requested

        self.device_id = device_id
        self.strategy = strategy
        self.limit = limit
        self.simulated = simulator_requested()
        self._lock = threading.RLock()
        self._free: dict[int, list[Block]] = {}
        self._live: dict[int, tuple[Block, Any]] = {}
        self._reserved = 0
        self._in_use = 0
        self._peak = 0
        self._num_allocs = 0
        self._num_reuses = 0
        self._num_device_allocs = 0
        self._num_frees = 0
        self.users = 0
        self._views_broken: str | None = None

    # --------------------------------------------------------------------------- blocks
    def _new_block(self, size: int) -> Block:
        if self.limit and self._reserved + size > self.limit:
            self._shrink_locked()
            if self._reserved + size > self.limit:
                raise Fail(
                    f"NumbaCudaExecutionProvider arena on gpu:{self.device_id} would exceed gpu_mem_limit="
                    f"{self.limit} bytes ({self._reserved} reserved, {size} more requested); raise "
                    "ep.NumbaCudaExecutionProvider.gpu_mem_limit or use smaller inputs"
                )
        from numba import cuda

        from ep_cuda_numba.device import device_context

        if self.simulated:
            raw: Any = np.empty(size, np.uint8)
        else:
            with device_context(self.device_id):
                raw = cuda.device_array(size, np.uint8)
        self._reserved += size
        self._num_device_allocs += 1
        return Block(raw, size)

    def _take(self, nbytes: int, stream: Any) -> Block:
        size = _bucket(nbytes, self.strategy)
        with self._lock:
            self._num_allocs += 1
            free = self._free.get(size)
            block: Block | None = None
            if free:
                # prefer a block last used on this stream (no wait needed)
                for i in range(len(free) - 1, -1, -1):
                    if free[i].stream is stream or free[i].stream is None:
                        block = free.pop(i)
                        break
                if block is None:
                    block = free.pop()
                    if block.stream is not None:
                        block.stream.synchronize()
                self._num_reuses += 1
            else:
                block = self._new_block(size)
            block.stream = stream
            self._in_use += block.size
            self._peak = max(self._peak, self._in_use)
            return block

    def _give_back(self, block: Block) -> None:
        with self._lock:
            self._in_use -= block.size
            self._num_frees += 1
            self._free.setdefault(block.size, []).append(block)

    # ------------------------------------------------------------------------------ API
    def alloc(self, nbytes: int, stream: Any = None) -> Any:
        """A raw uint8 device buffer of at least ``nbytes``; return it with :meth:`free`."""
        block = self._take(nbytes, stream)
        with self._lock:
            self._live[id(block.raw)] = (block, None)
        return block.raw

    def free(self, buf: Any) -> None:
        with self._lock:
            entry = self._live.pop(id(buf), None)
        if entry is None:
            raise Fail("DeviceArena.free: this buffer was not allocated by this arena (or was freed twice)")
        self._give_back(entry[0])

    def empty(self, shape: tuple[int, ...], dtype: Any, stream: Any = None) -> Any:
        """A C-contiguous device array whose block returns to the arena when its last view dies."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._views_broken is not None:
            from numba import cuda

            from ep_cuda_numba.device import device_context

            with device_context(self.device_id):
                return cuda.device_array(shape, dtype)
        block = self._take(nbytes, stream)
        if self.simulated:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            owner = _HostViewOwner(block, shape, dtype)
            arr = FakeCUDAArray(np.asarray(owner))
            weakref.finalize(owner, self._give_back, block)
            return arr
        try:
            return self._device_view(block, shape, dtype, nbytes)
        except Exception as exc:  # numba internals changed: keep working without the arena
            # the failed block may still be released by a half-built pointer's finalizer: leave it
            # to that (at most one block, once) rather than risk returning it twice
            self._views_broken = f"{type(exc).__name__}: {exc}"
            import warnings

            warnings.warn(
                f"NumbaCudaExecutionProvider arena on gpu:{self.device_id} cannot wrap its blocks in device arrays "
                f"({self._views_broken}); allocating directly from numba from now on (no block reuse)",
                RuntimeWarning,
                stacklevel=2,
            )
            from numba import cuda

            from ep_cuda_numba.device import device_context

            with device_context(self.device_id):
                return cuda.device_array(shape, dtype)

    def _device_view(self, block: Block, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> Any:
        import ctypes

        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.cuda.cudadrv.driver import AutoFreePointer

        ctx = block.raw.gpu_data.context
        key = [0]

        def release(arena: DeviceArena = self, blk: Block = block, k: list[int] = key) -> None:
            with arena._lock:
                arena._live.pop(k[0], None)
            arena._give_back(blk)

        addr = ctypes.c_void_p(int(block.raw.gpu_data.device_pointer_value))
        ptr = AutoFreePointer(ctx, addr, max(nbytes, 1), finalizer=release)
        key[0] = id(ptr)
        with self._lock:
            # the pointer must outlive every view; its finalizer (refcount 0) removes it
            self._live[id(ptr)] = (block, ptr)
        strides = _c_strides(shape, dtype.itemsize)
        return DeviceNDArray(shape, strides, dtype, gpu_data=ptr.own())

    def shrink(self) -> int:
        """Release cached free blocks back to the driver; returns the bytes released."""
        with self._lock:
            return self._shrink_locked()

    def _shrink_locked(self) -> int:
        released = 0
        for blocks in self._free.values():
            for b in blocks:
                if b.stream is not None:
                    b.stream.synchronize()
                released += b.size
        self._free.clear()
        self._reserved -= released
        return released

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "bytes_in_use": self._in_use,
                "peak_bytes_in_use": self._peak,
                "bytes_reserved": self._reserved,
                "num_allocs": self._num_allocs,
                "num_reuses": self._num_reuses,
                "num_device_allocs": self._num_device_allocs,
                "num_frees": self._num_frees,
                "num_free_blocks": sum(len(v) for v in self._free.values()),
                "limit": self.limit,
            }

    def __repr__(self) -> str:
        return f"DeviceArena(gpu:{self.device_id}, {self.strategy}, {self.stats()})"


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))

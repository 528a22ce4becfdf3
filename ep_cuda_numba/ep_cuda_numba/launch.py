"""Launch configuration and per-node runtime helpers shared by every kernel family.

Under the simulator each simulated thread is a Python thread (~100 us each), so every launch is
capped to one block of 32 threads and kernels use grid-stride loops; on a GPU the same kernels
get full grids. Kernel modules import ``from numba import cuda`` at top level (the simulator
patches that module-level name), so they are imported only when the registry loads."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import cuda

from ep_cuda_numba.device import simulator_requested
from ep_cuda_numba.stream import raw_stream
from ep_cuda_numba.transfer import as_bits

if TYPE_CHECKING:
    from ep_core.sdk.kernels import KernelContext
    from ep_core.sdk.memory import MemoryInfo
    from ep_cuda_numba.ep import NumbaCudaEp

SIM = simulator_requested()
SIM_THREADS = 32
DEFAULT_TPB = 256
MAX_BLOCKS = 65535 * 8


def grid_1d(n: int, tpb: int = DEFAULT_TPB) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over ``n`` items."""
    if SIM:
        return 1, SIM_THREADS
    return max(1, min(math.ceil(n / tpb), MAX_BLOCKS)), tpb


def grid_blocks(n_items: int, threads: int) -> tuple[int, int]:
    """(blocks, threads) where each block handles whole items (rows, tiles) in a stride loop."""
    if SIM:
        return 1, min(threads, SIM_THREADS)
    return max(1, min(n_items, MAX_BLOCKS)), threads


class Runtime:
    """What a compute function needs at run time: its stream, the arena, the launch width. The EP
    remembers the stream so ``ep_on_run_end`` and ``ep_sync`` can wait for it. Every launch goes
    through ``_go``: when the EP has a ``tap`` (GPU timing for profiles, or a simulated CUDA graph
    capture recording launches) the tap launches; arrays made while a graph is captured are kept
    in ``ep.capturing`` so they stay owned by that graph."""

    __slots__ = ("stream", "s", "arena", "tpb", "device", "ep")

    def __init__(self, ep: "NumbaCudaEp", memory_info: "MemoryInfo", stream: Any, allocator: Any) -> None:
        from ep_cuda_numba.device import device_context

        self.stream = stream
        self.s = raw_stream(stream)
        self.arena = allocator
        self.tpb = int(ep.options.max_threads_per_block)
        self.device = device_context(ep.options.device_id if memory_info.is_host else memory_info.device_id)
        self.ep = ep
        ep.note_stream(stream)

    @classmethod
    def of(cls, ctx: "KernelContext") -> "Runtime":
        """The runtime of a registry kernel, from its builder's context."""
        return cls(ctx.ep, ctx.memory_info, ctx.stream, ctx.allocator)

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        if self.arena is None:
            arr = cuda.device_array(tuple(int(s) for s in shape), dtype=np.dtype(dtype), stream=self.s)
        else:
            arr = self.arena.empty(tuple(int(s) for s in shape), dtype, self.stream)
        owned = self.ep.capturing
        if owned is not None:
            owned.append(arr)
        return arr

    def launch1d(self, kernel: Any, n: int, *args: Any) -> None:
        if n <= 0:
            return
        blocks, threads = grid_1d(n, self.tpb)
        self._go(kernel, blocks, threads, args)

    def launch_blocks(self, kernel: Any, n_items: int, threads: int, *args: Any) -> None:
        if n_items <= 0:
            return
        blocks, threads = grid_blocks(n_items, threads)
        self._go(kernel, blocks, threads, args)

    def launch(self, kernel: Any, blocks: int, threads: Any, *args: Any) -> None:
        """A launch with an explicit configuration (2-D blocks: matmul tiles)."""
        self._go(kernel, blocks, threads, args)

    def _go(self, kernel: Any, blocks: Any, threads: Any, args: tuple[Any, ...]) -> None:
        tap = self.ep.tap
        if tap is not None:
            tap(self, kernel, blocks, threads, args)
            return
        with self.device:
            kernel[blocks, threads, self.s](*args)

    def to_device(self, host: np.ndarray) -> Any:
        """Upload a small host array (attributes, folded constants) at build time."""
        host = np.ascontiguousarray(host).reshape(np.shape(host))  # ascontiguousarray makes 0-d 1-d
        dev = self.empty(host.shape, host.dtype)
        if host.size:
            as_bits(dev).copy_to_device(as_bits(host), stream=self.s)
            if self.s:
                self.s.synchronize()
        return dev


def flat(a: Any) -> Any:
    """A 1-D view of a C-contiguous device array (kernels index flat buffers); bfloat16, which
    numba cannot type, as its uint16 bit patterns (only kernels registered for it see them)."""
    n = int(np.prod(a.shape, dtype=np.int64)) if len(a.shape) else 1
    a = a.reshape(n) if a.shape != (n,) else a
    return a.view(np.uint16) if a.dtype.kind == "V" and a.dtype.itemsize == 2 else a


def scalar_arg(v: np.generic) -> np.generic:
    """A scalar kernel argument; bfloat16 as its bits, like ``flat``."""
    return v.view(np.uint16) if v.dtype.kind == "V" and v.dtype.itemsize == 2 else v


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    out = []
    acc = 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1

"""The pinned (page-locked) host allocator, onnxruntime's ``CudaPinned`` memory: the same BFC arena
over regions from ``cuda.pinned_array`` (plain host arrays under the simulator, same bookkeeping).

Its arrays are NumPy arrays the host reads and writes directly, and the device copies to and from
them by DMA without a staging buffer, so a copy queued on a stream really is asynchronous. A chunk
that an asynchronous copy uses is marked with the copy's stream (``mark_used_on``); the host then
waits for that stream before the chunk is handed out again, since the host writes it at once.

No session option reaches it (the core creates allocators for device memory only): it runs with
the arena defaults, without a limit, and gives its free regions back when the last session using
the device arena of its device leaves (``NumbaCudaFactory.ep_factory_release_allocator``)."""

from __future__ import annotations

import bisect
import weakref
from typing import Any

import numpy as np

from ep_cuda_numba.allocator import Chunk, DeviceArena, _HostViewOwner


class PinnedArena(DeviceArena):
    """Page-locked host memory for one device's copies (``empty`` gives NumPy arrays)."""

    memory_name = "CudaPinned"
    # no session option reaches this arena (the core creates allocators for device memory only): it
    # runs with the default settings, without a limit, so its limit error cannot name a setting
    limit_option = "nothing (the pinned arena runs with the default settings and has no limit)"
    host_side = True

    def _new_memory(self, nbytes: int) -> tuple[Any, int]:
        if self.simulated:
            raw: Any = np.empty(nbytes, np.uint8)
        else:
            from numba import cuda

            from ep_cuda_numba.device import device_context

            with device_context(self.device_id):
                raw = cuda.pinned_array(nbytes, dtype=np.uint8)
        return raw, raw.ctypes.data

    def _raw_view(self, raw: Any, offset: int, nbytes: int) -> Any:
        return raw[offset : offset + nbytes]

    def _typed_view(self, chunk: Chunk, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> Any:
        owner = _HostViewOwner(chunk, shape, dtype)
        arr = np.asarray(owner).view(dtype)  # typestr drops ml_dtypes' bfloat16
        weakref.finalize(owner, self._release, chunk)
        return arr

    def _direct(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return np.empty(shape, dtype)

    def _chunk_at(self, address: int) -> Chunk | None:
        """The in-use chunk holding ``address``, if this arena's memory holds it (lock held)."""
        i = bisect.bisect_right(self._regions, address, key=lambda r: r.base) - 1
        if i < 0 or address >= self._regions[i].base + self._regions[i].size:
            return None
        c = self._regions[i].first
        while c is not None and not (c.offset <= address - self._regions[i].base < c.offset + c.size):
            c = c.next
        return c if c is not None and c.in_use else None

    def holds(self, array: Any) -> bool:
        """Whether ``array`` (a NumPy array) lies in a live chunk of this pinned arena."""
        iface = getattr(array, "__array_interface__", None)
        if iface is None or not iface["data"][0]:
            return False
        with self._lock:
            self._drain()
            return self._chunk_at(iface["data"][0]) is not None

    def mark_used_on(self, array: Any, stream: Any) -> None:
        """An asynchronous copy on ``stream`` reads or writes ``array``: reusing its chunk waits for it."""
        if stream is None:
            return
        with self._lock:
            self._drain()
            c = self._chunk_at(array.__array_interface__["data"][0])
            if c is not None:
                c.stream = stream

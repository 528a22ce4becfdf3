"""The device arena: a best-fit-with-coalescing (BFC) allocator like onnxruntime's BFCArena, one
per CUDA device and shared by every session on it (the factory hands out the same object).

Memory comes from the device in regions (``Extend``: kNextPowerOfTwo doubles the region size,
kSameAsRequested takes what was asked); each region is a list of chunks. An allocation rounds to
256 bytes, takes the best-fitting free chunk from 21 size bins (256 B << i) and splits it when the
rest is large; a free merges the chunk with free neighbours. ``shrink`` gives whole free regions
back (onnxruntime keeps the first region under kNextPowerOfTwo). Stats use onnxruntime's names.

A typed array handed to a kernel owns its chunk through a pointer (a real device pointer at the
chunk's offset inside its region's allocation) whose finalizer returns the chunk when the last
view of the array dies, so the planner's "drop the value after its last use" is what frees memory.
Chunks remember the stream that last used them; taking one last used on another stream first makes
the new stream wait for the old one (a CUDA event), so sessions never overwrite each other's
pending work. Finalizers only queue the chunk; the queue is drained under the lock, so a garbage
collection that fires inside the arena never re-enters it."""

from __future__ import annotations

import bisect
import collections
import threading
import warnings
import weakref
from typing import Any

import numpy as np

from ep_core.sdk.errors import Fail
from ep_cuda_numba.arena_config import ArenaConfig

MIN_ALLOCATION = 256  # onnxruntime's kMinAllocationSize
NUM_BINS = 21
BACKPEDAL = 0.9  # a failed region allocation retries 10% smaller, down to the request (and 8 KiB)


def rounded_bytes(nbytes: int) -> int:
    return max(MIN_ALLOCATION, -(-int(nbytes) // MIN_ALLOCATION) * MIN_ALLOCATION)


def bin_for(size: int) -> int:
    """Bin ``i`` holds free chunks of [256 << i, 256 << (i+1)) bytes; the last one everything above."""
    return min((size >> 8).bit_length() - 1, NUM_BINS - 1)


class Region:
    """One allocation from the device, carved into chunks."""

    __slots__ = ("raw", "base", "size", "rid", "first")

    def __init__(self, raw: Any, base: int, size: int, rid: int) -> None:
        self.raw, self.base, self.size, self.rid = raw, base, size, rid
        self.first: Chunk | None = None


class Chunk:
    __slots__ = ("region", "offset", "size", "requested", "in_use", "stream", "prev", "next")

    def __init__(self, region: Region, offset: int, size: int, stream: Any) -> None:
        self.region, self.offset, self.size, self.stream = region, offset, size, stream
        self.requested = 0
        self.in_use = False
        self.prev: Chunk | None = None
        self.next: Chunk | None = None

    @property
    def addr(self) -> int:
        return self.region.base + self.offset


class _HostViewOwner:
    """A non-ndarray base for a typed host view of a chunk, so every NumPy view derived from the
    array keeps this object (and not just the region) alive; its finalizer is then a faithful
    'last view died' signal. Used for simulated device memory and for pinned host memory."""

    def __init__(self, chunk: Chunk, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.chunk = chunk
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (chunk.addr, False), "version": 3}


def _is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "OUT_OF_MEMORY" in str(exc)


class DeviceArena:
    """Thread-safe BFC arena for one device (``empty``/``alloc``/``free``/``reserve``/``shrink``/``stats``)."""

    memory_name = "Cuda"
    limit_option = "gpu_mem_limit (or arena.max_mem)"
    host_side = False  # pinned host memory: the host itself must wait for a chunk's stream

    def __init__(self, device_id: int, config: ArenaConfig | None = None) -> None:
        from ep_cuda_numba.device import simulator_requested

        self.device_id = device_id
        self.simulated = simulator_requested()
        self._lock = threading.Lock()
        self._pending: collections.deque[Chunk] = collections.deque()
        self._bins: list[list[tuple[int, int, Chunk]]] = [[] for _ in range(NUM_BINS)]
        self._regions: list[Region] = []  # sorted by base address
        self._live: dict[
            int, tuple[Chunk | None, Any, int]
        ] = {}  # id(buffer) -> (chunk | None if reserved, buffer, size)
        self.users = 0
        self._views_broken: str | None = None
        self._configure(config or ArenaConfig())

    def _configure(self, config: ArenaConfig) -> None:
        self.config = config
        self._next_rid = 0  # region ids only grow (shrinking must not reissue one); 0: the first region
        self._curr = self._initial_region_bytes()
        self._stats = dict.fromkeys(
            (
                "num_allocs",
                "num_reserves",
                "num_arena_extensions",
                "num_arena_shrinkages",
                "bytes_in_use",
                "total_allocated_bytes",
                "max_bytes_in_use",
                "max_alloc_size",
                "num_stream_waits",
            ),
            0,
        )

    def _initial_region_bytes(self) -> int:
        cfg = self.config
        return rounded_bytes(min(cfg.max_mem or cfg.initial_chunk_size_bytes, cfg.initial_chunk_size_bytes))

    @property
    def strategy(self) -> str:
        return self.config.extend_strategy

    @property
    def limit(self) -> int:
        return self.config.max_mem

    # ------------------------------------------------------------------ backend (device memory)
    def _new_memory(self, nbytes: int) -> tuple[Any, int]:
        """(an object owning ``nbytes`` fresh bytes, their address)."""
        if self.simulated:
            raw: Any = np.empty(nbytes, np.uint8)
            return raw, raw.ctypes.data
        from numba import cuda

        from ep_cuda_numba.device import device_context

        with device_context(self.device_id):
            raw = cuda.device_array(nbytes, np.uint8)
        return raw, int(raw.gpu_data.device_pointer_value)

    def _release_memory(self, region: Region) -> None:
        """Drop a region; on a GPU also flush numba's deferred frees so the driver gets it back."""
        ctx = None if self.simulated else getattr(getattr(region.raw, "gpu_data", None), "context", None)
        region.raw, region.first = None, None
        pending = getattr(ctx, "deallocations", None)
        if pending is not None:
            pending.clear()

    def _raw_view(self, raw: Any, offset: int, nbytes: int) -> Any:
        """``nbytes`` bytes at ``offset`` of a region, as a uint8 array of this memory."""
        if self.simulated:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(raw[offset : offset + nbytes])
        return raw[offset : offset + nbytes]

    def _typed_view(self, chunk: Chunk, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> Any:
        """A C-contiguous array over the chunk whose last view's death returns the chunk."""
        if self.simulated:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            owner = _HostViewOwner(chunk, shape, dtype)
            arr = FakeCUDAArray(np.asarray(owner).view(dtype))  # typestr drops ml_dtypes' bfloat16
            weakref.finalize(owner, self._release, chunk)
            return arr
        import ctypes

        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.cuda.cudadrv.driver import AutoFreePointer

        ctx = chunk.region.raw.gpu_data.context
        key = [0]

        def release(arena: DeviceArena = self, c: Chunk = chunk, k: list[int] = key) -> None:
            arena._live.pop(k[0], None)
            arena._release(c)

        # a pointer at the chunk's offset inside the region's allocation; it owns nothing itself
        ptr = AutoFreePointer(ctx, ctypes.c_void_p(chunk.addr), max(nbytes, 1), finalizer=release)
        key[0] = id(ptr)
        self._live[id(ptr)] = (chunk, ptr, chunk.size)  # the pointer must outlive every view
        return DeviceNDArray(shape, _c_strides(shape, dtype.itemsize), dtype, gpu_data=ptr.own())

    def _direct(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """An array straight from numba, outside the arena (empty arrays, broken views)."""
        from numba import cuda

        from ep_cuda_numba.device import device_context

        with device_context(self.device_id):
            return cuda.device_array(shape, dtype)

    # ------------------------------------------------------------------------- bins, chunks
    def _insert(self, c: Chunk) -> None:
        bisect.insort(self._bins[bin_for(c.size)], (c.size, c.addr, c))

    def _remove(self, c: Chunk) -> None:
        b = self._bins[bin_for(c.size)]
        i = bisect.bisect_left(b, (c.size, c.addr))
        assert b[i][2] is c, "arena bins out of order"
        del b[i]

    def _safe(self, c: Chunk, stream: Any) -> bool:
        return c.stream is None or (c.stream is stream and not self.host_side)

    def _find(self, rounded: int, stream: Any) -> Chunk | None:
        """The smallest free chunk that fits (lowest address on ties), preferring one this stream
        may use at once; else the first that fits, after waiting for its stream."""
        other: Chunk | None = None
        start = bin_for(rounded)
        for b in range(start, NUM_BINS):
            entries = self._bins[b]
            i = bisect.bisect_left(entries, (rounded,)) if b == start else 0
            for j in range(i, len(entries)):
                c = entries[j][2]
                if self._safe(c, stream):
                    del entries[j]
                    return c
                if other is None:
                    other = c
        if other is not None:
            self._remove(other)
            self._wait_for(other, stream)
        return other

    def _wait_for(self, c: Chunk, stream: Any) -> None:
        """Order ``stream`` (or, for host memory, the host) after the chunk's last stream."""
        from ep_cuda_numba.stream import new_event, raw_stream

        self._stats["num_stream_waits"] += 1
        if self.host_side:
            c.stream.synchronize()
        else:
            ev = new_event()
            ev.record(raw_stream(c.stream))
            ev.wait(raw_stream(stream))
        c.stream = None

    def _take(self, c: Chunk, rounded: int, nbytes: int, stream: Any) -> Chunk:
        cfg = self.config
        if c.size >= 2 * rounded or c.size - rounded >= cfg.max_dead_bytes_per_chunk:
            rest = Chunk(c.region, c.offset + rounded, c.size - rounded, c.stream)
            rest.prev, rest.next = c, c.next
            if c.next is not None:
                c.next.prev = rest
            c.next = rest
            c.size = rounded
            self._insert(rest)
        c.requested, c.in_use = nbytes, True
        if not self.host_side:
            c.stream = stream
        s = self._stats
        s["num_allocs"] += 1
        s["bytes_in_use"] += c.size
        s["max_bytes_in_use"] = max(s["max_bytes_in_use"], s["bytes_in_use"])
        s["max_alloc_size"] = max(s["max_alloc_size"], c.size)
        return c

    @staticmethod
    def _mergeable(a: Chunk, b: Chunk) -> bool:
        return not b.in_use and (a.stream is None or b.stream is None or a.stream is b.stream)

    def _merge(self, a: Chunk, b: Chunk) -> None:
        """Fold ``b`` (a's free right neighbour, out of its bin) into ``a``."""
        a.size += b.size
        a.stream = a.stream if a.stream is not None else b.stream
        a.next = b.next
        if b.next is not None:
            b.next.prev = a

    def _free_chunk(self, c: Chunk) -> None:
        assert c.in_use, "arena chunk freed twice"
        c.in_use = False
        self._stats["bytes_in_use"] -= c.size
        self._coalesce(c)

    def _coalesce(self, c: Chunk) -> Chunk:
        """Merge free chunk ``c`` (in no bin) with its mergeable neighbours and bin the result."""
        while c.next is not None and self._mergeable(c, c.next):
            self._remove(c.next)
            self._merge(c, c.next)
        if c.prev is not None and self._mergeable(c, c.prev):
            prev = c.prev
            self._remove(prev)
            self._merge(prev, c)
            c = prev
        self._insert(c)
        return c

    def _release(self, chunk: Chunk) -> None:
        """Finalizer side: queue the chunk, and free it now if the lock is free (never re-enters)."""
        self._pending.append(chunk)
        if self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    def _drain(self) -> None:
        while self._pending:
            self._free_chunk(self._pending.popleft())

    # ------------------------------------------------------------------------------ regions
    def _extend(self, rounded: int) -> None:
        cfg, s = self.config, self._stats
        available = (
            (cfg.max_mem - s["total_allocated_bytes"]) // MIN_ALLOCATION * MIN_ALLOCATION if cfg.max_mem else None
        )
        if available is not None and rounded > available:
            raise Fail(
                f"NumbaCudaExecutionProvider {self.memory_name} arena on gpu:{self.device_id}: available memory of "
                f"{available} bytes is smaller than the {rounded} bytes requested ({s['total_allocated_bytes']} of "
                f"the limit {cfg.max_mem} held in {len(self._regions)} regions); raise {self.limit_option}, use "
                "smaller inputs, or free unused regions with the run config entry "
                f"memory.enable_memory_arena_shrinkage=gpu:{self.device_id}"
            )
        if cfg.extend_strategy == "kNextPowerOfTwo":
            increased = False
            while rounded > self._curr:
                self._curr *= 2
                increased = True
            nbytes = self._curr if available is None else min(self._curr, available)
            if not increased:
                grown = self._curr * 2
                self._curr = grown if grown < cfg.max_power_of_two_extend_bytes else cfg.max_power_of_two_extend_bytes
        else:
            nbytes = rounded
        while True:
            try:
                raw, base = self._new_memory(nbytes)
                break
            except Exception as exc:
                if not _is_out_of_memory(exc):
                    raise
                smaller = rounded_bytes(int(nbytes * BACKPEDAL))
                if smaller < rounded or smaller < 8 * 1024:
                    raise Fail(
                        f"NumbaCudaExecutionProvider {self.memory_name} arena on gpu:{self.device_id} failed to "
                        f"allocate a region for {rounded} bytes: the device is out of memory ({exc})"
                    ) from exc
                nbytes = smaller
        region = Region(raw, base, nbytes, self._next_rid)
        self._next_rid += 1
        region.first = Chunk(region, 0, nbytes, None)
        bisect.insort(self._regions, region, key=lambda r: r.base)
        s["num_arena_extensions"] += 1
        s["total_allocated_bytes"] += nbytes
        self._insert(region.first)

    def _allocate(self, nbytes: int, stream: Any) -> Chunk:
        rounded = rounded_bytes(nbytes)
        with self._lock:
            self._drain()
            c = self._find(rounded, stream)
            if c is None:
                self._extend(rounded)
                c = self._find(rounded, stream)
                assert c is not None, "a fresh region must fit the request"
            return self._take(c, rounded, nbytes, stream)

    def _chunks(self, region: Region) -> list[Chunk]:
        out, c = [], region.first
        while c is not None:
            out.append(c)
            c = c.next
        return out

    def _shrink_locked(self, keep_first: bool) -> int:
        released = 0
        for region in list(self._regions):
            if keep_first and region.rid == 0:
                continue
            chunks = self._chunks(region)
            if any(c.in_use for c in chunks):
                continue
            for stream in {id(c.stream): c.stream for c in chunks if c.stream is not None}.values():
                stream.synchronize()  # queued work may still touch the region
            for c in chunks:
                self._remove(c)
            self._regions.remove(region)
            s = self._stats
            s["total_allocated_bytes"] -= region.size
            s["num_arena_shrinkages"] += 1
            s["num_arena_extensions"] -= 1
            released += region.size
            self._release_memory(region)
        return released

    # ------------------------------------------------------------------------------- API
    def empty(self, shape: tuple[int, ...], dtype: Any, stream: Any = None) -> Any:
        """A C-contiguous array in this memory whose chunk returns to the arena when its last view dies."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0 or self._views_broken is not None:
            return self._direct(shape, dtype)
        chunk = self._allocate(nbytes, stream)
        try:
            return self._typed_view(chunk, shape, dtype, nbytes)
        except Exception as exc:  # numba internals changed: keep working without the arena
            # the chunk may still be released by a half-built pointer's finalizer: leave it to that
            # (at most one chunk, once) rather than risk returning it twice
            self._views_broken = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"NumbaCudaExecutionProvider {self.memory_name} arena on gpu:{self.device_id} cannot wrap its "
                f"chunks in arrays ({self._views_broken}); allocating directly from numba from now on (no reuse)",
                RuntimeWarning,
                stacklevel=2,
            )
            return self._direct(shape, dtype)

    def alloc(self, nbytes: int, stream: Any = None) -> Any:
        """A uint8 buffer of ``nbytes`` from the arena; give it back with :meth:`free`."""
        chunk = self._allocate(max(int(nbytes), 1), stream)
        buf = self._raw_view(chunk.region.raw, chunk.offset, max(int(nbytes), 1))
        self._live[id(buf)] = (chunk, buf, chunk.size)
        return buf

    def reserve(self, nbytes: int) -> Any:
        """A buffer straight from the device, outside the regions (onnxruntime's ``Reserve``, for
        memory that lives as long as a session, e.g. weights); give it back with :meth:`free`."""
        nbytes = max(int(nbytes), 1)
        raw, _ = self._new_memory(nbytes)
        buf = self._raw_view(raw, 0, nbytes)
        with self._lock:
            s = self._stats
            s["num_reserves"] += 1
            s["num_allocs"] += 1
            s["bytes_in_use"] += nbytes
            s["total_allocated_bytes"] += nbytes
            s["max_bytes_in_use"] = max(s["max_bytes_in_use"], s["bytes_in_use"])
            s["max_alloc_size"] = max(s["max_alloc_size"], nbytes)
            self._live[id(buf)] = (None, (raw, buf), nbytes)
        return buf

    def free(self, buf: Any) -> None:
        entry = self._live.pop(id(buf), None)
        if entry is None:
            raise Fail(f"{type(self).__name__}.free: this buffer was not allocated by this arena (or was freed twice)")
        chunk, _, size = entry
        with self._lock:
            self._drain()
            if chunk is None:  # reserved
                self._stats["bytes_in_use"] -= size
                self._stats["total_allocated_bytes"] -= size
            else:
                self._free_chunk(chunk)

    def shrink(self) -> int:
        """onnxruntime's ``Shrink``: give back every region whose chunks are all free (not the first
        one under kNextPowerOfTwo) and restart growth at ``initial_growth_chunk_size_bytes``.
        Returns the bytes given back."""
        with self._lock:
            self._drain()
            released = self._shrink_locked(keep_first=self.config.extend_strategy == "kNextPowerOfTwo")
            self._curr = self.config.initial_growth_chunk_size_bytes
            return released

    def release_unused(self, config: ArenaConfig | None = None) -> int:
        """No session uses the arena: give back every entirely free region (the first included) and
        start over as a new arena would, with ``config`` if given (only when nothing is in use)."""
        with self._lock:
            self._drain()
            released = self._shrink_locked(keep_first=False)
            if config is not None and config != self.config:
                if self._regions or self._live:
                    raise Fail(f"{type(self).__name__} on gpu:{self.device_id} is still in use; cannot reconfigure it")
                self._configure(config)
            elif not self._regions:
                self._curr = self._initial_region_bytes()
                self._next_rid = 0  # starts over as a new arena: its next region is the first
            return released

    def reset_stream(self, stream: Any) -> None:
        """After ``stream`` was synchronized: its free chunks may be used by any stream at once, and
        neighbours kept apart by it merge (onnxruntime's ``ResetChunksUsingStream`` at run end)."""
        with self._lock:
            self._drain()
            for region in self._regions:
                c = region.first
                while c is not None:
                    if not c.in_use and c.stream is stream:
                        self._remove(c)
                        c.stream = None
                        c = self._coalesce(c)
                    c = c.next

    def in_use(self) -> bool:
        with self._lock:
            self._drain()
            return self._stats["bytes_in_use"] > 0

    def stats(self) -> dict[str, int]:
        """onnxruntime's AllocatorStats (``bytes_limit`` 0 = no limit), plus region/chunk counts and
        how often a chunk was taken from another stream (``num_stream_waits``)."""
        with self._lock:
            self._drain()
            out = dict(self._stats)
            out["bytes_limit"] = self.config.max_mem
            out["num_regions"] = len(self._regions)
            out["num_free_chunks"] = sum(len(b) for b in self._bins)
            return out

    def chunk_layout(self) -> list[list[tuple[int, int, bool]]]:
        """Per region (by address): its chunks as (offset, size, in use), for tests and debugging."""
        with self._lock:
            self._drain()
            return [[(c.offset, c.size, c.in_use) for c in self._chunks(r)] for r in self._regions]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gpu:{self.device_id}, {self.config.describe()})"


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))

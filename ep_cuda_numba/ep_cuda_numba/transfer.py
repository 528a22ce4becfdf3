"""Copies between host memory and CUDA devices (and between devices).

Host to device goes through pinned staging buffers: the host array is copied into page-locked
memory and the DMA is queued on the stream, so the host thread does not wait for the device.
Each staging buffer carries the event recorded after its copy and is reused only once that
event has completed. Device to host waits for the stream (the caller needs the data)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.errors import Fail
from ep_core.sdk.memory import DeviceType, MemoryInfo
from ep_cuda_numba.profiling import timed_copy
from ep_cuda_numba.stream import new_event, raw_stream

if TYPE_CHECKING:
    from ep_cuda_numba.factory import NumbaCudaFactory

STAGING_MIN_BYTES = 1 << 16  # below this a pageable copy is as fast as staging


def as_bits(array: Any) -> Any:
    """``array`` as unsigned integers of its width where its dtype is one of ml_dtypes' (bfloat16,
    the float8 types): those export no Python buffer, so numba-cuda cannot take a host pointer to
    them; a copy moves the same bits either way. Other arrays come back unchanged."""
    dtype = array.dtype
    if dtype.kind == "V" and dtype.fields is None and dtype.itemsize in (1, 2):
        return array.view(np.dtype(f"u{dtype.itemsize}"))
    return array


def _is_cuda(mem: MemoryInfo) -> bool:
    return mem.device_type is DeviceType.GPU and mem.name == "Cuda"


def _is_pinned(mem: MemoryInfo) -> bool:
    return mem.name == "CudaPinned" and mem.is_host


class StagingPool:
    """Reusable pinned host buffers, each guarded by the event of its last copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[tuple[Any, Any]] = []  # (pinned uint8 buffer, event or None)
        self.created = 0

    def get(self, nbytes: int) -> Any:
        from numba import cuda

        with self._lock:
            for i, (buf, ev) in enumerate(self._free):
                if buf.size >= nbytes:
                    del self._free[i]
                    if ev is not None:
                        ev.synchronize()
                    return buf
            self.created += 1
        size = 1 << max(nbytes - 1, 1).bit_length()
        return cuda.pinned_array(size, dtype=np.uint8)

    def put(self, buf: Any, event: Any) -> None:
        with self._lock:
            self._free.append((buf, event))
            if len(self._free) > 8:
                self._free.sort(key=lambda t: t[0].size)
                del self._free[0]


class CudaDataTransfer:
    """``can_copy``/``copy`` for the factory's devices (ep_core's data-transfer protocol)."""

    def __init__(self, factory: "NumbaCudaFactory") -> None:
        self.factory = factory
        self.staging = StagingPool()
        self.copies = {"h2d": 0, "d2h": 0, "d2d": 0}

    def can_copy(self, src: MemoryInfo, dst: MemoryInfo) -> bool:
        return (_is_cuda(src) and (dst.is_host or _is_cuda(dst))) or (src.is_host and _is_cuda(dst))

    def copy(self, value: Any, src: MemoryInfo, dst: MemoryInfo, stream: Any) -> Any:
        if value is None:
            return None
        if _is_cuda(dst) and src.is_host and not _is_cuda(src):
            return self.to_device(np.asarray(value), dst.device_id, stream)
        if _is_cuda(src) and _is_pinned(dst):
            return self.to_pinned(value, dst.device_id, stream)
        if _is_cuda(src) and dst.is_host:
            return self.to_host(value, stream)
        if _is_cuda(src) and _is_cuda(dst):
            return self.device_to_device(value, dst.device_id, stream)
        raise Fail(f"CudaDataTransfer cannot copy {src} -> {dst}")

    def to_device(self, host: np.ndarray, device_id: int, stream: Any) -> Any:
        self.copies["h2d"] += 1
        host = np.ascontiguousarray(host).reshape(np.shape(host))  # ascontiguousarray makes 0-d 1-d
        arena = self.factory.arena(device_id)
        dev = arena.empty(host.shape, host.dtype, stream)
        if host.size == 0:
            return dev
        s = raw_stream(stream)
        pinned = self.factory.pinned(device_id)
        if pinned.holds(host):  # page-locked already: one DMA on the stream, no staging, no wait
            timed_copy(
                stream, s, "HtoD", host.nbytes, host.shape, lambda: as_bits(dev).copy_to_device(as_bits(host), stream=s)
            )
            pinned.mark_used_on(host, stream)  # its chunk is reused only after this copy
            return dev
        if host.nbytes < STAGING_MIN_BYTES or arena.simulated:
            timed_copy(
                stream, s, "HtoD", host.nbytes, host.shape, lambda: as_bits(dev).copy_to_device(as_bits(host), stream=s)
            )
            if s:
                s.synchronize()  # a pageable async copy may read the host array after we return
            return dev
        buf = self.staging.get(host.nbytes)
        staged = buf[: host.nbytes].view(host.dtype).reshape(host.shape)
        staged[...] = host
        timed_copy(
            stream, s, "HtoD", host.nbytes, host.shape, lambda: as_bits(dev).copy_to_device(as_bits(staged), stream=s)
        )
        ev = new_event()
        ev.record(s)
        self.staging.put(buf, ev)
        return dev

    def to_pinned(self, dev: Any, device_id: int, stream: Any) -> np.ndarray:
        """Device to the pinned arena (IO binding's ``cuda_pinned`` outputs): a DMA queued on the
        stream with no staging; the stream is waited for, since the caller reads the array next
        (as onnxruntime's run returns its outputs complete)."""
        self.copies["d2h"] += 1
        s = raw_stream(stream)
        out = self.factory.pinned(device_id).empty(dev.shape, dev.dtype)
        if out.size:
            timed_copy(
                stream, s, "DtoH", out.nbytes, out.shape, lambda: as_bits(dev).copy_to_host(as_bits(out), stream=s)
            )
            if s:
                s.synchronize()
        return out

    def to_host(self, dev: Any, stream: Any) -> np.ndarray:
        self.copies["d2h"] += 1
        s = raw_stream(stream)
        out = np.empty(dev.shape, dtype=dev.dtype)
        if out.size:
            timed_copy(
                stream, s, "DtoH", out.nbytes, out.shape, lambda: as_bits(dev).copy_to_host(as_bits(out), stream=s)
            )
            if s:
                s.synchronize()
        return out

    def device_to_device(self, dev: Any, device_id: int, stream: Any) -> Any:
        self.copies["d2d"] += 1
        out = self.factory.arena(device_id).empty(dev.shape, dev.dtype, stream)
        if dev.size:
            s = raw_stream(stream)
            timed_copy(stream, s, "DtoD", out.nbytes, out.shape, lambda: out.copy_to_device(dev, stream=s))
        return out

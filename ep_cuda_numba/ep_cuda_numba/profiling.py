"""GPU-timed profiles: with ``SessionOptions.enable_profiling`` every kernel launch and every copy
between host and device on a session's stream is bracketed by two CUDA events; when profiling
stops their GPU durations become Chrome-trace events on a "GPU" track of the session's trace.

Each event carries what the EP knows (kernel name, grid and block, bytes and direction of a
copy) and the host time and thread that enqueued it (``enqueue_ns``, ``enqueue_tid``): ep_core's
trace writer uses those to name the node (or copy step) whose execution enqueued the work, as
CUPTI correlation ids do for onnxruntime. GPU start times are placed on the trace's clock through
a reference event recorded on the idle stream when timing starts.

Under the simulator CUDA events exist but record no time (``elapsed_time`` is -1), and simulated
kernels run synchronously on the host; ``HostClockEvent`` stands in for the event there: it
stamps ``perf_counter_ns`` when recorded, so durations are the simulated execution time on the
host. On a GPU they are real device times (``cuda.event(timing=True)``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ep_cuda_numba.ep import NumbaCudaEp

GPU_TID_BASE = 2**31 - 1  # the GPU track of device N is thread GPU_TID_BASE - N (no real thread id is that large)
_ACTIVE: list["GpuTimeline"] = []  # timelines recording now; copies look theirs up by stream
_LOCK = threading.Lock()


class HostClockEvent:
    """The simulator's stand-in for a timing CUDA event (see the module docstring)."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns = 0

    def record(self, stream: Any = 0) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "HostClockEvent") -> float:
        return (end.ns - self.ns) / 1e6


def timing_event(simulated: bool) -> Any:
    if simulated:
        return HostClockEvent()
    from numba import cuda

    return cuda.event(timing=True)  # type: ignore[call-arg]  # mypy reads the simulator's signature


def kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None) or kernel
    return str(getattr(fn, "__name__", type(kernel).__name__))


class GpuTimeline:
    """One session's GPU events, from ``start`` to ``stop``."""

    def __init__(self, ep: "NumbaCudaEp") -> None:
        self.ep = ep
        self.simulated = ep.simulated
        self.device_id = int(ep.options.device_id)
        self.epoch_ns = 0
        self.records: list[tuple[str, str, Any, Any, int, int, dict[str, Any]]] = []
        self._ref: tuple[Any, int] | None = None  # (event, host ns when it was recorded on an idle stream)
        self._lock = threading.Lock()

    def start(self, epoch_ns: int) -> None:
        self.epoch_ns = epoch_ns
        if self.ep.capturing is None:  # a capture keeps its recording tap; its end installs this one
            self.ep.tap = self.launch
        self.ep.timeline = self
        with _LOCK:
            _ACTIVE.append(self)

    def owns(self, stream: Any) -> bool:
        raw = getattr(stream, "cuda_stream", stream)
        return any(s is stream or s.cuda_stream is raw for s in self.ep._streams)

    def _reference(self, stream: Any) -> None:
        if self._ref is None:
            if stream:
                stream.synchronize()
            ev = timing_event(self.simulated)
            ev.record(stream)
            self._ref = (ev, time.perf_counter_ns())

    def timed(self, stream: Any, cat: str, name: str, args: dict[str, Any], work: Callable[[], Any]) -> Any:
        """Run ``work`` (which enqueues on ``stream``) between two timing events."""
        with self._lock:
            self._reference(stream)
        start, end = timing_event(self.simulated), timing_event(self.simulated)
        enqueued = time.perf_counter_ns()
        start.record(stream)
        out = work()
        end.record(stream)
        with self._lock:
            self.records.append((cat, name, start, end, enqueued, threading.get_native_id(), args))
        return out

    def launch(self, rt: Any, kernel: Any, blocks: Any, threads: Any, args: tuple[Any, ...]) -> None:
        """The EP's launch tap while profiling."""

        def go() -> None:
            with rt.device:
                kernel[blocks, threads, rt.s](*args)

        info = {"grid": _dims(blocks), "block": _dims(threads), "stream": _stream_id(rt.s)}
        self.timed(rt.s, "Kernel", kernel_name(kernel), info, go)

    def time_replay(self, stream: Any, gid: int, launch: Callable[[], None]) -> None:
        self.timed(stream, "Kernel", "cuda_graph_replay", {"gpu_graph_id": gid, "stream": _stream_id(stream)}, launch)

    def stop(self) -> list[dict[str, Any]]:
        """The GPU events (after waiting for the streams), plus the track's name."""
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        if self.ep.tap == self.launch:
            self.ep.tap = None
        self.ep.timeline = None
        with self._lock:
            records, self.records, ref = list(self.records), [], self._ref
        if not records or ref is None:
            return []
        for s in self.ep._streams:
            s.synchronize()
        ref_event, ref_ns = ref
        tid = GPU_TID_BASE - self.device_id
        out: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "tid": tid, "args": {"name": f"GPU {self.device_id} (NumbaCuda)"}}
        ]
        for cat, name, start, end, enqueued, host_tid, args in records:
            end.synchronize()
            begin_us = (ref_ns - self.epoch_ns) / 1000.0 + ref_event.elapsed_time(start) * 1000.0
            dur_us = max(start.elapsed_time(end) * 1000.0, 0.0)
            out.append(
                {
                    "cat": cat,
                    "name": name,
                    "ph": "X",
                    "tid": tid,
                    "ts": round(begin_us, 3),
                    "dur": round(dur_us, 3),
                    "args": {**args, "device": self.device_id, "enqueue_ns": enqueued, "enqueue_tid": host_tid},
                }
            )
        return out


def copy_timeline(stream: Any) -> GpuTimeline | None:
    """The recording timeline of the session owning ``stream`` (None when nothing is profiled)."""
    if not _ACTIVE or stream is None:
        return None
    with _LOCK:
        return next((t for t in _ACTIVE if t.owns(stream)), None)


def timed_copy(stream: Any, raw: Any, direction: str, nbytes: int, shape: Any, work: Callable[[], Any]) -> Any:
    """Run a copy, timed on the profiled session's stream if there is one."""
    timeline = copy_timeline(stream)
    if timeline is None or timeline.ep.capturing is not None:
        return work()
    info = {"direction": direction, "bytes": int(nbytes), "shape": [int(d) for d in shape], "stream": _stream_id(raw)}
    return timeline.timed(raw, "Memcpy", f"Memcpy{direction}", info, work)


def _dims(d: Any) -> list[int]:
    return [int(x) for x in d] if isinstance(d, tuple) else [int(d)]


def _stream_id(s: Any) -> int:
    handle = getattr(s, "handle", None)
    try:
        return int(handle) if handle is not None else 0
    except (TypeError, ValueError):
        return id(s)

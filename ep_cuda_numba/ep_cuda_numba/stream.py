"""Sync streams and notifications: one numba CUDA stream per session and device; a notification
is a CUDA event recorded on the producing stream and waited on by the consuming one, so
cross-stream ordering never blocks the host."""

from __future__ import annotations

from typing import Any


class CudaNotification:
    """``activate()`` records the event on its stream; ``wait_on_device(stream)`` makes another
    stream wait for it; ``wait_on_host()`` blocks the calling thread."""

    def __init__(self, stream: "CudaSyncStream") -> None:
        from ep_cuda_numba.device import device_context

        self.stream = stream
        self.device = device_context(stream.device_id)  # events belong to the producer's device
        with self.device:
            self.event = new_event()
        self.activated = False

    def activate(self) -> None:
        with self.device:
            self.event.record(self.stream.cuda_stream)
        self.activated = True

    def wait_on_device(self, stream: Any) -> None:
        """The consumer's stream (another device's too: CUDA streams wait on any device's events)
        waits; the host does not."""
        from ep_cuda_numba.device import device_context

        with device_context(getattr(stream, "device_id", self.stream.device_id)):
            self.event.wait(getattr(stream, "cuda_stream", stream))

    def wait_on_host(self) -> None:
        self.event.synchronize()


class CudaSyncStream:
    """The stream a session's kernels and copies for one device are queued on."""

    def __init__(self, device_id: int) -> None:
        from numba import cuda

        from ep_cuda_numba.device import device_context

        self.device_id = device_id
        with device_context(device_id):
            self.cuda_stream = cuda.stream()
        self.notifications_created = 0

    def synchronize(self) -> None:
        self.cuda_stream.synchronize()

    def create_notification(self) -> CudaNotification:
        self.notifications_created += 1
        return CudaNotification(self)

    def __repr__(self) -> str:
        return f"CudaSyncStream(gpu:{self.device_id})"


def new_event() -> Any:
    """A CUDA event without timing (cheaper); the simulator's Event takes no arguments."""
    from numba import cuda

    from ep_cuda_numba.device import simulator_requested

    if simulator_requested():
        return cuda.event()
    # numba.cuda's py.typed package imports the simulator's API or the real one at run time; mypy
    # reads the simulator's (no ``timing`` argument), the real ``cuda.event(timing=True)`` takes it
    return cuda.event(timing=False)  # type: ignore[call-arg]


def raw_stream(stream: Any) -> Any:
    """The numba stream to launch on: a session's sync stream, or the default stream (0)."""
    if stream is None:
        return 0
    return getattr(stream, "cuda_stream", stream)

"""The shapes of the objects an EP hands the core, as ``typing.Protocol``s.

The hookspecs say *when* the core asks; these say *what* the answer must look like, so an EP
author (and mypy) can check a factory, an EP, an allocator, a data transfer, a sync stream, a
notification or a profiler without running a session. Only the required methods are listed: the
optional hooks of factories and EPs are in ``ep_core.sdk.hookspecs`` with their defaults.
Kernel-side shapes (``KernelContext``, ``KernelBuilder``, ``Compute``) are in
``ep_core.sdk.kernels``; ``ComputeContext``/``NodeComputeInfo`` in ``ep_core.sdk.compute``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.config import SessionConfig
    from ep_core.sdk.devices import EpDevice, HardwareDevice
    from ep_core.sdk.graph import GraphView
    from ep_core.sdk.memory import MemoryInfo


@runtime_checkable
class ExecutionProviderFactory(Protocol):
    """``OrtEpFactory``: one per EP package, the target of its entry point."""

    def ep_factory_name(self) -> str: ...

    def ep_factory_vendor(self) -> str: ...

    def ep_factory_version(self) -> str: ...

    def ep_factory_get_supported_devices(self, devices: "Sequence[HardwareDevice]") -> "Sequence[EpDevice]": ...

    def ep_factory_create_ep(
        self, devices: "Sequence[EpDevice]", ep_options: Mapping[str, str], session_options: "SessionConfig"
    ) -> "ExecutionProvider": ...


@runtime_checkable
class ExecutionProvider(Protocol):
    """``OrtEp``: one per session, made by ``ep_factory_create_ep``."""

    def ep_get_capability(self, graph: "GraphView", support: "SupportInfo") -> None: ...


@runtime_checkable
class Allocator(Protocol):
    """Device memory from ``ep_factory_create_allocator``; may be shared across sessions."""

    def alloc(self, nbytes: int) -> Any: ...

    def free(self, buf: Any) -> None: ...

    def stats(self) -> Mapping[str, int]: ...


@runtime_checkable
class DataTransfer(Protocol):
    """Copies between memory devices, from ``ep_factory_create_data_transfer``."""

    def can_copy(self, src: "MemoryInfo", dst: "MemoryInfo") -> bool: ...

    def copy(self, value: Any, src: "MemoryInfo", dst: "MemoryInfo", stream: "SyncStream | None") -> Any:
        """Return the copy of ``value`` in ``dst`` memory (asynchronous on ``stream`` if given)."""
        ...


@runtime_checkable
class SyncNotification(Protocol):
    """Marks a point in one stream that another stream (or the host) can wait for."""

    def activate(self) -> None: ...

    def wait_on_device(self, stream: "SyncStream") -> None: ...

    def wait_on_host(self) -> None: ...


@runtime_checkable
class SyncStream(Protocol):
    """An ordered queue of device work, from ``ep_factory_create_sync_stream_for_device``."""

    def synchronize(self) -> None: ...

    def create_notification(self) -> SyncNotification: ...


@runtime_checkable
class EpProfiler(Protocol):
    """From ``ep_create_profiler``: events merged into the session's Chrome trace."""

    def start(self, epoch_ns: int) -> None: ...

    def stop(self) -> list[dict[str, Any]]: ...

"""The session's handle on one EP: the EP object plus what its factory provides for it
(memory info, allocator, data transfer, sync stream)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import EpFail
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo

if TYPE_CHECKING:
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelRegistry
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.discover import PluginRegistry
    from ep_core.runtime.select import SelectedEp


class EpInstance:
    def __init__(self, selected: "SelectedEp", options: "SessionOptions", registry: "PluginRegistry") -> None:
        self.selected = selected
        self.handle = selected.handle
        self.name = selected.name
        self.registry = registry
        self.devices = selected.devices
        self.memory_info: MemoryInfo = self.devices[0].memory_info if self.devices else HOST_MEMORY
        try:
            ep = self.handle.call(
                "ep_factory_create_ep",
                devices=list(self.devices),
                ep_options=dict(selected.options),
                session_options=options,
            )
        except Exception as exc:
            from ep_core.sdk.errors import EpCoreError

            if isinstance(exc, EpCoreError):
                raise
            raise EpFail(f"{self.name}: ep_factory_create_ep failed: {type(exc).__name__}: {exc}") from exc
        if ep is None:
            raise EpFail(f"{self.name}: ep_factory_create_ep returned None")
        registry.register_ep(ep, self.name)
        self.ep = ep
        self.kernel_registry: KernelRegistry | None = self.call("ep_get_kernel_registry")
        self.allocator = None
        self.stream = None
        self.data_transfer = self.handle.call("ep_factory_create_data_transfer", default=None)
        if not self.memory_info.is_host:
            self.allocator = self.handle.call(
                "ep_factory_create_allocator", memory_info=self.memory_info, allocator_options={}
            )
            if self.handle.call("ep_factory_is_stream_aware", default=False):
                self.stream = self.handle.call(
                    "ep_factory_create_sync_stream_for_device", memory_info=self.memory_info, stream_options={}
                )
        self.has_run_start = registry.implements(ep, "ep_on_run_start")
        self.has_run_end = registry.implements(ep, "ep_on_run_end")
        self.has_sync = registry.implements(ep, "ep_sync")
        aliases = getattr(ep, "context_sources", None)
        self._sources = {self.name, *(aliases() if callable(aliases) else aliases or ())}

    def call(self, hook: str, **kwargs: Any) -> Any:
        return self.registry.call_plugin(self.ep, hook, ep=self.ep, **kwargs)

    def accepts_context_source(self, source: str) -> bool:
        return source in self._sources

    def decline_reason(self, node: "NodeView") -> str:
        if self.kernel_registry is None:
            return "no kernel registry"
        return self.kernel_registry.lookup(node).reason

    def close(self) -> None:
        try:
            if self.allocator is not None:
                self.handle.call("ep_factory_release_allocator", allocator=self.allocator)
            self.handle.call("ep_factory_release_ep", ep=self.ep)
        finally:
            self.registry.unregister_ep(self.ep)

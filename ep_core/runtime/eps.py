"""The session's handle on one EP: the EP object plus what its factory provides for it
(memory info, allocator, data transfer, sync stream).

EP hooks are version-gated like factory hooks: the core never calls an ``ep_*`` hook newer than
the factory's ``ep_factory_api_version``, and warns when the EP implements one anyway."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ep_core.host.logs import SessionLog
from ep_core.runtime.discover import hook_error
from ep_core.sdk.errors import EpCoreError, EpFail
from ep_core.sdk.hookspecs import HOOK_API_VERSIONS
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo
from ep_core.sdk.protocols import SyncStream

if TYPE_CHECKING:
    from ep_core.runtime.discover import PluginRegistry
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.select import SelectedEp
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelRegistry


class EpInstance:
    def __init__(
        self, selected: SelectedEp, options: SessionOptions, registry: PluginRegistry, log: SessionLog | None = None
    ) -> None:
        self.selected, self.handle, self.name, self.registry = selected, selected.handle, selected.name, registry
        self.api_version: int = self.handle.api_version
        self.devices = selected.devices
        self.memory_info: MemoryInfo = self.devices[0].memory_info if self.devices else HOST_MEMORY
        log = log or SessionLog(options.logid, options.log_severity_level, options.log_verbosity_level)
        first = self.devices[0].ep_options if self.devices else {}  # the devices' options they agree on
        agreed = {k: v for k, v in first.items() if all(d.ep_options.get(k) == v for d in self.devices)}
        ep = self.handle.call(
            "ep_factory_create_ep",
            devices=list(self.devices),
            ep_options={**agreed, **selected.options},
            session_options=options,
            logger=log.ep_logger(self.name),
        )
        if ep is None:
            raise EpFail(f"{self.name}: ep_factory_create_ep returned None")
        registry.register_ep(ep, self.name)
        self.ep = ep
        self._warn_newer_hooks()
        self.kernel_registry: KernelRegistry | None = self.call("ep_get_kernel_registry")
        self.allocator = self.stream = None
        self.data_transfer = self.handle.call("ep_factory_create_data_transfer", default=None)
        if not self.memory_info.is_host:
            arena = {k: v for k, v in selected.options.items() if k.startswith("arena.")}  # OrtArenaCfg's keys
            self.allocator = self.handle.call(
                "ep_factory_create_allocator", memory_info=self.memory_info, allocator_options=arena
            )
            if self.handle.call("ep_factory_is_stream_aware", default=False):
                self.stream = self.handle.call(
                    "ep_factory_create_sync_stream_for_device", memory_info=self.memory_info, stream_options={}
                )
                if self.stream is not None and not isinstance(self.stream, SyncStream):
                    raise EpFail(f"{self.name}: its sync stream must implement ep_core.sdk.protocols.SyncStream")
        hooks = ("ep_on_run_start", "ep_on_run_end", "ep_sync")
        self.has_run_start, self.has_run_end, self.has_sync = (registry.implements(ep, h) for h in hooks)
        self._sources = {self.name, *self._context_sources()}

    def call(self, hook: str, **kwargs: Any) -> Any:
        """Call one EP hook on this EP alone (observers may wrap it); None, without calling, for a
        hook newer than the factory's API version."""
        if HOOK_API_VERSIONS.get(hook, 1) > self.api_version:
            return None
        try:
            return self.registry.call_plugin(self.ep, hook, ep=self.ep, **kwargs)
        except Exception as exc:
            raise hook_error(self.name, hook, exc) from exc

    def _warn_newer_hooks(self) -> None:
        newer = {
            h: v
            for h, v in HOOK_API_VERSIONS.items()
            if v > self.api_version and not h.startswith("ep_factory_") and callable(getattr(self.ep, h, None))
        }
        if newer:
            warnings.warn(
                f"{self.name}: the EP implements {sorted(newer)}, added in ep_core API version {max(newer.values())}, "
                f"but its factory declares version {self.api_version}, so the core never calls them; return "
                f"{max(newer.values())} from ep_factory_api_version to use them",
                RuntimeWarning,
                stacklevel=3,
            )

    def _context_sources(self) -> tuple[str, ...]:
        if (aliases := self.call("ep_get_context_sources")) is None:
            return ()
        if isinstance(aliases, str) or not isinstance(aliases, Iterable):
            raise EpFail(f"{self.name}.ep_get_context_sources returned {aliases!r}; return a sequence of names")
        names = tuple(aliases)
        if bad := [a for a in names if not isinstance(a, str)]:
            raise EpFail(f"{self.name}.ep_get_context_sources returned non-string names {bad!r}")
        return names

    def accepts_context_source(self, source: str) -> bool:
        return source in self._sources

    def decline_reason(self, node: "NodeView") -> str:
        return "no kernel registry" if self.kernel_registry is None else self.kernel_registry.lookup(node).reason

    # -- issue 12, contract diagnostics: InferenceSession.get_partition_diagnostics() includes these
    def diagnostics(self) -> list[str]:
        """Kernels this EP's registry refused at registration (type constraint not in the schema,
        no schema for the op or its ``since``), each naming the EP, op, domain and opsets."""
        return self.kernel_registry.problems if self.kernel_registry is not None else []

    def close(self) -> list[EpCoreError]:
        """Release the allocator, then the EP, then unregister it; each step runs even if an
        earlier one raised. Returns the failures (typed, naming EP and hook)."""
        errors: list[EpCoreError] = []
        steps: list[tuple[str, dict[str, Any]]] = [("ep_factory_release_ep", {"ep": self.ep})]
        if self.allocator is not None:
            steps.insert(0, ("ep_factory_release_allocator", {"allocator": self.allocator}))
        for hook, kwargs in steps:
            try:
                self.handle.call(hook, **kwargs)
            except EpCoreError as exc:  # handle.call already named the EP and hook
                errors.append(exc)
        self.registry.unregister_ep(self.ep)
        return errors

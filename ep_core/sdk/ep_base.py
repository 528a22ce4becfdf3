"""Reusable pieces for EP authors: a factory for host-memory EPs and an EP whose capability is
its kernel registry. Our own EPs use them exactly as a third-party package would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.errors import ConfigError, PluginError
from ep_core.sdk.memory import HOST_MEMORY, DeviceType

if TYPE_CHECKING:
    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.graph import GraphView
    from ep_core.sdk.kernels import KernelRegistry


class RegistryEp:
    """An EP that claims every node its kernel registry can serve."""

    def __init__(self, name: str, registry: "KernelRegistry") -> None:
        self.name = name
        self.registry = registry

    def ep_get_kernel_registry(self) -> "KernelRegistry":
        return self.registry

    def ep_get_capability(self, graph: "GraphView", support: "SupportInfo") -> None:
        """Claim what the registry serves; a node whose op it has but whose opset or types it does
        not serve is still asked for, so the refusal and its reason show in the diagnostics."""
        for node in graph.nodes:
            if self.registry.has_op(node.op_type, node.domain) or support.can_serve(node):
                support.add_single_node(node)


class HostEpFactory:
    """Factory for an EP that runs on the host CPU with NumPy arrays.

    A subclass declares ``ep_name`` (ending in ``ExecutionProvider``, equal to its entry-point
    name), ``ep_vendor`` and ``ep_version`` (SemVer). There are no defaults: discovery refuses a
    factory that forgets one instead of listing it under another vendor or version."""

    ep_name: str
    ep_vendor: str
    ep_version: str
    option_names: tuple[str, ...] = ()

    def _fact(self, attr: str) -> str:
        value = getattr(self, attr, None)
        if value is None:
            raise PluginError(
                f"{type(self).__name__} does not declare {attr}: HostEpFactory gives no default, "
                f"set {attr} on the factory class"
            )
        return str(value)

    def ep_factory_name(self) -> str:
        return self._fact("ep_name")

    def ep_factory_vendor(self) -> str:
        return self._fact("ep_vendor")

    def ep_factory_version(self) -> str:
        return self._fact("ep_version")

    def ep_factory_get_supported_devices(self, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
        return [EpDevice(self.ep_name, self.ep_vendor, d, HOST_MEMORY) for d in devices if d.type is DeviceType.CPU]

    def check_options(self, ep_options: Mapping[str, str]) -> None:
        unknown = set(ep_options) - set(self.option_names)
        if unknown:
            raise ConfigError(
                f"{self.ep_name} has no option(s) {sorted(unknown)}; its options are {list(self.option_names) or 'none'}"
            )

    def ep_factory_get_hardware_device_incompatibility_details(self, device: HardwareDevice) -> list[str] | None:
        return [f"{self.ep_name} runs on the host CPU only"] if device.type is not DeviceType.CPU else None

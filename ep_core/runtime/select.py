"""Which EPs a session uses, on which devices, with which options, in priority order.

Three ways in, as in ORT: an explicit provider list, EpDevices added to the session options (or a
config file), or a device policy. The CPU fallback EP is appended unless disabled. Every name is
checked; nothing falls back silently."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_core.runtime.discover import FactoryHandle, PluginLoadError, PluginRegistry, get_registry
from ep_core.runtime.options import EpSelectionPolicy, ProviderConfig, SessionOptions
from ep_core.sdk.devices import EpDevice, HardwareDevice, dedupe_devices, host_cpu_device
from ep_core.sdk.errors import ConfigError, EpCoreError, UnknownProviderError, strict_mode
from ep_core.sdk.memory import DeviceType

ProviderSpec = Any  # "Name" | ("Name", {options})


@dataclass
class SelectedEp:
    handle: FactoryHandle
    devices: list[EpDevice]
    options: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.handle.name


def hardware_devices(registry: PluginRegistry | None = None) -> list[HardwareDevice]:
    """The host CPU plus whatever each loadable factory probes."""
    registry = registry or get_registry()
    found = [host_cpu_device()]
    for h in registry.handles():
        try:
            found.extend(h.call("ep_factory_probe_hardware_devices", default=()) or () if h.load() is not None else ())
        except EpCoreError as exc:  # as a failed import: that EP has no device, the others stay usable
            h.load_error = PluginLoadError(h.name, h.target, h.distribution, f"hardware probe: {exc.message}", exc)
            if strict_mode():
                raise
    return dedupe_devices(found)


def ep_devices_for(handle: FactoryHandle, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
    if handle.load() is None or handle.load_error is not None:
        return []
    return list(handle.call("ep_factory_get_supported_devices", default=(), devices=list(devices)) or ())


def get_ep_devices(registry: PluginRegistry | None = None) -> list[EpDevice]:
    """Every (EP, device) pair available, in discovery order (ORT's ``get_ep_devices``)."""
    registry = registry or get_registry()
    devices = hardware_devices(registry)
    return [d for h in registry.handles() for d in ep_devices_for(h, devices)]


def incompatibility_reasons(handle: FactoryHandle, devices: Sequence[HardwareDevice]) -> list[str]:
    hook = "ep_factory_get_hardware_device_incompatibility_details"
    return [f"{d.key}: {line}" for d in devices for line in handle.call(hook, default=None, device=d) or ()]


def _parse_provider(spec: ProviderSpec) -> tuple[str, dict[str, str]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], Mapping):
        return spec[0], {str(k): _opt_str(v) for k, v in spec[1].items()}
    raise ConfigError(f"a provider must be 'NameExecutionProvider' or ('Name', {{options}}), got {spec!r}")


def _opt_str(value: Any) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def _pick_device(
    handle: FactoryHandle, supported: list[EpDevice], device: str | None, where: str, opts: Mapping[str, str]
) -> list[EpDevice]:
    if not supported:
        reasons = incompatibility_reasons(handle, hardware_devices())
        why = "; ".join(reasons) or str(handle.load_error or "it reports no supported device")
        raise ConfigError(f"{where}execution provider {handle.name!r} cannot run here: {why}")
    if device is None:  # the first whose own ep_options (a device_id) the user's options agree with
        return [d for d in supported if all(opts.get(k, v) == v for k, v in d.ep_options.items())][:1] or supported[:1]
    kind, _, idx = device.partition(":")
    matches = [
        d for d in supported if d.device.type.value.lower() == kind and (not idx or d.device.device_id == int(idx))
    ]
    if not matches:
        have = [d.device.key for d in supported]
        raise ConfigError(f"{where}execution provider {handle.name!r} has no device {device!r}; it supports {have}")
    return matches[:1]


_POLICY_ORDER = {
    EpSelectionPolicy.PREFER_CPU: (DeviceType.CPU, DeviceType.GPU, DeviceType.NPU),
    EpSelectionPolicy.PREFER_GPU: (DeviceType.GPU, DeviceType.NPU, DeviceType.CPU),
    EpSelectionPolicy.PREFER_NPU: (DeviceType.NPU, DeviceType.GPU, DeviceType.CPU),
    EpSelectionPolicy.MAX_PERFORMANCE: (DeviceType.GPU, DeviceType.NPU, DeviceType.CPU),
    EpSelectionPolicy.MAX_EFFICIENCY: (DeviceType.NPU, DeviceType.CPU, DeviceType.GPU),
    EpSelectionPolicy.MIN_OVERALL_POWER: (DeviceType.NPU, DeviceType.CPU, DeviceType.GPU),
    EpSelectionPolicy.DEFAULT: (DeviceType.CPU,),
}


def _by_policy(policy: EpSelectionPolicy, ep_devices: list[EpDevice]) -> list[EpDevice]:
    """EpDevices ordered by the policy's device-type preference. Simulated devices are never
    preferred over real ones: a policy asking for performance must not pick a simulator."""
    order = _POLICY_ORDER[policy]
    ranked = [d for d in ep_devices if d.device.type in order and d.device.metadata.get("simulated", "0") != "1"]
    ranked.sort(key=lambda d: order.index(d.device.type))
    return ranked[:1] if policy is EpSelectionPolicy.DEFAULT else ranked


def select_providers(
    options: SessionOptions,
    providers: Sequence[ProviderSpec] | None,
    config: ProviderConfig | None,
    registry: PluginRegistry | None = None,
) -> list[SelectedEp]:
    """The ordered EP list for a session (fallback included unless disabled)."""
    registry = registry or get_registry()
    chosen: list[SelectedEp] = []
    all_devices = functools.cache(lambda: hardware_devices(registry))  # probed once, when first needed

    def devices_of(handle: FactoryHandle) -> list[EpDevice]:
        """The EP's devices among the host CPU and its own probes; other factories are probed
        (importing their stacks) only if that finds none."""
        own = dedupe_devices([host_cpu_device(), *(handle.call("ep_factory_probe_hardware_devices", default=()) or ())])
        return ep_devices_for(handle, own) or ep_devices_for(handle, all_devices())

    def add(handle: FactoryHandle, eps: list[EpDevice], opts: Mapping[str, str]) -> None:
        if any(c.name == handle.name for c in chosen):
            raise ConfigError(f"execution provider {handle.name!r} is listed twice")
        chosen.append(SelectedEp(handle, eps, dict(opts)))

    if providers:
        for spec in providers:
            name, opts = _parse_provider(spec)
            handle = registry.handle(name)
            if handle.load() is None:
                raise UnknownProviderError(
                    f"execution provider {name!r} is installed but failed to load: {handle.load_error}"
                )
            add(handle, _pick_device(handle, devices_of(handle), opts.pop("device", None), "", opts), opts)
    elif config is not None and config.providers:
        for entry in config.providers:
            where = f"{config.source}: providers[{entry.name}]: "
            try:
                handle = registry.handle(entry.name)
            except UnknownProviderError as exc:
                raise UnknownProviderError(f"{config.source}: providers: {exc.message}") from None
            if handle.load() is None:
                raise UnknownProviderError(f"{where}installed but failed to load: {handle.load_error}")
            opts = {k: _opt_str(v) for k, v in entry.options.items()}
            add(handle, _pick_device(handle, devices_of(handle), entry.device, where, opts), opts)
    elif options.provider_devices:
        for devs, opts in options.provider_devices:
            add(registry.handle(devs[0].ep_name), list(devs), opts)
    elif options.ep_selection_delegate is not None or options.ep_selection_policy is not None:
        available = get_ep_devices(registry)
        if options.ep_selection_delegate is not None:
            picked = list(options.ep_selection_delegate(available, {}, {}, len(available)))
        else:
            picked = _by_policy(options.ep_selection_policy or EpSelectionPolicy.DEFAULT, available)
        for d in picked:
            if all(c.name != d.ep_name for c in chosen):
                chosen.append(SelectedEp(registry.handle(d.ep_name), [d], {}))

    # provider options may also come as ep.<name>.<key> session entries
    for c in chosen:
        prefix = f"ep.{c.name}."
        for key, value in options.config_entries.items():
            if key.startswith(prefix):
                c.options.setdefault(key[len(prefix) :], value)

    if not options.flag("session.disable_cpu_ep_fallback"):
        fallback = registry.cpu_fallback()
        if fallback is not None and all(c.name != fallback.name for c in chosen):
            eps = ep_devices_for(fallback, [host_cpu_device()])
            chosen.append(SelectedEp(fallback, eps[:1], {}))
    if not chosen:
        raise ConfigError(
            "no execution provider was selected and the CPU fallback is disabled or not installed; "
            "pass providers=[...] (see `ep-core providers`)"
        )
    return chosen

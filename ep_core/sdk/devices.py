"""Hardware devices and the (EP, device) pairs offered to sessions.

The core finds the host CPU itself; every other device is probed by the factory that knows how
(``ep_factory_probe_hardware_devices``), lazily, so importing ep_core never touches a GPU stack."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ep_core.sdk.memory import HOST_MEMORY, DeviceType, MemoryInfo


@dataclass(frozen=True)
class HardwareDevice:
    """A physical (or simulated) device, like ``OrtHardwareDevice``."""

    type: DeviceType
    vendor: str
    vendor_id: int = 0
    device_id: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """A short stable id such as ``gpu:0`` used by config files and the CLI."""
        return f"{self.type.value.lower()}:{self.device_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "vendor": self.vendor,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "key": self.key,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class EpDevice:
    """An execution provider paired with one device it supports, like ``OrtEpDevice``."""

    ep_name: str
    ep_vendor: str
    device: HardwareDevice
    memory_info: MemoryInfo = HOST_MEMORY
    host_accessible_memory_info: MemoryInfo | None = None
    ep_metadata: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    ep_options: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ep_name": self.ep_name,
            "ep_vendor": self.ep_vendor,
            "device": self.device.to_dict(),
            "memory_info": str(self.memory_info),
            "ep_metadata": dict(self.ep_metadata),
            "ep_options": dict(self.ep_options),
        }


def _cpuinfo_field(name: str) -> str | None:
    """A field of the first processor in /proc/cpuinfo (Linux), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


_CPU_VENDOR_IDS = {"GenuineIntel": 0x8086, "AuthenticAMD": 0x1022, "ARM": 0x41}


@lru_cache(maxsize=1)
def host_cpu_device() -> HardwareDevice:
    """The host CPU, found once per process."""
    vendor = _cpuinfo_field("vendor_id") or platform.machine()
    model = _cpuinfo_field("model name") or platform.processor() or platform.machine()
    metadata = {"model": model, "arch": platform.machine(), "cores": str(os.cpu_count() or 1)}
    return HardwareDevice(DeviceType.CPU, vendor, vendor_id=_CPU_VENDOR_IDS.get(vendor, 0), metadata=metadata)


def dedupe_devices(devices: list[HardwareDevice]) -> list[HardwareDevice]:
    """Keep the first of devices that several factories probed (same type, vendor and id)."""
    seen: set[tuple[DeviceType, int, int, str]] = set()
    out: list[HardwareDevice] = []
    for dev in devices:
        key = (dev.type, dev.vendor_id, dev.device_id, dev.vendor)
        if key not in seen:
            seen.add(key)
            out.append(dev)
    return out

"""Where a tensor lives. One ``MemoryInfo`` per memory device; the planner compares them to
decide where copies go, so they are frozen and hashable."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class DeviceType(str, Enum):
    CPU = "CPU"
    GPU = "GPU"
    NPU = "NPU"


class MemType(str, Enum):
    """``DEFAULT`` is the device's own memory; ``HOST_ACCESSIBLE`` is host memory the device can
    reach (pinned), used for staging transfers."""

    DEFAULT = "default"
    HOST_ACCESSIBLE = "host_accessible"


@dataclass(frozen=True)
class MemoryInfo:
    """Identifies a memory device (like ``OrtMemoryInfo``/``OrtMemoryDevice``)."""

    name: str
    device_type: DeviceType = DeviceType.CPU
    device_id: int = 0
    vendor_id: int = 0
    mem_type: MemType = MemType.DEFAULT
    alignment: int = field(default=64, compare=False)

    @property
    def is_host(self) -> bool:
        """True when NumPy can read the memory directly."""
        return self.device_type is DeviceType.CPU or self.mem_type is MemType.HOST_ACCESSIBLE

    def __str__(self) -> str:
        return f"{self.name}:{self.device_type.value}:{self.device_id}"


HOST_MEMORY = MemoryInfo("Cpu", DeviceType.CPU, 0)

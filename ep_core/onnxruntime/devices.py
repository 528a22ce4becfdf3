"""onnxruntime's device, memory and EP-device types over ep-core's (``ep_core.sdk.devices`` and
``ep_core.sdk.memory``): the enums with onnxruntime's numbers, ``OrtDevice`` (its Python wrapper
and its pybind class in one), ``OrtMemoryInfo``, ``OrtArenaCfg`` and ``OrtEpDevice``.

``OrtHardwareDevice`` *is* ep-core's ``HardwareDevice`` (same attributes) and
``OrtHardwareDeviceType`` ep-core's ``DeviceType`` (same members); ``OrtEpDevice`` wraps an
``EpDevice`` because onnxruntime's ``memory_info`` is a method where ep-core's is a field."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from ep_core.onnxruntime.ortvalue import OrtRuntimeError
from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.devices import HardwareDevice as OrtHardwareDevice
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.memory import HOST_MEMORY, DeviceType, MemoryInfo, MemType
from ep_core.sdk.memory import DeviceType as OrtHardwareDeviceType

__all__ = [
    "ArenaExtendStrategy",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtEpDevice",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "get_ort_device_type",
    "get_vendor_id_for_device_type",
]


class OrtDeviceVendorId(IntEnum):
    """PCI vendor ids, as onnxruntime's ``OrtDeviceVendorId``."""

    NONE = 0x0000
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


class OrtMemType(IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1  # onnxruntime's alias of CPU_OUTPUT
    DEFAULT = 0


class OrtAllocatorType(IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemoryInfoDeviceType(IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceMemoryType(IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class ArenaExtendStrategy(IntEnum):
    kNextPowerOfTwo = 0
    kSameAsRequested = 1


# onnxruntime's device type numbers (OrtDevice::CPU/GPU/FPGA/NPU) and the names OrtDevice.make takes
_DEVICE_TYPES = {"cpu": 0, "gpu": 1, "cuda": 1, "webgpu": 1, "fpga": 2, "npu": 3, "cann": 3, "dml": 4}
_VENDORS = {
    "cuda": OrtDeviceVendorId.NVIDIA,
    "dml": OrtDeviceVendorId.MICROSOFT,
    "cann": OrtDeviceVendorId.HUAWEI,
    "webgpu": OrtDeviceVendorId.NONE,
}
_KINDS = {0: DeviceType.CPU, 1: DeviceType.GPU, 3: DeviceType.NPU}
# OrtMemoryInfo(name, ...): the device onnxruntime derives from the name (type, memory type, vendor)
_NAMED_MEMORY = {
    "Cpu": (0, 0, 0),
    "Cuda": (1, 0, 0x10DE),
    "CudaPinned": (1, 5, 0x10DE),
    "Hip": (1, 0, 0x1002),
    "HipPinned": (1, 5, 0x1002),
    "DML": (1, 0, 0x1414),
    "OpenVINO_GPU": (1, 0, 0x8086),
    "WebGPU_Buffer": (1, 0, 0),
    "QnnHtpShared": (3, 5, 0x5143),
}


def get_ort_device_type(device_type: str) -> int:
    """onnxruntime's number for a device name ('cpu', 'cuda', 'gpu', 'npu', ...)."""
    try:
        return _DEVICE_TYPES[device_type]
    except KeyError:
        raise InvalidArgument(f"Unsupported device type: {device_type} (use one of {sorted(_DEVICE_TYPES)})") from None


def get_vendor_id_for_device_type(device_type: str) -> OrtDeviceVendorId | None:
    return _VENDORS.get(device_type)


class OrtDevice:
    """A device: type, memory type, vendor and id. One class for onnxruntime's two: the Python
    ``OrtDevice`` (``make``, ``device_type()``...) and the pybind one apps build directly
    (``OrtDevice(OrtDevice.cuda(), OrtDevice.default_memory(), 0)``)."""

    def __init__(self, device_type: int | OrtDevice, mem_type: int = 0, *vendor_and_id: int) -> None:
        if isinstance(device_type, OrtDevice):  # onnxruntime's wrapper of a pybind device
            self._type, self._mem, self._vendor, self._id = device_type._fields()
            return
        if len(vendor_and_id) == 1:
            vendor, device_id = 0, vendor_and_id[0]
        elif len(vendor_and_id) == 2:
            vendor, device_id = vendor_and_id
        else:
            raise TypeError("OrtDevice(device_type, mem_type, [vendor_id,] device_id)")
        self._type, self._mem, self._vendor, self._id = int(device_type), int(mem_type), int(vendor), int(device_id)
        if self._type == 4:  # DirectML's legacy type: a Microsoft GPU, as onnxruntime stores it
            self._type, self._vendor = 1, int(OrtDeviceVendorId.MICROSOFT)

    def _fields(self) -> tuple[int, int, int, int]:
        return self._type, self._mem, self._vendor, self._id

    def _get_c_device(self) -> OrtDevice:
        return self

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> OrtDevice:
        kind = get_ort_device_type(ort_device_name)
        if vendor_id < 0:
            vendor_id = int(_VENDORS.get(ort_device_name, 0))
        return OrtDevice(kind, 0, int(vendor_id), device_id)

    # the pybind class's constants
    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def gpu() -> int:
        return 1

    cuda = webgpu = gpu

    @staticmethod
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    cann = npu

    @staticmethod
    def dml() -> int:
        return 4

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def vendor_id(self) -> int:
        return self._vendor

    def mem_type(self) -> int:
        return self._mem

    device_vendor_id = vendor_id
    device_mem_type = mem_type

    @property
    def key(self) -> str:
        """ep-core's spelling of the device: ``cpu``, ``gpu:0``, ``npu:1`` (what IO binding takes)."""
        kind = _KINDS.get(self._type)
        if kind is None:
            raise InvalidArgument(f"ep-core has no device of onnxruntime's type {self._type} (FPGA)")
        return "cpu" if kind is DeviceType.CPU else f"{kind.value.lower()}:{self._id}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"OrtDevice(device_type={self._type}, mem_type={self._mem}, vendor_id={self._vendor}, id={self._id})"


class OrtMemoryInfo:
    """onnxruntime's ``OrtMemoryInfo``: ``OrtMemoryInfo(name, allocator_type, device_id, mem_type)``
    (the device follows from the name, as in onnxruntime: ``Cpu``, ``Cuda``, ``CudaPinned``...)
    or ``OrtMemoryInfo.create_v2(name, device_type, vendor_id, device_id, device_mem_type,
    alignment, allocator_type)``."""

    def __init__(
        self, name: str, allocator_type: OrtAllocatorType | int, device_id: int, mem_type: OrtMemType | int
    ) -> None:
        if name not in _NAMED_MEMORY:
            raise OrtRuntimeError(
                f"Specified device is not supported. Try CreateMemoryInfo_V2. (names: {sorted(_NAMED_MEMORY)})"
            )
        kind, device_mem, vendor = _NAMED_MEMORY[name]
        device_id = 0 if name == "Cpu" else device_id  # onnxruntime has one CPU memory
        self._set(name, allocator_type, device_id, mem_type, kind, vendor, device_mem, 0)

    def _set(
        self, name: str, allocator: int, device_id: int, mem: int, kind: int, vendor: int, device_mem: int, align: int
    ) -> None:
        self._name = name
        self._allocator = OrtAllocatorType(allocator)
        self._id = int(device_id)
        self._mem = OrtMemType(mem)
        self._device_type = OrtMemoryInfoDeviceType(kind)
        self._vendor = int(vendor)
        self._device_mem = OrtDeviceMemoryType(device_mem)
        self._alignment = int(align)
        self._memory: MemoryInfo | None = None

    @staticmethod
    def create_v2(
        name: str,
        device_type: OrtMemoryInfoDeviceType | int,
        vendor_id: int,
        device_id: int,
        device_mem_type: OrtDeviceMemoryType | int,
        alignment: int,
        allocator_type: OrtAllocatorType | int,
    ) -> OrtMemoryInfo:
        info = OrtMemoryInfo.__new__(OrtMemoryInfo)
        mem = OrtMemType.CPU if device_mem_type == OrtDeviceMemoryType.HOST_ACCESSIBLE else OrtMemType.DEFAULT
        info._set(name, allocator_type, device_id, mem, device_type, vendor_id, device_mem_type, alignment)
        return info

    @staticmethod
    def from_memory_info(info: MemoryInfo) -> OrtMemoryInfo:
        """onnxruntime's view of one of ep-core's memories."""
        kinds = {DeviceType.CPU: 0, DeviceType.GPU: 1, DeviceType.NPU: 3}
        device_mem = OrtDeviceMemoryType.HOST_ACCESSIBLE if info.mem_type is MemType.HOST_ACCESSIBLE else 0
        allocator = OrtAllocatorType.ORT_DEVICE_ALLOCATOR
        out = OrtMemoryInfo.create_v2(
            info.name, kinds[info.device_type], info.vendor_id, info.device_id, device_mem, info.alignment, allocator
        )
        out._memory = info
        return out

    @property
    def memory_info(self) -> MemoryInfo:
        """ep-core's memory for this one: the memory an installed EP offers for its device (the
        host for the CPU), its host-accessible memory for ``HOST_ACCESSIBLE``."""
        if self._memory is not None:
            return self._memory
        if self._device_type is OrtMemoryInfoDeviceType.CPU:
            return HOST_MEMORY
        from ep_core.onnxruntime.ortvalue import resolve_device
        from ep_core.runtime.select import get_ep_devices

        if self._device_type is OrtMemoryInfoDeviceType.FPGA:
            raise OrtRuntimeError("ep-core has no FPGA device memory")
        mem = resolve_device(self._device_type.name.lower(), self._id, self._vendor or -1)
        if self._device_mem is OrtDeviceMemoryType.DEFAULT:
            return mem
        for d in get_ep_devices():
            if d.memory_info == mem and d.host_accessible_memory_info is not None:
                return d.host_accessible_memory_info
        raise OrtRuntimeError(f"no installed execution provider offers host-accessible memory for {mem}")

    @property
    def name(self) -> str:
        return self._name

    @property
    def allocator_type(self) -> OrtAllocatorType:
        return self._allocator

    @property
    def device_id(self) -> int:
        return self._id

    @property
    def mem_type(self) -> OrtMemType:
        return self._mem

    @property
    def device_mem_type(self) -> OrtDeviceMemoryType:
        return self._device_mem

    @property
    def device_vendor_id(self) -> int:
        return self._vendor

    @property
    def device_type(self) -> OrtMemoryInfoDeviceType:
        return self._device_type

    def __repr__(self) -> str:
        return (
            f"OrtMemoryInfo(name={self._name!r}, device_type={self._device_type.name}, device_id={self._id}, "
            f"device_mem_type={self._device_mem.name})"
        )


class OrtArenaCfg:
    """Arena settings: ``OrtArenaCfg(max_mem, arena_extend_strategy, initial_chunk_size_bytes,
    max_dead_bytes_per_chunk)`` or ``OrtArenaCfg({key: value})``; -1 means onnxruntime's default.
    Only ``create_and_register_allocator`` takes one, and ep-core refuses that (the reason is in
    docs/onnxruntime-compat.md)."""

    _KEYS = (
        "max_mem",
        "arena_extend_strategy",
        "initial_chunk_size_bytes",
        "max_dead_bytes_per_chunk",
        "initial_growth_chunk_size_bytes",
        "max_power_of_two_extend_bytes",
    )

    def __init__(self, *args: Any) -> None:
        values = dict.fromkeys(self._KEYS, -1)
        values["max_mem"] = 0
        if len(args) == 1 and isinstance(args[0], Mapping):
            unknown = sorted(set(args[0]) - set(self._KEYS))
            if unknown:
                raise InvalidArgument(f"OrtArenaCfg: unknown keys {unknown}; known: {list(self._KEYS)}")
            values.update({k: int(v) for k, v in args[0].items()})
        elif len(args) == 4:
            values.update(zip(self._KEYS[:4], map(int, args)))
        elif args:
            raise TypeError(
                "OrtArenaCfg(max_mem, arena_extend_strategy, initial_chunk_size_bytes, "
                "max_dead_bytes_per_chunk) or OrtArenaCfg(dict)"
            )
        self.__dict__.update(values)

    max_mem: int
    arena_extend_strategy: int
    initial_chunk_size_bytes: int
    max_dead_bytes_per_chunk: int
    initial_growth_chunk_size_bytes: int
    max_power_of_two_extend_bytes: int


class OrtEpDevice:
    """An execution provider on one device (onnxruntime's ``OrtEpDevice``) over ep-core's
    ``EpDevice``, which ``ep_device`` gives back."""

    def __init__(self, ep_device: EpDevice) -> None:
        self.ep_device = ep_device

    @property
    def ep_name(self) -> str:
        return self.ep_device.ep_name

    @property
    def ep_vendor(self) -> str:
        return self.ep_device.ep_vendor

    @property
    def ep_metadata(self) -> dict[str, str]:
        return dict(self.ep_device.ep_metadata)

    @property
    def ep_options(self) -> dict[str, str]:
        return dict(self.ep_device.ep_options)

    @property
    def device(self) -> HardwareDevice:
        return self.ep_device.device

    def memory_info(self, memory_type: OrtDeviceMemoryType | int) -> OrtMemoryInfo | None:
        """The EP's memory of that type on this device (None when it has none, as onnxruntime)."""
        if OrtDeviceMemoryType(memory_type) is OrtDeviceMemoryType.DEFAULT:
            return OrtMemoryInfo.from_memory_info(self.ep_device.memory_info)
        host = self.ep_device.host_accessible_memory_info
        return None if host is None else OrtMemoryInfo.from_memory_info(host)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtEpDevice) and other.ep_device == self.ep_device

    def __hash__(self) -> int:
        return hash(self.ep_device)

    def __repr__(self) -> str:
        return f"OrtEpDevice(ep_name={self.ep_name!r}, device={self.device.key})"


def ep_device_of(device: Any) -> Any:
    """ep-core's ``EpDevice`` for an ``OrtEpDevice`` (anything else unchanged)."""
    return device.ep_device if isinstance(device, OrtEpDevice) else device

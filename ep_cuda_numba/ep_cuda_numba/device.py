"""Finding CUDA devices through numba.cuda. Every function imports numba lazily, so importing
this module is free; the simulator is detected from the environment *before* numba is imported
(``NUMBA_ENABLE_CUDASIM`` is read once, at numba's import)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ep_core.sdk.devices import HardwareDevice
from ep_core.sdk.memory import DeviceType, MemoryInfo, MemType
from ep_cuda_numba import EP_NAME, NVIDIA_VENDOR_ID

MIN_COMPUTE_CAPABILITY = (5, 0)
INSTALL_HINT = "pip install ep-cuda-numba (from this repository: pip install ./ep_cuda_numba)"
SIM_ENV = "NUMBA_ENABLE_CUDASIM"


def simulator_requested() -> bool:
    """True when numba will run (or runs) the CUDA simulator."""
    import sys

    if "numba" in sys.modules:
        from numba import config

        # numba.config fills its settings into globals() at import: its py.typed package cannot declare them
        return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
    return os.environ.get(SIM_ENV, "0") not in ("", "0")


class _SimulatedDevice:
    """The simulator has one device and no contexts: this keeps a per-thread stack of the device
    ids entered, so the same control flow as on a GPU (enter the EP's device, restore the
    caller's) runs and can be observed (``current_device_id``)."""

    __slots__ = ("device_id",)

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id

    def __enter__(self) -> None:
        _sim_stack().append(self.device_id)

    def __exit__(self, *exc: object) -> None:
        _sim_stack().pop()


_SIM_THREAD = threading.local()


def _sim_stack() -> list[int]:
    stack: list[int] | None = getattr(_SIM_THREAD, "stack", None)
    if stack is None:
        stack = _SIM_THREAD.stack = []
    return stack


def device_context(device_id: int) -> Any:
    """A reusable context manager that makes ``device_id`` current (numba pushes the device's
    primary context, ``cudaSetDevice``'s driver-API form) and restores the caller's device on exit
    (the pop). With a single GPU, device 0 is the only one a thread can be in: no push."""
    if simulator_requested():
        return _SimulatedDevice(device_id)
    from numba import cuda

    if device_id == 0 and len(cuda.gpus) == 1:
        return contextlib.nullcontext()
    return cuda.gpus[device_id]


def current_device_id() -> int:
    """The device this thread's CUDA work goes to now (under the simulator: the last entered)."""
    if simulator_requested():
        stack = _sim_stack()
        return stack[-1] if stack else 0
    from numba import cuda

    return int(cuda.get_current_device().id)


def synchronize_device(device_id: int) -> None:
    """``CudaEp::Sync`` (design 5.1.1): enter ``device_id``, wait for all of its work
    (``cudaDeviceSynchronize``, every stream), restore the caller's device."""
    from numba import cuda

    with device_context(device_id):
        cuda.synchronize()


def device_memory_info(device_id: int) -> MemoryInfo:
    return MemoryInfo("Cuda", DeviceType.GPU, device_id, NVIDIA_VENDOR_ID)


def pinned_memory_info(device_id: int) -> MemoryInfo:
    return MemoryInfo("CudaPinned", DeviceType.GPU, device_id, NVIDIA_VENDOR_ID, MemType.HOST_ACCESSIBLE)


@dataclass(frozen=True)
class ProbeResult:
    """What probing found: devices we can use, and sentences explaining what we cannot."""

    devices: tuple[HardwareDevice, ...] = ()
    problems: tuple[str, ...] = ()
    too_old: dict[int, str] = field(default_factory=dict)


def _numba_cuda_installed() -> bool:
    return importlib.util.find_spec("numba") is not None and importlib.util.find_spec("numba.cuda") is not None


def compiler_problem() -> str | None:
    """Why numba-cuda could not compile a kernel on this machine, found before a session is built
    rather than as a failure in every node: libNVVM must load, and numba-cuda's CUDA target (the
    lowering registries its first compile loads) must import with the installed NumPy (numba-cuda
    0.30 overloads ``np.row_stack``, which NumPy 2.5 removed)."""
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("numba.cuda.cudadrv.nvvm") is not None:
        try:
            from numba.cuda.cudadrv.nvvm import NVVM

            NVVM()
        except Exception as exc:
            return (
                f"libNVVM, numba-cuda's compiler, could not be loaded ({type(exc).__name__}: {exc}); install the "
                f"nvidia-nvvm wheel ({INSTALL_HINT} pins it) or point CUDA_HOME at a CUDA toolkit"
            )
    if importlib.util.find_spec("numba.cuda.cudaimpl") is not None:
        try:
            import numba.cuda.cudaimpl  # noqa: F401
        except Exception as exc:
            import numpy

            try:
                release = f"numba-cuda {version('numba-cuda')}"
            except PackageNotFoundError:  # the numba.cuda that older numba releases carried
                release = "numba.cuda"
            return (
                f"{release} cannot load its CUDA target with NumPy {numpy.__version__} "
                f"({type(exc).__name__}: {exc}); install a NumPy that numba-cuda supports (ep-cuda-numba asks "
                "for numpy<2.5)"
            )
    return None


@lru_cache(maxsize=1)
def probe() -> ProbeResult:
    """Probe once per process (drivers do not appear while a process runs)."""
    if not _numba_cuda_installed():
        return ProbeResult(problems=(f"numba-cuda is not installed: {INSTALL_HINT}",))
    try:
        from numba import cuda
    except Exception as exc:  # a broken install must not break device listing
        return ProbeResult(problems=(f"numba.cuda failed to import ({type(exc).__name__}: {exc}): {INSTALL_HINT}",))
    if simulator_requested():
        dev = HardwareDevice(
            type=DeviceType.GPU,
            vendor="NVIDIA (numba-cuda simulator)",
            vendor_id=NVIDIA_VENDOR_ID,
            device_id=0,
            metadata={
                "name": "numba-cuda simulator",
                "simulated": "1",
                "compute_capability": "5.0",
                "source": "numba.cuda.simulator",
            },
        )
        return ProbeResult(devices=(dev,))
    try:
        available = cuda.is_available()
    except Exception as exc:
        return ProbeResult(problems=(f"the CUDA driver could not be loaded ({exc}); install an NVIDIA driver",))
    if not available:
        return ProbeResult(
            problems=(
                "no CUDA driver or no NVIDIA GPU was found (numba.cuda.is_available() is False); install the "
                "NVIDIA driver, or set NUMBA_ENABLE_CUDASIM=1 before starting Python to use the simulator",
            )
        )
    broken = compiler_problem()
    if broken is not None:
        return ProbeResult(problems=(broken,))
    devices: list[HardwareDevice] = []
    too_old: dict[int, str] = {}
    for gpu in cuda.gpus:
        cc = tuple(gpu.compute_capability)
        name = gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name)
        meta = {
            "name": name,
            "simulated": "0",
            "compute_capability": f"{cc[0]}.{cc[1]}",
            "source": "numba.cuda",
        }
        for attr, key in (
            ("MULTIPROCESSOR_COUNT", "sm_count"),
            ("MEMORY_CLOCK_RATE", "memory_clock_khz"),
            ("GLOBAL_MEMORY_BUS_WIDTH", "memory_bus_width_bits"),
            ("PCI_BUS_ID", "pci_bus_id"),
        ):
            try:
                meta[key] = str(getattr(gpu, attr))
            except Exception:
                pass
        dev = HardwareDevice(DeviceType.GPU, "NVIDIA", NVIDIA_VENDOR_ID, int(gpu.id), meta)
        if cc < MIN_COMPUTE_CAPABILITY:
            too_old[int(gpu.id)] = (
                f"compute capability {cc[0]}.{cc[1]} of {name} is below the minimum "
                f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} that numba-cuda supports; use a newer GPU"
            )
        devices.append(dev)
    return ProbeResult(devices=tuple(devices), too_old=too_old)


def is_ours(device: HardwareDevice) -> bool:
    return any(d == device for d in probe().devices)


def usable(device: HardwareDevice) -> bool:
    return is_ours(device) and device.device_id not in probe().too_old


def incompatibility(device: HardwareDevice) -> list[str] | None:
    """Why this EP cannot run on ``device``, as sentences a person can act on."""
    found = probe()
    if device.type is not DeviceType.GPU or device.vendor_id != NVIDIA_VENDOR_ID:
        reasons = [f"{EP_NAME} runs on NVIDIA GPUs only (this is a {device.type.value} device)"]
        reasons.extend(found.problems)
        if any(d.metadata.get("simulated") == "1" for d in found.devices):
            reasons.append(
                "only a simulated device is available (NUMBA_ENABLE_CUDASIM=1): it is for tests, never a real GPU; "
                "unset NUMBA_ENABLE_CUDASIM on a machine with an NVIDIA GPU"
            )
        return reasons
    if device.device_id in found.too_old and is_ours(device):
        return [found.too_old[device.device_id]]
    if not is_ours(device):
        return list(found.problems) or [f"{EP_NAME} did not find {device.key} through numba.cuda"]
    return None

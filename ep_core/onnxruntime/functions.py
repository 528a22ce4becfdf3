"""onnxruntime's module-level functions over ep-core: providers and devices, versions and build
information, compiled-model compatibility queries, the random seed, telemetry, DLL preloading and
shared allocators. Logging and thread-pool functions are ep-core's own (``ep_core.host``),
re-exported as they are."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any

from ep_core.host.logs import set_default_logger_severity, set_default_logger_verbosity
from ep_core.host.threads import set_global_thread_pool_sizes
from ep_core.onnxruntime.devices import OrtArenaCfg, OrtEpDevice, OrtMemoryInfo, ep_device_of
from ep_core.onnxruntime.refusals import refuse
from ep_core.runtime import api, discover, select
from ep_core.sdk.devices import HardwareDevice
from ep_core.sdk.errors import InvalidArgument, NoSuchFile, NotImplementedByAnyEp
from ep_core.sdk.memory import DeviceType

__all__ = [
    "OrtCompiledModelCompatibility",
    "OrtDeviceEpIncompatibilityReason",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_compatibility_info_from_model",
    "get_compatibility_info_from_model_bytes",
    "get_hardware_device_ep_incompatibility_details",
    "get_model_compatibility_for_ep_devices",
    "get_device",
    "get_ep_devices",
    "get_hardware_devices",
    "get_version_string",
    "has_collective_ops",
    "preload_dlls",
    "print_debug_info",
    "register_execution_provider_library",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
    "unregister_execution_provider_library",
]

API_VERSION = "1.31.0"  # the onnxruntime Python API this module mirrors
_NATIVE = (".so", ".dll", ".dylib", ".pyd")


def _as_onnxruntime_lists(names: list[str]) -> list[str]:
    """onnxruntime's conventions on ep-core's EP names: an EP that answers to an onnxruntime name
    (``ep_factory_get_provider_aliases``) is listed under it, and the CPU EP comes last, so
    ``providers=get_available_providers()`` means "accelerators first, CPU last" as there, with no
    EP twice. The EPs' own names stay accepted by the compat session."""
    registry = discover.get_registry()
    alias_of = {ep: alias for alias, ep in reversed(registry.aliases().items())}
    fallback = registry.cpu_fallback()
    last = [n for n in names if fallback is not None and n == fallback.name]
    return [alias_of.get(n, n) for n in [*(n for n in names if n not in last), *last]]


def get_available_providers() -> list[str]:
    """The EPs that load and have a device here, under the onnxruntime names they answer to, CPU last."""
    return _as_onnxruntime_lists(api.get_available_providers())


def get_all_providers() -> list[str]:
    """Every EP installed, loadable or not, named and ordered as ``get_available_providers``."""
    return _as_onnxruntime_lists(api.get_all_providers())


def get_ep_devices() -> list[OrtEpDevice]:
    """Every (EP, device) pair available, as onnxruntime's ``OrtEpDevice``."""
    return [OrtEpDevice(d) for d in select.get_ep_devices()]


def get_hardware_devices() -> list[HardwareDevice]:
    """The devices found: the host CPU and what each EP factory probes."""
    return select.hardware_devices()


def get_device() -> str:
    """'GPU' when an available EP runs on a real (not simulated) GPU, else 'CPU'."""
    for d in select.get_ep_devices():
        if d.device.type is DeviceType.GPU and d.device.metadata.get("simulated", "0") != "1":
            return "GPU"
    return "CPU"


def register_execution_provider_library(registration_name: str, library_path: str | os.PathLike[str]) -> None:
    """Register an EP factory by hand: ``'package.module:attribute'`` (ep-core's plugins are Python).
    A native library (onnxruntime's plugin-EP C API) is refused, saying so."""
    target = os.fspath(library_path)
    if target.lower().endswith(_NATIVE) or os.path.isfile(target):
        raise NotImplementedByAnyEp(
            f"{target!r} is a native library for onnxruntime's plugin-EP C API (OrtEpFactory); ep-core loads "
            "EP factories written in Python: give 'package.module:factory', or install the EP package "
            "(entry point group 'ep_core.execution_providers')"
        )
    discover.register_execution_provider_library(registration_name, target)


def unregister_execution_provider_library(registration_name: str) -> None:
    discover.unregister_execution_provider_library(registration_name)


def get_version_string() -> str:
    """The onnxruntime API version mirrored (ep-core's own is ``ep_core.__version__``)."""
    return API_VERSION


def get_build_info() -> str:
    import ep_core

    return f"ep-core {ep_core.__version__} (onnxruntime {API_VERSION} Python API), Python {platform.python_version()}"


def has_collective_ops() -> bool:
    """False: no ep-core EP implements onnxruntime's collective (NCCL/MPI) contrib ops."""
    return False


def set_seed(seed: int) -> None:
    """Seed the random ops (RandomNormal, RandomUniform, Bernoulli, Multinomial, Dropout...) that
    have no ``seed`` attribute, in sessions created after this call, as onnxruntime does: each
    installed EP factory with a ``set_random_seed`` method gets the seed (the reference EP has one).
    Ops with a ``seed`` attribute keep their own."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"set_seed takes an int, got {seed!r}")
    for handle in discover.get_registry().handles():
        seeder = getattr(handle.load(), "set_random_seed", None)
        if callable(seeder):
            seeder(seed)


def disable_telemetry_events() -> None:
    """Nothing to disable: ep-core collects and sends no telemetry, ever."""


def enable_telemetry_events() -> None:
    """Nothing to enable: ep-core collects and sends no telemetry (onnxruntime's events go to
    Windows' ETW, which ep-core does not write to)."""


def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: str | None = None) -> None:
    """Nothing to preload, as with onnxruntime's CPU package: ep-core's EPs load their own
    libraries when their factory is created (the Numba-CUDA EP finds CUDA through numba-cuda).
    A ``directory`` that does not exist is refused, as onnxruntime does."""
    if directory and not os.path.isdir(directory):
        raise RuntimeError(f"Invalid parameter of directory={directory}. The directory does not exist!")


def print_debug_info() -> None:
    """Print versions, platform, the EPs installed (with why any does not load) and the devices."""
    import ep_core

    print(f"ep-core version: {ep_core.__version__} (onnxruntime {API_VERSION} Python API)")
    print("platform:", platform.platform())
    print("python:", sys.version.split()[0], sys.executable)
    registry = discover.get_registry()
    print("\nExecution providers:")
    for h in registry.handles():
        state = "loads" if h.load() is not None else f"does not load: {h.load_error}"
        print(f"  {h.name} ({h.distribution or h.target}): {state}")
    for alias, name in registry.aliases().items():
        print(f"  {alias} -> {name}")
    print("\nDevices:")
    for d in select.get_ep_devices():
        print(f"  {d.ep_name} on {d.device.key} ({d.device.vendor})")


class OrtCompiledModelCompatibility(IntEnum):
    """onnxruntime's verdicts on a compiled model (ep-core's ``CompiledModelCompatibility``)."""

    EP_NOT_APPLICABLE = 0
    EP_SUPPORTED_OPTIMAL = 1
    EP_SUPPORTED_PREFER_RECOMPILATION = 2
    EP_UNSUPPORTED = 3


class OrtDeviceEpIncompatibilityReason(IntEnum):
    NONE = 0
    DRIVER_INCOMPATIBLE = 1
    DEVICE_INCOMPATIBLE = 2
    MISSING_DEPENDENCY = 4
    UNKNOWN = -(2**31)


def _compatibility_info(model: Any, ep_type: str) -> str | None:
    """The ``ep_compatibility_info.<EP>`` metadata a compiled model records for an EP."""
    from ep_core.runtime.compatibility import METADATA_PREFIX

    registry = discover.get_registry()
    names = {ep_type, registry.handle(ep_type).name} if ep_type in registry.aliases() else {ep_type}
    found = [p.value for p in model.metadata_props if p.key in {METADATA_PREFIX + n for n in names}]
    return found[0] if found else None


def get_compatibility_info_from_model(model_path: str | os.PathLike[str], ep_type: str) -> str | None:
    """The compatibility info a compiled model records for ``ep_type`` (None if none)."""
    import onnx

    if not os.path.isfile(model_path):
        raise NoSuchFile(f"model file {os.fspath(model_path)!r} does not exist")
    return _compatibility_info(onnx.load(os.fspath(model_path), load_external_data=False), ep_type)


def get_compatibility_info_from_model_bytes(model_bytes: bytes, ep_type: str) -> str | None:
    import onnx

    return _compatibility_info(onnx.load_from_string(bytes(model_bytes)), ep_type)


def get_model_compatibility_for_ep_devices(
    ep_devices: Sequence[Any], compatibility_info: str
) -> OrtCompiledModelCompatibility:
    """The EP's verdict (its factory's ``ep_factory_validate_compiled_model_compatibility``) on a
    compiled model's compatibility info, for these devices of one EP."""
    from ep_core.runtime.compatibility import parse_verdict

    devices = [ep_device_of(d) for d in ep_devices]
    names = {d.ep_name for d in devices}
    if len(names) != 1:
        raise InvalidArgument(f"give devices of one execution provider, got {sorted(names) or 'none'}")
    if not compatibility_info:
        return OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
    answer = (
        discover.get_registry()
        .handle(names.pop())
        .call(
            "ep_factory_validate_compiled_model_compatibility",
            default=None,
            devices=[d.device for d in devices],
            compatibility_info=compatibility_info,
        )
    )
    return OrtCompiledModelCompatibility["EP_" + parse_verdict(answer)[0].value]


def get_hardware_device_ep_incompatibility_details(ep_name: str, hardware_device: HardwareDevice) -> dict[str, Any]:
    """Why an EP cannot use a device: ``{"reasons_bitmask", "notes", "error_code"}`` as
    onnxruntime returns it (the EP's reasons, joined, in ``notes``)."""
    handle = discover.get_registry().handle(ep_name)
    found = handle.call("ep_factory_get_hardware_device_incompatibility_details", default=None, device=hardware_device)
    notes = [str(r) for r in found or ()]
    mask = OrtDeviceEpIncompatibilityReason.DEVICE_INCOMPATIBLE if notes else OrtDeviceEpIncompatibilityReason.NONE
    return {"reasons_bitmask": int(mask), "notes": "; ".join(notes) or None, "error_code": 0}


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None) -> None:
    refuse("create_and_register_allocator")


def create_and_register_allocator_v2(
    provider_type: str, mem_info: OrtMemoryInfo, provider_options: Mapping[str, str], arena_cfg: OrtArenaCfg | None
) -> None:
    refuse("create_and_register_allocator_v2")

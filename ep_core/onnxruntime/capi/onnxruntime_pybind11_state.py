"""``onnxruntime.capi.onnxruntime_pybind11_state``: onnxruntime's exceptions (ep-core's typed
errors themselves, so ``except InvalidArgument`` catches what ep-core raises), its enums, and the
classes and functions of its C extension that have an ep-core counterpart. The pybind-level
``InferenceSession``, ``ModelCompiler`` and ``OrtValue`` (C signatures under onnxruntime's Python
classes) are not here: use ``onnxruntime.InferenceSession`` etc.; docs/onnxruntime-compat.md says
why for each name missing."""

from __future__ import annotations

from ep_core.onnxruntime.compiler import OrtCompileApiFlags
from ep_core.onnxruntime.devices import (
    ArenaExtendStrategy,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtEpDevice,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
)
from ep_core.onnxruntime.functions import (
    OrtCompiledModelCompatibility,
    OrtDeviceEpIncompatibilityReason,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_compatibility_info_from_model,
    get_compatibility_info_from_model_bytes,
    get_device,
    get_ep_devices,
    get_hardware_device_ep_incompatibility_details,
    get_hardware_devices,
    get_model_compatibility_for_ep_devices,
    get_version_string,
    has_collective_ops,
    register_execution_provider_library,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_global_thread_pool_sizes,
    set_seed,
    unregister_execution_provider_library,
)
from ep_core.onnxruntime.iobinding import SessionIOBinding
from ep_core.onnxruntime.options import RunOptions, SessionOptions
from ep_core.onnxruntime.ortvalue import copy_tensors
from ep_core.onnxruntime.refusals import AdapterFormat, LoraAdapter, OrtSparseFormat, SparseTensor
from ep_core.onnxruntime.session import OrtEpAssignedNode, OrtEpAssignedSubgraph
from ep_core.runtime.options import EpSelectionPolicy as OrtExecutionProviderDevicePolicy
from ep_core.runtime.options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel
from ep_core.runtime.session import ModelMetadata, NodeArg
from ep_core.sdk.errors import (
    DeviceReset,
    EngineError,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    RuntimeException,
)
from ep_core.sdk.errors import EpFail as EPFail
from ep_core.sdk.errors import NotImplementedByAnyEp as NotImplemented  # noqa: A004 - onnxruntime's name

kNextPowerOfTwo = ArenaExtendStrategy.kNextPowerOfTwo  # noqa: N816 - onnxruntime exports the members too
kSameAsRequested = ArenaExtendStrategy.kSameAsRequested  # noqa: N816


def get_default_session_options() -> SessionOptions:
    """Fresh default session options."""
    return SessionOptions()


__all__ = [
    "AdapterFormat",
    "ArenaExtendStrategy",
    "DeviceReset",
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "LoraAdapter",
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelMetadata",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotFound",
    "NotImplemented",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtCompileApiFlags",
    "OrtCompiledModelCompatibility",
    "OrtDevice",
    "OrtDeviceEpIncompatibilityReason",
    "OrtDeviceMemoryType",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "OrtSparseFormat",
    "RunOptions",
    "RuntimeException",
    "SessionIOBinding",
    "SessionOptions",
    "SparseTensor",
    "copy_tensors",
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
    "get_default_session_options",
    "get_device",
    "get_ep_devices",
    "get_hardware_devices",
    "get_version_string",
    "has_collective_ops",
    "kNextPowerOfTwo",
    "kSameAsRequested",
    "register_execution_provider_library",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
    "unregister_execution_provider_library",
]

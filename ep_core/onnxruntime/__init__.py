"""onnxruntime 1.31's public Python API over ep-core: code written for onnxruntime runs on ep-core's
execution providers, with onnxruntime's names, defaults, exceptions and behaviour.

Import it as ``import ep_core.onnxruntime as ort``, or let unchanged programs get it as
``onnxruntime`` through ``ep_core.onnxruntime.dropin.install()`` / ``ep-core exec -- python app.py``.
It never imports the real onnxruntime. What is missing or refused, each with its reason, is listed
in docs/onnxruntime-compat.md (generated from ``missing.toml`` by ``python -m
ep_core.onnxruntime.walk``). ``SessionOptions``, ``RunOptions``, ``NodeArg``, ``ModelMetadata``,
the enums and the exceptions are ep-core's own classes."""

from __future__ import annotations

import ep_core as _ep_core
from ep_core.onnxruntime import capi

# importing onnxruntime imports these capi modules too: code reaches them as attributes
# (``onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf``) without importing them
from ep_core.onnxruntime.capi import (  # noqa: F401
    _pybind_state,
    build_and_package_info,
    onnxruntime_inference_collection,
    onnxruntime_pybind11_state,
    onnxruntime_validation,
)
from ep_core.onnxruntime.compiler import ModelCompiler, OrtCompileApiFlags
from ep_core.onnxruntime.devices import (
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtEpDevice,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
)
from ep_core.onnxruntime.functions import (
    API_VERSION,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_ep_devices,
    get_version_string,
    has_collective_ops,
    preload_dlls,
    print_debug_info,
    register_execution_provider_library,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_global_thread_pool_sizes,
    set_seed,
    unregister_execution_provider_library,
)
from ep_core.onnxruntime.iobinding import IOBinding, SessionIOBinding
from ep_core.onnxruntime.options import RunOptions, SessionOptions
from ep_core.onnxruntime.ortvalue import OrtValue, copy_tensors
from ep_core.onnxruntime.refusals import AdapterFormat, LoraAdapter, OrtSparseFormat, SparseTensor
from ep_core.onnxruntime.session import InferenceSession, OrtEpAssignedNode, OrtEpAssignedSubgraph
from ep_core.runtime.options import (
    EpSelectionPolicy as OrtExecutionProviderDevicePolicy,
)
from ep_core.runtime.options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
)
from ep_core.runtime.session import ModelMetadata, NodeArg

__version__ = API_VERSION  # the onnxruntime API mirrored; ep-core's own version is ep_core_version
version = __version__
ep_core_version = _ep_core.__version__
package_name = "ep-core"
cuda_version = ""  # onnxruntime's CUDA build version; ep-core is built for no CUDA (EPs bring their own)
import_capi_exception = None  # onnxruntime keeps an import error of its C extension here; ep-core has none

__all__ = [
    "AdapterFormat",
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "IOBinding",
    "InferenceSession",
    "LoraAdapter",
    "ModelCompiler",
    "ModelMetadata",
    "NodeArg",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtCompileApiFlags",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
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
    "OrtValue",
    "RunOptions",
    "SessionIOBinding",
    "SessionOptions",
    "SparseTensor",
    "__version__",
    "capi",
    "copy_tensors",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "cuda_version",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "ep_core_version",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_ep_devices",
    "get_version_string",
    "has_collective_ops",
    "import_capi_exception",
    "onnxruntime_validation",
    "package_name",
    "preload_dlls",
    "print_debug_info",
    "register_execution_provider_library",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
    "unregister_execution_provider_library",
    "version",
]

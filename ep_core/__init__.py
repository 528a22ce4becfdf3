"""ep-core: run ONNX models on pluggable execution providers.

Attributes load lazily (PEP 562) so ``import ep_core`` costs almost nothing: onnx, NumPy and
pydantic load with the first session, and EP stacks (numba, onnxruntime) only when that EP is
created."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "InferenceSession": "ep_core.runtime.session",
    "NodeArg": "ep_core.runtime.session",
    "ModelMetadata": "ep_core.runtime.session",
    "SessionOptions": "ep_core.runtime.options",
    "RunOptions": "ep_core.runtime.options",
    "EpSelectionPolicy": "ep_core.runtime.options",
    "GraphOptimizationLevel": "ep_core.runtime.options",
    "ProviderConfig": "ep_core.runtime.options",
    "load_provider_config": "ep_core.runtime.options",
    "get_ep_devices": "ep_core.runtime.select",
    "hardware_devices": "ep_core.runtime.select",
    "HardwareDevice": "ep_core.sdk.devices",
    "EpDevice": "ep_core.sdk.devices",
    "MemoryInfo": "ep_core.sdk.memory",
    "DeviceType": "ep_core.sdk.memory",
    "HOST_MEMORY": "ep_core.sdk.memory",
    "Tensor": "ep_core.sdk.tensor",
    "hookimpl": "ep_core.sdk.hookspecs",
    "KernelRegistry": "ep_core.sdk.kernels",
    "KernelDef": "ep_core.sdk.kernels",
    "NodeComputeInfo": "ep_core.sdk.compute",
    "FusedNode": "ep_core.sdk.compute",
    "register_execution_provider_library": "ep_core.runtime.discover",
    "unregister_execution_provider_library": "ep_core.runtime.discover",
    "get_available_providers": "ep_core.runtime.api",
    "get_all_providers": "ep_core.runtime.api",
    "ModelCompiler": "ep_core.runtime.compile_api",
    "CompileApiFlags": "ep_core.runtime.compile_api",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ep_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from ep_core.runtime.api import get_all_providers, get_available_providers
    from ep_core.runtime.compile_api import CompileApiFlags, ModelCompiler
    from ep_core.runtime.discover import register_execution_provider_library, unregister_execution_provider_library
    from ep_core.runtime.options import (
        EpSelectionPolicy,
        GraphOptimizationLevel,
        ProviderConfig,
        RunOptions,
        SessionOptions,
        load_provider_config,
    )
    from ep_core.runtime.select import get_ep_devices, hardware_devices
    from ep_core.runtime.session import InferenceSession, ModelMetadata, NodeArg
    from ep_core.sdk.compute import FusedNode, NodeComputeInfo
    from ep_core.sdk.devices import EpDevice, HardwareDevice
    from ep_core.sdk.hookspecs import hookimpl
    from ep_core.sdk.kernels import KernelDef, KernelRegistry
    from ep_core.sdk.memory import HOST_MEMORY, DeviceType, MemoryInfo
    from ep_core.sdk.tensor import Tensor

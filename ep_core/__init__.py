"""ep-core: run ONNX models on pluggable execution providers.

Attributes load lazily (PEP 562) so ``import ep_core`` costs almost nothing: onnx, NumPy and
pydantic load with the first session, and EP stacks (numba, onnxruntime) only when that EP is
created."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "InferenceSession": "ep_core.session",
    "NodeArg": "ep_core.session",
    "ModelMetadata": "ep_core.session",
    "SessionOptions": "ep_core.options",
    "RunOptions": "ep_core.options",
    "EpSelectionPolicy": "ep_core.options",
    "GraphOptimizationLevel": "ep_core.options",
    "ProviderConfig": "ep_core.options",
    "load_provider_config": "ep_core.options",
    "get_ep_devices": "ep_core.selection",
    "hardware_devices": "ep_core.selection",
    "HardwareDevice": "ep_core.devices",
    "EpDevice": "ep_core.devices",
    "MemoryInfo": "ep_core.memory",
    "DeviceType": "ep_core.memory",
    "HOST_MEMORY": "ep_core.memory",
    "Tensor": "ep_core.tensor",
    "hookimpl": "ep_core.hookspecs",
    "KernelRegistry": "ep_core.kernels",
    "KernelDef": "ep_core.kernels",
    "NodeComputeInfo": "ep_core.compute",
    "FusedNode": "ep_core.compute",
    "register_execution_provider_library": "ep_core.plugins",
    "unregister_execution_provider_library": "ep_core.plugins",
    "get_available_providers": "ep_core.api",
    "get_all_providers": "ep_core.api",
    "ModelCompiler": "ep_core.epcontext.compile_api",
    "CompileApiFlags": "ep_core.epcontext.compile_api",
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
    from ep_core.api import get_all_providers, get_available_providers
    from ep_core.compute import FusedNode, NodeComputeInfo
    from ep_core.devices import EpDevice, HardwareDevice
    from ep_core.epcontext.compile_api import CompileApiFlags, ModelCompiler
    from ep_core.hookspecs import hookimpl
    from ep_core.kernels import KernelDef, KernelRegistry
    from ep_core.memory import HOST_MEMORY, DeviceType, MemoryInfo
    from ep_core.options import (
        EpSelectionPolicy,
        GraphOptimizationLevel,
        ProviderConfig,
        RunOptions,
        SessionOptions,
        load_provider_config,
    )
    from ep_core.plugins import register_execution_provider_library, unregister_execution_provider_library
    from ep_core.selection import get_ep_devices, hardware_devices
    from ep_core.session import InferenceSession, ModelMetadata, NodeArg
    from ep_core.tensor import Tensor

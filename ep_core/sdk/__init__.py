"""The EP SDK: everything an execution provider needs from ep-core, and the only part of ep-core an
EP package imports (built-in, contrib and third-party alike).

It holds the contract (pluggy hookspecs), the values that cross it (devices, memory, tensors,
graph and node views, kernel registry, capability, compute infos, EPContext helpers, the session
config view) and the typed errors. The engine lives in ``ep_core.runtime`` and never leaks into
what an EP sees."""

from __future__ import annotations

from ep_core.sdk.capability import SupportInfo
from ep_core.sdk.compute import ComputeContext, FusedNode, NodeComputeInfo
from ep_core.sdk.config import RunConfig, SessionConfig
from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.errors import (
    ConfigError,
    EpCoreError,
    EpFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    ModelRequiresCompilation,
    NoSuchFile,
    NotImplementedByAnyEp,
    StatusCode,
)
from ep_core.sdk.graph import GraphView, NodeView, ValueInfo
from ep_core.sdk.grouping import convex_groups
from ep_core.sdk.hookspecs import API_VERSION, ENTRY_POINT_GROUP, hookimpl
from ep_core.sdk.kernels import KernelContext, KernelDef, KernelRegistry
from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN
from ep_core.sdk.memory import HOST_MEMORY, DeviceType, MemoryInfo, MemType
from ep_core.sdk.protocols import (
    Allocator,
    DataTransfer,
    EpProfiler,
    ExecutionProvider,
    ExecutionProviderFactory,
    SyncNotification,
    SyncStream,
)
from ep_core.sdk.tensor import Tensor

__all__ = [
    "API_VERSION",
    "Allocator",
    "ComputeContext",
    "ConfigError",
    "DataTransfer",
    "DeviceType",
    "ENTRY_POINT_GROUP",
    "EpCoreError",
    "EpDevice",
    "EpFail",
    "EpProfiler",
    "ExecutionProvider",
    "ExecutionProviderFactory",
    "Fail",
    "FusedNode",
    "GraphView",
    "HOST_MEMORY",
    "HardwareDevice",
    "HostEpFactory",
    "InvalidArgument",
    "InvalidGraph",
    "KernelContext",
    "KernelDef",
    "KernelRegistry",
    "LAYOUT_SENSITIVE_OPS",
    "MemType",
    "MemoryInfo",
    "ModelRequiresCompilation",
    "NHWC_DOMAIN",
    "NoSuchFile",
    "NodeComputeInfo",
    "NodeView",
    "NotImplementedByAnyEp",
    "RegistryEp",
    "RunConfig",
    "SessionConfig",
    "StatusCode",
    "SupportInfo",
    "SyncNotification",
    "SyncStream",
    "Tensor",
    "ValueInfo",
    "convex_groups",
    "hookimpl",
]

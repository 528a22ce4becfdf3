"""The whole execution-provider contract, as pluggy hookspecs.

Two kinds of plugin implement it:

* a **factory** (one per EP package, found through the ``ep_core.execution_providers`` entry-point
  group) implements the ``ep_factory_*`` hooks, mirroring ``OrtEpFactory``;
* an **EP** (an object returned by ``ep_factory_create_ep``, one per session) implements the
  ``ep_*`` hooks, mirroring ``OrtEp``.

The core calls one factory's or one EP's hook at a time: the other EPs are excluded from the call
(pluggy's ``subset_hook_caller``), while plugins that are neither, such as tracers and profilers,
stay in and may wrap any hook with ``@hookimpl(wrapper=True)``. That is why every hook takes the
``factory`` or ``ep`` it is addressed to: an implementation on that very object ignores it (pluggy
lets an implementation take a subset of the arguments), a wrapper uses it to know whom it wraps.

All hooks are ``firstresult``: the addressed plugin answers. Hooks marked *optional* may be left
out; the documented default applies. ``API_VERSION`` grows when hooks are added; each hook says the
version that introduced it (``HOOK_API_VERSIONS``), and the core never calls a hook, factory or EP
level, newer than the factory's ``ep_factory_api_version`` (default 1).

Version 2 moved the last of the contract into this module (``ep_get_context_sources``,
``ep_factory_get_fusable_ops``, the ``output`` of ``ep_get_ep_context_nodes``; a typed
``KernelContext``; version-gated EP hooks; ``session.disable_compile`` enforced by the core).
Version 3 adds ``ep_factory_get_provider_aliases``; version 4 onnxruntime's graph capture hooks
(``OrtEp::IsGraphCaptureEnabled`` ...). A version-1 factory keeps working unchanged."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

if TYPE_CHECKING:
    from logging import Logger

    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.compute import FusedNode, NodeComputeInfo
    from ep_core.sdk.config import RunConfig, SessionConfig
    from ep_core.sdk.devices import EpDevice, HardwareDevice
    from ep_core.sdk.epcontext.output import ContextOutput
    from ep_core.sdk.graph import GraphView
    from ep_core.sdk.kernels import KernelDef, KernelRegistry
    from ep_core.sdk.memory import MemoryInfo
    from ep_core.sdk.protocols import (
        Allocator,
        DataTransfer,
        EpProfiler,
        ExecutionProvider,
        ExecutionProviderFactory,
        SyncStream,
    )

PROJECT = "ep_core"
API_VERSION = 4
ENTRY_POINT_GROUP = "ep_core.execution_providers"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# hook name -> API version that introduced it
HOOK_API_VERSIONS: dict[str, int] = {}


_Spec = TypeVar("_Spec", bound=Callable[..., Any])


def _since(version: int) -> Callable[[_Spec], _Spec]:
    def deco(fn: _Spec) -> _Spec:
        HOOK_API_VERSIONS[fn.__name__] = version
        return hookspec(firstresult=True)(fn)

    return deco


# ============================================================================ factory level


@_since(1)
def ep_factory_name(factory: "ExecutionProviderFactory") -> str:
    """The EP's name, ending in ``ExecutionProvider`` (e.g. ``CpuReferenceExecutionProvider``).
    Required; must equal the entry-point name."""


@_since(1)
def ep_factory_vendor(factory: "ExecutionProviderFactory") -> str:
    """The vendor who owns the EP. Required."""


@_since(1)
def ep_factory_vendor_id(factory: "ExecutionProviderFactory") -> int:
    """PCI vendor id of the EP's vendor. Optional, default 0."""


@_since(1)
def ep_factory_version(factory: "ExecutionProviderFactory") -> str:
    """The EP's version as SemVer 2.0 (``1.2.3``). Required; validated at load."""


@_since(1)
def ep_factory_api_version(factory: "ExecutionProviderFactory") -> int:
    """The ep_core contract version the factory was written for. Optional, default 1."""


@_since(1)
def ep_factory_is_cpu_fallback(factory: "ExecutionProviderFactory") -> bool:
    """True if this EP can serve as the session's CPU fallback (appended after the selected EPs
    unless ``session.disable_cpu_ep_fallback=1``). Optional, default False. The first discovered
    factory that says True is the fallback; the core names no concrete EP."""


@_since(1)
def ep_factory_probe_hardware_devices(factory: "ExecutionProviderFactory") -> "Sequence[HardwareDevice]":
    """Hardware devices only this factory knows how to find (GPUs, NPUs, simulated devices).
    Called lazily, the first time devices are enumerated; may import heavy libraries. The host CPU
    is found by the core. Optional, default none."""


@_since(1)
def ep_factory_get_supported_devices(
    factory: "ExecutionProviderFactory", devices: "Sequence[HardwareDevice]"
) -> "Sequence[EpDevice]":
    """From all known hardware devices, the ones this EP supports, each as an ``EpDevice`` with
    the memory info of its device memory. Required (``GetSupportedDevices``)."""


@_since(1)
def ep_factory_get_hardware_device_incompatibility_details(
    factory: "ExecutionProviderFactory", device: "HardwareDevice"
) -> "Sequence[str] | None":
    """Why this EP cannot use ``device``, as sentences a person can act on ("numba-cuda is not
    installed: pip install ep-cuda-numba"). Optional, default None (no known reason)."""


@_since(1)
def ep_factory_create_ep(
    factory: "ExecutionProviderFactory",
    devices: "Sequence[EpDevice]",
    ep_options: Mapping[str, str],
    session_options: "SessionConfig",
    logger: "Logger",
) -> "ExecutionProvider":
    """A new EP object for one session on ``devices``. ``ep_options``: the devices' ``EpDevice.ep_options``
    under this provider's options and ``ep.<name>.<key>`` entries (the user's win); reject unknown keys or bad
    values with ``ConfigError`` naming the allowed ones. ``logger``: the session's ``logging`` child for this EP
    (its logid and severity; name it to get it, as ``OrtLogger``). Required (``CreateEp``)."""


@_since(1)
def ep_factory_release_ep(factory: "ExecutionProviderFactory", ep: "ExecutionProvider") -> None:
    """Release an EP created by this factory when its session closes. Optional."""


@_since(1)
def ep_factory_validate_compiled_model_compatibility(
    factory: "ExecutionProviderFactory", devices: "Sequence[HardwareDevice]", compatibility_info: str
) -> str:
    """Judge a compiled model's ``ep_compatibility_info.<EP>`` string: one of
    ``NOT_APPLICABLE``, ``SUPPORTED_OPTIMAL``, ``SUPPORTED_PREFER_RECOMPILATION``, ``UNSUPPORTED``
    optionally followed by ``: reason``. Optional, default ``NOT_APPLICABLE``."""


@_since(1)
def ep_factory_create_allocator(
    factory: "ExecutionProviderFactory", memory_info: "MemoryInfo", allocator_options: Mapping[str, str]
) -> "Allocator | None":
    """An allocator for ``memory_info`` that may be shared across sessions (``alloc(nbytes)``,
    ``free(buf)``, ``stats()``). Optional, default None: host memory from NumPy."""


@_since(1)
def ep_factory_release_allocator(factory: "ExecutionProviderFactory", allocator: "Allocator") -> None:
    """Release an allocator from ``ep_factory_create_allocator``. Optional."""


@_since(1)
def ep_factory_create_data_transfer(factory: "ExecutionProviderFactory") -> "DataTransfer | None":
    """A data-transfer object for the devices this factory serves, implementing
    ``can_copy(src: MemoryInfo, dst: MemoryInfo) -> bool`` and
    ``copy(value, src: MemoryInfo, dst: MemoryInfo, stream) -> value`` (returns the copy).
    Optional, default None (the EP's memory is host memory)."""


@_since(1)
def ep_factory_is_stream_aware(factory: "ExecutionProviderFactory") -> bool:
    """True if the EP's kernels run asynchronously on sync streams. Optional, default False."""


@_since(1)
def ep_factory_create_sync_stream_for_device(
    factory: "ExecutionProviderFactory", memory_info: "MemoryInfo", stream_options: Mapping[str, str]
) -> "SyncStream | None":
    """A sync stream for one session on one memory device, implementing ``synchronize()`` and
    ``create_notification()`` (whose result has ``activate()``, ``wait_on_device(stream)`` and
    ``wait_on_host()``: the core makes a consumer on another stream, or the host, wait on one).
    Called only for stream-aware factories. Optional, default None."""


@_since(1)
def ep_factory_get_custom_op_domains(factory: "ExecutionProviderFactory") -> "Sequence[Any] | None":
    """Custom op domains (``onnx.defs.OpSchema`` lists) the EP adds so models using them check.
    Optional, default None."""


@_since(2)
def ep_factory_get_fusable_ops(
    factory: "ExecutionProviderFactory",
) -> "Sequence[tuple[str, str, int, int | None] | KernelDef] | KernelRegistry | None":
    """What a compiling EP can fuse, for reports (``ep-core parity``); the session never asks.
    ``(domain, op_type, since_version, end_version)`` tuples (``end_version`` None: up to the
    newest opset; domain ``""`` or ``"ai.onnx"`` is the default domain), ``KernelDef``s, or a
    ``KernelRegistry`` of compile-only defs (its builders are never called). Optional, default
    None: the EP declares no fusable ops (an empty sequence declares that it fuses nothing)."""


@_since(3)
def ep_factory_get_provider_aliases(factory: "ExecutionProviderFactory") -> "Sequence[str] | None":
    """Other names this EP may be selected by: another runtime's EP whose job this EP does with
    the same results (onnxruntime's ``CPUExecutionProvider`` for a CPU EP of the ONNX operators).
    Only where honest: an alias promises the ops and numbers of the EP it names. Each ends in
    ``ExecutionProvider`` and names no installed EP; the first factory to claim an alias keeps it.
    Optional, default none."""


# ================================================================================= EP level


@_since(1)
def ep_get_capability(ep: "ExecutionProvider", graph: "GraphView", support: "SupportInfo") -> None:
    """Claim nodes of ``graph`` (its ``nodes`` are the ones no EP has claimed yet) through
    ``support.add_single_node(node)`` (served by the EP's kernel registry) and
    ``support.add_nodes_to_fuse(nodes, drop_constant_initializers=...)`` (compiled by
    ``ep_compile``). Invalid claims are dropped and recorded, never fatal. Required."""


@_since(1)
def ep_compile(
    ep: "ExecutionProvider", graphs: "Sequence[GraphView]", fused_nodes: "Sequence[FusedNode]"
) -> "Sequence[NodeComputeInfo]":
    """Compile each fused group (``graphs[i]``, with its ``fused_nodes[i]`` name, inputs and
    outputs) into a ``NodeComputeInfo``. Required if the EP fuses."""


@_since(1)
def ep_get_kernel_registry(ep: "ExecutionProvider") -> "KernelRegistry | None":
    """The registry serving nodes claimed with ``add_single_node``. Optional, default None."""


@_since(1)
def ep_get_ep_context_nodes(ep: "ExecutionProvider", output: "ContextOutput") -> "Sequence[Any] | None":
    """After ``ep_compile`` with ``ep.context_enable=1``: one ``EPContext`` NodeProto per fused
    node, named like it, for the core to write into the ``_ctx.onnx`` model. ``output`` (API
    version 2) says where the model goes (embed mode, folder, model name, ``binary_name(ep)``) and
    stages the context files the EP writes (``write_file``), committed with the model. Optional."""


@_since(2)
def ep_get_context_sources(ep: "ExecutionProvider") -> "Sequence[str]":
    """Further names under which an EPContext node's ``source`` attribute may name this EP (older
    or short names, e.g. ``NumbaCuda``); only nodes whose source the EP accepts are offered to it.
    Optional, default none: the EP's own name, which is always accepted."""


@_since(1)
def ep_get_preferred_data_layout(ep: "ExecutionProvider") -> str:
    """``NCHW`` or ``NHWC``. Optional, default ``NCHW``."""


@_since(1)
def ep_should_convert_data_layout_for_op(
    ep: "ExecutionProvider", domain: str, op_type: str, target_layout: str
) -> bool | None:
    """Whether the layout transformer should convert this op to ``target_layout``; None lets the
    core decide. Optional."""


@_since(1)
def ep_on_run_start(ep: "ExecutionProvider", run_options: "RunConfig | None") -> None:
    """Called before each run that uses this EP. Optional."""


@_since(1)
def ep_on_run_end(ep: "ExecutionProvider", run_options: "RunConfig | None", sync_stream: bool) -> None:
    """Called after each run; ``sync_stream`` says whether the EP must finish its work before
    returning. Optional."""


@_since(1)
def ep_sync(ep: "ExecutionProvider") -> None:
    """Block until all work the EP queued has finished. Optional."""


@_since(1)
def ep_get_compiled_model_compatibility_info(ep: "ExecutionProvider", graph: "GraphView") -> str | None:
    """A string recorded as ``ep_compatibility_info.<EP>`` in compiled models, describing what
    the compiled code depends on. Optional."""


@_since(1)
def ep_create_profiler(ep: "ExecutionProvider") -> "EpProfiler | None":
    """A profiler with ``start(epoch_ns)`` and ``stop() -> list[dict]`` (Chrome-trace events) that
    the session merges into its trace. Optional."""


@_since(4)
def ep_is_graph_capture_enabled(ep: "ExecutionProvider") -> bool:
    """True if the EP captures runs as device graphs (the session then checks node placement and
    runs warm-up and capture in one ``run``, as onnxruntime). Optional, default False."""


@_since(4)
def ep_get_graph_capture_node_assignment_policy(ep: "ExecutionProvider") -> str:
    """``ALL_NODES_ON_EP`` (default) or ``ALLOW_CPU_FOR_SHAPES`` (host-EP nodes with no copies)."""


@_since(4)
def ep_is_graph_captured(ep: "ExecutionProvider", graph_annotation_id: int) -> bool:
    """True once the graph of run config entry ``gpu_graph_id`` (default 0) is captured."""


@_since(4)
def ep_replay_graph(ep: "ExecutionProvider", graph_annotation_id: int) -> None:
    """Launch the captured graph and wait for it; the core runs no node of the run."""

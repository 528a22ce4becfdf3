"""The EP object of one session: claims nodes (registry kernels, fused elementwise groups, its own
EPContext nodes), compiles fused groups, and answers layout, sync and compiled-model questions."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ep_cuda_numba import EP_NAME
from ep_cuda_numba.layout import NHWC_DOMAIN, nhwc_miss, preferred_layout, should_convert
from ep_cuda_numba.options import NumbaCudaOptions

if TYPE_CHECKING:
    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.compute import FusedNode, NodeComputeInfo
    from ep_core.sdk.epcontext.output import ContextOutput
    from ep_core.sdk.graph import GraphView
    from ep_core.sdk.kernels import KernelRegistry
    from ep_cuda_numba.factory import NumbaCudaFactory

EP_CONTEXT_OP = "EPContext"
MS_DOMAIN = "com.microsoft"


class NumbaCudaProfiler:
    """The EP's part of the session trace: GPU-timed kernel launches and copies (``profiling.py``,
    CUDA events around each on the session's stream) and, when profiling stops, the device arena's
    statistics and how many kernels were generated and fused (Chrome-trace counter events)."""

    def __init__(self, ep: "NumbaCudaEp") -> None:
        from ep_cuda_numba.profiling import GpuTimeline

        self.ep = ep
        self.epoch_ns = 0
        self.timeline = GpuTimeline(ep)

    def start(self, epoch_ns: int) -> None:
        self.epoch_ns = epoch_ns
        self.timeline.start(epoch_ns)

    def stop(self) -> list[dict[str, Any]]:
        import time

        from ep_cuda_numba import codegen

        gpu = self.timeline.stop()
        ts = (time.perf_counter_ns() - self.epoch_ns) / 1000.0
        return gpu + [
            {"name": "arena", "ph": "C", "ts": ts, "args": dict(self.ep.arena.stats())},
            {
                "name": "kernels",
                "ph": "C",
                "ts": ts,
                "args": {
                    "generated_elementwise": len(codegen._CACHE),
                    "fused_groups": len(self.ep.compiled),
                    "fused_launches": sum(g.launches["fused"] for g in self.ep.compiled),
                },
            },
        ]


class NumbaCudaEp:
    name = EP_NAME

    def __init__(
        self,
        factory: "NumbaCudaFactory",
        options: NumbaCudaOptions,
        arena: Any,
        session_options: Any,
        simulated: bool,
        logger: logging.Logger | None = None,
    ) -> None:
        from ep_cuda_numba.registry import registry

        # the session's logger for this EP (ep_factory_create_ep's ``logger``: its logid, its severity)
        self.logger = logger or logging.getLogger(f"ep_core.{EP_NAME}")
        self.factory = factory
        self.options = options
        self.arena = arena
        self.session_options = session_options
        self.simulated = simulated
        self.registry: KernelRegistry = registry()
        self.layout, self.layout_reason = preferred_layout(options.prefer_nhwc, self.registry)
        self.logger.info("%s layout %s: %s", EP_NAME, self.layout, self.layout_reason)
        if options.prefer_nhwc and self.layout != "NHWC":
            warnings.warn(f"{EP_NAME}: {self.layout_reason}", RuntimeWarning, stacklevel=2)
        self._streams: list[Any] = []
        # launch interceptor (profiling.GpuTimeline.launch, or a simulated graph capture's recorder),
        # the arrays a CUDA graph being captured owns, the profile's timeline and the graphs
        self.tap: Any = None
        self.capturing: list[Any] | None = None
        self.timeline: Any = None
        from ep_cuda_numba.graph_capture import CudaGraphs

        self.graphs = CudaGraphs(self)
        self.compiled: list[Any] = []  # fusion.CompiledGroup, for EPContext nodes
        self.host_nodes: list[str] = []  # nodes left to the host on purpose (shape math)
        self.loaded_context_groups: list[Any] = []  # groups rebuilt from EPContext nodes
        self.declined: dict[str, str] = {}  # node -> why a registered kernel cannot run it

    def note_stream(self, stream: Any) -> None:
        if stream is not None and all(s is not stream for s in self._streams):
            self._streams.append(stream)

    # --------------------------------------------------------------------- capability
    def ep_get_kernel_registry(self) -> "KernelRegistry":
        return self.registry

    def ep_get_context_sources(self) -> tuple[str, ...]:
        return ("NumbaCuda",)

    def ep_get_capability(self, graph: "GraphView", support: "SupportInfo") -> None:
        from ep_cuda_numba.fusion import find_groups
        from ep_cuda_numba.placement import host_side_nodes

        claimed: set[int] = set()
        for n in graph.nodes:
            # the core offers EPContext nodes only to the EP their source names; the registry's
            # EPContext kernel rebuilds the fused kernel from the node's payload
            if n.op_type == EP_CONTEXT_OP and n.domain == MS_DOMAIN:
                if support.add_single_node(n):
                    claimed.add(n.index)
        from ep_cuda_numba.registry import BF16_REASON, touches_bfloat16, unsupported_reason

        served = {}
        for n in graph.nodes:
            if n.index in claimed:
                continue
            if n.domain == NHWC_DOMAIN and (miss := nhwc_miss(self.registry, n)) is not None:
                self.declined[n.name] = miss  # a rewritten node left unclaimed: say exactly why
                warnings.warn(f"{EP_NAME}: {miss}", RuntimeWarning, stacklevel=2)
                continue
            found = self.registry.lookup(n)
            if found.entry is not None:
                why = unsupported_reason(n)
                if why is None:
                    served[n.index] = found.entry.kernel_def
                else:
                    self.declined[n.name] = why
            elif touches_bfloat16(n):
                self.declined[n.name] = BF16_REASON
        host = host_side_nodes(graph, served)
        device_nodes = [n for n in graph.nodes if n.index in served and n.index not in host]
        if self.options.enable_fusion:
            for group in find_groups(graph, device_nodes, self.options.fused_group_max_nodes, host):
                if support.add_nodes_to_fuse(group, drop_constant_initializers=True):  # baked in: context_group
                    claimed.update(n.index for n in group)
        self.host_nodes.extend(graph.all_nodes[i].name for i in sorted(host) if i not in claimed)
        for n in device_nodes:
            if n.index not in claimed:
                support.add_single_node(n)

    def ep_compile(self, graphs: Sequence["GraphView"], fused_nodes: Sequence["FusedNode"]) -> list["NodeComputeInfo"]:
        from ep_cuda_numba.context_group import compile_group, compute_info

        infos = []
        for view, fused in zip(graphs, fused_nodes, strict=False):
            group = compile_group(view, fused, self)
            group.in_main_graph = view.parent is None  # a subgraph's groups recompile on load
            self.compiled.append(group)
            infos.append(compute_info(group))
        return infos

    def ep_get_ep_context_nodes(self, output: "ContextOutput") -> list[Any]:
        from ep_cuda_numba.epcontext import make_context_nodes

        return make_context_nodes(self, output)

    def ep_get_compiled_model_compatibility_info(self, graph: "GraphView") -> str:
        from ep_cuda_numba.epcontext import compatibility_info

        return compatibility_info(self.options.device_id)

    # ------------------------------------------------------------------------- layout
    def ep_get_preferred_data_layout(self) -> str:
        return self.layout

    def ep_should_convert_data_layout_for_op(self, domain: str, op_type: str, target_layout: str) -> bool | None:
        return should_convert(
            self.options.prefer_nhwc and self.layout == "NHWC", self.registry, domain, op_type, target_layout
        )

    def ep_create_profiler(self) -> "NumbaCudaProfiler":
        return NumbaCudaProfiler(self)

    # -------------------------------------------------------------------- CUDA graphs
    def ep_is_graph_capture_enabled(self) -> bool:
        return self.graphs.enabled

    def ep_get_graph_capture_node_assignment_policy(self) -> str:
        from ep_cuda_numba.graph_capture import POLICY

        return POLICY

    def ep_is_graph_captured(self, graph_annotation_id: int) -> bool:
        return self.graphs.is_captured(graph_annotation_id)

    def ep_replay_graph(self, graph_annotation_id: int) -> None:
        self.graphs.replay(graph_annotation_id)

    # ---------------------------------------------------------------------- run, sync
    def ep_on_run_start(self, run_options: Any) -> None:
        self._shrink_targets(run_options)  # a malformed value is refused before the run, not after it
        if self.graphs.enabled:
            self.graphs.on_run_start(run_options)

    def ep_on_run_end(self, run_options: Any, sync_stream: bool) -> None:
        if self.graphs.enabled:
            self.graphs.on_run_end(run_options)  # ends a capture (and replays it) before any wait
        if sync_stream:
            for s in self._streams:
                s.synchronize()
                self.arena.reset_stream(s)  # its free chunks are safe for every stream now
        self._shrink_if_asked(run_options)

    @staticmethod
    def _shrink_targets(run_options: Any) -> set[tuple[str, int]]:
        """The devices onnxruntime's run config entry ``memory.enable_memory_arena_shrinkage`` names
        (``InvalidArgument`` naming the entry and its value when malformed). Well-formed entries for
        devices this EP does not serve (``cpu:0``, another ``gpu:N``) are left to the EPs that do."""
        from ep_cuda_numba.arena_config import SHRINK_KEY, shrink_targets

        value = (getattr(run_options, "config_entries", None) or {}).get(SHRINK_KEY)
        return shrink_targets(value) if value else set()

    def _shrink_if_asked(self, run_options: Any) -> None:
        """The shrink entry naming this EP's device (``gpu:<device_id>``): give the arena's entirely
        free regions back after the run (the value was checked at run start)."""
        if ("gpu", self.options.device_id) in self._shrink_targets(run_options):
            self.arena.shrink()

    def ep_sync(self) -> None:
        """``CudaEp::Sync`` (design 5.1.1): on the EP's device, the caller's restored after, a
        device-wide barrier (every stream of the device, not only this session's)."""
        from ep_cuda_numba.device import synchronize_device

        synchronize_device(self.options.device_id)

    def release(self) -> None:
        self.graphs.release()  # the graphs' arrays go back to the arena
        self._streams.clear()
        self.compiled.clear()

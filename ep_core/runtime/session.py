"""``InferenceSession``: ``onnxruntime.InferenceSession``'s shape over ``build`` (creation) and
``execute`` (runs). It holds a ``Built`` engine and nothing else of the engine's."""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.runtime import run
from ep_core.runtime.build import build, resolve_request
from ep_core.runtime.contract import declared_outputs
from ep_core.runtime.discover import PluginRegistry, get_registry
from ep_core.runtime.engine import Built
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import GraphView, ValueInfo
from ep_core.sdk.memory import MemoryInfo

if TYPE_CHECKING:
    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.iobinding import IOBinding
    from ep_core.runtime.options import ProviderConfig, RunOptions, SessionOptions
    from ep_core.runtime.program import GraphProgram


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()`` reports it."""

    name: str
    shape: list[int | str | None]
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _node_arg(v: ValueInfo, named: Collection[str] = ()) -> NodeArg:
    # dims as onnxruntime shows them: unknown rank is []; a negative size, '' or a name onnx's shape
    # inference made up (unk__N, unless the model itself ``named`` it: tf2onnx writes them) is None
    dims = [
        None if d in (None, "") or str(d).startswith("-") or (str(d).startswith("unk__") and d not in named) else d
        for d in v.shape or ()
    ]
    return NodeArg(v.name, dims, v.type_str)


class InferenceSession:
    """Runs one ONNX model on the selected execution providers.

    ``providers`` is ORT-style (``["NameExecutionProvider", ("Name", {options})]``); ``config`` is
    a provider config file (TOML/JSON) or a ``ProviderConfig``; with neither, the session options'
    devices or policy decide, then ``$EP_CORE_CONFIG``, then the CPU fallback alone."""

    def __init__(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes | Any,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        config: str | os.PathLike[str] | ProviderConfig | None = None,
        *,
        registry: PluginRegistry | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._closed = False
        request = resolve_request(
            path_or_bytes, sess_options, providers, provider_options, config, registry or get_registry()
        )
        self._built: Built = build(request)
        self.context_model_path = self._built.context_model_path

    def close(self) -> None:
        """Release the EPs, compiled state and constants (also done when the session is
        garbage-collected)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._built.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "InferenceSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------------- introspection
    @property
    def options(self) -> SessionOptions:
        return self._built.options

    @property
    def model(self) -> Any:
        """The loaded model (shape-inferred)."""
        return self._built.model

    @property
    def model_path(self) -> Path | None:
        return self._built.model_path

    @property
    def graph(self) -> GraphView:
        assert self._built.graph is not None
        return self._built.graph

    @property
    def program(self) -> "GraphProgram":
        program = self._built.program
        if program is None:
            raise InvalidArgument("the session is closed")
        return program

    @property
    def execution_providers(self) -> "list[EpInstance]":
        return list(self._built.eps)

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v, {str(d) for d in v.shape or ()}) for v in self.graph.inputs]  # declared, all of them

    def get_outputs(self) -> list[NodeArg]:
        """As declared, with what inference found (``declared_outputs``), as onnxruntime reports them."""
        outputs = type(self.graph.proto)(output=declared_outputs(self._built.declared, self.graph.proto))
        given = self._built.declared.output if self._built.declared is not None else ()
        named = {d.dim_param for v in given for d in v.type.tensor_type.shape.dim}
        return [_node_arg(v, named) for v in GraphView(outputs, {}).outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        graph = self.graph
        inits = graph.initializer_protos
        return [_node_arg(graph.value_info(v.name) or ValueInfo(v.name)) for v in graph.proto.input if v.name in inits]

    def get_providers(self) -> list[str]:
        return [ep.name for ep in self._built.eps]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {ep.name: dict(ep.selected.options) for ep in self._built.eps}

    def get_session_options(self) -> SessionOptions:
        return self._built.options.model_copy(deep=True)

    def get_modelmeta(self) -> ModelMetadata:
        m = self._built.model
        return ModelMetadata(
            producer_name=m.producer_name,
            graph_name=m.graph.name,
            domain=m.domain,
            description=m.doc_string,
            graph_description=m.graph.doc_string,
            version=int(m.model_version),
            custom_metadata_map={p.key: p.value for p in m.metadata_props},
        )

    def get_node_assignment(self) -> dict[str, dict[str, Any]]:
        """Node name -> ``{"ep": name, "fused_node": name or None, "op_type": ..., "domain": ...}``,
        subgraph nodes included as ``parent/attr/node`` (node names need not say the op, nor be unique)."""
        out: dict[str, dict[str, Any]] = {}
        for program in self._built.programs():
            for u in program.units:
                ep, graph, fused = self._built.eps[u.ep_index].name, program.graph, u.name if u.fused_nodes else None
                for n in [graph.node(name) for name in u.fused_nodes] or [graph.all_nodes[u.order_key]]:
                    out[program.qualified(n.name)] = {
                        "ep": ep,
                        "fused_node": fused,
                        "op_type": n.op_type,
                        "domain": n.domain,
                    }
        return out

    def get_partition_diagnostics(self) -> list[str]:
        """Every kernel the EPs' registries refused, rejected capability claim and layout decision,
        with its reason."""
        out: list[str] = list(self._built.notes)
        for ep in self._built.eps:
            out.extend(ep.diagnostics())
        for program in self._built.programs():
            out.extend(str(r) for r in program.partition.rejected)
        return out

    def get_plan(self, input_memory: Mapping[str, MemoryInfo] | None = None, outputs_to_host: bool = True) -> list[str]:
        """The main graph's steps, copies included, one line each."""
        return self.program.plan(input_memory, outputs_to_host).describe()

    # -------------------------------------------------------------------------------- run
    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: RunOptions | None = None
    ) -> list[Any]:
        """Run the model; outputs come back as NumPy arrays in the order asked."""
        if self._closed:
            raise InvalidArgument("the session is closed")
        feed = run.check_feed(self.graph, input_feed)
        values = run.run(self._built, feed, run_options, fetches=output_names)
        return run.select_outputs(self.graph, output_names, values)

    def end_profiling(self) -> str:
        """Write the trace (onnxruntime's format) and return its path ('' when profiling is off or ended)."""
        trace = self._built.host.trace
        return "" if trace is None else trace.end()

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started, in ns since the epoch (0 when profiling is off), as onnxruntime."""
        return int(getattr(self._built.host.trace, "start_time_ns", 0))

    # --------------------------------------------------------------------------- IO binding
    def io_binding(self) -> "IOBinding":
        from ep_core.runtime.iobinding import IOBinding

        if self._closed:
            raise InvalidArgument("the session is closed")
        return IOBinding(self._built)

    def run_with_iobinding(self, binding: "IOBinding", run_options: RunOptions | None = None) -> None:
        if self._closed:
            raise InvalidArgument("the session is closed")
        binding.run(run_options)

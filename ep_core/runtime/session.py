"""``InferenceSession``: strings the steps together (load, select, partition, compile, plan,
run) with the shape of ``onnxruntime.InferenceSession``."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument, NotImplementedByAnyEp
from ep_core.sdk.graph import GraphView, ValueInfo, opset_map
from ep_core.runtime.load import EXTERNAL_FOLDER_KEY, check_and_infer, load_model
from ep_core.sdk.memory import MemoryInfo
from ep_core.runtime.options import CONFIG_ENV, ProviderConfig, RunOptions, SessionOptions, load_provider_config
from ep_core.runtime.discover import PluginRegistry, get_registry
from ep_core.runtime.profiling import Profiler
from ep_core.runtime.program import GraphProgram, SessionContext, model_hash
from ep_core.runtime.eps import EpInstance
from ep_core.runtime.select import select_providers

if TYPE_CHECKING:
    from ep_core.runtime.iobinding import IOBinding


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()`` reports it."""

    name: str
    shape: list[int | str | None] | None
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


def _node_arg(v: ValueInfo) -> NodeArg:
    return NodeArg(v.name, list(v.shape) if v.shape is not None else None, v.type_str)


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
        t_start = time.perf_counter_ns()
        options = sess_options.model_copy(deep=True) if sess_options is not None else SessionOptions()
        if (
            config is None
            and not providers
            and not options.provider_devices
            and options.ep_selection_policy is None
            and options.ep_selection_delegate is None
            and os.environ.get(CONFIG_ENV)
        ):
            config = os.environ[CONFIG_ENV]
        if config is not None and not isinstance(config, ProviderConfig):
            config = load_provider_config(config)
        if config is not None:
            options = config.apply_to(options)
        if provider_options is not None:
            if providers is None or len(provider_options) != len(providers):
                raise InvalidArgument("provider_options must have one mapping per entry of providers")
            providers = [(p if isinstance(p, str) else p[0], dict(o)) for p, o in zip(providers, provider_options)]
        self._options = options
        self._registry = registry or get_registry()
        self._profiler = Profiler(options.profile_file_prefix) if options.enable_profiling else None
        self._lock = threading.Lock()
        self._closed = False

        t0 = time.perf_counter_ns()
        proto, self._model_path = load_model(path_or_bytes, options.get_session_config_entry(EXTERNAL_FOLDER_KEY))
        self._source_proto = proto
        from ep_core.runtime.context_write import prepare_session

        prepare_session(options, self._model_path, proto)  # EPContext schema; refuse a bad output before compiling
        selected = select_providers(options, providers, config, self._registry)
        self._eps: list[EpInstance] = []
        try:
            for sel in selected:
                self._eps.append(EpInstance(sel, options, self._registry))
            self._register_custom_domains()
            self._model = check_and_infer(proto)
            self._trace("model_loading", t0)
            self._validate_compiled_model()
            if self._profiler is not None:
                for ep in self._eps:
                    prof = ep.call("ep_create_profiler")
                    if prof is not None:
                        self._profiler.add_ep_profiler(ep.name, prof)
            self._graph = GraphView(self._model.graph, opset_map(self._model))
            self._layout_notes: list[str] = []
            self._build_program()
            t0 = time.perf_counter_ns()
            self._program.plan()
            self._trace("plan", t0)
            if options.flag("ep.context_enable"):
                from ep_core.runtime.context_write import generate_context_model

                t0 = time.perf_counter_ns()
                self.context_model_path = generate_context_model(self)
                self._trace("ep_context_generation", t0)
            self._run_hooks = [ep for ep in self._eps if ep.has_run_start or ep.has_run_end]
        except BaseException:
            self._release_eps()
            raise
        self._trace("session_initialization", t_start)

    # ------------------------------------------------------------------------ set-up steps
    def _trace(self, phase: str, t0: int) -> None:
        if self._profiler is not None:
            self._profiler.phase(phase, t0)

    def _register_custom_domains(self) -> None:
        from onnx import defs

        for ep in self._eps:
            for schema in ep.handle.call("ep_factory_get_custom_op_domains", default=None) or ():
                if not defs.has(schema.name, schema.since_version, schema.domain):
                    defs.register_schema(schema)

    def _validate_compiled_model(self) -> None:
        from ep_core.runtime.compatibility import validate_model_compatibility

        validate_model_compatibility(self._model, self._eps, self._options)

    def _new_context(self, model_id: str) -> SessionContext:
        ctx = SessionContext(self._options, self._eps, model_id, self._profiler)
        ctx.model_path = self._model_path  # EPContext payloads resolve against the model's folder
        return ctx

    def _build_program(self) -> None:
        """Partition, compile and plan; with an NHWC-preferring EP, on the layout-transformed
        graph (the second capability pass), reverting to the original if the EP leaves a
        rewritten node unclaimed."""
        from ep_core.runtime.layout import transform_to_nhwc

        model_id = model_hash(self._model.graph.SerializeToString())
        t0 = time.perf_counter_ns()
        layout = transform_to_nhwc(self._model, self._graph, self._eps)
        self._trace("layout_transformation", t0)
        if layout is not None:
            graph = GraphView(layout.model.graph, opset_map(layout.model))
            self._ctx = self._new_context(model_id)
            try:
                self._program = GraphProgram(graph, self._ctx)
                owners = {u.name: self._eps[u.ep_index].name for u in self._program.units}
                left = {n: ep for n, ep in layout.converted.items() if owners.get(n) != ep}
            except NotImplementedByAnyEp as exc:  # a rewritten node nobody runs
                self._program = None
                left = {n: ep for n, ep in layout.converted.items() if f"'{n}'" in exc.message} or dict(
                    layout.converted
                )
            if not left and self._program is not None:
                self._model, self._graph = layout.model, graph
                self._layout_notes.append(
                    f"layout: {len(layout.converted)} node(s) run in NHWC ({sorted(layout.converted)}), "
                    f"{layout.transposes} layout transpose(s) remain"
                )
                return
            note = (
                f"layout: reverted to NCHW because the EP that asked for NHWC did not claim the rewritten "
                f"node(s) {sorted(left)} in the second capability pass"
            )
            warnings.warn(note, RuntimeWarning, stacklevel=3)
            self._layout_notes.append(note)
            if self._program is not None:
                self._program.release()
        self._ctx = self._new_context(model_id)
        self._program = GraphProgram(self._graph, self._ctx)

    def _release_eps(self) -> None:
        program = getattr(self, "_program", None)
        if program is not None:
            program.release()
        for ep in reversed(self._eps):
            ep.close()
        self._eps = []

    def close(self) -> None:
        """Release the EPs (also done when the session is garbage-collected)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release_eps()

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
        return self._options

    @property
    def model(self) -> Any:
        """The loaded model (shape-inferred)."""
        return self._model

    @property
    def model_path(self) -> Path | None:
        return self._model_path

    @property
    def graph(self) -> GraphView:
        return self._graph

    @property
    def program(self) -> GraphProgram:
        return self._program

    @property
    def execution_providers(self) -> list[EpInstance]:
        return list(self._eps)

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._graph.outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        inits = self._graph.initializer_protos
        return [
            _node_arg(self._graph.value_info(v.name) or ValueInfo(v.name))
            for v in self._model.graph.input
            if v.name in inits
        ]

    def get_providers(self) -> list[str]:
        return [ep.name for ep in self._eps]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {ep.name: dict(ep.selected.options) for ep in self._eps}

    def get_session_options(self) -> SessionOptions:
        return self._options.model_copy(deep=True)

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
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
        """Node name -> ``{"ep": name, "fused_node": name or None}``, subgraph nodes included as
        ``parent/attr/node``."""
        out: dict[str, dict[str, Any]] = {}
        for program in self._programs():
            for u in program.units:
                ep = self._eps[u.ep_index].name
                if u.fused_nodes:
                    for n in u.fused_nodes:
                        out[program._qual(n)] = {"ep": ep, "fused_node": u.name}
                else:
                    out[u.name] = {"ep": ep, "fused_node": None}
        return out

    def _programs(self) -> "list[GraphProgram]":
        """The main graph's program and every subgraph program below it."""
        found = [self._program]
        for program in found:
            found.extend(program.subprograms())
        return found

    def get_partition_diagnostics(self) -> list[str]:
        """Every rejected capability claim, with its reason."""
        out: list[str] = list(self._layout_notes)
        for program in self._programs():
            out.extend(str(r) for r in program.partition.rejected)
        return out

    def get_plan(self, input_memory: Mapping[str, MemoryInfo] | None = None, outputs_to_host: bool = True) -> list[str]:
        """The main graph's steps, copies included, one line each."""
        return self._program.plan(input_memory, outputs_to_host).describe()

    # -------------------------------------------------------------------------------- run
    def _check_feed(self, feed: Mapping[str, Any], on_device: frozenset[str] = frozenset()) -> None:
        """Check names, dtypes, ranks and fixed dims; ``on_device`` inputs are checked through
        their ``shape``/``dtype`` attributes instead of being required to be NumPy arrays."""
        expected = {v.name: v for v in self._graph.inputs}
        overridable = self._graph.input_names
        for name in feed:
            if name not in overridable:
                raise InvalidArgument(f"unknown input {name!r}; the model's inputs are {list(expected)}")
        for name, info in expected.items():
            if name not in feed:
                raise InvalidArgument(
                    f"missing input {name!r} (expected {info.type_str} with shape {_shape_str(info.shape)})"
                )
            value = feed[name]
            if info.kind != "tensor":
                continue
            if name in on_device:
                if not (hasattr(value, "shape") and hasattr(value, "dtype")):
                    raise InvalidArgument(
                        f"input {name!r} bound on a device has no shape/dtype ({type(value).__name__})"
                    )
            elif not isinstance(value, np.ndarray):
                raise InvalidArgument(f"input {name!r} must be a numpy.ndarray, got {type(value).__name__}")
            want = info.np_dtype
            if want is not None and np.dtype(value.dtype) != want:
                raise InvalidArgument(f"input {name!r} has dtype {value.dtype}, expected {want} ({info.type_str})")
            if info.shape is not None:
                if len(value.shape) != len(info.shape):
                    raise InvalidArgument(
                        f"input {name!r} has rank {len(value.shape)} (shape {list(value.shape)}), expected rank "
                        f"{len(info.shape)} (shape {_shape_str(info.shape)})"
                    )
                for axis, (got, want_dim) in enumerate(zip(value.shape, info.shape)):
                    if (
                        isinstance(want_dim, int) and want_dim >= 0 and want_dim != got
                    ):  # -1: exporters mark dynamic dims so
                        raise InvalidArgument(
                            f"input {name!r} has dim {got} on axis {axis} (shape {list(value.shape)}), "
                            f"expected {want_dim} (shape {_shape_str(info.shape)})"
                        )

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the model; outputs come back as NumPy arrays in the order asked."""
        self._check_feed(input_feed)
        values = self._run(input_feed, run_options, None, True)
        return self._select_outputs(output_names, values)

    def _select_outputs(self, output_names: Sequence[str] | None, values: list[Any]) -> list[Any]:
        names = [v.name for v in self._graph.outputs]
        if not output_names:
            return values
        out = []
        for n in output_names:
            try:
                out.append(values[names.index(n)])
            except ValueError:
                raise InvalidArgument(f"unknown output {n!r}; the model's outputs are {names}") from None
        return out

    def _run(
        self,
        feed: Mapping[str, Any],
        run_options: RunOptions | None,
        input_memory: Mapping[str, MemoryInfo] | None,
        outputs_to_host: bool,
    ) -> list[Any]:
        if self._closed:
            raise InvalidArgument("the session is closed")
        plan = self._program.plan(input_memory, outputs_to_host)
        vals = plan.template.copy()
        slots = plan.input_slots
        for name, value in feed.items():
            vals[slots[name]] = value
        for ep in self._run_hooks:
            if ep.has_run_start:
                ep.call("ep_on_run_start", run_options=run_options)
        prof = self._profiler
        if prof is None:
            self._program.execute(plan, vals, None)
        else:
            events: list[dict[str, Any]] = []
            t0 = time.perf_counter_ns()
            self._program.execute(plan, vals, events)
            prof.add_run(t0, time.perf_counter_ns(), events, run_options.run_tag if run_options else "")
        for ep in self._run_hooks:
            if ep.has_run_end:
                ep.call("ep_on_run_end", run_options=run_options, sync_stream=True)
        return plan.outputs(vals)

    def end_profiling(self) -> str:
        """Write the Chrome trace and return its path ('' when profiling is off)."""
        if self._profiler is None:
            return ""
        return self._profiler.end()

    # --------------------------------------------------------------------------- IO binding
    def io_binding(self) -> "IOBinding":
        from ep_core.runtime.iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, binding: "IOBinding", run_options: RunOptions | None = None) -> None:
        binding._run(run_options)


def _shape_str(shape: Sequence[Any] | None) -> str:
    return "unknown" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"

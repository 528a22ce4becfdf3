"""``build()``: every session-creation step, strung together once.

A ``BuildRequest`` (what the user asked for) becomes a ``Built`` engine (EPs, the partitioned and
compiled program, its plan) through one function per step: load, select, create EPs, check and
infer, compatibility, place (partition + layout), program, plan, context write. ``InferenceSession``,
``ModelCompiler`` and ``IOBinding`` are thin callers of this module and of ``execute``; nothing
else reaches into a session's state."""

from __future__ import annotations

import copy
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ep_core.host.graphs import GraphCapture
from ep_core.host.session import SessionHost
from ep_core.host.trace import Profiler
from ep_core.optimizer import optimize_model
from ep_core.optimizer.schemas import register_schemas
from ep_core.runtime import context_write
from ep_core.runtime.compatibility import validate_model_compatibility
from ep_core.runtime.engine import Built
from ep_core.runtime.eps import EpInstance
from ep_core.runtime.load import EXTERNAL_FOLDER_KEY, check_and_infer, check_options, load_model, materialise_budget
from ep_core.runtime.options import CONFIG_ENV, ProviderConfig, SessionOptions, load_provider_config
from ep_core.runtime.partition import Partition, partition_graph
from ep_core.runtime.program import GraphProgram
from ep_core.runtime.select import select_providers
from ep_core.runtime.units import SessionContext, model_hash
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import GraphView, opset_map

if TYPE_CHECKING:
    from ep_core.runtime.context_write import CompileRequest
    from ep_core.runtime.discover import PluginRegistry


@dataclass
class BuildRequest:
    """What to build: the model, the resolved session options and the provider choice."""

    model: Any
    options: SessionOptions
    providers: Sequence[Any] | None
    config: ProviderConfig | None
    registry: "PluginRegistry"
    compile: "CompileRequest | None" = None  # set by the compile API: write the context model its way
    origin: SessionOptions | None = None  # the caller's options: its load cancellation flag is watched


def resolve_request(
    model: Any,
    sess_options: SessionOptions | None,
    providers: Sequence[Any] | None,
    provider_options: Sequence[Mapping[str, Any]] | None,
    config: str | os.PathLike[str] | ProviderConfig | None,
    registry: "PluginRegistry",
) -> BuildRequest:
    """Apply the provider config (argument, else ``$EP_CORE_CONFIG`` when nothing else chooses) to
    a private copy of the session options, and pair ``provider_options`` with ``providers``."""
    o = sess_options if sess_options is not None else SessionOptions()
    shared = {id(v): v for d in (o.initializers, o.external_initializer_files) for v in d.values()}
    options = copy.deepcopy(o, shared)  # initializers stay the caller's arrays (onnxruntime keeps a reference)
    chooses = providers or options.provider_devices or options.ep_selection_policy is not None
    if config is None and not chooses and options.ep_selection_delegate is None and os.environ.get(CONFIG_ENV):
        config = os.environ[CONFIG_ENV]
    if config is not None and not isinstance(config, ProviderConfig):
        config = load_provider_config(config)
    if config is not None:
        options = config.apply_to(options)
    if provider_options is not None:
        if providers is None or len(provider_options) != len(providers):
            raise InvalidArgument("provider_options must have one mapping per entry of providers")
        providers = [(p if isinstance(p, str) else p[0], dict(o)) for p, o in zip(providers, provider_options)]
    return BuildRequest(model, options, providers, config, registry, origin=sess_options)


def build(request: BuildRequest) -> Built:
    """Run every creation step; on failure everything created so far is released."""
    options = request.options
    profiler = (host := SessionHost(options)).trace  # the session's threads, logger and trace
    t_start = t0 = time.perf_counter_ns()
    check_options(request.origin)
    proto, model_path = load_model(request.model, options.get_session_config_entry(EXTERNAL_FOLDER_KEY), options)
    context_write.prepare_session(options, model_path, proto, request.compile)  # refuse a bad output early
    selected = select_providers(options, request.providers, request.config, request.registry)
    built = Built(options, request.registry, [], model_path, host)
    try:
        for sel in selected:
            built.eps.append(EpInstance(sel, options, request.registry, host.log))
        register_schemas(proto, built.eps)
        built.declared = type(proto.graph)(output=proto.graph.output, value_info=proto.graph.value_info)
        built.model = check_and_infer(proto)
        kernels, budget = built.eps[0].kernel_registry if built.eps else None, materialise_budget(built.model.graph)
        supports = kernels.has_op if kernels is not None else None  # fusions make only ops the first EP has
        level, config = options.graph_optimization_level, options.config_entries
        cpu = not built.eps or built.eps[0].memory_info.is_host  # float16 as onnxruntime's CPU EP runs it
        built.model = optimize_model(built.model, level, supports, budget, host.log.log, config, built.declared, cpu)
        _trace(profiler, "model_loading_uri" if model_path else "model_loading_array", t0)
        validate_model_compatibility(built.model, built.eps, options, model_path)
        if profiler is not None:
            for ep in built.eps:
                prof = ep.call("ep_create_profiler")
                if prof is not None:
                    profiler.add_ep_profiler(ep.name, prof)
        _place_and_compile(built)
        assert built.program is not None
        t0 = time.perf_counter_ns()
        built.program.plan()
        _trace(profiler, "plan", t0)
        check_options(request.origin)
        if options.optimized_model_filepath:  # the model as planned: folded, pruned, dims fixed
            built.program.save_optimized(built.model, options.optimized_model_filepath, built.declared)
        if options.flag("ep.context_enable"):
            t0 = time.perf_counter_ns()
            built.context_model_path = context_write.generate_context_model(built, request.compile)
            _trace(profiler, "ep_context_generation", t0)
        built.run_hooks = [ep for ep in built.eps if ep.has_run_start or ep.has_run_end]
        built.capture = GraphCapture.check(built)
        _trace(profiler, "session_initialization", t_start)
        host.created(built, t_start)
    except BaseException:
        try:
            built.release()
        except Exception as exc:  # noqa: BLE001 - the build error is the one to raise
            warnings.warn(f"releasing after a failed session creation also failed: {exc}", RuntimeWarning, stacklevel=2)
        raise
    return built


def _trace(profiler: Profiler | None, phase: str, t0: int) -> None:
    if profiler is not None:
        profiler.phase(phase, t0)


def _new_context(built: Built, model_id: str) -> SessionContext:
    ctx = SessionContext(built.options, built.eps, model_id, built.host.trace)
    ctx.model_path = built.model_path  # EPContext payloads resolve against the model's folder
    return ctx


def _place_and_compile(built: Built) -> None:
    """Partition, then compile the program. With an NHWC-preferring EP: a first capability pass,
    the layout rewrite, a second pass on the rewritten graph, and a revert to the original graph
    (with the reason recorded) if the EP left a rewritten node to another EP or to none."""
    from ep_core.runtime.layout import nhwc_eps, transform_to_nhwc

    graph = GraphView(built.model.graph, opset_map(built.model))
    model_id = model_hash(built.model.graph.SerializeToString())
    trial = nhwc_eps(built.eps)
    if trial:
        t0 = time.perf_counter_ns()
        first = partition_graph(graph, built.eps, layout_trial=trial)
        layout = transform_to_nhwc(built.model, graph, built.eps, first)
        _trace(built.host.trace, "layout_transformation", t0)
        if layout is not None:
            nhwc_graph = GraphView(layout.model.graph, opset_map(layout.model))
            second = partition_graph(nhwc_graph, built.eps)
            owners = second.owners()
            names = [ep.name for ep in built.eps]
            left = {n: ep for n, ep in layout.converted.items() if n not in owners or names[owners[n]] != ep}
            if not left and not second.unclaimed:
                built.notes.append(
                    f"layout: {len(layout.converted)} node(s) run in NHWC ({sorted(layout.converted)}), "
                    f"{layout.transposes} layout transpose(s) remain"
                )
                _compile(built, layout.model, nhwc_graph, model_id, second)
                return
            if left:
                why = f"the EP that asked for NHWC did not claim the rewritten node(s) {sorted(left)}"
            else:
                unclaimed = sorted(nhwc_graph.all_nodes[i].name for i in second.unclaimed)
                why = f"no EP claimed the node(s) {unclaimed} of the rewritten graph"
            note = f"layout: reverted to NCHW because {why} in the second capability pass"
            warnings.warn(note, RuntimeWarning, stacklevel=4)
            built.notes.append(note)
    _compile(built, built.model, graph, model_id, None)


def _compile(built: Built, model: Any, graph: GraphView, model_id: str, partition: Partition | None) -> None:
    built.model, built.graph = model, graph
    built.context = _new_context(built, model_id)
    built.program = GraphProgram(graph, built.context, partition=partition)

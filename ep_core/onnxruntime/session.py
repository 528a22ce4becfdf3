"""``onnxruntime.InferenceSession`` over ep-core's: the Python layer of onnxruntime
(``onnxruntime_inference_collection.Session``) on ep-core's engine.

What differs from ``ep_core.InferenceSession`` is onnxruntime's, on purpose: a provider that is
not available is warned about and skipped (ep-core's own API refuses it); a missing input is a
``ValueError``; an EP failure (``EPFail``) at creation or in a run retries once on the CPU EP,
printing what happened, unless ``disable_fallback()``; provider names are reported as the
application wrote them (``CPUExecutionProvider``)."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ep_core.onnxruntime.devices import OrtEpDevice, OrtMemoryInfo, ep_device_of
from ep_core.onnxruntime.options import SessionOptions
from ep_core.onnxruntime.refusals import refuse
from ep_core.optimizer.disabled import KEY as DISABLED_KEY
from ep_core.runtime.contract import declared_outputs
from ep_core.runtime.discover import get_registry
from ep_core.runtime.options import ExecutionMode, RunOptions
from ep_core.runtime.options import SessionOptions as _EpCoreOptions
from ep_core.runtime.session import InferenceSession as _EpCoreSession
from ep_core.runtime.session import ModelMetadata, NodeArg
from ep_core.sdk.errors import EpCoreError, EpFail, InvalidArgument, NotImplementedByAnyEp
from ep_core.sdk.graph import type_string
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo
from ep_core.sdk.tensor import Tensor

if TYPE_CHECKING:
    from ep_core.onnxruntime.iobinding import IOBinding
    from ep_core.onnxruntime.ortvalue import OrtValue

_NO_VERSION = 2**63 - 1  # onnxruntime's ModelMetadata.version of a model without model_version
CPU_PROVIDER = "CPUExecutionProvider"


# onnxruntime 1.31's get_all_providers(): the names it knows, whether its build has them or not
ONNXRUNTIME_PROVIDERS = frozenset(
    f"{n}ExecutionProvider"
    for n in "NvTensorRTRTX Tensorrt CUDA MIGraphX OpenVINO Dnnl VitisAI QNN Nnapi VSINPU Js CoreML ACL Dml Rknpu "
    "WebNN WebGpu Xnnpack CANN Azure CPU".split()
)


def available_providers() -> list[str]:
    """EP names a compat session accepts: ``get_available_providers()`` (onnxruntime's names) and
    the ep-core names of EPs listed there under an alias."""
    from ep_core.onnxruntime.functions import get_available_providers
    from ep_core.runtime import api

    listed = get_available_providers()
    return listed + [n for n in api.get_available_providers() if n not in listed]


def _alias_options(name: str, options: dict[Any, Any], ep_name: str, so: Any) -> dict[Any, Any]:
    """Options given to an EP under an onnxruntime name it answers to. onnxruntime's
    CPUExecutionProvider reads no provider options (its factory takes only the session's arena
    flag), so applications pass some it then ignores (``arena_extend_strategy``); ep-core drops
    them the same way, saying so at warning severity on the session's logger."""
    if name == ep_name or name != CPU_PROVIDER or not options:
        return options
    from ep_core.host.logs import SessionLog

    log = SessionLog(getattr(so, "logid", ""), getattr(so, "log_severity_level", -1), 0)
    log.log(2, "%s reads no provider options in onnxruntime; ignored as there: %s", name, sorted(options))
    return {}


def check_and_normalize_provider_args(
    providers: Sequence[Any] | None,
    provider_options: Sequence[dict[Any, Any]] | None,
    available_provider_names: Sequence[str],
) -> tuple[list[str], list[dict[str, str]]]:
    """onnxruntime's validation of ``providers``/``provider_options``: ``ValueError`` for a
    malformed argument, a warning for an unavailable or repeated name; returns (names, options)."""
    if providers is None:
        return [], []
    chosen: dict[str, dict[str, str]] = {}

    def add(name: str, options: Mapping[Any, Any]) -> None:
        if name not in available_provider_names:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{', '.join(available_provider_names)}'",
                stacklevel=5,
            )
        if name in chosen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=5)
            return
        chosen[name] = {str(k): str(v) for k, v in options.items()}

    if not isinstance(providers, collections.abc.Sequence):
        raise ValueError("'providers' should be a sequence.")
    if provider_options is not None:
        if not isinstance(provider_options, collections.abc.Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        for name, options in zip(providers, provider_options):
            add(name, options)
    else:
        for p in providers:
            if isinstance(p, str):
                add(p, {})
            elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
                add(p[0], p[1])
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    return list(chosen), list(chosen.values())


def _shape(tp: Any) -> list[int | str | None]:
    """onnxruntime's ``NodeArg.shape`` of a value's type as declared: a size, a name (whatever it
    is, ``unk__7`` too), None for one unknown or negative; an optional's tensor shape; else []."""
    while tp.WhichOneof("value") == "optional_type":
        tp = tp.optional_type.elem_type
    if tp.WhichOneof("value") != "tensor_type":
        return []
    dims = tp.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or None for d in dims]


def _tensor_dims(arg: NodeArg, tp: Any, declared: Any, names: set[str]) -> NodeArg:
    """``arg``'s dims as onnxruntime reports them, from the shape-inferred type ``tp``: a size; a
    name the model uses (onnx's inference makes up ``unk__N`` names, which onnxruntime's does not:
    those are None); else what the model ``declared`` for that dim."""
    if not tp.tensor_type.HasField("shape"):
        return arg
    inferred = [
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param if d.dim_param in names else None)
        for d in tp.tensor_type.shape.dim
    ]
    if declared is not None and declared.tensor_type.HasField("shape"):
        given = _shape(declared)
        if len(given) == len(inferred):
            # a declared name comes back; a declared size ``tp`` lacks is one inference contradicted: None
            inferred = [i if isinstance(i, int) or not isinstance(g, str) else g for g, i in zip(given, inferred)]
    return NodeArg(arg.name, inferred, arg.type)


@dataclasses.dataclass(frozen=True)
class OrtEpAssignedNode:
    """A node as ``get_provider_graph_assignment_info`` lists it."""

    name: str
    domain: str
    op_type: str


@dataclasses.dataclass(frozen=True)
class OrtEpAssignedSubgraph:
    """Nodes one EP runs as one step (a node, or a fused group)."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self.nodes)


class _Meta:
    """What a built session reports and every run reads, computed once per build (onnxruntime's
    session keeps its ``_inputs_meta`` & co. the same way)."""

    def __init__(self, session: _EpCoreSession, requested: dict[str, str]) -> None:
        graph = session.model.graph
        shown = declared_outputs(session._built.declared, graph)  # as declared, filled in by inference
        types = {v.name: v.type for v in [*graph.value_info, *shown, *graph.input]}

        declared = {v.name: v.type for v in [*graph.input, *session._built.declared.output]}
        names = {d.dim_param for t in declared.values() for d in t.tensor_type.shape.dim if d.dim_param}

        def arg(a: NodeArg) -> NodeArg:
            tp = types.get(a.name)
            if tp is None:
                return a
            if tp.WhichOneof("value") == "tensor_type":
                return _tensor_dims(a, tp, declared.get(a.name), names)
            return NodeArg(a.name, _shape(tp), type_string(tp))

        self.requested = requested  # ep-core EP name -> the name the application selected it by
        self.inputs = [arg(a) for a in session.get_inputs()]
        self.outputs = [arg(a) for a in session.get_outputs()]
        self.overridable = [arg(a) for a in session.get_overridable_initializers()]
        self.optionals = {a.name for a in [*self.inputs, *self.overridable] if a.type.startswith("optional")}
        self.required = tuple(a.name for a in self.inputs if a.name not in self.optionals)
        self.output_names = tuple(a.name for a in self.outputs)
        self.dtypes = {v.name: v.np_dtype for v in session.graph.inputs}
        # inputs fed as Python containers that stay containers: sequences (lists) and maps (dicts)
        self.containers = {
            a.name: a.type for a in [*self.inputs, *self.overridable] if a.type.startswith(("seq", "map"))
        }
        self.strings = {a.name for a in [*self.inputs, *self.overridable] if a.type == "tensor(string)"}


class InferenceSession:
    """``onnxruntime.InferenceSession(path_or_bytes, sess_options, providers, provider_options,
    **kwargs)`` on ep-core's EPs. ``kwargs``: ``enable_fallback`` (1, onnxruntime's default);
    ``disabled_optimizers`` (names of rewrites not to run, ep-core's or onnxruntime's, as the
    session config entry ``optimization.disable_specified_optimizers`` takes them);
    ``read_config_from_model`` is refused when set (NOT_IMPLEMENTED, saying why).

    As onnxruntime's, it holds the engine's session in ``_sess`` (ep-core's
    ``ep_core.InferenceSession``) and keeps onnxruntime's private attributes (``_model_path``,
    ``_providers``, ``_inputs_meta``...), which applications read; subclasses may set any other
    attribute (``self.model_path = ...``)."""

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str] | Any,
        sess_options: _EpCoreOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - {"enable_fallback", "read_config_from_model", "disabled_optimizers"})
        if unknown:
            raise TypeError(f"InferenceSession() got unexpected keyword arguments {unknown}")
        read_config = kwargs.get("read_config_from_model", os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL") == "1")
        if int(read_config) == 1:
            raise NotImplementedByAnyEp(
                "read_config_from_model (ORT_LOAD_CONFIG_FROM_MODEL=1) reads onnxruntime session options stored in "
                "the model's 'ort_config' metadata; ep-core does not read them: set them on SessionOptions instead"
            )
        off = kwargs.get("disabled_optimizers") or ()
        self._disabled_optimizers = [off] if isinstance(off, str) else [str(n) for n in off]
        if isinstance(path_or_bytes, (str, os.PathLike)):
            self._model_path: str | None = os.fspath(path_or_bytes)
            self._model_bytes: bytes | None = None
        elif isinstance(path_or_bytes, (bytes, onnx.ModelProto)):
            self._model_path = None
            self._model_bytes = path_or_bytes if isinstance(path_or_bytes, bytes) else None
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        self._enable_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        self._read_config_from_model = False
        self._ep_core_source = path_or_bytes
        self._sess_options = sess_options
        self._sess_options_initial = sess_options
        self._fallback_providers = [CPU_PROVIDER]
        self._sess: _EpCoreSession | None = None
        try:
            self._create_inference_session(providers, provider_options)
        except (ValueError, RuntimeError, EpFail) as e:
            if not self._enable_fallback:
                raise
            print("*************** EP Error ***************")
            print(f"EP Error {e} when using {providers}")
            print(f"Falling back to {self._fallback_providers} and retrying.")
            print("****************************************")
            try:
                self._create_inference_session(self._fallback_providers, None)
            except Exception as fallback_error:
                raise fallback_error from e
            self.disable_fallback()

    # ----------------------------------------------------------------------- creation
    def _create_inference_session(
        self, providers: Sequence[Any] | None, provider_options: Sequence[dict[Any, Any]] | None
    ) -> None:
        """Build the engine's session and the attributes onnxruntime's ``Session`` keeps."""
        available = available_providers()
        names, options = check_and_normalize_provider_args(providers, provider_options, available)
        sess_options = self._sess_options_initial
        if sess_options is not None and names and sess_options.provider_devices:
            warnings.warn(
                "Specified 'providers'/'provider_options' when creating InferenceSession but SessionOptions has "
                "already been configured with providers. InferenceSession will only use the providers "
                "passed to InferenceSession().",
                stacklevel=3,
            )
        # onnxruntime skips a provider it knows but does not have (after the warning above), and
        # refuses a name it does not know (the constructor then falls back to the CPU EP)
        unknown = [n for n in names if n not in available and n not in ONNXRUNTIME_PROVIDERS]
        if unknown:
            from ep_core.onnxruntime.ortvalue import OrtRuntimeError

            raise OrtRuntimeError(f"Unknown Provider Type: {unknown[0]}")
        kept = [(n, o) for n, o in zip(names, options) if n in available]
        registry = get_registry()
        requested = {registry.handle(n).name: n for n, _ in kept}
        kept = [(n, _alias_options(n, o, registry.handle(n).name, sess_options)) for n, o in kept]
        engine_options = _for_ep_core(sess_options) or SessionOptions()  # onnxruntime's defaults, not ep-core's
        if self._disabled_optimizers:  # onnxruntime's keyword, added to its config entry (the caller's options kept)
            listed = engine_options.get_session_config_entry(DISABLED_KEY) or ""
            engine_options = engine_options.model_copy()
            engine_options.add_session_config_entry(DISABLED_KEY, ";".join([listed, *self._disabled_optimizers]))
        sess = _EpCoreSession(self._ep_core_source, engine_options, kept or None)
        meta = _Meta(sess, requested)
        self._sess, self._ep_core_meta = sess, meta
        self._sess_options = sess.options
        self._inputs_meta, self._outputs_meta = meta.inputs, meta.outputs
        self._overridable_initializers = meta.overridable
        self._model_meta = self.get_modelmeta()
        self._providers = self.get_providers()
        self._provider_options = self.get_provider_options()
        self._profiling_start_time_ns = sess.get_profiling_start_time_ns()

    def _engine(self) -> _EpCoreSession:
        if self._sess is None:
            raise InvalidArgument("the session is not built (its creation failed)")
        return self._sess

    def _reset_session(self, providers: Sequence[Any] | None, provider_options: Sequence[Any] | None) -> None:
        """Build the session again with other providers; the old engine is released only once the
        new one is built (a failure leaves the session as it was)."""
        saved = dict(self.__dict__)
        try:
            self._create_inference_session(providers, provider_options)
        except BaseException:
            self.__dict__.update(saved)
            raise
        old = saved.get("_sess")
        if old is not None:
            old.close()

    # -------------------------------------------------------------------- introspection
    def get_inputs(self) -> list[NodeArg]:
        return self._inputs_meta

    def get_outputs(self) -> list[NodeArg]:
        return self._outputs_meta

    def get_overridable_initializers(self) -> list[NodeArg]:
        return self._overridable_initializers

    def get_modelmeta(self) -> ModelMetadata:
        sess = self._engine()
        meta = sess.get_modelmeta()
        return meta if sess.model.HasField("model_version") else dataclasses.replace(meta, version=_NO_VERSION)

    def _name_of(self, ep_name: str) -> str:
        """The name the application selected an EP by; an EP ep-core added (the CPU fallback) by
        its first alias, as onnxruntime lists CPUExecutionProvider."""
        if ep_name in self._ep_core_meta.requested:
            return self._ep_core_meta.requested[ep_name]
        return next((a for a, ep in get_registry().aliases().items() if ep == ep_name), ep_name)

    def get_providers(self) -> list[str]:
        return [self._name_of(name) for name in self._engine().get_providers()]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {self._name_of(name): opts for name, opts in self._engine().get_provider_options().items()}

    def set_providers(
        self, providers: Sequence[Any] | None = None, provider_options: Sequence[Any] | None = None
    ) -> None:
        """Build the session again with these providers (onnxruntime's ``set_providers``)."""
        self._reset_session(providers, provider_options)

    def disable_fallback(self) -> None:
        self._enable_fallback = False

    def enable_fallback(self) -> None:
        self._enable_fallback = True

    def end_profiling(self) -> str:
        """Write the trace (onnxruntime's format) and return its path ('' when profiling is off or
        ended); its node events name each EP as the application selected it (CPUExecutionProvider)."""
        path = self._engine().end_profiling()
        renamed = {ep.name: self._name_of(ep.name) for ep in self._engine().execution_providers}
        if path and any(k != v for k, v in renamed.items()):
            with open(path, encoding="utf-8") as fh:
                events = json.load(fh)
            for e in events:
                args = e.get("args") or {}
                if args.get("provider") in renamed:
                    args["provider"] = renamed[args["provider"]]
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(events, fh)
        return path

    def get_profiling_start_time_ns(self) -> int:
        return self._engine().get_profiling_start_time_ns()

    def _placements(self, outputs: bool) -> dict[str, tuple[MemoryInfo, Any]]:
        """Value name -> (memory, EpDevice) of the step that first reads it (inputs) or writes it."""
        sess = self._engine()
        eps, found = sess.execution_providers, dict[str, tuple[MemoryInfo, Any]]()
        for u in sess.program.units:
            names, host = (u.outputs, u.host_outputs) if outputs else (u.inputs, u.host_inputs)
            for i, name in enumerate(names):
                ep = eps[u.ep_index]
                mem = HOST_MEMORY if i in host else ep.memory_info
                found.setdefault(name, (mem, ep.devices[0] if ep.devices else None))
        return found

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where the first step that reads each input wants it (an input fed elsewhere is copied)."""
        found = self._placements(False)
        return [OrtMemoryInfo.from_memory_info(found.get(a.name, (HOST_MEMORY, None))[0]) for a in self.get_inputs()]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        found = self._placements(True)
        return [OrtMemoryInfo.from_memory_info(found.get(a.name, (HOST_MEMORY, None))[0]) for a in self.get_outputs()]

    def get_input_epdevices(self) -> list[OrtEpDevice | None]:
        found = self._placements(False)
        devices = [found.get(a.name, (None, None))[1] for a in self.get_inputs()]
        return [OrtEpDevice(d) if d is not None else None for d in devices]

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """The steps each EP runs, with their nodes (recorded always: no config entry needed)."""
        groups: dict[tuple[str, str], list[OrtEpAssignedNode]] = {}
        for name, where in self._engine().get_node_assignment().items():
            key = (where["ep"], where["fused_node"] or name)
            groups.setdefault(key, []).append(OrtEpAssignedNode(name, where["domain"], where["op_type"]))
        return [OrtEpAssignedSubgraph(self._name_of(ep), tuple(nodes)) for (ep, _), nodes in groups.items()]

    # -------------------------------------------------------------------------------- run
    def _validate_input(self, feed_input_names: list[str]) -> None:
        missing = [name for name in self._ep_core_meta.required if name not in feed_input_names]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({feed_input_names}).")

    def _with_fallback(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except EpFail as err:
            if not self._enable_fallback:
                raise
            print(f"EP Error: {err!s} using {self.get_providers()}")
            print(f"Falling back to {self._fallback_providers} and retrying.")
            self.set_providers(self._fallback_providers)
            self.disable_fallback()
            return call()

    def _feed_value(self, name: str, value: Any) -> Any:
        """A fed value as the engine takes it, converted as onnxruntime converts it: lists to the
        input's type (a sequence input keeps its list, a map input its dict), NumPy ``str``/
        ``bytes`` arrays to the object arrays of strings a string tensor holds (any other element
        of an object array as its ``str()``, as onnxruntime converts it). (A one-element array
        for a rank-0 input is taken as the scalar by the engine's feed check.)"""
        meta = self._ep_core_meta
        if name in meta.containers and (isinstance(value, (np.ndarray, list, tuple, dict)) or value is None):
            return _container(name, meta.containers[name], value)
        if isinstance(value, np.ndarray):
            if name in meta.strings and value.dtype.kind in "US":
                value = value.astype(object) if value.dtype.kind == "U" else _decoded(value)
            elif name in meta.strings and value.dtype == object and not all(type(s) is str for s in value.flat):
                value = np.array([s if type(s) is str else str(s) for s in value.flat], object).reshape(value.shape)
            return value
        if value is None and name in meta.optionals:  # an optional input without a value
            return None
        if isinstance(value, (list, tuple)):
            try:
                array = np.asarray(value, dtype=meta.dtypes.get(name))
            except (ValueError, TypeError, OverflowError) as exc:  # ragged, or a value the type cannot hold
                from ep_core.onnxruntime.ortvalue import OrtRuntimeError

                raise OrtRuntimeError(
                    f"Could not create tensor from given input list for input {name!r}: {exc}"
                ) from None
            return self._feed_value(name, array)
        return _tensor_of(value)

    def _run_values(
        self, output_names: Sequence[str], feed: Mapping[str, Any], run_options: RunOptions | None
    ) -> list[Any]:
        """One run; inputs are arrays, lists (converted to the input's type, as onnxruntime does)
        or OrtValues (on any device); outputs come back on the host (arrays, or the lists and dicts
        of sequence and map outputs)."""
        sess = self._engine()
        arrays: dict[str, Any] = {}
        on_device: dict[str, Tensor] = {}
        for name, value in feed.items():
            v = self._feed_value(name, value)
            if not isinstance(v, Tensor):
                arrays[name] = v
            elif v.memory_info.is_host:
                arrays[name] = v.data
            else:
                on_device[name] = v
        if not on_device:
            return sess.run(output_names, arrays, run_options)
        binding = sess.io_binding()
        for name, t in [*((k, Tensor(v)) for k, v in arrays.items()), *on_device.items()]:
            binding.bind_input(name, t)
        wanted = list(dict.fromkeys(output_names))  # a name asked twice is bound once
        for name in wanted:
            binding.bind_output(name, "cpu")
        sess.run_with_iobinding(binding, run_options)
        results = binding.copy_outputs_to_cpu()
        return [results[wanted.index(n)] for n in output_names]

    def _output_names(self, output_names: Sequence[str] | None) -> list[str]:
        """The outputs asked for (all when None or empty); a bare string is a ``TypeError``, as in
        onnxruntime (its characters are not names)."""
        if isinstance(output_names, (str, bytes)):
            from ep_core.onnxruntime.ortvalue import OrtTypeError

            raise OrtTypeError(f"run(): output_names must be a list of names, got the string {output_names!r}")
        return list(output_names) if output_names else list(self._ep_core_meta.output_names)

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: RunOptions | None = None
    ) -> list[Any]:
        """Compute the outputs named (all when None or empty): NumPy arrays, and lists / dicts for
        sequence and map outputs, as onnxruntime returns them."""
        self._validate_input(list(input_feed))
        names = self._output_names(output_names)
        return self._with_fallback(lambda: self._run_values(names, input_feed, run_options))

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """Like ``run``, with OrtValues in and out."""
        from ep_core.onnxruntime.ortvalue import OrtValue

        self._validate_input(list(input_dict_ort_values))
        names = self._output_names(output_names)
        values = self._with_fallback(lambda: self._run_values(names, input_dict_ort_values, run_options))
        return [OrtValue(Tensor(v)) for v in values]

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Callable[[list[Any], Any, str], None],
        user_data: Any,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on another thread, then call ``callback(results, user_data, error)``: the outputs
        and '' , or [] and the error's message (onnxruntime's contract)."""
        self._validate_input(list(input_feed.keys()))
        names = self._output_names(output_names)

        def work() -> None:
            try:
                results = self._run_values(names, input_feed, run_options)
            except Exception as exc:  # noqa: BLE001 - onnxruntime hands the error to the callback
                callback([], user_data, getattr(exc, "message", str(exc)))
                return
            callback(results, user_data, "")

        threading.Thread(target=work, name="ep-core-run-async", daemon=True).start()

    def io_binding(self) -> IOBinding:
        from ep_core.onnxruntime.iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: RunOptions | None = None) -> None:
        """Run with an ``IOBinding`` made by this session's ``io_binding()``. A failure is raised
        as a ``RuntimeError`` too, as onnxruntime raises it, keeping ep-core's class."""
        from ep_core.onnxruntime.ortvalue import as_runtime_error

        sess = self._engine()
        inner = getattr(iobinding, "_iobinding", iobinding)
        if getattr(inner, "_built", None) is not sess._built:
            raise ValueError("IOBinding must be used with the session that created it.")
        try:
            sess.run_with_iobinding(inner, run_options)
        except EpCoreError as exc:
            raise as_runtime_error(exc) from exc

    def get_session_options(self) -> SessionOptions:
        """A copy of the options the session runs with (onnxruntime's ``SessionOptions`` class)."""
        options = self._engine().get_session_options()
        return options if isinstance(options, SessionOptions) else SessionOptions.model_validate(dict(options))

    def create_ortvalue_from_shape_and_type(
        self, shape: Sequence[int], element_type: Any, device_type: str, device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """A zero-filled OrtValue on the device (memory of the EP that owns it; ep-core keeps no
        per-session allocator, so the value may be used with any session)."""
        from ep_core.onnxruntime.ortvalue import OrtValue

        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id, vendor_id)

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Nothing to release: no ep-core EP captures graphs (onnxruntime does nothing too for an EP
        without graph capture)."""

    def set_ep_dynamic_options(self, options: dict[str, str]) -> None:
        refuse("InferenceSession.set_ep_dynamic_options")

    def get_tuning_results(self) -> list[dict[str, Any]]:
        """Kernel tuning results to save: none (ep-core's EPs keep no tunable-op results; their
        compiled state is saved as an EPContext model instead)."""
        return []

    def set_tuning_results(self, results: Sequence[Mapping[str, Any]], *, error_on_invalid: bool = False) -> None:
        """Loads nothing: ep-core has no tunable ops. Results (which can only come from onnxruntime)
        are refused unless the list is empty."""
        if results:
            raise NotImplementedByAnyEp(
                "tuning results are onnxruntime's TunableOp records (ROCm/CUDA kernels); ep-core's EPs have no "
                "tunable ops to apply them to"
            )


def _decoded(value: np.ndarray) -> np.ndarray:
    """A NumPy ``bytes`` array as the object array of ``str`` a string tensor holds (UTF-8)."""
    return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(value)


def _for_ep_core(options: _EpCoreOptions | None) -> _EpCoreOptions | None:
    """The options ep-core's engine reads: OrtEpDevices unwrapped to EpDevices, a selection
    delegate given OrtEpDevices as onnxruntime's are, ORT_PARALLEL made sequential (see
    ``_sequential``); unchanged when nothing needs that."""
    if options is None:
        return None
    devices = [(tuple(ep_device_of(d) for d in devs), opts) for devs, opts in options.provider_devices]
    delegate = options.ep_selection_delegate
    parallel = options.execution_mode == ExecutionMode.ORT_PARALLEL
    if devices == options.provider_devices and delegate is None and not parallel:
        return options
    copy = options.model_copy(deep=False)
    copy.provider_devices = devices
    if parallel:
        _sequential(copy)
    if delegate is not None:
        user = delegate

        def wrapped(eps: Sequence[Any], model_meta: Any, runtime_meta: Any, max_selections: int) -> list[Any]:
            picked = user([OrtEpDevice(d) for d in eps], model_meta, runtime_meta, max_selections)
            return [ep_device_of(d) for d in picked]

        delegate = wrapped
    copy.ep_selection_delegate = delegate
    return copy


def _sequential(options: _EpCoreOptions) -> None:
    """ORT_PARALLEL on ep-core, as onnxruntime treats it for an EP whose nodes its parallel executor
    cannot run (the DML EP): the session runs sequentially, saying so at warning severity. Nodes
    run one at a time either way, so the results are the same; inter_op_num_threads then sizes
    nothing, as in onnxruntime's sequential mode."""
    from ep_core.host.logs import SessionLog

    options.execution_mode = ExecutionMode.ORT_SEQUENTIAL
    log = SessionLog(options.logid, options.log_severity_level, 0)
    log.log(
        2,
        "Parallel execution mode is not supported by ep-core's executor (it runs one node at a time). So making "
        "the execution mode sequential for this session, as onnxruntime does for the DML Execution Provider.",
    )


def _container(name: str, type_str: str, value: Any) -> Any:
    """A list for a sequence input, a dict with keys of the map's key type for a map input (a
    str key for an int64 map matched no entry and gave zeros); anything else is refused naming
    the input, as onnxruntime refuses it."""
    from ep_core.onnxruntime.ortvalue import OrtRuntimeError

    if type_str.startswith("seq") and isinstance(value, (list, tuple)):
        return list(value)
    if type_str.startswith("map") and isinstance(value, dict):
        key = type_str[4 : type_str.index(",")]
        ok = (
            (lambda k: type(k) is str)
            if key == "string"
            else (lambda k: isinstance(k, (int, np.integer)) and not isinstance(k, bool))
        )
        bad = next((k for k in value if not ok(k)), None)
        if bad is None:
            return value
        # a key of the other map kind is a type mismatch (InvalidArgument); any other, onnxruntime cannot convert
        error = InvalidArgument if isinstance(bad, (str, int, np.integer)) else OrtRuntimeError
        raise error(f"input {name!r} ({type_str}): key {bad!r} is a {type(bad).__name__}, not a {key}")
    raise OrtRuntimeError(
        f"input {name!r} is {type_str}: it takes a {'list' if type_str.startswith('seq') else 'dict'}, got {type(value).__name__}"
    )


def _tensor_of(value: Any) -> Tensor:
    from ep_core.onnxruntime.ortvalue import OrtRuntimeError, OrtValue

    if isinstance(value, OrtValue):
        return value._tensor
    if isinstance(value, Tensor):
        return value
    raise OrtRuntimeError(
        f"Unable to handle object of type {type(value)}: an input must be a numpy.ndarray, a list or an OrtValue"
    )

"""Step 1 of a session: path | bytes | ModelProto -> a checked ModelProto with its external data
resolved and shapes inferred. Models are untrusted: loading is bounded (no data propagation,
external data checked against its file, data past protobuf's limit left in its file), and a model
onnxruntime refuses for its structure or types is refused, naming the node: onnx's checker, strict
shape inference, then what both miss (tensor sizes, bad UTF-8, unknown opsets, arguments)."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.host.model_files import all_tensors, resolve_external, stored_bytes, tensor_bits
from ep_core.sdk.errors import (
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    NoSuchFile,
    NotImplementedByAnyEp,
)
from ep_core.sdk.graph import GraphView, nested_graphs, opset_map

if TYPE_CHECKING:
    from ep_core.runtime.options import SessionOptions

EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"
_EDITS = "initializers external_initializer_files free_dimension_overrides free_dimension_overrides_by_denotation"
BUDGET_FLOOR = 64 << 20  # what creation may materialise (folds, sparse densifying) beyond 4x the stored tensors


def load_model(model: Any, external_folder: str | None, so: SessionOptions | None = None) -> tuple[Any, Path | None]:
    """The model, edited as the session options ``so`` say (``_apply_options``), and the path it
    came from (None for bytes or a ModelProto)."""
    import onnx
    from onnx import external_data_helper

    path: Path | None = None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.is_dir():  # onnxruntime fails to parse it: INVALID_PROTOBUF
            raise InvalidProtobuf(f"{str(path)!r} is a directory, not an ONNX model file")
        if not path.is_file():
            raise NoSuchFile(f"model file {str(path)!r} does not exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as exc:
            raise _unparsed(str(path), path, exc) from exc
        base: str | None = str(path.parent)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise _unparsed("the model bytes", bytes(model[:8]), exc) from exc
        base = external_folder
    elif isinstance(model, onnx.ModelProto):
        proto = model
        base = external_folder
    else:
        raise InvalidArgument(f"a model is a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    if not proto.HasField("graph"):  # an empty file or bytes parse as an empty ModelProto
        raise InvalidArgument(f"{path or 'the model'}: no graph was found in the protobuf (an empty model?)")
    _check_strings(proto, "the model")
    if so is not None and any(getattr(so, k) for k in _EDITS.split()):  # a ModelProto given is not changed
        proto = onnx.ModelProto.FromString(proto.SerializeToString()) if proto is model else proto
        _apply_options(proto, so)
    external = [t for t in all_tensors(proto) if external_data_helper.uses_external_data(t)]
    if external:
        if base is None:
            raise InvalidArgument(
                f"initializer {external[0].name!r} is stored in external data, but the model was given as "
                f"bytes: set the session config entry {EXTERNAL_FOLDER_KEY!r} to the folder holding it"
            )
        if proto is model:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
        resolve_external(proto, base, str(path) if path is not None else None)
    return proto, path


def _unparsed(what: str, source: Path | bytes, exc: Exception) -> Exception:
    """The error for a model protobuf cannot parse; onnxruntime's own ORT format ("ORTM" at byte 4,
    a flatbuffer) is named as such: ep-core reads ONNX models only."""
    if isinstance(source, Path):
        with source.open("rb") as fh:
            source = fh.read(8)
    if source[4:8] == b"ORTM":
        return NotImplementedByAnyEp(
            f"{what}: an ORT-format model (onnxruntime's flatbuffer); ep-core reads .onnx models"
        )
    return InvalidProtobuf(f"{what} is not a valid ONNX model: {exc}")


def check_options(options: SessionOptions | None) -> None:
    """Stop at the caller's load cancellation flag (set from any thread); refuse what ep-core lacks."""
    if options is not None and options.load_cancelled:
        raise ModelLoadCanceled("session creation canceled by SessionOptions.set_load_cancellation_flag(True)")
    if options is not None and (options.execution_mode or options.execution_order):
        raise InvalidArgument(
            f"execution_mode {options.execution_mode.name} / execution_order {options.execution_order.name}: ep-core "
            "runs nodes one at a time in topological order; set ORT_SEQUENTIAL and DEFAULT"
        )


def _apply_options(proto: Any, options: SessionOptions) -> None:
    """As onnxruntime at load: external data files given in memory, the caller's initializers
    (the model's dtype and shape), then graph inputs' free dims, by dim_param or denotation."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    files, values = options.external_initializer_files, options.initializers
    for t in (t for t in all_tensors(proto) if t.data_location == TensorProto.EXTERNAL):
        info = {e.key: e.value for e in t.external_data}
        if (buf := files.get(info.get("location", ""))) is not None:
            at, n = int(info.get("offset", "0")), stored_bytes(t, raw=True)
            if not 0 <= at <= len(buf) - n or int(info.get("length", n)) != n:
                raise InvalidArgument(
                    f"tensor {t.name!r}: {n} bytes at offset {at} overrun in-memory file {info['location']!r}"
                )
            t.raw_data, t.data_location = buf[at : at + n].tobytes(), TensorProto.DEFAULT
            del t.external_data[:]
    done = set()
    for t in (t for g in nested_graphs(proto.graph) for t in g.initializer if t.name in values):
        arr = np.asarray(v.numpy() if hasattr(v := values[t.name], "numpy") else v)
        want = helper.tensor_dtype_to_np_dtype(t.data_type) if tensor_bits(t.data_type) else None
        if arr.dtype != want or arr.shape != tuple(t.dims):
            raise InvalidArgument(
                f"initializer {t.name!r} given is {arr.dtype}{list(arr.shape)}, not {want}{list(t.dims)}"
            )
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
        done.add(t.name)
    if set(values) - done:
        raise InvalidArgument(f"session options give initializer(s) {sorted(set(values) - done)} the model lacks")
    by_denotation = {k.lower(): v for k, v in options.free_dimension_overrides_by_denotation.items()}
    for v in proto.graph.input:
        for axis, d in enumerate(v.type.tensor_type.shape.dim):
            pair = (options.free_dimension_overrides.get(d.dim_param), by_denotation.get(d.denotation.lower()))
            found, fixed = {x for x in pair if x is not None}, {d.dim_value} if d.HasField("dim_value") else set()
            if found and (len(found | fixed) > 1 or min(found) < 0):
                raise InvalidArgument(
                    f"input {v.name!r} axis {axis}: free dimension override(s) {sorted(found)} are negative, "
                    f"disagree with each other or with its fixed size {sorted(fixed)}"
                )
            if found:
                d.dim_value = found.pop()


def check_and_infer(proto: Any) -> Any:
    """Validate the model and add inferred value types (kernels match on them)."""
    import onnx

    from ep_core.optimizer import arguments, functions, onnxruntime_sizes, sparse, spelling, toposort

    proto = toposort.sorted_topologically(proto)  # as onnxruntime sorts graphs; onnx's checker needs it
    proto = spelling.as_onnxruntime_reads(proto)
    _check_tensors(proto)
    proto = sparse.dense_initializers(proto)  # as onnxruntime loads them
    _check_opsets(proto)
    proto, moved, added = _lazy_initializers_as_inputs(proto)
    try:
        onnx.checker.check_model(spelling.for_the_checker(proto), full_check=False)
    except Exception as exc:  # ValidationError, or a proto its C++ side cannot parse
        raise InvalidGraph(f"the model is invalid: {' '.join(str(exc).split())}") from exc  # its context names the node
    proto = functions.inline_functions(proto)  # model-local functions run as their bodies, as in onnxruntime
    inferred = onnxruntime_sizes.aligned(_infer(proto))  # pools and ConvTranspose sized as onnxruntime's kernels
    if moved:  # back from graph inputs to initializers, in the model kept
        kept = [v for v in inferred.graph.input if v.name not in added]
        del inferred.graph.input[:]
        inferred.graph.input.extend(kept)
        inferred.graph.initializer.extend(moved)
    arguments.check_arguments(GraphView(inferred.graph, opset_map(inferred)))
    return inferred


def _infer(proto: Any) -> Any:
    """Strict shape inference without data propagation (it turns every 1-D integer tensor into a
    shape of as many dims: a bomb). Errors onnxruntime tolerates pass (``_LENIENT``). Main-graph
    outputs and value_info lose their declared shapes (not dtypes) first: the author's word (torch's
    exporter leaves its example's dims there), which onnxruntime does not check, is no proof to hold
    an EP to (``contract``); the optimizer puts back those inference cannot find (``shape_hints``)."""
    import onnx

    data = _undeclared(proto).SerializeToString()  # once for both passes; the copy goes before inference
    try:
        return onnx.shape_inference.infer_shapes(data, check_type=True, strict_mode=True, data_prop=False)
    except Exception as exc:  # InferenceError, or a checker error for a type the model misuses
        problems = _problems(str(exc))
        if problems:
            if "node name:" not in problems[0]:  # onnx names only named nodes: name them as GraphView does
                problems = _problems(_named_strict_error(onnx.load_from_string(data))) or problems
            raise InvalidGraph(
                f"the model is invalid: {problems[0]} (onnx strict shape inference: "
                "onnx.shape_inference.infer_shapes(model, strict_mode=True) shows it)"
            ) from exc
    try:
        return onnx.shape_inference.infer_shapes(data, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - only errors onnxruntime tolerates are left: run without shapes
        return onnx.load_from_string(data)


def _undeclared(proto: Any) -> Any:
    """``proto``, or a copy whose main-graph outputs and value_info (not initializers') have no shape."""
    inits = {t.name for t in proto.graph.initializer}
    hinted = [v for v in (*proto.graph.output, *proto.graph.value_info) if v.name not in inits]
    if not any(v.type.tensor_type.HasField("shape") for v in hinted):
        return proto
    (copy := type(proto)()).CopyFrom(proto)
    for v in (*copy.graph.output, *(v for v in copy.graph.value_info if v.name not in inits)):
        if v.type.HasField("tensor_type"):
            v.type.tensor_type.ClearField("shape")
    return copy


_LENIENT = (
    "existing shape differ",  # a declared shape the inferred one contradicts: onnxruntime merges them
    "One and only one of the attributes",  # Constant: onnxruntime takes one (onnx misreads function bodies too)
)


def _problems(text: str) -> list[str]:
    """The errors of an onnx inference error text that onnxruntime would refuse too."""
    lines = [line.strip() for line in text.replace("Inference error(s): ", "", 1).splitlines()]
    return [line for line in lines if line and not any(p in line for p in _LENIENT)]


def _named_strict_error(proto: Any) -> str:
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for g in nested_graphs(copy.graph):
        for i, n in enumerate(g.node):
            n.name = n.name or f"{n.op_type}_{i}"
    try:
        onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True, data_prop=False)
    except Exception as exc:  # noqa: BLE001 - its text is all that is wanted
        return str(exc)
    return ""


# ------------------------------------------------------------------------------- what onnx misses
@functools.lru_cache(maxsize=64)
def _string_fields(descriptor: Any) -> tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]:
    strings = tuple((f.name, f.is_repeated) for f in descriptor.fields if f.type == f.TYPE_STRING)
    messages = tuple((f.name, f.is_repeated) for f in descriptor.fields if f.type == f.TYPE_MESSAGE)
    return strings, messages


def _check_strings(msg: Any, where: str) -> None:
    """Protobuf strings must be UTF-8; the Python bindings hand out bytes for those that are not
    (and onnxruntime's Python API fails on them)."""
    strings, messages = _string_fields(msg.DESCRIPTOR)
    for name, repeated in strings:
        for s in getattr(msg, name) if repeated else (getattr(msg, name),):
            if isinstance(s, bytes):
                raise InvalidGraph(f"{where}: field {name!r} is not valid UTF-8 ({s[:32]!r}); protobuf strings must be")
    for name, repeated in messages:
        children = getattr(msg, name) if repeated else ([getattr(msg, name)] if msg.HasField(name) else [])
        for i, child in enumerate(children):
            label = getattr(child, "name", "")
            _check_strings(child, f"{where} / {name}[{i}]{f' {label!r}' if isinstance(label, str) and label else ''}")


def _check_tensors(proto: Any) -> None:
    """Tensor types and data lengths against dims (onnx checks only that data is not too short),
    value types, and sparse tensors within what creation may materialise."""
    from onnx import TensorProto, helper

    known = set(TensorProto.DataType.values()) - {0}
    budget = materialise_budget(proto.graph)
    for v in proto.graph.input:
        if v.type.WhichOneof("value") is None:
            raise InvalidGraph(f"model input {v.name!r} has no type (tensor, sequence...)")
    for g in nested_graphs(proto.graph):
        for n in g.node:  # what onnx's inference crashes on: axes past int32, Split outputs past num_outputs
            for a in n.attribute:
                if a.name in ("axis", "axes") and any(not -(2**31) <= v < 2**31 for v in [a.i, *a.ints]):
                    raise InvalidGraph(f"node {n.name or n.op_type!r}: attribute {a.name!r} is beyond any rank")
                split = a.name == "num_outputs" and n.op_type == "Split" and n.domain in ("", "ai.onnx")
                if split and (a.i != len(n.output) or len(n.input) > 1 and n.input[1]):
                    raise InvalidGraph(
                        f"node {n.name or n.op_type!r}: num_outputs {a.i} with a split input or other outputs"
                    )
        for v in list(g.input) + list(g.output) + list(g.value_info):
            t = v.type
            while t.WhichOneof("value") in ("sequence_type", "optional_type"):  # onnxruntime refuses an empty element
                if (t := getattr(t, str(t.WhichOneof("value"))).elem_type).WhichOneof("value") is None:
                    raise InvalidGraph(f"value {v.name!r} in graph {g.name!r} has a sequence or optional of no type")
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type not in known | {0}:  # 0: unknown
                raise InvalidGraph(
                    f"value {v.name!r} has element type {v.type.tensor_type.elem_type}, not an ONNX type"
                )
        attrs = [(a, f"attribute {a.name!r} of node {n.name or n.op_type!r}") for n in g.node for a in n.attribute]
        tensors = [(t, f"initializer {t.name!r}") for t in g.initializer]
        tensors += [(t, w) for a, w in attrs for t in ([a.t] if a.HasField("t") else []) + list(a.tensors)]
        for t, where in tensors:
            if t.data_type not in known or any(d < 0 for d in t.dims):
                raise InvalidGraph(f"{where}: data type {t.data_type} or dims {list(t.dims)} is not valid")
            if t.data_location == TensorProto.EXTERNAL:
                continue  # checked against its file by load_model
            raw = t.HasField("raw_data")  # len() below copies the data once: in proportion to the model
            have = len(t.raw_data) if raw else len(getattr(t, helper.tensor_dtype_to_field(t.data_type)))
            if have != stored_bytes(t, raw):
                unit = "bytes of raw_data" if raw else f"entries of {helper.tensor_dtype_to_field(t.data_type)}"
                raise InvalidGraph(f"{where}: {have} {unit}, but its dims {list(t.dims)} need {stored_bytes(t, raw)}")
        sparse = [(s, f"sparse initializer {s.values.name!r}") for s in g.sparse_initializer]
        sparse += [(s, w) for a, w in attrs for s in ([a.sparse_tensor] if a.HasField("sparse_tensor") else [])]
        for s, where in sparse + [(s, w) for a, w in attrs for s in a.sparse_tensors]:
            dense = math.prod(s.dims) * tensor_bits(s.values.data_type) // 8
            if dense > budget:
                raise InvalidGraph(
                    f"{where}: densifying it takes {dense} bytes, more than the {budget} bytes session creation "
                    "may materialise for this model"
                )


def materialise_budget(graph: Any) -> int:
    """Bytes session creation may materialise (constant folds, densified sparse tensors): 4x what
    the model stores in tensors (dequantizing int8 weights to float32), plus BUDGET_FLOOR (room for
    the transient copy of a Cast -> Mul dequantization, freed when the Mul folds)."""
    stored = sum(max(0, int(math.prod(t.dims))) * tensor_bits(t.data_type) // 8 for t in graph.initializer)
    return BUDGET_FLOOR + 4 * stored


def _check_opsets(proto: Any) -> None:
    from onnx import helper

    release = helper.VERSION_TABLE[-1]  # the onnx installed: (version, IR, ai.onnx, ai.onnx.ml, training)
    newest = dict(zip(("", "ai.onnx.ml", "ai.onnx.preview.training"), release[2:]))
    newest["ai.onnx"] = newest[""]
    for o in proto.opset_import:
        if o.version > newest.get(o.domain, o.version):
            raise InvalidGraph(
                f"the model imports opset {o.version} of domain {o.domain or 'ai.onnx'!r}; the onnx installed "
                f"defines up to {newest[o.domain]}: no schema exists to check or run its nodes"
            )


def _lazy_initializers_as_inputs(proto: Any) -> tuple[Any, list[Any], set[str]]:
    """Main-graph initializers whose data stayed in its file become graph inputs of their type and
    shape while onnx checks and infers (it would look for the file beside the working folder), and
    so do those a feed may replace (graph inputs from IR 4: not constants, as for onnxruntime);
    returns a copy of ``proto`` without them, them, and the names made inputs. Before IR 4 every
    initializer is listed as an input and none may be fed: the copy takes IR 4's form."""
    from onnx import TensorProto, helper

    inputs = {v.name for v in proto.graph.input}
    if proto.ir_version < 4 or any(
        t.name in inputs or t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer
    ):
        proto = type(proto).FromString(proto.SerializeToString())  # the model given stays as it was
    if proto.ir_version < 4:
        kept_inputs = [v for v in proto.graph.input if v.name not in {t.name for t in proto.graph.initializer}]
        del proto.graph.input[:]
        proto.graph.input.extend(kept_inputs)
        proto.ir_version, inputs = 4, {v.name for v in kept_inputs}
    moved = [t for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL or t.name in inputs]
    added = {t.name for t in moved} - inputs
    if moved:
        kept = [t for t in proto.graph.initializer if t.data_location != TensorProto.EXTERNAL and t.name not in inputs]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(kept)
        proto.graph.input.extend(
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in moved if t.name in added
        )
    return proto, moved, added

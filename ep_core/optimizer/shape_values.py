"""Shapes of Reshapes whose target is computed from other shapes.

tf2onnx writes ``Shape -> Cast -> Gather -> Concat -> Cast -> Reshape`` around every Dense layer
of a dynamic-batch model. onnx's shape inference, even with its data propagation, does not carry a
shape's value through Cast, so the Reshape's output has no rank and neither has anything after
it: the Numba EP then cannot compile a single element-wise op of magika 0.5's three Dense+Gelu
blocks (they run as delegated NumPy steps, 2x the reference EP's time). onnxruntime infers such
shapes symbolically at run time; ep-core's EPs plan at session creation, so the optimizer tracks
the values of small integer tensors made from shapes here (dims: numbers, or the symbols the
inferred shapes hold) and writes the Reshape's output shape, and inference carries it on.

What is tracked, on 1-D or scalar int32/int64 tensors: Shape (with start/end), Cast between
integer types, Identity, Gather on axis 0 and Slice on axis 0 (constant indices and bounds, step
1), Concat, Unsqueeze/Squeeze of a scalar or one-element vector, and constants of at most
``MAX_DIMS`` elements. A Reshape's 0 copies the input's dim (allowzero 0); its -1 is the input's
element count over the rest when every dim is a number, else an unknown dim: the rank is what the
EPs need. Anything else leaves the value unknown, and the Reshape as onnx left it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_DIMS = 8
MAX_ROUNDS = 8  # a chain of such Reshapes resolves one deeper a round
Dim = int | str | None  # a number, a symbol, or unknown
_INT_TYPES = (6, 7)  # TensorProto.INT32, INT64
_INTS = {6, 7, 12, 13}  # int32, int64, uint32, uint64: a Cast to these keeps a dim's value


def with_computed_reshapes(model: Any) -> Any:
    """``model`` with its Reshapes of computed targets shaped, inference carrying each round's on;
    the very object when there is none to shape. The rounds run on a copy without the main
    graph's weights (each a typed graph input instead: inference reads only their types and
    shapes), so a large model is copied once, at the end, not serialised again every round."""
    import onnx

    from ep_core.sdk.graph import nested_graphs

    try:
        if not any([resolve_reshapes(g, write=False) for g in nested_graphs(model.graph)]):
            return model
    except Exception:  # noqa: BLE001 - an odd tensor this module cannot read: the shapes stay onnx's
        return model
    work, resolved = _without_weights(model), False
    for _ in range(MAX_ROUNDS):
        if not any([resolve_reshapes(g) for g in nested_graphs(work.graph)]):
            break
        try:
            work = onnx.shape_inference.infer_shapes(work, check_type=False, strict_mode=False, data_prop=False)
        except Exception:  # noqa: BLE001 - keep what the rounds before gave
            break
        resolved = True
    if not resolved:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for mine, theirs in zip(nested_graphs(out.graph), nested_graphs(work.graph), strict=True):
        del mine.value_info[:]
        mine.value_info.extend(theirs.value_info)
        for value, inferred in zip(mine.output, theirs.output, strict=True):
            value.type.CopyFrom(inferred.type)  # what inference gives every graph's outputs
    return out


def _without_weights(model: Any) -> Any:
    """A copy of ``model`` whose main-graph initializers of more than ``MAX_DIMS`` elements are
    typed graph inputs instead (the small ones stay: a Reshape's target may be one). Copied field
    by field: ``CopyFrom`` would copy the weights too."""
    import onnx
    from onnx import helper

    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, skip="graph")
    _copy_fields(model.graph, skeleton.graph, skip="initializer")
    inputs = {v.name for v in skeleton.graph.input}
    for init in model.graph.initializer:
        if _count(init.dims) <= MAX_DIMS:
            skeleton.graph.initializer.append(init)
        elif init.name not in inputs:
            skeleton.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return skeleton


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def resolve_reshapes(graph: Any, write: bool = True) -> bool:
    """Give every Reshape of ``graph`` (a GraphProto, changed in place unless ``write`` is false)
    whose output has no shape the one its computed target describes. True when any was (or, not
    writing, would be) written."""
    from onnx import numpy_helper

    shaped = {v.name for v in [*graph.input, *graph.value_info, *graph.output] if v.type.tensor_type.HasField("shape")}
    if all(n.op_type != "Reshape" or not n.output or n.output[0] in shaped for n in graph.node):
        return False  # every Reshape has its shape: nothing to track
    shapes = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
    outputs = {v.name for v in graph.output}
    values: dict[str, tuple[list[Dim], bool]] = {}  # name -> (dims, is a scalar)
    for init in graph.initializer:
        if init.data_location == 1:  # TensorProto.EXTERNAL: its bytes are in a file this pass does not read
            continue
        if init.data_type in _INT_TYPES and len(init.dims) <= 1 and _count(init.dims) <= MAX_DIMS:
            arr = numpy_helper.to_array(init)
            values[init.name] = ([int(v) for v in arr.reshape(-1)], arr.ndim == 0)
    wrote = False
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Reshape" and len(node.input) >= 2 and node.output:
            dims = _reshaped(node, values.get(node.input[1]), shapes)
            if dims is not None and node.output[0] not in outputs:  # a graph output keeps its declared type
                if not write:
                    return True
                wrote |= _write(graph, node, dims, shapes)
            continue
        got = _value(node, values, shapes)
        if got is not None and node.output:
            values[node.output[0]] = got
    return wrote


def _count(dims: Sequence[int]) -> int:
    return int(np.prod(dims)) if dims else 1


def _dims(tp: Any) -> list[Dim] | None:
    """A value's inferred dims (None for an unknown rank), read as the sdk reads them."""
    from ep_core.sdk.graph import value_info_from_type

    shape = None if tp is None else value_info_from_type("", tp).shape
    return None if shape is None else list(shape)


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _value(node: Any, values: dict[str, tuple[list[Dim], bool]], shapes: dict[str, Any]) -> Any:
    """(dims, is a scalar) of ``node``'s first output when this module can track it, else None."""
    op, ins = node.op_type, [values.get(i) for i in node.input]
    if op == "Shape":
        dims = _dims(shapes.get(node.input[0]))
        if dims is None:
            return None
        start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)
        return dims[start : None if end is None else int(end)], False
    if op == "Constant":
        from onnx import numpy_helper

        t = _attr(node, "value", None)
        if t is not None and t.data_type in _INT_TYPES and len(t.dims) <= 1 and _count(t.dims) <= MAX_DIMS:
            arr = numpy_helper.to_array(t)
            return [int(v) for v in arr.reshape(-1)], arr.ndim == 0
        ints = _attr(node, "value_ints", None)
        return (list(ints), False) if ints is not None and len(ints) <= MAX_DIMS else None
    if not ins or ins[0] is None:
        return None
    dims, scalar = ins[0]
    if op == "Identity" or (op == "Cast" and _attr(node, "to", 0) in _INTS):
        return ins[0]
    if op == "Gather" and int(_attr(node, "axis", 0)) == 0 and not scalar and len(ins) > 1 and ins[1] is not None:
        idx, idx_scalar = ins[1]
        if all(isinstance(i, int) and -len(dims) <= i < len(dims) for i in idx):
            return [dims[i] for i in idx], idx_scalar  # type: ignore[index]
        return None
    if op == "Concat" and all(v is not None and not v[1] for v in ins):
        return [d for v in ins for d in v[0]], False  # type: ignore[index]
    if op == "Unsqueeze" and scalar:
        return dims, False
    if op == "Squeeze" and not scalar and len(dims) == 1:
        return dims, True
    if op == "Slice" and not scalar and len(ins) >= 3 and ins[1] is not None and ins[2] is not None:
        axes = values.get(node.input[3]) if len(node.input) > 3 and node.input[3] else ([0], False)
        steps = values.get(node.input[4]) if len(node.input) > 4 and node.input[4] else ([1], False)
        if axes is None or steps is None or axes[0] not in ([0], [-1]) or steps[0] != [1]:
            return None
        bounds = [b for b in ins[1][0] + ins[2][0] if isinstance(b, int)]
        if len(bounds) == 2 == len(ins[1][0]) + len(ins[2][0]):
            return dims[bounds[0] : bounds[1]], False
    return None


def _reshaped(node: Any, target: Any, shapes: dict[str, Any]) -> list[Dim] | None:
    """The Reshape's output dims from its target's tracked value, when onnx inferred none."""
    out = shapes.get(node.output[0])
    if target is None or target[1] or (out is not None and out.tensor_type.HasField("shape")):
        return None
    dims: list[Dim] = list(target[0])
    source = _dims(shapes.get(node.input[0]))
    if int(_attr(node, "allowzero", 0)) == 0:
        for i, d in enumerate(dims):
            if d == 0:
                if source is None or i >= len(source):
                    return None
                dims[i] = source[i]
    if sum(d == -1 for d in dims) > 1 or any(isinstance(d, int) and d < -1 for d in dims):
        return None
    if -1 in dims:
        known = [d for d in dims if d != -1]
        whole = source is not None and all(isinstance(d, int) for d in source + known)
        n_known, n_all = (_count(known), _count(source)) if whole else (0, 0)  # type: ignore[arg-type]
        dims[dims.index(-1)] = n_all // n_known if n_known and n_all % n_known == 0 else None
    return dims


def _write(graph: Any, node: Any, dims: list[Dim], shapes: dict[str, Any]) -> bool:
    """Set the output's shape to ``dims`` in its value_info (added, typed as the input, if absent)."""
    tp = shapes.get(node.output[0])
    if tp is None:
        source = shapes.get(node.input[0])
        if source is None or not source.tensor_type.elem_type:
            return False
        vi = graph.value_info.add()
        vi.name = node.output[0]
        vi.type.tensor_type.elem_type = source.tensor_type.elem_type
        tp = shapes[node.output[0]] = vi.type
    out = tp.tensor_type
    out.shape.SetInParent()  # a rank-0 target has no dims to add
    for d in dims:
        dim = out.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return True

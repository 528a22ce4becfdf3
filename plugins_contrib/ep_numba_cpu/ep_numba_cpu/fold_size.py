"""How many bytes a step folded at runner build time would make, known before it runs.

A runner folds steps whose inputs are all weights (``runtime.GraphRunner._fold``) within a budget.
The record comes from a model or a context file, so a 100-byte ConstantOfShape, Expand, Tile or a
broadcast of (N, 1) by (1, N) could ask for gigabytes: the size is bounded from the input shapes
(ops that never make more elements than they read, broadcasts, products) or inferred by onnx's
shape inference with data propagation on the one-node graph; a step whose size neither tells is
not folded, it runs with the graph. Elements are counted at their dtype's size (declared by the
record for bounded ops, inferred otherwise; at most 8 bytes, the widest a context stores)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ep_numba_cpu import delegate

ITEM_BYTES = 8
# ops whose outputs together hold at most as many elements as their inputs
NOT_MORE = frozenset(
    """Identity Cast CastLike Reshape Squeeze Unsqueeze Flatten Transpose Shape Size Slice Concat Split
    Neg Abs Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Floor Ceil Round Sign Not Erf Softmax LogSoftmax
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear Clip LeakyRelu HardSigmoid HardSwish Softplus
    Elu Selu Celu Gelu Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh IsNaN IsInf GatherElements
    ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceSumSquare ArgMax ArgMin""".split()
)
# elementwise ops with broadcasting: the broadcast of the inputs' shapes
BROADCAST = frozenset(
    """Add Sub Mul Div Pow Max Min Sum Mean Where And Or Xor Equal Less Greater LessOrEqual GreaterOrEqual
    Mod BitShift PRelu""".split()
)
INLINE_MAX = 1024  # constant inputs up to this many elements reach shape inference as values


def fold_bytes(kind: str, step: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> int | None:
    """An upper bound of the bytes step ``step`` of ``kind`` makes from ``weights``, or None when
    it cannot be known before running it (then it is not folded)."""
    shapes = [np.shape(weights[n]) for n in step["inputs"] if n]
    if _makes_strings(kind, step, weights):  # their bytes are data, not shape: never folded
        return None
    try:
        if kind == "kernel":
            per = sum(_item_bytes(o.get("dtype")) for o in step["outputs"])
            return per * _numel(np.broadcast_shapes(*shapes))
        if kind == "matmul":
            return _numel(_matmul_shape(shapes[0], shapes[1])) * weights[step["inputs"][0]].itemsize
        if kind != "node":
            return None  # a convolution of constants: rare, its padding could make it any size
        node = step["node"]
        per = max([_item_bytes(t[0]) for t in node["out_types"]], default=ITEM_BYTES)
        if node["domain"] in ("", "ai.onnx") and node["op"] in NOT_MORE:
            return sum(_numel(s) for s in shapes) * per
        if node["domain"] in ("", "ai.onnx") and node["op"] in BROADCAST:
            return _numel(np.broadcast_shapes(*shapes)) * per
    except ValueError:  # shapes that do not broadcast or multiply: running it would fail anyway
        return None
    return _inferred(step["node"], weights)


def _makes_strings(kind: str, step: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> bool:
    """Whether the step may make strings, whose bytes are their lengths, which no shape bounds
    (StringConcat(x, x) doubles them): it reads one, or declares one, or casts to one (the record's
    declared types are not trusted alone)."""
    if any(np.asarray(weights[n]).dtype.kind in "OUS" for n in step["inputs"] if n):
        return True
    if kind == "kernel":
        return any(_is_string(o.get("dtype")) for o in step["outputs"])
    node = step.get("node") or {}
    attrs = node.get("attrs") or {}  # name -> (kind, value); a tensor attribute's value names a weight
    if any(k == "tensor" and np.asarray(weights.get(v, 0)).dtype.kind in "OUS" for k, v in attrs.values()):
        return True
    return tuple(attrs.get("to") or ()) == ("int", 8) or any(_is_string(t[0]) for t in node.get("out_types", ()))


def _is_string(dtype: Any) -> bool:
    try:
        return dtype is not None and np.dtype(dtype).kind in "OUS"
    except TypeError:
        return True


def _item_bytes(dtype: Any) -> int:
    """The declared dtype's item size (a record's declared types can at most shift the count by
    the 8x between dtypes; its shapes are never trusted), 8 when none is declared."""
    try:
        return min(ITEM_BYTES, np.dtype(dtype).itemsize) if dtype else ITEM_BYTES
    except TypeError:
        return ITEM_BYTES


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    return (*np.broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])


def _inferred(node: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> int | None:
    """The outputs' bytes from onnx's shape inference (data propagation: a ConstantOfShape's,
    Expand's or Tile's shape input is read), or None unless every output's shape is static."""
    from onnx import TypeProto, helper, shape_inference

    graph, opsets = delegate.node_graph(node, weights, inline_max=INLINE_MAX)
    del graph.output[:]  # the record's declared output types are not evidence
    graph.output.extend(helper.make_value_info(o, TypeProto()) for o in node["outputs"] if o)
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items() if d != "ai.onnx"]
    try:
        model = shape_inference.infer_shapes(
            helper.make_model(graph, opset_imports=imports), strict_mode=True, data_prop=True
        )
    except Exception:
        return None
    total = 0
    for out in model.graph.output:
        t = out.type.tensor_type
        if not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
            return None
        total += _numel(tuple(d.dim_value for d in t.shape.dim)) * _item_bytes(_np_dtype(t.elem_type))
    return total


def _np_dtype(elem_type: int) -> Any:
    """The inferred element type as a NumPy dtype, None when it has none (then 8 bytes count)."""
    from onnx import helper

    try:
        return helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, TypeError, ValueError):
        return None

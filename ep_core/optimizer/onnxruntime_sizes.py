"""Output sizes of the nodes onnxruntime sizes unlike the ONNX spec, in the shapes inference gives
the EPs: a pool under ceil_mode whose last window would start in the padding, a pool with SAME
padding and dilations (onnxruntime pads from the undilated kernel), a SAME ConvTranspose with
output_padding (onnxruntime's output is input * stride), a PRelu whose slope widens its input
(onnxruntime broadcasts both ways), NonZero of a scalar ([1, n] in onnxruntime, [0, n] in onnx). The kernels make onnxruntime's sizes
(``sdk.geometry``); with onnx's size in a static shape the EP contract refused the session.

Such a node is inferred in an explicit form onnx sizes the same way (pads written out, ceil_mode
off; an output_shape), in a copy only read for its shapes, or its output's shape is given to
inference, which keeps a shape it is given."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ep_core.sdk.geometry import pool_length, same_pads
from ep_core.sdk.graph import nested_graphs

POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
MAX_ROUNDS = 6  # inferences at most: a chain of such nodes settles one node a round


def aligned(model: Any) -> Any:
    """``model`` (inferred), or a copy inferred again with such nodes in their explicit forms and
    the nodes themselves kept."""
    out = inferred_afresh(model, force=False)
    if out is None:
        return model
    for g, original in zip(nested_graphs(out.graph), nested_graphs(model.graph), strict=True):
        del g.node[:]
        g.node.extend(original.node)
    return out


def inferred_afresh(model: Any, edit: Callable[[Any], None] | None = None, force: bool = True) -> Any:
    """``model`` inferred anew (value_info and output shapes cleared), such nodes in their explicit
    forms (again until the sizes settle: one node's size is the next one's input) and ``edit``
    applied to every node: a copy to read shapes from, not the model. None when nothing would
    change and not ``force``; None too should inference fail."""
    import onnx

    graphs = list(nested_graphs(model.graph))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    forms = [explicit_forms(g, static_shapes(g), opset) for g in graphs]
    if not force and not any(forms):
        return None
    out = None
    for _ in range(MAX_ROUNDS):
        bare = onnx.ModelProto()
        bare.CopyFrom(model)
        for g, found in zip(nested_graphs(bare.graph), forms, strict=True):
            del g.value_info[:]
            for v in g.output:
                if v.type.HasField("tensor_type"):
                    v.type.tensor_type.ClearField("shape")
            if edit is not None:
                for n in g.node:
                    edit(n)
            for i, form in found.items():
                if isinstance(form, onnx.ValueInfoProto):  # a shape inference keeps (the node stays)
                    given = next((v for v in g.output if v.name == form.name), None)
                    g.value_info.append(form) if given is None else given.type.CopyFrom(form.type)
                else:
                    g.node[i].CopyFrom(form)
        try:
            out = onnx.shape_inference.infer_shapes(bare, check_type=False, strict_mode=False, data_prop=False)
        except Exception:  # noqa: BLE001 - the caller keeps what it had
            return None
        again = [
            explicit_forms(g, static_shapes(o), opset) for g, o in zip(graphs, nested_graphs(out.graph), strict=True)
        ]
        if [sorted(f) for f in again] == [sorted(f) for f in forms] and all(
            a[i].SerializeToString() == f[i].SerializeToString() for a, f in zip(again, forms, strict=True) for i in f
        ):
            break
        forms = again
    return out


def static_shapes(graph: Any) -> dict[str, tuple[Any, ...]]:
    """Name -> dims (an int, or None where unknown) of every typed tensor ``graph`` declares."""
    out: dict[str, tuple[Any, ...]] = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            out[v.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in t.shape.dim)
    for t in graph.initializer:
        out.setdefault(t.name, tuple(int(d) for d in t.dims))
    return out


def explicit_forms(graph: Any, shapes: Mapping[str, tuple[Any, ...]], opset: int) -> dict[int, Any]:
    """Node index -> the explicit form of each node of ``graph`` whose onnx size (at ``opset``)
    differs from onnxruntime's, for the input shapes in ``shapes`` (of ``graph`` or of an inferred
    copy of it)."""
    return dict(_forms(graph, shapes, opset))


def _forms(graph: Any, shapes: Mapping[str, tuple[Any, ...]], opset: int) -> Iterator[tuple[int, Any]]:
    from onnx import TensorProto, helper

    for i, node in enumerate(graph.node):
        if node.op_type == "NonZero" and node.domain in ("", "ai.onnx") and shapes.get(node.input[0]) == ():
            yield i, helper.make_tensor_value_info(node.output[0], TensorProto.INT64, [1, None])  # onnx: [0, n]
            continue
        if node.op_type == "PRelu" and node.domain in ("", "ai.onnx") and len(node.input) == 2:
            if (form := _prelu(node, shapes)) is not None:
                yield i, form
            continue
        if (
            node.domain not in ("", "ai.onnx")
            or not node.input
            or (node.op_type not in POOLS and node.op_type != "ConvTranspose")
        ):
            continue
        x = shapes.get(node.input[0])
        if x is None or len(x) < 3 or not all(isinstance(d, int) for d in x[2:]):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        found = (_pool if node.op_type in POOLS else _conv_transpose)(node, x[2:], attrs, auto_pad)
        if found is not None and found[0] != _onnx_sizes(node, shapes, opset):
            yield i, found[1]


def _prelu(node: Any, shapes: Mapping[str, tuple[Any, ...]]) -> Any:
    """A PRelu whose slope widens X: onnxruntime broadcasts both ways (x [15, 1] by a slope [1, 15]
    gives [15, 15]) where onnx infers X's shape; inferred as an Add, which broadcasts so."""
    import numpy as np
    from onnx import helper

    x, slope = shapes.get(node.input[0]), shapes.get(node.input[1])
    if x is None or slope is None or not all(isinstance(d, int) for d in (*x, *slope)):
        return None
    try:
        wide = np.broadcast_shapes(x, slope)
    except ValueError:
        return None
    return None if wide == tuple(x) else helper.make_node("Add", list(node.input), list(node.output), name=node.name)


def _pool(node: Any, spatial: tuple[int, ...], attrs: dict[str, Any], auto_pad: str) -> tuple[list[int], Any] | None:
    """(onnxruntime's sizes, the explicit form) of a pool onnx may size otherwise."""
    from onnx import helper

    ceil = bool(attrs.get("ceil_mode", 0))
    kernel = list(attrs.get("kernel_shape", ()))
    if len(kernel) != len(spatial) or (auto_pad in ("NOTSET", "") and not ceil):
        return None  # onnx and onnxruntime size these alike
    nd = len(kernel)
    strides, dil = list(attrs.get("strides") or [1] * nd), list(attrs.get("dilations") or [1] * nd)
    begin, end, sizes = [], [], []
    for k in range(nd):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = same_pads(spatial[k], kernel[k], strides[k], auto_pad == "SAME_UPPER")
        elif auto_pad == "VALID":
            pads = (0, 0)
        else:
            given = list(attrs.get("pads") or [0] * 2 * nd)
            pads = (int(given[k]), int(given[k + nd]))
        n = pool_length(spatial[k], kernel[k], strides[k], dil[k], pads, ceil)
        span = (kernel[k] - 1) * dil[k] + 1
        begin.append(max(pads[0], 0))
        end.append(max(0, (n - 1) * strides[k] + span - spatial[k] - begin[-1]))  # onnx refuses pads below 0
        if (spatial[k] + begin[-1] + end[-1] - span) // strides[k] + 1 != n:
            return None  # no explicit form onnx sizes as onnxruntime
        sizes.append(n)
    kept = {k: v for k, v in attrs.items() if k not in ("auto_pad", "pads", "ceil_mode")}
    return sizes, helper.make_node(
        node.op_type, list(node.input), list(node.output), name=node.name, pads=begin + end, **kept
    )


def _conv_transpose(
    node: Any, spatial: tuple[int, ...], attrs: dict[str, Any], auto_pad: str
) -> tuple[list[int], Any] | None:
    """A SAME ConvTranspose without output_shape: onnxruntime's output is input * stride."""
    from onnx import helper

    if attrs.get("output_shape") or auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    sizes = [i * s for i, s in zip(spatial, list(attrs.get("strides") or [1] * len(spatial)), strict=False)]
    return sizes, helper.make_node(
        node.op_type, list(node.input), list(node.output), name=node.name, output_shape=sizes, **attrs
    )


def _onnx_sizes(node: Any, shapes: Mapping[str, tuple[Any, ...]], opset: int) -> list[int] | None:
    """The spatial sizes onnx's inference gives ``node`` at ``opset``, None if it gives none."""
    import onnx
    from onnx import TensorProto, defs, helper

    try:
        schema = defs.get_schema(node.op_type, opset)
        types = {
            n: helper.make_tensor_type_proto(TensorProto.FLOAT, list(shapes[n])) for n in node.input if n in shapes
        }
        got = onnx.shape_inference.infer_node_outputs(schema, node, types)[node.output[0]]
        return [int(d.dim_value) for d in got.tensor_type.shape.dim][2:]
    except Exception:  # noqa: BLE001 - no size inferred: treat as differing
        return None

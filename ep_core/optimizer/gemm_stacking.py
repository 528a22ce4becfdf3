"""Gemm stacking: independent Gemm nodes that share one constant weight become one Gemm.

Unrolled RNN exports (the zoo's ``captcha_crnn``: 40 per-step input Gemms at batch 1 against one
4096x400 weight) read the weight once per step; stacked, the rows are one GEMM that reads it once:
Concat(A_i, axis 0) -> Gemm -> Split(axis 0, the row counts) -> the original output values, whose
consumers are unchanged. A graph pass, not a pattern rule: a group is any number of nodes anywhere
in one graph (the main graph and each subgraph separately). onnxruntime has no such rewrite; its
MLAS is fast enough at one row that it needs none, NumPy per call is not."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import onnx_ir as ir

from ep_core.optimizer.passes import SOURCE

_Key = tuple[ir.Value, ir.Value | None, tuple[tuple[str, Any], ...]]


class GemmStackingPass(ir.passes.InPlacePass):
    """Stacks each group of Gemms with transA=0, the same constant B, the same C (absent, or a
    constant broadcast along rows: [N] or [1, N]) and the same attributes, keeping only members whose
    A is 2-D with a known row count (symbolic from opset 15: read at run time) and does not depend (transitively, subgraphs' captures included)
    on another member's output, so the stacked Gemm makes no cycle. One group at a time, the
    dependencies computed again after each (two groups stacked at once could depend on each other)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", 1)
        values = [v for n in ir.traversal.RecursiveGraphIterator(model.graph) for v in (*n.inputs, *n.outputs) if v]
        values += [*model.graph.inputs, *model.graph.initializers.values()]
        used = {v.name for v in values if v.name is not None}
        modified = False
        for graph in _graphs(model.graph):
            while group := _next_group(graph, opset):
                _stack(graph, group, opset, used)
                modified = True
        return ir.passes.PassResult(model, modified)


def _graphs(graph: ir.Graph) -> list[ir.Graph]:
    found = [graph]
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                found += _graphs(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                found += [s for g in attr.as_graphs() for s in _graphs(g)]
    return found


def _constant(v: ir.Value | None) -> bool:
    return v is not None and v.const_value is not None and not v.is_graph_input()


def _key(node: ir.Node, opset: int) -> _Key | None:
    """The group of a stackable Gemm; None when it is not one. Its A's row count must be static
    before opset 15; from 15 a symbolic one is read at run time (Shape with start/end)."""
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    trans_a = node.attributes.get("transA")
    if a is None or (trans_a is not None and trans_a.as_int() != 0) or not _constant(b):
        return None
    if a.shape is None or a.shape.rank() != 2 or not isinstance(a.shape[0], int) and opset < 15:
        return None  # the Split needs each member's row count
    if c is not None:
        shape = c.const_value.shape if _constant(c) else None  # type: ignore[union-attr]
        if shape is None or not (len(shape) == 1 or len(shape) == 2 and shape[0] == 1):
            return None  # a C with rows would need stacking too
    attrs = tuple(sorted((k, repr(v.value)) for k, v in node.attributes.items()))
    return (b, c, attrs)  # type: ignore[return-value]


def _captured(node: ir.Node) -> list[ir.Value]:
    """The values a node reads: its inputs and what its subgraphs read from outside them."""
    values = [v for v in node.inputs if v is not None]
    for attr in node.attributes.values():
        subs = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else []
        subs += list(attr.as_graphs()) if attr.type == ir.AttributeType.GRAPHS else []
        for sub in subs:
            values += [v for n in ir.traversal.RecursiveGraphIterator(sub) for v in n.inputs if v is not None]
    return values


def _next_group(graph: ir.Graph, opset: int) -> list[ir.Node] | None:
    """The first group (in graph order) with at least two mutually independent members."""
    groups: dict[_Key, list[ir.Node]] = defaultdict(list)
    bit: dict[ir.Node, int] = {}
    for node in graph:
        if (key := _key(node, opset)) is not None:
            bit[node] = 1 << len(bit)
            groups[key].append(node)
    if not any(len(g) > 1 for g in groups.values()):
        return None
    reach: dict[ir.Node, int] = {}  # node -> the candidates it depends on, itself included
    for node in graph:  # in topological order
        mask = bit.get(node, 0)
        for v in _captured(node):
            if (p := v.producer()) is not None:
                mask |= reach.get(p, 0)
        reach[node] = mask
    for members in groups.values():
        if len(members) < 2:
            continue
        mask = sum(bit[n] for n in members)
        free = [n for n in members if not reach.get(n.inputs[0].producer(), 0) & mask]  # type: ignore[union-attr,arg-type]
        if len(free) > 1:
            return free
    return None


def _unique(name: str, used: set[str]) -> str:
    out, i = name, 1
    while out in used:
        i += 1
        out = f"{name}_{i}"
    used.add(out)
    return out


def _stack(graph: ir.Graph, members: list[ir.Node], opset: int, used: set[str]) -> None:
    """Concat(A_i) -> Gemm -> Split in place of ``members``, after the last producer of an A. The
    Split's row counts: an int64 initializer (the ``split`` attribute before opset 13), or, when
    some row count is symbolic, Shape(A_i, start=0, end=1) of each concatenated."""
    first = members[0]
    a_values = [n.inputs[0] for n in members]
    dims = [a.shape[0] for a in a_values]  # type: ignore[union-attr,index]
    rows = [d for d in dims if isinstance(d, int)]
    olds = [n.outputs[0] for n in members]
    base = first.name or olds[0].name or "gemm"
    a0, y0 = a_values[0], olds[0]
    cat = ir.Value(name=_unique(f"{base}_stacked_A", used), type=a0.type)  # type: ignore[union-attr]
    total = sum(rows) if len(rows) == len(dims) else None
    cat.shape = ir.Shape([total, a0.shape[1]])  # type: ignore[union-attr,index]
    y = ir.Value(name=_unique(f"{base}_stacked_Y", used), type=y0.type)
    if y0.shape is not None and y0.shape.rank() == 2:
        y.shape = ir.Shape([total, y0.shape[1]])
    concat = ir.Node("", "Concat", a_values, attributes=[ir.AttrInt64("axis", 0)], outputs=[cat])
    gemm = ir.Node("", "Gemm", [cat, *first.inputs[1:]], attributes=list(first.attributes.values()), outputs=[y])
    news = [ir.Value(name=o.name, type=o.type, shape=o.shape) for o in olds]
    split_attrs: list[ir.Attr] = [ir.AttrInt64("axis", 0)]
    split_inputs: list[ir.Value | None] = [y]
    counting: list[ir.Node] = []  # symbolic row counts: Shape(A_i)[0:1] each, concatenated
    if total is None:
        for i, a in enumerate(a_values):
            out = ir.Value(name=_unique(f"{base}_rows_{i}", used), type=ir.TensorType(ir.DataType.INT64))
            out.shape = ir.Shape([1])
            attrs = [ir.AttrInt64("start", 0), ir.AttrInt64("end", 1)]
            counting.append(ir.Node("", "Shape", [a], attributes=attrs, outputs=[out]))
        sizes = ir.Value(name=_unique(f"{base}_stacked_rows", used), type=ir.TensorType(ir.DataType.INT64))
        sizes.shape = ir.Shape([len(dims)])
        attrs = [ir.AttrInt64("axis", 0)]
        counting.append(ir.Node("", "Concat", [n.outputs[0] for n in counting], attributes=attrs, outputs=[sizes]))
        split_inputs.append(sizes)
    elif opset >= 13:
        sizes = ir.Value(name=_unique(f"{base}_stacked_rows", used), const_value=ir.tensor(np.array(rows, np.int64)))
        sizes.type, sizes.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(rows)])
        graph.register_initializer(sizes)
        split_inputs.append(sizes)
    else:
        split_attrs.append(ir.AttrInt64s("split", rows))
    split = ir.Node("", "Split", split_inputs, attributes=split_attrs, outputs=news)
    source = first.metadata_props.get(SOURCE, f":{first.name or ''}")
    index, name = source.split(":", 1)
    labelled = [(n, f"_rows_{i}" if n.op_type == "Shape" else "_rows") for i, n in enumerate(counting)]
    for node, suffix in ((concat, "_Concat"), (gemm, ""), (split, "_Split"), *labelled):
        node.name = f"{name}{suffix}" if name else None
        node.metadata_props[SOURCE] = f"{index}:{node.name or ''}"
    ir.convenience.replace_all_uses_with(olds, news, replace_graph_outputs=True)
    producers: set[ir.Node] = {p for a in a_values if (p := a.producer()) is not None} & set(graph)  # type: ignore[union-attr]
    order = {n: i for i, n in enumerate(graph)}
    if producers:
        graph.insert_after(max(producers, key=order.__getitem__), [*counting, concat, gemm, split])
    else:
        graph.insert_before(min(members, key=order.__getitem__), [*counting, concat, gemm, split])
    graph.remove(members, safe=True)
    if not _sorted(graph):
        graph.sort()


def _sorted(graph: ir.Graph) -> bool:
    """Whether every node of ``graph`` comes after the producers (in this graph) of what it reads."""
    seen: set[ir.Node] = set()
    nodes = set(graph)
    for node in graph:
        for v in _captured(node):
            p = v.producer()
            if p is not None and p in nodes and p not in seen:
                return False
        seen.add(node)
    return True


def gemm_stacking_passes() -> list[Any]:
    return [GemmStackingPass()]

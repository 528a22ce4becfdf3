"""What onnxruntime reads one way, made one way at load, before onnx's checker (which refuses some
of it) and the kernels see the model:

- a node or opset import in the default domain's long name ``ai.onnx`` is in ``""``;
- of repeated ``metadata_props`` keys the last value stands (onnxruntime's ``custom_metadata_map``);
- a subgraph initializer named like a value of an enclosing graph is dropped: onnxruntime 1.31 binds
  the name to the outer value (graph input, initializer or node output), so the branch reads that.
  ONNX's scoping rules forbid the shadowing; a warning names each one;
- a dim declared with a negative size (older converters' -1 batch) is an unknown dim;
- a local function nothing calls is dropped (onnxruntime never reads it).

The caller's ModelProto is not edited: a copy is made when anything changes."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from ep_core.sdk.graph import nested_graphs


def as_onnxruntime_reads(model: Any) -> Any:
    """``model``, or a copy spelled as the module docstring says."""
    if not (
        _long_domain_names(model)
        or _repeated_keys(model)
        or any(_shadowing(model.graph, frozenset()))
        or any(True for _ in _negative_dims(model))
        or _unused_functions(model)
    ):
        return model
    from onnx import helper

    copy = type(model)()
    copy.CopyFrom(model)
    for n in (n for g in bodies(copy) for n in g.node if n.domain == "ai.onnx"):
        n.domain = ""
    for imports in [copy.opset_import, *(f.opset_import for f in copy.functions)]:
        versions = {o.domain or "ai.onnx": o.version for o in imports}
        del imports[:]
        imports.extend(helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in versions.items())
    last = {p.key: p.value for p in model.metadata_props}
    del copy.metadata_props[:]
    for key, value in last.items():
        copy.metadata_props.add(key=key, value=value)
    unused = _unused_functions(copy)
    kept = [f for f in copy.functions if (f.domain, f.name) not in unused]
    del copy.functions[:]
    copy.functions.extend(kept)
    for dim in list(_negative_dims(copy)):
        dim.Clear()  # an unknown dim: older converters wrote -1 for a dynamic batch
    for graph, name in list(_shadowing(copy.graph, frozenset())):
        warnings.warn(
            f"subgraph {graph.name!r} has an initializer {name!r} named like a value of an enclosing graph: "
            "it reads the outer value, as onnxruntime does (ONNX forbids the shadowing; rename one of them)",
            RuntimeWarning,
            stacklevel=4,
        )
        kept = [t for t in graph.initializer if t.name != name]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return copy


def _unused_functions(model: Any) -> set[tuple[str, str]]:
    """The local functions no node of the model calls, directly or through another function:
    onnxruntime never looks at them (onnx's checker refused a model whose unused function had an
    op no schema defines)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    if not functions:
        return set()
    called: set[tuple[str, str]] = set()
    todo = [n for g in nested_graphs(model.graph) for n in g.node]
    while todo:
        n = todo.pop()
        key = (n.domain, n.op_type)
        if key in functions and key not in called:
            called.add(key)
            todo.extend(m for g in nested_graphs(functions[key]) for m in g.node)
    return set(functions) - called


def _negative_dims(model: Any) -> Iterator[Any]:
    """The dims declared with a negative size on values of every graph: onnxruntime reads them as
    unknown; onnx's strict inference took -1 for a size (an Add of [-1, 4] and [3, 4] refused)."""
    for g in nested_graphs(model.graph):
        for v in [*g.input, *g.output, *g.value_info]:
            if v.type.HasField("tensor_type"):
                yield from (d for d in v.type.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value < 0)


def bodies(model: Any) -> list[Any]:
    """Every graph of ``model`` and every local function's body with their subgraphs: all that
    holds nodes (``nested_graphs`` reads a FunctionProto's nodes as a graph's)."""
    return [*nested_graphs(model.graph), *(g for f in model.functions for g in nested_graphs(f))]


def _long_domain_names(model: Any) -> bool:
    return any(o.domain == "ai.onnx" for o in model.opset_import) or any(
        n.domain == "ai.onnx" for g in bodies(model) for n in g.node
    )


def _repeated_keys(model: Any) -> bool:
    keys = [p.key for p in model.metadata_props]
    return len(set(keys)) != len(keys)


def _shadowing(graph: Any, outer: frozenset[str]) -> Iterator[tuple[Any, str]]:
    """(subgraph, initializer name) for each initializer of a graph nested in ``graph`` whose name an
    enclosing graph (``outer`` for the ones above ``graph``) defines."""
    for t in graph.initializer:
        if t.name in outer:
            yield graph, t.name
    defined = outer | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output if o}
    for n in graph.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _shadowing(sub, defined)


def for_the_checker(proto: Any) -> Any:
    """``proto``, or a copy for onnx's checker only, with what it insists on and onnxruntime does not:
    a shape field on graph inputs and outputs of unknown rank (one unknown dim: it checks nothing
    else), a type on a graph output declared with none (inference gives the real one), a name on a
    graph named "" (onnxruntime runs such graphs). The session runs the model as given."""

    def missing(v: Any) -> bool:  # a graph output of no type at all too: onnxruntime infers it
        kind = v.type.WhichOneof("value")
        return (kind is None and v in proto.graph.output) or (
            kind == "tensor_type" and not v.type.tensor_type.HasField("shape")
        )

    unnamed = [g for g in nested_graphs(proto.graph) if not g.name]
    if not unnamed and not any(missing(v) for v in [*proto.graph.input, *proto.graph.output]):
        return proto
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for v in [*copy.graph.input, *copy.graph.output]:
        if v.type.WhichOneof("value") is None:
            v.type.tensor_type.elem_type = 1
        if missing(v):
            v.type.tensor_type.shape.dim.add()
    for k, g in enumerate(g for g in nested_graphs(copy.graph) if not g.name):
        g.name = f"unnamed_graph_{k}"
    return copy

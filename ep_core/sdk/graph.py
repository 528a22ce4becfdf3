"""A read-only view of an ONNX graph for execution providers.

EPs see nodes, values (type and shape), initializers, producers and consumers, and nested
subgraphs, never the mutable protobuf. Views are cheap: a view of a subset of nodes shares the
parent's tables."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # onnx is imported lazily: building a view is the first thing that needs it
    import numpy as np
    import onnx

SUBGRAPH_ATTR_TYPES = (5, 10)  # AttributeProto.GRAPH, AttributeProto.GRAPHS


@dataclass(frozen=True)
class ValueInfo:
    """A value's element type (``TensorProto`` enum, 0 when unknown) and shape.

    Shape entries are ints, strings (symbolic dims) or None (unknown); ``shape`` is None when
    even the rank is unknown. ``kind`` is 'tensor', 'sequence', 'map' or 'optional'; ``container``
    spells the type of one of the last three (``seq(tensor(float))``)."""

    name: str
    elem_type: int = 0
    shape: tuple[int | str | None, ...] | None = None
    kind: str = "tensor"
    container: str = ""

    @property
    def type_str(self) -> str:
        """The type as onnxruntime's ``NodeArg.type`` spells it, e.g. ``tensor(float)``."""
        from onnx import helper

        if self.kind != "tensor" or not self.elem_type:
            return self.container or self.kind if self.kind != "tensor" else "tensor(undefined)"
        return f"tensor({helper.tensor_dtype_to_string(self.elem_type).split('.')[-1].lower()})"

    @cached_property  # read for every feed of every run
    def np_dtype(self) -> "np.dtype | None":
        from onnx import helper

        if self.kind != "tensor" or not self.elem_type:
            return None
        return helper.tensor_dtype_to_np_dtype(self.elem_type)


_KINDS = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional"}  # TypeProto's other kinds


def value_info_from_type(name: str, tp: "onnx.TypeProto") -> ValueInfo:
    """An optional tensor has its tensor's shape (onnxruntime's ``NodeArg.shape`` shows it)."""
    which = tp.WhichOneof("value")
    if which == "optional_type" and tp.optional_type.elem_type.HasField("tensor_type"):
        inner = value_info_from_type(name, tp.optional_type.elem_type)
        return ValueInfo(name, 0, inner.shape, "optional", type_string(tp))
    if which == "tensor_type" or which == "sparse_tensor_type":
        tt = getattr(tp, which)
        shape: tuple[int | str | None, ...] | None = None
        if tt.HasField("shape"):  # a negative dim_value (some exporters write -1) is an unknown dim
            shape = tuple(
                int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or None
                for d in tt.shape.dim
            )
        return ValueInfo(name, int(tt.elem_type), shape, "tensor")
    return ValueInfo(name, 0, None, _KINDS.get(str(which), "tensor"), type_string(tp))


def type_string(tp: "onnx.TypeProto") -> str:
    """A type as onnxruntime's ``NodeArg.type`` spells it: ``tensor(float)``, ``seq(tensor(int64))``,
    ``map(string,tensor(float))``, ``optional(seq(tensor(float)))``, ``sparse_tensor(float)``."""
    from onnx import helper

    def elem(t: int) -> str:
        return str(helper.tensor_dtype_to_string(t)).split(".")[-1].lower()

    which = str(tp.WhichOneof("value"))
    if which in ("tensor_type", "sparse_tensor_type"):
        return f"{which[:-5]}({elem(getattr(tp, which).elem_type)})"
    if which == "map_type":
        return f"map({elem(tp.map_type.key_type)},{type_string(tp.map_type.value_type)})"
    if which == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    return "undefined"


def tensor_array(t: "onnx.TensorProto") -> "np.ndarray":
    """A tensor's value; a tensor that cannot be read is INVALID_GRAPH naming it.

    Data the loader left in its file (a model past protobuf's 2 GiB) is read from the absolute
    location the loader checked, into one array. String data that is not UTF-8 is kept (as
    onnxruntime keeps bytes), surrogate-escaped. ``segment`` is ignored, as onnxruntime does."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    try:
        dims = tuple(t.dims)
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            if not os.path.isabs(info.get("location", "")):
                raise ValueError("its external data was not resolved by the model loader")
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            with open(info["location"], "rb") as fh:
                raw = np.fromfile(fh, np.uint8, count=int(info["length"]), offset=int(info["offset"]))
            if dtype.itemsize * math.prod(dims) == raw.size and sys.byteorder == "little":
                return raw.view(dtype).reshape(dims)
            t = _without(t, "external_data", raw_data=raw.tobytes())  # packed types: onnx unpacks
        if t.data_type == TensorProto.STRING:
            return np.array([s.decode("utf-8", "surrogateescape") for s in t.string_data], object).reshape(dims)
        return numpy_helper.to_array(_without(t, "segment") if t.HasField("segment") else t)
    except Exception as exc:
        from ep_core.sdk.errors import InvalidGraph

        raise InvalidGraph(f"tensor {t.name!r} cannot be read: {type(exc).__name__}: {exc}") from exc


def _without(t: "onnx.TensorProto", field_name: str, **values: Any) -> "onnx.TensorProto":
    from onnx import TensorProto

    copy = TensorProto()
    copy.CopyFrom(t)
    copy.ClearField(field_name)
    if field_name == "external_data":
        copy.data_location = TensorProto.DEFAULT
    for k, v in values.items():
        setattr(copy, k, v)
    return copy


_ATTRIBUTE_VALUES: dict[int, Callable[[Any], Any]] = {  # AttributeProto.AttributeType -> its value
    1: lambda a: float(a.f),  # FLOAT
    2: lambda a: int(a.i),  # INT
    3: lambda a: a.s.decode("utf-8", errors="surrogateescape"),  # STRING
    4: lambda a: tensor_array(a.t),  # TENSOR
    5: lambda a: a.g,  # GRAPH
    6: lambda a: [float(v) for v in a.floats],  # FLOATS
    7: lambda a: [int(v) for v in a.ints],  # INTS
    8: lambda a: [s.decode("utf-8", errors="surrogateescape") for s in a.strings],  # STRINGS
    9: lambda a: [tensor_array(x) for x in a.tensors],  # TENSORS
    10: lambda a: list(a.graphs),  # GRAPHS
    11: lambda a: a.sparse_tensor,  # SPARSE_TENSOR
    13: lambda a: a.tp,  # TYPE_PROTO
    14: lambda a: list(a.type_protos),  # TYPE_PROTOS
}


def attribute_value(attr: "onnx.AttributeProto") -> Any:
    """An attribute as a plain Python value (str for STRING, ndarray for TENSOR, GraphProto for
    GRAPH), the form every kernel wants."""
    value = _ATTRIBUTE_VALUES.get(attr.type)
    if value is None:
        raise ValueError(f"attribute {attr.name!r} has unsupported type {attr.type}")
    return value(attr)


@dataclass(eq=False)
class NodeView:
    """One node: what an EP needs to decide whether and how to run it."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int
    proto: "onnx.NodeProto" = field(repr=False)
    graph: "GraphView" = field(repr=False)

    @cached_property
    def attributes(self) -> dict[str, Any]:
        return {a.name: attribute_value(a) for a in self.proto.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    @cached_property
    def subgraphs(self) -> dict[str, "GraphView"]:
        """Subgraph attributes (If branches, Loop/Scan bodies) as views nested in this graph."""
        from onnx import AttributeProto

        out: dict[str, GraphView] = {}
        for a in self.proto.attribute:
            if a.type == AttributeProto.GRAPH:
                out[a.name] = GraphView(a.g, self.graph.opsets, parent=self.graph, owner=self)
            elif a.type == AttributeProto.GRAPHS:
                for i, g in enumerate(a.graphs):
                    out[f"{a.name}[{i}]"] = GraphView(g, self.graph.opsets, parent=self.graph, owner=self)
        return out

    @property
    def has_subgraphs(self) -> bool:
        return any(a.type in SUBGRAPH_ATTR_TYPES for a in self.proto.attribute)

    @cached_property
    def implicit_inputs(self) -> tuple[str, ...]:
        """Outer-scope values the node's subgraphs read (ORT's implicit inputs)."""
        if not self.has_subgraphs:
            return ()
        seen: dict[str, None] = {}
        for sub in self.subgraphs.values():
            for name in sub.outer_scope_inputs:
                seen.setdefault(name, None)
        return tuple(seen)

    @property
    def domain_key(self) -> str:
        return "ai.onnx" if self.domain in ("", "ai.onnx") else self.domain

    def input_info(self, i: int) -> ValueInfo | None:
        return self.graph.value_info(self.inputs[i]) if i < len(self.inputs) and self.inputs[i] else None

    def output_info(self, i: int) -> ValueInfo | None:
        return self.graph.value_info(self.outputs[i]) if i < len(self.outputs) and self.outputs[i] else None

    def describe(self) -> str:
        """How errors name a node: name, op, domain and opset."""
        return f"node {self.name!r} (op {self.domain_key}::{self.op_type}, opset {self.opset})"


class GraphView:
    """A read-only view over a ``GraphProto``.

    ``nodes`` lists the nodes in view (all of them, or the subset not yet claimed when an EP is
    asked for its capability); values, producers and consumers always cover the whole graph."""

    def __init__(
        self,
        graph: "onnx.GraphProto",
        opsets: Mapping[str, int],
        *,
        parent: "GraphView | None" = None,
        owner: NodeView | None = None,
        value_infos: Mapping[str, ValueInfo] | None = None,
        name: str | None = None,
    ) -> None:
        self.proto = graph
        self.opsets = dict(opsets)
        self.parent = parent
        self.owner = owner
        self.name = name or graph.name or "main_graph"
        self._extra_value_infos = dict(value_infos or {})
        self._all_nodes: list[NodeView] | None = None
        self._subset: tuple[int, ...] | None = None

    # ----------------------------------------------------------------- construction helpers
    def subset(self, indices: Iterable[int]) -> "GraphView":
        """A view of some nodes of this graph that shares its tables."""
        view = GraphView.__new__(GraphView)
        view.__dict__.update(self.__dict__)
        view._subset = tuple(sorted(indices))
        view.__dict__.pop("nodes", None)
        return view

    # ------------------------------------------------------------------------------ nodes
    @property
    def all_nodes(self) -> list[NodeView]:
        if self._all_nodes is None:
            nodes = []
            used: set[str] = set()
            for i, n in enumerate(self.proto.node):
                domain = n.domain
                key = "" if domain in ("", "ai.onnx") else domain
                name = n.name or f"{n.op_type}_{i}"
                if name in used:
                    name = f"{name}__{i}"
                used.add(name)
                opset = int(self.opsets.get(key, 1))
                nodes.append(NodeView(i, name, n.op_type, domain, tuple(n.input), tuple(n.output), opset, n, self))
            self._all_nodes = nodes
        return self._all_nodes

    @cached_property
    def nodes(self) -> list[NodeView]:
        if self._subset is None:
            return self.all_nodes
        all_nodes = self.all_nodes
        return [all_nodes[i] for i in self._subset]

    def __iter__(self) -> Iterator[NodeView]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> NodeView:
        return self._node_by_name[name]

    @cached_property
    def _node_by_name(self) -> dict[str, NodeView]:
        return {n.name: n for n in self.all_nodes}

    # ----------------------------------------------------------------------------- values
    @cached_property
    def initializer_protos(self) -> dict[str, "onnx.TensorProto"]:
        return {t.name: t for t in self.proto.initializer}

    def initializer(self, name: str) -> "np.ndarray | None":
        """The initializer's value (cached), or None if ``name`` is not a constant here."""
        cache: dict[str, np.ndarray] = self.__dict__.setdefault("_init_cache", {})
        if name in cache:
            return cache[name]
        proto = self.initializer_protos.get(name)
        if proto is None:
            return None
        arr = cache[name] = tensor_array(proto)
        return arr

    def constant_value(self, name: str) -> "np.ndarray | None":
        """An initializer here or in an enclosing graph (not one a feed may replace: listed as a
        graph input), or the value of a Constant node."""
        g: GraphView | None = self
        while g is not None:
            if name in g.initializer_protos:
                return None if name in g.input_names else g.initializer(name)
            prod = g.producer(name)
            if prod is not None:
                if prod.op_type == "Constant" and prod.domain in ("", "ai.onnx"):
                    attrs = prod.attributes
                    import numpy as np

                    if "value" in attrs:
                        return np.asarray(attrs["value"])  # a TENSOR attribute: already an ndarray
                    for key in ("value_float", "value_int", "value_floats", "value_ints"):
                        if key in attrs:
                            return np.array(attrs[key], dtype=np.float32 if "float" in key else np.int64)
                return None
            if name in self.input_names:
                return None
            g = g.parent
        return None

    @cached_property
    def _value_infos(self) -> dict[str, ValueInfo]:
        out: dict[str, ValueInfo] = {}  # a graph input's declaration wins over value_info or an output naming it
        for vi in list(self.proto.value_info) + list(self.proto.output) + list(self.proto.input):
            if vi.HasField("type"):
                out[vi.name] = value_info_from_type(vi.name, vi.type)
        for t in self.proto.initializer:
            if t.name not in out:
                out[t.name] = ValueInfo(t.name, int(t.data_type), tuple(int(d) for d in t.dims))
        out.update(self._extra_value_infos)
        return out

    def value_info(self, name: str) -> ValueInfo | None:
        """Type and shape of a value, searching enclosing graphs for outer-scope names."""
        g: GraphView | None = self
        while g is not None:
            vi = g._value_infos.get(name)
            if vi is not None:
                return vi
            g = g.parent
        return None

    @cached_property
    def inputs(self) -> list[ValueInfo]:
        """Graph inputs that are not initializers (what a caller must feed)."""
        inits = self.initializer_protos
        return [self._value_infos.get(v.name, ValueInfo(v.name)) for v in self.proto.input if v.name not in inits]

    @cached_property
    def input_names(self) -> frozenset[str]:
        return frozenset(v.name for v in self.proto.input)

    @cached_property
    def outputs(self) -> list[ValueInfo]:
        return [self._value_infos.get(v.name, ValueInfo(v.name)) for v in self.proto.output]

    # ------------------------------------------------------------------ producers/consumers
    @cached_property
    def _producers(self) -> dict[str, NodeView]:
        return {o: n for n in self.all_nodes for o in n.outputs if o}

    @cached_property
    def _consumers(self) -> dict[str, list[NodeView]]:
        out: dict[str, list[NodeView]] = {}
        for n in self.all_nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
            for i in n.implicit_inputs:
                out.setdefault(i, []).append(n)
        return out

    def producer(self, name: str) -> NodeView | None:
        return self._producers.get(name)

    def consumers(self, name: str) -> list[NodeView]:
        return list(self._consumers.get(name, ()))

    @cached_property
    def outer_scope_inputs(self) -> tuple[str, ...]:
        """Names this graph (and its nested subgraphs) read from enclosing scopes."""
        local = set(self.input_names) | set(self.initializer_protos) | set(self._producers)
        seen: dict[str, None] = {}
        for n in self.all_nodes:
            for i in tuple(n.inputs) + n.implicit_inputs:
                if i and i not in local:
                    seen.setdefault(i, None)
        return tuple(seen)

    # ----------------------------------------------------------------------------- export
    def to_model_proto(self, name: str | None = None) -> "onnx.ModelProto":
        """This view's nodes as a standalone model: inputs are the values they read from outside,
        outputs the values read outside or graph outputs; needed initializers are copied."""
        from onnx import helper

        nodes = self.nodes
        produced = {o for n in nodes for o in n.outputs if o}
        inside = {id(n) for n in nodes}
        consumed: dict[str, None] = {}
        for n in nodes:
            for i in tuple(n.inputs) + n.implicit_inputs:
                if i and i not in produced:
                    consumed.setdefault(i, None)
        inits = [self.initializer_protos[n] for n in consumed if n in self.initializer_protos]
        graph_outputs = {v.name for v in self.proto.output}
        outs = [
            o
            for n in nodes
            for o in n.outputs
            if o and (o in graph_outputs or any(id(c) not in inside for c in self._consumers.get(o, ())))
        ]

        def vi(nm: str) -> "onnx.ValueInfoProto":
            info = self.value_info(nm)
            if info is None or info.kind != "tensor" or not info.elem_type:
                return helper.make_value_info(nm, helper.TypeProto())
            return helper.make_tensor_value_info(
                nm, info.elem_type, list(info.shape) if info.shape is not None else None
            )

        g = helper.make_graph(
            [n.proto for n in nodes],
            name or self.name,
            [vi(i) for i in consumed if i not in self.initializer_protos],
            [vi(o) for o in outs],
            initializer=inits,
            value_info=[vi(o) for o in produced if o not in outs and self.value_info(o) is not None],
        )
        opsets = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in self.opsets.items()]
        return helper.make_model(g, opset_imports=opsets, producer_name="ep-core")


def nested_graphs(g: "onnx.GraphProto") -> Iterator["onnx.GraphProto"]:
    """A graph and every subgraph nested in its nodes' attributes (If branches, Loop bodies, ...)."""
    yield g
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from nested_graphs(sub)


def opset_map(model: "onnx.ModelProto") -> dict[str, int]:
    """Domain -> opset version, with the default domain under both '' and 'ai.onnx'."""
    out: dict[str, int] = {}
    for o in model.opset_import:
        key = "" if o.domain in ("", "ai.onnx") else o.domain
        out[key] = int(o.version)
    if "" in out:
        out["ai.onnx"] = out[""]
    return out


def topo_order(n: int, edges: Sequence[Iterable[int]], partial: bool = False) -> list[int]:
    """Stable Kahn topological order of ``n`` items; ``edges[i]`` lists i's successors. A cycle is
    INVALID_GRAPH, or with ``partial`` the order of the items outside it (the caller names them)."""
    indeg = [0] * n
    for succ in edges:
        for j in succ:
            indeg[j] += 1
    import heapq

    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in edges[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != n and not partial:
        from ep_core.sdk.errors import InvalidGraph

        raise InvalidGraph("the graph has a cycle; ONNX graphs must be acyclic")
    return order

"""Delegated nodes: every node of a group that the EP does not compile runs through ep-core's
NumPy reference kernels (``ep_cpu_reference.registry``), so a group can span Reshape, Concat,
Softmax, pooling, quantized ops ... and stay one fused node. One source of truth: the EP never
re-implements a kernel the reference EP has.

A delegated node is stored as data (``spec``: op, domain, opset, typed attributes, value names and
types); a TENSOR attribute is a stored weight. To build its kernel, the node is rebuilt with
``onnx.helper`` from those checked fields alone into a one-node graph (constant inputs are the
group's stored weights, value infos come from the stored types) and handed, as an sdk ``NodeView``,
to the reference builder. Compiling a model and loading a context both go through ``build``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ep_core.sdk.kernels import KernelDef, KernelRegistry
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo
from ep_numba_cpu.ops import DATA_DTYPES

# AttributeProto type -> the record's tag (GRAPH, GRAPHS, TENSORS, SPARSE_TENSOR(S), TYPE_PROTO(S)
# are not data this EP stores: nodes carrying them are not claimed)
ATTR_KINDS = {1: "float", 2: "int", 3: "string", 4: "tensor", 6: "floats", 7: "ints", 8: "strings"}
SCHEMA_KINDS = {"float": "FLOAT", "int": "INT", "string": "STRING", "tensor": "TENSOR"}
SCHEMA_KINDS.update({"floats": "FLOATS", "ints": "INTS", "strings": "STRINGS"})
NEVER = frozenset({"If", "Loop", "Scan", "SequenceMap", "EPContext", "Constant"})  # see ``delegable``
_TYPE_STRS = {  # ONNX type strings of the dtypes a delegated value may have
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def reference() -> KernelRegistry:
    """The reference EP's kernel registry: a query about an op imports only the kernel families
    that register it (its schema too, for a contrib op), so a context whose groups delegate a few
    ops does not import all ~50 (~70 ms)."""
    from ep_cpu_reference.registry import REGISTRY

    return REGISTRY


def schema(op: str, domain: str, opset: int) -> Any:
    """The ONNX schema in effect for ``op`` at ``opset`` (a contrib op's as the reference EP
    registers it), or None."""
    from onnx import defs

    reference().has_op(op, domain)  # imports what registers its schema
    try:
        return defs.get_schema(op, opset, "" if domain in ("", "ai.onnx") else domain)
    except Exception:
        return None


def served(op: str, domain: str, opset: int) -> bool:
    """Whether a reference kernel covers ``op`` at ``opset`` (an opset onnx, with the reference
    EP's contrib schemas, knows of), and the op has no subgraph attributes (control flow runs in
    the core, which partitions its bodies)."""
    from onnx import defs

    if op in NEVER:
        return False
    kernels = reference().kernel_defs(op, domain)
    newest = defs.C.schema_version_map().get("" if domain in ("", "ai.onnx") else domain)
    s = schema(op, domain, opset)
    if not newest or opset > int(newest[1]) or s is None or not any(d.covers(opset) for d in kernels):
        return False
    return not any(a.type.name in ("GRAPH", "GRAPHS") for a in s.attributes.values())


def dtype_name(dt: Any) -> str | None:
    """The record's name of a NumPy dtype, or None when a delegated value may not have it."""
    name = "bool" if np.dtype(dt) == np.bool_ else str(np.dtype(dt))
    return name if name in DATA_DTYPES else None


def delegable(node: Any) -> bool:
    """Whether ``node`` can be a delegated step: the reference registry serves it with these types,
    every attribute is data (``ATTR_KINDS``; a TENSOR one of a stored dtype), and every value it
    reads or makes is a tensor of a stored dtype (or of a type the model leaves unknown)."""
    if node.op_type in NEVER or node.has_subgraphs or not served(node.op_type, node.domain, node.opset):
        return False
    for a in node.proto.attribute:
        if a.type not in ATTR_KINDS or a.ref_attr_name:
            return False
        if a.type == 4 and (a.t.data_location == 1 or dtype_name_of_elem(a.t.data_type) is None):
            return False
    for name in tuple(node.inputs) + tuple(node.outputs):
        info = node.graph.value_info(name) if name else None
        if info is None:
            continue
        if info.kind != "tensor" or (info.elem_type and dtype_name_of_elem(info.elem_type) is None):
            return False
    return bool(reference().lookup(node))


def dtype_name_of_elem(elem_type: int) -> str | None:
    from onnx import helper

    try:
        return dtype_name(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def attributes(node: Any, anchor: str, weights: dict[str, np.ndarray]) -> dict[str, list[Any]]:
    """The node's attributes as record values (``[tag, value]``); a TENSOR attribute's value is
    added to ``weights`` under ``{anchor}::attr.{name}`` and stored as ``["tensor", that name]``."""
    from ep_core.sdk.graph import attribute_value

    out: dict[str, list[Any]] = {}
    for a in node.proto.attribute:
        kind = ATTR_KINDS[a.type]
        value = attribute_value(a)
        if kind == "tensor":
            wname = f"{anchor}::attr.{a.name}"
            weights[wname] = np.ascontiguousarray(value)
            value = wname
        out[a.name] = [kind, value]
    return out


class GroupRegistry(KernelRegistry):
    """The EP's kernel registry (EPContext nodes only), whose ``has_op`` also answers for every op
    a group can run (compiled, or delegated to a reference kernel): the core's graph optimizer
    makes only ops the first EP "has". Its fusions into Attention, LayerNormalization, Gelu, QDQ
    integer ops and stacked Gemms are what make the reference EP fast and QDQ models exact, so this
    EP takes them too; FusedConv, FusedGemm and FusedMatMul stay off: the compiled paths fuse a
    contraction with its activation themselves (and with more of the elementwise tail)."""

    def has_op(self, op_type: str, domain: str = "") -> bool:
        if super().has_op(op_type, domain):
            return True
        if op_type in COMPILED_FUSIONS:
            return False
        return reference().has_op(op_type, domain)


COMPILED_FUSIONS = ("FusedConv", "FusedGemm", "FusedMatMul")


# ------------------------------------------------------------------------------ building
@dataclass(frozen=True)
class Host:
    """What a delegated node's kernel context says beyond the node: the EP object, the session's
    options and the model's path (None while compiling: a group's nodes read no files)."""

    ep: Any = None
    session_options: Any = None
    model_path: Path | None = None


class NodeContext:
    """``ep_core.sdk.kernels.KernelContext`` for a delegated node: host memory, no stream, no
    allocator; constants are the node's stored weights; it has no subgraphs (never claimed)."""

    __slots__ = ("node", "ep", "memory_info", "stream", "allocator", "session_options", "model_path")

    def __init__(self, node: Any, host: Host) -> None:
        self.node = node
        self.ep = host.ep
        self.memory_info: MemoryInfo = HOST_MEMORY
        self.stream: Any = None
        self.allocator: Any = None
        self.session_options = host.session_options
        self.model_path = host.model_path

    def constant(self, name: str) -> Any:
        return self.node.graph.constant_value(name) if name else None

    def subgraph(self, attr_name: str) -> Any:
        raise NotImplementedError(f"{self.node.describe()}: delegated nodes have no subgraphs")


def node_view(step: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> Any:
    """The checked record ``step`` rebuilt as a one-node graph's ``NodeView``: attributes from the
    record's values only, constant inputs from ``weights``, value infos from the record's types."""
    from ep_core.sdk.graph import GraphView

    graph, opsets = node_graph(step, weights)
    return GraphView(graph, opsets).all_nodes[0]


def node_graph(
    step: Mapping[str, Any], weights: Mapping[str, np.ndarray], inline_max: int | None = None
) -> tuple[Any, dict[str, int]]:
    """``step`` as a one-node ``GraphProto`` and its opsets; with ``inline_max``, a constant input of
    more elements is a typed input of its static shape instead of an initializer (shape inference
    needs the values of shape-like inputs only, and serializing big weights would cost)."""
    from onnx import helper, numpy_helper

    attrs = []
    for name, (kind, value) in sorted(step["attrs"].items()):
        if kind == "tensor":
            value = numpy_helper.from_array(np.asarray(weights[value]), name)
        elif kind == "string":
            value = value.encode("utf-8", "surrogateescape")
        elif kind == "strings":
            value = [s.encode("utf-8", "surrogateescape") for s in value]
        code = next(c for c, k in ATTR_KINDS.items() if k == kind)
        attrs.append(helper.make_attribute(name, value, attr_type=code))
    node = helper.make_node(step["op"], step["inputs"], step["outputs"], name=_name(step), domain=step["domain"])
    node.attribute.extend(attrs)
    inits, ins, seen = [], [], set()
    for name, t in zip(step["inputs"], step["in_types"], strict=True):
        if not name or name in seen:
            continue
        seen.add(name)
        value = weights.get(name)
        if value is not None and (inline_max is None or np.size(value) <= inline_max):
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            ins.append(_value_info(name, t if value is None else (str(value.dtype), list(np.shape(value)))))
    outs = [_value_info(n, t) for n, t in zip(step["outputs"], step["out_types"], strict=True) if n]
    graph = helper.make_graph([node], f"delegated_{_name(step)}", ins, outs, initializer=inits)
    key = "" if step["domain"] in ("", "ai.onnx") else step["domain"]
    opsets = {key: step["opset"]}
    if key == "":
        opsets["ai.onnx"] = step["opset"]
    return graph, opsets


def _name(step: Mapping[str, Any]) -> str:
    return f"{step['op']}:{next(o for o in step['outputs'] if o)}"


def _value_info(name: str, t: Sequence[Any]) -> Any:
    from onnx import helper

    dtype, shape = t
    if dtype is None:
        return helper.make_value_info(name, helper.TypeProto())
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


class BuildError(ValueError):
    """A delegated node the reference registry does not serve as stored (the message says why)."""


def build(
    step: Mapping[str, Any], weights: Mapping[str, np.ndarray], host: Host, **loops: Any
) -> Callable[..., Sequence[Any]]:
    """The reference kernel of a checked delegated step; ``BuildError`` when the registry has no
    kernel for its types or its builder refuses it. ``loops``: compiled loops the builder takes
    (``ml_loops``: a tree walk, an SVM coupling; ``int_loops``: a recurrent integer product)."""
    node = node_view(step, weights)
    found = reference().lookup(node)
    if found.entry is None:
        raise BuildError(found.reason)
    try:
        return found.entry.builder(node, NodeContext(node, host), **loops)
    except Exception as exc:
        raise BuildError(f"the reference kernel refuses it: {type(exc).__name__}: {str(exc)[:300]}") from exc


def declared_ops() -> list[KernelDef]:
    """What delegated steps serve, for the parity report's fusable-ops declaration: every reference
    kernel def of an op ``served`` at its opsets, with the dtypes a delegated value may have
    (``DATA_DTYPES``), one def per schema version (``typed``)."""
    from ep_core.sdk.kernels import schema_versions

    out = []
    for d in reference().kernel_defs():  # every family
        versions = schema_versions(d) or ()
        if d.op_type in NEVER or any(
            a.type.name in ("GRAPH", "GRAPHS") for v in versions for a in _attrs_of(d, v.since)
        ):
            continue
        out.extend(typed(d, DATA_DTYPES))
    return out


def typed(d: KernelDef, dtypes: Sequence[str]) -> list[KernelDef]:
    """``d`` split per schema version it serves, each version's type constraints cut to ``dtypes``
    (NumPy names); versions left without a type for some constraint, or with a formal parameter
    of a fixed type outside ``dtypes`` (tensor(string)), are not served and left out."""
    from ep_core.sdk.kernels import schema_versions

    versions = schema_versions(d)
    if versions is None:  # a domain the sdk has no schema index for (contrib schemas registered late)
        cut = {c: tuple(t for t in ts if _TYPE_STRS.get(t) in dtypes) for c, ts in d.type_constraints.items()}
        return [KernelDef(d.op_type, d.domain, d.since_version, d.end_version, cut)] if all(cut.values()) else []
    out = []
    for v in versions:
        since, end = max(d.since_version, v.since), v.end
        if d.end_version is not None:
            end = d.end_version if end is None else min(end, d.end_version)
        s = schema(d.op_type, d.domain, since)
        fixed = [p.type_str for p in (*s.inputs, *s.outputs) if "(" in p.type_str] if s is not None else []
        if any(_TYPE_STRS.get(t) not in dtypes for t in fixed):
            continue
        constraints = {}
        for c, types in v.constraints.items():
            have = set(d.type_constraints[c]) & types if c in d.type_constraints else types
            constraints[c] = tuple(sorted(t for t in have if _TYPE_STRS.get(t) in dtypes))
        if all(constraints.values()):
            out.append(KernelDef(d.op_type, d.domain, since, end, constraints))
    return out


def _attrs_of(d: KernelDef, since: int) -> Any:
    s = schema(d.op_type, d.domain, since)
    return s.attributes.values() if s is not None else ()

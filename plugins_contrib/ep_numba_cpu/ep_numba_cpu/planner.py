"""Choosing the groups to fuse, and turning one group into a declarative plan (``spec``).

Groups are grown in topological order: a supported node (compiled, or delegated to the reference
kernels: ``delegate``) joins the group of one of its producers unless that would make the group
non-convex (a path leaving the group and re-entering at the node); then groups are merged while
they stay convex, so a graph without control flow is typically one group.
Constant nodes whose every consumer is in one group join it, so their values travel with the
compiled context. Inside a group, contractions are separate steps and elementwise nodes form
clusters, each described by its items (op, arguments, dtype, parameters) from which ``generate``
writes one kernel that computes every value at the broadcast shape of the cluster's inputs (values
stay in registers; outputs of a smaller shape are sliced back)."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ep_numba_cpu.delegate import attributes, delegable, dtype_name
from ep_numba_cpu.generate import depthwise_geometry
from ep_numba_cpu.ops import (
    CONTRACTIONS,
    DATA_DTYPES,
    ELEMENTWISE,
    FLOAT_DTYPES,
    KERNEL_DTYPES,
    MS_SINCE,
    SINCE,
    expression,
    params_for,
)
from ep_numba_cpu.spec import SpecError, check_conv_attrs, check_params, over_limits

TINY = 16  # elements: a cluster of shape logic making at most this many runs as delegated steps (``_tiny``)
MAX_INLINE_SIZE = 1  # constants of this many elements may become literals in the kernel source
MAX_INLINE_MAGNITUDE = 64  # ... when they are "round" numbers (multiples of 1/8 up to this magnitude)
CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _dtype(graph: Any, name: str) -> str | None:
    value = graph.constant_value(name)
    if value is not None:
        return _dtype_name(value.dtype)
    info = graph.value_info(name)
    if info is None or info.kind != "tensor" or not info.elem_type:
        return None
    dt = info.np_dtype
    return None if dt is None else _dtype_name(np.dtype(dt))


@functools.cache
def _dtype_name(dt: np.dtype) -> str:
    """NumPy's name of ``dt`` (asked thousands of times per graph: ``str(dtype)`` costs ~8 us)."""
    return "bool" if dt == np.bool_ else str(dt)


def _rank(graph: Any, name: str) -> int | None:
    value = graph.constant_value(name)
    if value is not None:
        return value.ndim
    info = graph.value_info(name)
    return None if info is None or info.shape is None else len(info.shape)


def _known(graph: Any, names: Sequence[str], dtypes: Sequence[str] = KERNEL_DTYPES) -> bool:
    return all(_dtype(graph, n) in dtypes and _rank(graph, n) is not None for n in names if n)


Note = Callable[[str], None]  # told why a node the EP could run is left to the next EP


def supported(node: Any, note: Note | None = None) -> bool:
    """Whether this EP takes ``node`` into a group: compiled (``compiled``), else delegated to the
    reference kernels (``delegate.delegable``), and within the bounds its stored record must keep
    (``spec.over_limits``): a node claimed over them would fail the session at compile time."""
    if not (compiled(node) or delegable(node)):
        return False
    why = over_limits(node)
    if why is not None and note is not None:
        note(f"{node.describe()} is left to the next EP: {why}")
    return why is None


def compiled(node: Any) -> bool:
    """Whether this EP compiles ``node`` (types and ranks must be known: kernels are typed)."""
    op = node.op_type
    ms = node.domain == "com.microsoft" and op in MS_SINCE
    if not (ms or node.domain in ("", "ai.onnx")) or node.has_subgraphs:
        return False
    g = node.graph
    since = MS_SINCE[op] if ms else SINCE.get(op)
    if since is None or node.opset < since:
        return False
    if op in ELEMENTWISE:
        if not node.outputs or len(node.outputs) != 1 or not _known(g, list(node.inputs) + list(node.outputs)):
            return False
        keep = [i for i, n in enumerate(node.inputs) if n or op == "Clip"]
        dts = [_dtype(g, node.inputs[i]) or "" if node.inputs[i] else "" for i in keep]
        args = [f"x{i}" if node.inputs[i] else "" for i in keep]
        try:
            params = params_for(node)
            check_params(op, params, "params")
            return expression(op, params, args, dts, _dtype(g, node.outputs[0]) or "") is not None
        except Exception:
            return False
    if op == "BatchNormalization":
        return (
            len([o for o in node.outputs if o]) == 1
            and not node.attr("training_mode", 0)
            and all(g.constant_value(i) is not None for i in node.inputs[1:5])
            and _known(g, [node.inputs[0], node.outputs[0]], FLOAT_DTYPES)
            and (_rank(g, node.inputs[0]) or 0) >= 2
        )
    if op == "Conv":
        return (
            _conv_attrs_fit(node)
            and _known(g, [node.inputs[0], node.outputs[0]], FLOAT_DTYPES)
            and _rank(g, node.inputs[0]) in (3, 4)
            and g.constant_value(node.inputs[1]) is not None
            and (len(node.inputs) < 3 or not node.inputs[2] or g.constant_value(node.inputs[2]) is not None)
        )
    if op == "MatMul":
        return _known(g, list(node.inputs) + list(node.outputs), FLOAT_DTYPES) and all(
            (_rank(g, n) or 0) >= 1 for n in node.inputs
        )
    return False


def _conv_attrs_fit(node: Any) -> bool:
    """Whether a Conv's attributes are within what its compiled step accepts (``spec``); one
    beyond (a stride over 4096) is delegated to the reference kernel instead."""
    try:
        check_conv_attrs({k: v for k, v in node.attributes.items() if k in CONV_ATTRS}, "attrs")
    except SpecError:
        return False
    return True


def choose_groups(graph: Any, note: Note | None = None) -> list[list[Any]]:
    """Maximal convex groups of supported nodes among ``graph.nodes`` (the unclaimed ones);
    ``note`` is told about each node left out for the record's bounds only."""
    available = {n.index for n in graph.nodes}
    ok = {n.index for n in graph.nodes if supported(n, note)}
    group_of: dict[int, int] = {}
    groups: dict[int, list[Any]] = {}
    reach: dict[int, frozenset[int]] = {}  # node -> groups it depends on
    gdeps: dict[int, set[int]] = {}  # group -> groups its members depend on directly
    for n in graph.all_nodes:
        producers = [p for p in (graph.producer(i) for i in tuple(n.inputs) + n.implicit_inputs if i) if p is not None]
        r: set[int] = set()
        for p in producers:
            r |= reach.get(p.index, frozenset())
            if p.index in group_of:
                r.add(group_of[p.index])
        reach[n.index] = frozenset(r)
        if n.index not in ok or n.index not in available:
            continue
        chosen = None
        for p in producers:
            gid = group_of.get(p.index)
            if gid is None or gid == chosen:
                continue
            # convex: no other producer outside the group may depend on the group; acyclic: no
            # group this node depends on may itself depend on the group (two groups feeding each
            # other through different members would be a cycle of fused nodes)
            if all(
                group_of.get(q.index) == gid or gid not in reach.get(q.index, frozenset()) for q in producers
            ) and not any(_group_depends(gdeps, h, gid) for h in r if h != gid):
                chosen = gid
                break
        if chosen is None:
            chosen = len(groups)
            groups[chosen] = []
            gdeps[chosen] = set()
        group_of[n.index] = chosen
        groups[chosen].append(n)
        gdeps[chosen] |= r - {chosen}
    _merge_groups(graph, groups, group_of)
    # absorb Constant nodes whose every consumer is in one group
    for n in graph.nodes:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or n.index in group_of:
            continue
        if n.outputs[0] in {v.name for v in graph.proto.output}:
            continue
        consumers = graph.consumers(n.outputs[0])
        owners = {group_of.get(c.index) for c in consumers}
        gid = owners.pop() if len(owners) == 1 else None
        if gid is not None and graph.constant_value(n.outputs[0]) is not None:
            group_of[n.index] = gid
            groups[gid].append(n)
    out = []
    for nodes in groups.values():
        if any(x.op_type != "Constant" for x in nodes):
            out.append(sorted(nodes, key=lambda x: x.index))
    return out


def _merge_groups(graph: Any, groups: dict[int, list[Any]], group_of: dict[int, int]) -> None:
    """Merge groups while the union stays convex: growing from producers leaves a group per node
    that reads only values from outside (a Shape of an input, a branch from a graph input), most of
    them mergeable. Groups ``a`` before ``b`` (in a topological order of the graph of groups and
    other nodes) merge when no path leads from ``a`` to ``b`` through anything else, so the graph
    of fused nodes stays acyclic. Reachability is kept as bitsets; each merge recomputes it."""
    from ep_core.sdk.graph import topo_order

    while len(groups) > 1:
        gids = sorted(groups)
        vid = {g: i for i, g in enumerate(gids)}
        vertex: dict[int, int] = {}
        for n in graph.all_nodes:
            g = group_of.get(n.index)
            vertex[n.index] = vid[g] if g is not None else len(gids) + n.index
        size = len(gids) + len(graph.all_nodes)
        succ: list[set[int]] = [set() for _ in range(size)]
        for n in graph.all_nodes:
            for i in tuple(n.inputs) + n.implicit_inputs:
                p = graph.producer(i) if i else None
                if p is not None and vertex[p.index] != vertex[n.index]:
                    succ[vertex[p.index]].add(vertex[n.index])
        order = topo_order(size, [sorted(x) for x in succ])
        reach = [0] * size  # vertex -> bitset of the vertices it reaches
        for v in reversed(order):
            r = 0
            for w in succ[v]:
                r |= reach[w] | (1 << w)
            reach[v] = r
        pos = {v: k for k, v in enumerate(order)}
        ranked = sorted(range(len(gids)), key=pos.__getitem__)
        pair = None
        for k, a in enumerate(ranked):
            for b in ranked[k + 1 :]:
                via = 0
                for w in succ[a]:
                    if w != b:
                        via |= reach[w] | (1 << w)
                if not (via >> b) & 1:
                    pair = gids[a], gids[b]
                    break
            if pair:
                break
        if pair is None:
            return
        keep, gone = pair
        for n in groups.pop(gone):
            group_of[n.index] = keep
            groups[keep].append(n)


def _group_depends(gdeps: dict[int, set[int]], start: int, target: int) -> bool:
    """Whether group ``start`` depends on group ``target`` (through any chain of groups)."""
    seen, todo = {start}, [start]
    while todo:
        g = todo.pop()
        for h in gdeps.get(g, ()):
            if h == target:
                return True
            if h not in seen:
                seen.add(h)
                todo.append(h)
    return False


@dataclass
class _Item:
    """One elementwise computation inside a cluster: an op of ``ops`` with its parameters."""

    inputs: list[str]
    output: str
    op: str
    params: dict[str, Any]
    node: Any = None  # the ONNX node it computes (none for a folded BatchNormalization or conv bias)


@dataclass
class _Cluster:
    items: list[_Item] = field(default_factory=list)
    produced: set[str] = field(default_factory=set)
    shaped: set[str] = field(default_factory=set)  # values known to have the cluster's shape


@dataclass
class GroupPlan:
    """A declarative plan (JSON data, see ``spec``), the constants it needs, and the fused node's
    input and output types (``[dtype, shape]``, None where unknown) its context node must match."""

    plan: dict[str, Any]
    weights: dict[str, np.ndarray]
    types: dict[str, list[list[Any]]]


def build_plan(
    view: Any,
    inputs: Sequence[str],
    outputs: Sequence[str],
    parallel: Callable[[int | None], bool],
    one_thread: bool = False,
) -> GroupPlan:
    """The plan of one fused group (``view`` holds its nodes; ``inputs``/``outputs`` are the fused
    node's). ``one_thread``: the session runs on one thread, so dense convolutions may take the
    serial direct kernel (``direct_conv``; the choice is recorded in the step)."""
    graph = _WithSynthetic(view)
    consts: dict[str, np.ndarray] = {}
    members = list(view.nodes)
    steps: list[dict[str, Any] | _Cluster] = []  # a contraction's plan step, or a cluster of elementwise items
    where: dict[str, int] = {}  # value -> index of the step producing it
    derived: set[str] = set()  # values computed from constants only (the runner folds their steps)

    def from_constants(names: Sequence[str]) -> bool:
        return all(n in consts or n in derived for n in names if n)

    def const(name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in consts:
            return consts[name]
        if name in inputs:
            return None
        v = graph.constant_value(name)
        if v is not None:
            consts[name] = v
        return v

    for node in members:
        op = node.op_type
        if op == "Constant" and node.domain in ("", "ai.onnx"):
            consts[node.outputs[0]] = graph.constant_value(node.outputs[0])
            continue
        if not compiled(node) or op == "Identity":  # a delegated Identity hands on its input: no copy
            for i in node.inputs:
                const(i)
            if from_constants(node.inputs):
                derived.update(o for o in node.outputs if o)
            steps.append(_node_step(graph, node, consts))
            where.update((o, len(steps) - 1) for o in node.outputs if o)
            continue
        if op in CONTRACTIONS:
            for i in node.inputs:
                const(i)
            kind = op.lower()
            ins = list(node.inputs) + ([""] * (3 - len(node.inputs)) if kind == "conv" else [])
            known = CONV_ATTRS if kind == "conv" else ()
            body: dict[str, Any] = {"kind": kind, "inputs": ins, "outputs": [node.outputs[0]]}
            if known:
                body["attrs"] = {k: v for k, v in node.attributes.items() if k in known}
            bias_item = None
            if kind == "conv":
                body["depthwise"] = _depthwise(graph, node, parallel)
                if body["depthwise"] is None:
                    if one_thread and _direct(graph, node):
                        body["direct"] = True
                    bias_item = _conv_bias_item(graph, node, ins, consts, body)
            steps.append(body)
            where[body["outputs"][0]] = len(steps) - 1
            if bias_item is None:
                continue
            item = bias_item  # the bias add opens the elementwise tail's cluster (one pass over memory)
        elif op == "BatchNormalization":
            x = node.inputs[0]
            const(x)  # a constant input is a weight of the plan (else no step or input made it)
            scale, bias, mean, var = (graph.constant_value(i) for i in node.inputs[1:5])
            eps = float(node.attr("epsilon", 1e-5))
            dt = np.dtype(_dtype(graph, x))
            a = (scale / np.sqrt(var + eps)).astype(dt)
            b = (bias - mean * a).astype(dt)
            shape = (a.shape[0],) + (1,) * ((_rank(graph, x) or 2) - 2)
            an, bn = f"{node.outputs[0]}::bn_scale", f"{node.outputs[0]}::bn_shift"
            consts[an], consts[bn] = a.reshape(shape), b.reshape(shape)
            item = _Item([x, an, bn], node.outputs[0], "ScaleShift", {})
        else:
            for i in node.inputs:
                const(i)
            item = _Item(list(node.inputs), node.outputs[0], op, params_for(node), node)
        # join the latest cluster among the producers' if every producer runs no later
        # and the item keeps the cluster's shape (``_keeps_shape``), so every value a cluster
        # computes has the shape of its first item's output (independent chains of different
        # shapes joining through a shared scalar never mix)
        deps = [where[i] for i in item.inputs if i in where]
        cl: _Cluster | None = None
        target = -1
        if deps:
            target = max(deps)
            last = steps[target]
            if isinstance(last, _Cluster) and _keeps_shape(graph, item, last.shaped, consts):
                cl = last
        constant = from_constants(item.inputs)
        if constant:
            derived.add(item.output)
        if (
            cl is None
            and not constant
            and steps
            and isinstance(steps[-1], _Cluster)
            and len(steps) - 1 > max(deps, default=-1)
        ):
            # a chain whose producers all ran before the latest cluster joins it when its output
            # has that cluster's static shape (a GRU cell's gates, each from its own Slice); one
            # of constants only does not (its own cluster is folded once, not run every time)
            cl = _sibling(graph, item, steps[-1], consts)
            target = len(steps) - 1 if cl is not None else target
        if cl is None:
            cl = _Cluster()
            steps.append(cl)
            target = len(steps) - 1
            # an input the opening item's output has the shape of: later items may read it too
            cl.shaped.update(i for i in item.inputs if i and i not in consts and _keeps_shape(graph, item, {i}, consts))
        cl.items.append(item)
        cl.produced.add(item.output)
        cl.shaped.add(item.output)
        where[item.output] = target

    # which values leave each step (read by a later step or a fused-node output)
    needed_later: dict[int, set[str]] = {}
    for k, entry in enumerate(steps):
        reads = [i for it in entry.items for i in it.inputs] if isinstance(entry, _Cluster) else entry["inputs"]
        for name in reads:
            if name in where and where[name] != k:
                needed_later.setdefault(where[name], set()).add(name)
    for name in outputs:
        if name in where:
            needed_later.setdefault(where[name], set()).add(name)

    plan_steps: list[dict[str, Any]] = []
    used_consts: set[str] = set()
    for k, entry in enumerate(steps):
        if isinstance(entry, _Cluster) and all(it.node is not None and _tiny(graph, it.node) for it in entry.items):
            if not needed_later.get(k):
                continue  # nothing it computes is read: dead code, as for a kernel
            for it in entry.items:  # shape logic: the reference kernels' NumPy calls, no kernel call
                node_step = _node_step(graph, it.node, consts)
                used_consts.update(n for n in node_step["inputs"] if n in consts)
                plan_steps.append(node_step)
            continue
        if isinstance(entry, _Cluster):
            made = _cluster_step(graph, entry, needed_later.get(k, set()), consts, parallel)
            if made is None:
                continue  # nothing it computes is read: dead code
            entry = made
        used_consts.update(n for n in entry["inputs"] if n in consts)
        if entry["kind"] == "node":
            used_consts.update(v for kind, v in entry["attrs"].values() if kind == "tensor")
        plan_steps.append(entry)
    plan = {"inputs": list(inputs), "outputs": list(outputs), "steps": plan_steps}
    types = {"inputs": [_type(graph, n) for n in inputs], "outputs": [_type(graph, n) for n in outputs]}
    # (reshaped: ascontiguousarray makes a 0-d array 1-d, and a delegated node tells them apart)
    return GroupPlan(plan, {n: np.ascontiguousarray(consts[n]).reshape(consts[n].shape) for n in used_consts}, types)


def _type(graph: Any, name: str) -> list[Any]:
    """``[dtype, shape]`` of a value (None where unknown; symbolic dims None)."""
    value = graph.constant_value(name) if name else None
    if value is not None:
        return [dtype_name(value.dtype), list(value.shape)]
    shape = _static_shape(graph, name) if name else None
    dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
    dt = _dtype(graph, name) if name else None
    return [dt if dt in DATA_DTYPES else None, dims]


def _node_step(graph: Any, node: Any, consts: dict[str, np.ndarray]) -> dict[str, Any]:
    """A delegated node's declarative step (``spec``): op, domain, opset, typed attributes (TENSOR
    ones become weights in ``consts``), value names and types."""
    from ep_numba_cpu import int_loops  # (imports generate, which this module imports)

    anchor = next(o for o in node.outputs if o)
    step = {
        "kind": "node",
        "op": node.op_type,
        "domain": node.domain,
        "opset": node.opset,
        "attrs": attributes(node, anchor, consts),
        "inputs": list(node.inputs),
        "outputs": list(node.outputs),
        "in_types": [_type(graph, n) if n not in consts else _weight_type(consts[n]) for n in node.inputs],
        "out_types": [_type(graph, n) for n in node.outputs],
    }
    kind = int_loops.takes_vnni(step, consts)
    if kind is not None:
        step["int8"] = kind
    return step


def _weight_type(value: np.ndarray) -> list[Any]:
    return [dtype_name(value.dtype), list(value.shape)]


class _WithSynthetic:
    """The group's graph view plus value infos of values the plan makes up (a convolution's output
    before its bias)."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self.infos: dict[str, Any] = {}

    def value_info(self, name: str) -> Any:
        info = self.infos.get(name)
        return info if info is not None else self._graph.value_info(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


def _conv_bias_item(
    graph: _WithSynthetic, node: Any, ins: list[str], consts: dict[str, np.ndarray], body: dict[str, Any]
) -> _Item | None:
    """For a convolution with a constant bias: the convolution step writes its output without the
    bias, and an elementwise item adds it, so the bias joins the tail's kernel instead of being one
    more pass over the output. None (bias left to the convolution) when shapes are not known."""
    bias = consts.get(ins[2]) if ins[2] else None
    rank = _rank(graph, node.inputs[0])
    info = graph.value_info(node.outputs[0])
    if bias is None or bias.ndim != 1 or rank not in (3, 4) or info is None or info.shape is None:
        return None
    out = node.outputs[0]
    raw, b = f"{out}::conv", f"{out}::conv_bias"
    consts[b] = bias.reshape((bias.shape[0],) + (1,) * (rank - 2))
    graph.infos[raw] = info
    body["inputs"] = [ins[0], ins[1], ""]
    body["outputs"] = [raw]
    return _Item([raw, b], out, "BiasAdd", {})


def _cluster_step(
    graph: Any, cl: _Cluster, exported: set[str], consts: dict[str, np.ndarray], parallel: Callable[[int | None], bool]
) -> dict[str, Any] | None:
    """The cluster's declarative step (``spec``: array arguments, items referring to arrays,
    earlier items and literals, exported items, the broadcast flags the static shapes predict);
    None when nothing the cluster computes is read."""
    dtype: dict[str, str] = {}

    def dt(name: str) -> str:
        if name not in dtype:
            dtype[name] = str(consts[name].dtype) if name in consts else (_dtype(graph, name) or "float32")
        return dtype[name]

    ext: list[str] = []
    for it in cl.items:
        for i in it.inputs:
            if i and i not in cl.produced and i not in ext:
                ext.append(i)
    arrays = [n for n in ext if not (n in consts and _inlined(consts[n]))]
    ref: dict[str, list[Any]] = {n: ["a", j] for j, n in enumerate(arrays)}
    for n in ext:
        if n not in ref:
            v = consts[n].reshape(-1)[0]
            kind = "bool" if consts[n].dtype == np.bool_ else str(consts[n].dtype)
            ref[n] = ["c", kind, bool(v) if kind == "bool" else float(v) if kind in FLOAT_DTYPES else int(v)]
    items: list[dict[str, Any]] = []
    for t, it in enumerate(cl.items):
        args = [ref[i] if i else None for i in it.inputs]
        items.append({"op": it.op, "args": args, "dtype": dt(it.output), "params": it.params})
        ref[it.output] = ["v", t]
    exports = [t for t, it in enumerate(cl.items) if it.output in exported]
    if not exports:
        return None
    outs = [cl.items[t].output for t in exports]
    ranks = [(_rank(graph, n) if n not in consts else consts[n].ndim) or 0 for n in arrays + outs]
    rank = max([1] + ranks)
    full: list[list[bool]] = []  # per array and dim: spans the output (unknown dims are assumed to)
    for n in arrays:
        shape = tuple(consts[n].shape) if n in consts else (_static_shape(graph, n) or ())
        full.append([d != 1 for d in (1,) * (rank - len(shape)) + tuple(shape)])
    return {
        "kind": "kernel",
        "inputs": arrays,
        "arrays": [dt(n) for n in arrays],
        "full": full,
        "rank": rank,
        "items": items,
        "outputs": outs,
        "exports": exports,
        "out_ranks": [_rank(graph, n) or 0 for n in outs],
        "parallel": parallel(_static_numel(graph, outs[0])),
    }


def _inlined(value: np.ndarray) -> bool:
    """Whether a scalar constant is spelled as a literal in the kernel source. Only structural
    numbers (0, 1, 0.5, 3, 6, ... and non-finite ones) are: a learned scale or shift passed as a
    one-element argument lets clusters that differ only in their weights share one kernel (PP-OCR
    det: 38 distinct elementwise kernels became 10), where a literal would compile one kernel each."""
    if value.size > MAX_INLINE_SIZE or value.size == 0:  # an empty constant is an array argument
        return False
    v = value.reshape(-1)[0]
    if value.dtype == np.bool_:
        return True
    f = float(v)
    return not math.isfinite(f) or (abs(f) <= MAX_INLINE_MAGNITUDE and float(f * 8).is_integer())


def _depthwise(graph: Any, node: Any, parallel: Callable[[int | None], bool]) -> dict[str, Any] | None:
    """``{dtype, parallel}`` for a 2-D depthwise convolution that ``generate`` compiles a kernel
    for (``depthwise_geometry``: BLAS serves them badly); None for any other convolution."""
    w = graph.constant_value(node.inputs[1])
    dt = _dtype(graph, node.inputs[0])
    if w is None or dt not in FLOAT_DTYPES or str(w.dtype) != dt or _rank(graph, node.inputs[0]) != 4:
        return None
    if depthwise_geometry({k: v for k, v in node.attributes.items() if k in CONV_ATTRS}, w.shape) is None:
        return None
    return {"dtype": dt, "parallel": parallel(_static_numel(graph, node.outputs[0]))}


def _direct(graph: Any, node: Any) -> bool:
    """Whether a dense convolution takes the compiled direct kernel: a stored float32 filter the
    kernel serves (``direct_conv.serves``), on a CPU with AVX-512 (asked only then: importing it
    starts Numba's code generator)."""
    w = graph.constant_value(node.inputs[1])
    if w is None or str(w.dtype) != "float32" or _dtype(graph, node.inputs[0]) != "float32":
        return False
    from ep_numba_cpu import direct_conv

    attrs = {k: v for k, v in node.attributes.items() if k in CONV_ATTRS}
    return direct_conv.serves(attrs, w.shape, "float32") and direct_conv.available()


def _sibling(graph: Any, item: _Item, cluster: _Cluster, consts: Mapping[str, np.ndarray]) -> _Cluster | None:
    """``cluster`` when ``item``, reading none of its values, may still run in it: its output has
    the static shape of the cluster's first value, and so has an input it keeps the shape of."""
    first = cluster.items[0].output
    if not _same_static_shape(graph, item.output, first, _unvouched_labels(graph, item.output, first)):
        return None
    alike = {i for i in item.inputs if i and i not in consts and _same_static_shape(graph, i, first)}
    if not alike or not _keeps_shape(graph, item, cluster.shaped | alike, consts):
        return None
    cluster.shaped.update(alike)
    return cluster


def _keeps_shape(graph: Any, item: _Item, shaped: set[str], consts: Mapping[str, np.ndarray]) -> bool:
    """Whether ``item``'s output has the shape of the values in ``shaped`` (a cluster's) among its
    inputs: one of them has its output's static shape, or every other input is in ``shaped`` too
    or a constant (or a value of static shape) that broadcasts into them without enlarging them
    (a bias over channels, a scalar, squeeze-excitation's (1, C, 1, 1) scales). The second form
    holds with dynamic dims (PP-OCR's H and W), where static shapes say nothing: Conv -> bias ->
    Relu, HardSwish's x * Clip(x + 3) / 6 stay one kernel, one pass over memory."""
    inside = [i for i in item.inputs if i and i in shaped]
    if not inside:
        return False
    if any(_same_static_shape(graph, i, item.output) for i in inside):
        return True
    shape = _static_shape(graph, inside[0])
    if shape is None:
        return False
    for name in item.inputs:
        if not name or name in shaped:
            continue
        value = consts.get(name)
        small = value.shape if value is not None else _static_shape(graph, name)  # a computed (1, C, 1, 1) too
        if small is None or len(small) > len(shape) or not all(isinstance(d, int) for d in small):
            return False
        dims = shape[len(shape) - len(small) :]
        if any(s != 1 and s != d for s, d in zip(small, dims, strict=True)):
            return False
    return True


def _same_static_shape(graph: Any, a: str, b: str, labels: frozenset[str] = frozenset()) -> bool:
    """Both shapes known and equal dim by dim (equal ints or the same symbolic name, unless the
    name is one of ``labels``)."""
    sa, sb = _static_shape(graph, a), _static_shape(graph, b)
    return (
        sa is not None
        and sb is not None
        and len(sa) == len(sb)
        and all(
            x == y and (isinstance(x, int) or (isinstance(x, str) and x != "" and x not in labels))
            for x, y in zip(sa, sb, strict=True)
        )
    )


def _unvouched_labels(graph: Any, a: str, b: str) -> frozenset[str]:
    """Symbolic dims several inputs declare that no input both ``a`` and ``b`` are computed from
    declares: onnxruntime does not hold feeds to a shared name (exporters reuse "N", "seq" for
    unrelated axes), so two independent chains that only share one are not known to be alike (fused
    as one kernel, feeds of 3 and 4 failed); slices of one input (a GRU cell's gates) still are."""
    memo = graph.__dict__.setdefault("_sibling_labels", {})  # once per plan: groups have hundreds of nodes
    if "shared" not in memo:
        declared = {
            v.name: {d for d in (v.shape or ()) if isinstance(d, str) and d} for v in getattr(graph, "inputs", ())
        }
        seen: dict[str, int] = {}
        for dims in declared.values():
            for d in dims:
                seen[d] = seen.get(d, 0) + 1
        memo["declared"], memo["shared"] = declared, {d for d, n in seen.items() if n > 1}
    declared, shared = memo["declared"], memo["shared"]
    if not shared:
        return frozenset()
    if "roots" not in memo:
        memo["roots"] = _input_roots(graph)
    roots = memo["roots"]
    common = roots.get(a, frozenset()) & roots.get(b, frozenset())
    return frozenset(shared - {d for name in common for d in declared.get(name, ())})


def _input_roots(graph: Any) -> dict[str, frozenset[str]]:
    """Value -> the inputs of ``graph`` it is computed from (nodes in topological order)."""
    inputs = {v.name for v in getattr(graph, "inputs", ())}
    roots: dict[str, frozenset[str]] = {n: frozenset({n}) for n in inputs}
    for node in graph.nodes:
        got = frozenset().union(*(roots.get(i, frozenset()) for i in node.inputs if i))
        roots.update((o, got) for o in node.outputs if o)
    return roots


def _static_shape(graph: Any, name: str) -> tuple[Any, ...] | None:
    info = graph.value_info(name)
    return None if info is None or info.shape is None else tuple(info.shape)


RECURRENT = ("LSTM", "GRU")  # served by compiled loops (recurrent.py)
ML_OPS = ("TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble", "SVMClassifier")
LOOPS = {("ai.onnx.ml", op) for op in ML_OPS} | {("com.microsoft", "DynamicQuantizeLSTM")}  # ml_ / int_loops.py


def _vnni_product(node: Any) -> bool:
    """Whether an 8-bit product node has a VNNI kernel on this CPU (a grouped conv has none)."""
    from ep_numba_cpu import int_loops  # (imports generate, which this module imports)

    if (node.domain, node.op_type) not in int_loops.GEMM_OPS | int_loops.CONV_OPS or int(node.attr("group", 1)) != 1:
        return False
    from ep_numba_cpu import vnni  # (only here: its import and the CPU query start Numba's code generator)

    return vnni.available()


def pays_a_runner(node: Any) -> bool:
    """Whether ``node`` makes a group worth its runner's call when the group is not the whole
    graph (inside a control-flow body the call is paid on every branch taken): a recurrent loop,
    a tree walk, SVM coupling or integer recurrent product, an 8-bit product on VNNI, or a
    compiled node computing floats.
    Copies (Identity) and shape logic on integers and bools run as fast on the next EP without
    the call (silero's nested Ifs: a dozen such groups made it 2x slower than the reference EP)."""
    if node.op_type in RECURRENT or (node.domain, node.op_type) in LOOPS:
        return True
    if _vnni_product(node):
        return True
    if node.op_type == "Identity" or not compiled(node) or not node.outputs:
        return False
    return _dtype(node.graph, node.outputs[0]) in FLOAT_DTYPES


def _tiny(graph: Any, node: Any) -> bool:
    """Shape logic: an elementwise node of at most ``TINY`` output elements that computes no
    floats from floats (an Equal on a dim, a Cast of a sample rate). A cluster of nothing else
    runs as reference steps: their NumPy calls (~1 us each) beat a compiled kernel's call from the
    runner (~3-5 us); one with float work keeps its kernel (one call for all its items)."""
    out = node.outputs[0] if node.outputs else ""
    n = _static_numel(graph, out) if out else None
    if n is None or n > TINY:
        return False
    floats = [i for i in node.inputs if i and _dtype(graph, i) in FLOAT_DTYPES]
    return (_dtype(graph, out) not in FLOAT_DTYPES or not floats) and delegable(node)


def _static_numel(graph: Any, name: str) -> int | None:
    info = graph.value_info(name)
    if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
        return None
    return int(np.prod(info.shape)) if info.shape else 1


def weight_key(array: np.ndarray) -> str:
    """Content key of a weight (the sha256 of its dtype, shape and bytes): identical weights are
    stored once, and a stored weight is checked against its key when a context loads."""
    h = hashlib.sha256()
    h.update(f"{array.dtype.str}|{array.shape}|".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()

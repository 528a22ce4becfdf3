"""Choosing the groups to fuse, and turning one group into a plan plus generated kernel sources.

Groups are grown in topological order: a supported node joins the group of one of its producers
unless that would make the group non-convex (a path leaving the group and re-entering at the node).
Constant nodes whose every consumer is in one group join it, so their values travel with the
compiled context. Inside a group, contractions are separate steps and elementwise nodes form
clusters, each compiled into one kernel that computes every value at the broadcast shape of the
cluster's inputs (values stay in registers; outputs of a smaller shape are sliced back)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ep_numba_cpu.ops import (
    CONTRACTIONS,
    ELEMENTWISE,
    FLOAT_DTYPES,
    KERNEL_DTYPES,
    NB_NAMES,
    SINCE,
    helper_source,
    literal,
)

MAX_INLINE_SIZE = 1  # constants of this many elements become literals in the kernel source


def _dtype(graph: Any, name: str) -> str | None:
    value = graph.constant_value(name)
    if value is not None:
        return "bool" if value.dtype == np.bool_ else str(value.dtype)
    info = graph.value_info(name)
    if info is None or info.kind != "tensor" or not info.elem_type:
        return None
    dt = info.np_dtype
    return None if dt is None else ("bool" if dt == np.bool_ else str(np.dtype(dt)))


def _rank(graph: Any, name: str) -> int | None:
    value = graph.constant_value(name)
    if value is not None:
        return value.ndim
    info = graph.value_info(name)
    return None if info is None or info.shape is None else len(info.shape)


def _known(graph: Any, names: Sequence[str], dtypes: Sequence[str] = KERNEL_DTYPES) -> bool:
    return all(_dtype(graph, n) in dtypes and _rank(graph, n) is not None for n in names if n)


def supported(node: Any) -> bool:
    """Whether this EP can fuse ``node`` (types and ranks must be known: kernels are typed)."""
    if node.domain not in ("", "ai.onnx") or node.has_subgraphs:
        return False
    g = node.graph
    op = node.op_type
    if op not in SINCE or node.opset < SINCE[op]:
        return False
    if op in ELEMENTWISE:
        if not node.outputs or len(node.outputs) != 1 or not _known(g, list(node.inputs) + list(node.outputs)):
            return False
        dts = [_dtype(g, i) or "" for i in node.inputs if i]
        args = [f"x{i}" for i, n in enumerate(node.inputs) if n]
        if op == "Clip":
            args = [f"x{i}" if n else "" for i, n in enumerate(node.inputs)]
        try:
            return ELEMENTWISE[op](node, args, dts, _dtype(g, node.outputs[0]) or "") is not None
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
            _known(g, [node.inputs[0], node.outputs[0]], FLOAT_DTYPES)
            and _rank(g, node.inputs[0]) in (3, 4)
            and g.constant_value(node.inputs[1]) is not None
            and (len(node.inputs) < 3 or not node.inputs[2] or g.constant_value(node.inputs[2]) is not None)
        )
    if op == "MatMul":
        return _known(g, list(node.inputs) + list(node.outputs), FLOAT_DTYPES) and all(
            (_rank(g, n) or 0) >= 1 for n in node.inputs
        )
    if op == "Gemm":
        return _known(g, [n for n in node.inputs if n] + list(node.outputs), FLOAT_DTYPES)
    return False


def choose_groups(graph: Any) -> list[list[Any]]:
    """Maximal convex groups of supported nodes among ``graph.nodes`` (the unclaimed ones)."""
    available = {n.index for n in graph.nodes}
    ok = {n.index for n in graph.nodes if supported(n)}
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
    """One elementwise computation inside a cluster."""

    inputs: list[str]
    output: str
    expr: Callable[[Sequence[str], Sequence[str], str], str | None]


@dataclass
class _Cluster:
    items: list[_Item] = field(default_factory=list)
    produced: set[str] = field(default_factory=set)


@dataclass
class GroupPlan:
    """A plan (JSON data), the constants it needs and the kernel sources to compile."""

    plan: dict[str, Any]
    weights: dict[str, np.ndarray]
    kernels: dict[str, dict[str, Any]]  # key -> {source, fn, signature, parallel}


def build_plan(
    view: Any, inputs: Sequence[str], outputs: Sequence[str], parallel: Callable[[int | None], bool]
) -> GroupPlan:
    """The plan of one fused group (``view`` holds its nodes; ``inputs``/``outputs`` are the fused
    node's)."""
    from ep_numba_cpu.codegen import kernel_key

    graph = _WithSynthetic(view)
    consts: dict[str, np.ndarray] = {}
    members = list(view.nodes)
    steps: list[dict[str, Any] | _Cluster] = []  # a contraction's plan step, or a cluster of elementwise items
    where: dict[str, int] = {}  # value -> index of the step producing it

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
        if op == "Constant":
            consts[node.outputs[0]] = graph.constant_value(node.outputs[0])
            continue
        if op in CONTRACTIONS:
            for i in node.inputs:
                const(i)
            kind = op.lower()
            ins = list(node.inputs) + ([""] * (3 - len(node.inputs)) if kind in ("conv", "gemm") else [])
            attrs = {k: v for k, v in node.attributes.items() if isinstance(v, (int, float, str, list))}
            body: dict[str, Any] = {"kind": kind, "inputs": ins, "outputs": [node.outputs[0]], "attrs": attrs}
            bias_item = None
            if kind == "conv":
                dw = _depthwise_kernel(graph, node, parallel)
                if dw is not None:
                    body["kernel"] = dw
                else:
                    bias_item = _conv_bias_item(graph, node, ins, consts, body)
            steps.append(body)
            where[body["outputs"][0]] = len(steps) - 1
            if bias_item is None:
                continue
            item = bias_item  # the bias add opens the elementwise tail's cluster (one pass over memory)
        elif op == "BatchNormalization":
            x = node.inputs[0]
            scale, bias, mean, var = (graph.constant_value(i) for i in node.inputs[1:5])
            eps = float(node.attr("epsilon", 1e-5))
            dt = np.dtype(_dtype(graph, x))
            a = (scale / np.sqrt(var + eps)).astype(dt)
            b = (bias - mean * a).astype(dt)
            shape = (a.shape[0],) + (1,) * ((_rank(graph, x) or 2) - 2)
            an, bn = f"{node.outputs[0]}::bn_scale", f"{node.outputs[0]}::bn_shift"
            consts[an], consts[bn] = a.reshape(shape), b.reshape(shape)
            item = _Item([x, an, bn], node.outputs[0], lambda a_, d_, o_: f"({a_[0]} * {a_[1]} + {a_[2]})")
        else:
            for i in node.inputs:
                const(i)
            fn = ELEMENTWISE[op]
            item = _Item(
                list(node.inputs), node.outputs[0], (lambda f, nd: lambda a_, d_, o_: f(nd, a_, d_, o_))(fn, node)
            )
        # join the latest cluster among the producers' if every producer runs no later
        # and the item keeps the cluster's shape: one of its inputs made there has its output's
        # static shape, so every value a cluster computes has the shape of its first item's output
        # (independent chains of different shapes joining through a shared scalar never mix)
        deps = [where[i] for i in item.inputs if i in where]
        cl: _Cluster | None = None
        target = -1
        if deps:
            target = max(deps)
            last = steps[target]
            if isinstance(last, _Cluster) and any(
                i in last.produced and _same_static_shape(graph, i, item.output) for i in item.inputs if i
            ):
                cl = last
        if cl is None:
            cl = _Cluster()
            steps.append(cl)
            target = len(steps) - 1
        cl.items.append(item)
        cl.produced.add(item.output)
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
    kernels: dict[str, dict[str, Any]] = {}
    used_consts: set[str] = set()
    for k, entry in enumerate(steps):
        if not isinstance(entry, _Cluster):
            used_consts.update(n for n in entry["inputs"] if n in consts)
            if "kernel" in entry:
                kernel = entry["kernel"]
                key = kernel_key(kernel["source"], kernel["signature"], kernel["parallel"])
                kernels[key] = kernel
                entry = {**entry, "kernel": key}
            plan_steps.append(entry)
            continue
        made = _cluster_kernel(graph, entry, needed_later.get(k, set()), consts, parallel)
        if made is None:
            continue  # nothing it computes is read: dead code
        step, kernel, flat = made
        used_consts.update(n for n in step["inputs"] if n in consts)
        key = kernel_key(kernel["source"], kernel["signature"], kernel["parallel"])
        step["kernel"] = key
        kernels[key] = kernel
        if flat is not None:
            fkey = kernel_key(flat["source"], flat["signature"], flat["parallel"])
            step["kernel_spec"] = fkey
            kernels[fkey] = flat
        plan_steps.append(step)
    plan = {"inputs": list(inputs), "outputs": list(outputs), "steps": plan_steps}
    return GroupPlan(plan, {n: np.ascontiguousarray(consts[n]) for n in used_consts}, kernels)


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
    return _Item([raw, b], out, lambda a_, d_, o_: f"({a_[0]} + {a_[1]})")


def _cluster_kernel(
    graph: Any, cl: _Cluster, exported: set[str], consts: dict[str, np.ndarray], parallel: Callable[[int | None], bool]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None] | None:
    """The cluster's step and kernels: a general one over N-d strided (broadcast) views, and one
    over flat contiguous buffers specialised for the broadcast pattern the static shapes predict
    (``_spec_kernel``; the runtime uses it whenever the real shapes follow that pattern); None when
    nothing the cluster computes is read."""
    dtype: dict[str, str] = {}

    def dt(name: str) -> str:
        if name not in dtype:
            dtype[name] = str(consts[name].dtype) if name in consts else (_dtype(graph, name) or "float32")
            if dtype[name] == "bool":
                pass
        return dtype[name]

    ext: list[str] = []
    for it in cl.items:
        for i in it.inputs:
            if i and i not in cl.produced and i not in ext:
                ext.append(i)
    arrays = [n for n in ext if not (n in consts and consts[n].size <= MAX_INLINE_SIZE)]
    expr: dict[str, str] = {}
    for n in ext:
        if n not in arrays:
            v = consts[n].reshape(-1)[0]
            expr[n] = literal(v, "bool" if consts[n].dtype == np.bool_ else str(consts[n].dtype))
    for j, n in enumerate(arrays):
        expr[n] = f"x{j}"
    outs = [it.output for it in cl.items if it.output in exported]
    if not outs:
        return None
    ranks = [(_rank(graph, n) if n not in consts else consts[n].ndim) or 0 for n in arrays + outs]
    rank = max([1] + ranks)
    lines: list[str] = []
    for t, it in enumerate(cl.items):
        args = [expr[i] if i else "" for i in it.inputs]
        e = it.expr(args, [dt(i) if i else "" for i in it.inputs], dt(it.output))
        if e is None:
            raise ValueError(f"cannot generate code for {it.output}")
        var = f"v{t}"
        lines.append(f"{var} = {e}")
        expr[it.output] = var
    # dependencies of every exported output on the array arguments
    deps: dict[str, set[int]] = {n: {j} for j, n in enumerate(arrays)}
    for it in cl.items:
        deps[it.output] = set().union(*[deps.get(i, set()) for i in it.inputs if i])
    idx = ", ".join(f"i{d}" for d in range(rank))
    body = [f"        x{j} = a{j}[{idx}]" for j in range(len(arrays))]
    body += [f"        {ln}" for ln in lines]
    body += [f"        o{m}[{idx}] = {expr[n]}" for m, n in enumerate(outs)]
    numel = _static_numel(graph, outs[0]) if outs else None
    par = parallel(numel)
    params = ", ".join([f"o{m}" for m in range(len(outs))] + [f"a{j}" for j in range(len(arrays))])
    src = _prelude(lines) + [f"def kernel({params}):"]
    src += [f"    n{d} = o0.shape[{d}]" for d in range(rank)]
    loop = "prange" if par else "range"
    if rank == 1:
        src.append(f"    for i0 in {loop}(n0):")
    else:
        outer = " * ".join(f"n{d}" for d in range(rank - 1))
        src.append(f"    for t in {loop}({outer}):")
        rest = "t"
        for d in range(rank - 2, -1, -1):
            if d == 0:
                src.append(f"        i0 = {rest}")
            else:
                src.append(f"        i{d} = {rest} % n{d}")
                src.append(f"        r{d} = {rest} // n{d}")
                rest = f"r{d}"
        src.append(f"        for i{rank - 1} in range(n{rank - 1}):")
        body = ["    " + b for b in body]
    src += body
    source = "\n".join(src) + "\n"
    sig = ",".join([f"{NB_NAMES[dt(n)]}:{rank}:C:w" for n in outs] + [f"{NB_NAMES[dt(n)]}:{rank}:A:r" for n in arrays])
    step = {
        "kind": "kernel",
        "inputs": arrays,
        "rank": rank,
        "outputs": [{"name": n, "dtype": dt(n), "rank": (_rank(graph, n) or 0), "deps": sorted(deps[n])} for n in outs],
    }
    spec = _broadcast_spec(graph, arrays, consts, rank)
    spec_kernel = _spec_kernel(spec, params, lines, expr, outs, arrays, dt, par)
    step["spec"] = spec
    return step, {"source": source, "fn": "kernel", "signature": sig, "parallel": par}, spec_kernel


def _prelude(lines: Sequence[str]) -> list[str]:
    """Imports, and the definitions of the helpers (``ops.HELPERS``) the kernel body calls."""
    helpers = helper_source("\n".join(lines))
    head = [
        "import math",
        "import numpy as np",
        "from numba import njit, prange" if helpers else "from numba import prange",
    ]
    return head + ([helpers.rstrip("\n"), ""] if helpers else []) + ["", ""]


def _broadcast_spec(graph: Any, arrays: Sequence[str], consts: dict[str, np.ndarray], rank: int) -> dict[str, Any]:
    """The broadcast pattern the kernel is specialised for, from the static shapes: per array
    argument and dimension, ``True`` where it spans the output (unknown dims are assumed to) and
    ``False`` where its dim is 1; then the output dims coalesced into groups over which every
    argument is uniformly full or broadcast, dims where every argument broadcasts dropped. The
    runtime checks the real shapes against ``full`` before calling the specialised kernel."""
    full: list[list[bool]] = []
    for n in arrays:
        shape = tuple(consts[n].shape) if n in consts else (_static_shape(graph, n) or ())
        shape = (1,) * (rank - len(shape)) + tuple(shape)
        full.append([d != 1 for d in shape])
    dims = [d for d in range(rank) if any(f[d] for f in full)]
    groups: list[list[int]] = []
    for d in dims:
        if groups and all(f[groups[-1][-1]] == f[d] for f in full):
            groups[-1].append(d)
        else:
            groups.append([d])
    if not groups:
        groups = [list(range(rank))]
    return {"full": full, "groups": groups, "group_full": [[f[g[0]] for g in groups] for f in full]}


def _spec_kernel(
    spec: dict[str, Any],
    params: str,
    lines: Sequence[str],
    expr: dict[str, str],
    outs: Sequence[str],
    arrays: Sequence[str],
    dt: Callable[[str], str],
    par: bool,
) -> dict[str, Any]:
    """The kernel over flat contiguous buffers for one broadcast pattern: nested loops over the
    coalesced dims, each argument read at a base offset plus the innermost index where it spans the
    innermost dims, or as one value hoisted out of the innermost loop where it broadcasts there; no
    per-element index arithmetic, so the innermost loop vectorises."""
    k = len(spec["groups"])
    gf = spec["group_full"]
    src = _prelude(lines) + [f"def kernel({params}, dims):"]
    src += [f"    n{g} = dims[{g}]" for g in range(k)]
    # stride of argument j along group g: the product of the later groups it spans
    for j in range(len(arrays)):
        for g in range(k - 1):
            if gf[j][g]:
                later = [f"n{h}" for h in range(g + 1, k) if gf[j][h]]
                src.append(f"    s{j}_{g} = {' * '.join(later) if later else '1'}")
    ind = "    "
    for g in range(k - 1):
        loop = "prange" if (par and g == 0) else "range"
        src.append(f"{ind}for i{g} in {loop}(n{g}):")
        ind += "    "
    last = k - 1
    obase = "0"
    for g in range(k - 1):
        obase = f"({obase}) * n{g} + i{g}" if g else f"i{g}"
    src.append(f"{ind}ob = ({obase}) * n{last}" if k > 1 else f"{ind}ob = 0")
    for j in range(len(arrays)):
        terms = [f"i{g} * s{j}_{g}" for g in range(k - 1) if gf[j][g]]
        base = " + ".join(terms) if terms else "0"
        if gf[j][last]:
            src.append(f"{ind}b{j} = {base}")
            src.append(f"{ind}r{j} = a{j}[b{j}:b{j} + n{last}]")
        else:
            src.append(f"{ind}x{j} = a{j}[{base}]")
    for m in range(len(outs)):
        src.append(f"{ind}q{m} = o{m}[ob:ob + n{last}]")
    loop = "prange" if (par and k == 1) else "range"
    src.append(f"{ind}for t in {loop}(n{last}):")
    ind += "    "
    src += [f"{ind}x{j} = r{j}[t]" for j in range(len(arrays)) if gf[j][last]]
    src += [f"{ind}{ln}" for ln in lines]
    src += [f"{ind}q{m}[t] = {expr[n]}" for m, n in enumerate(outs)]
    sig = ",".join(
        [f"{NB_NAMES[dt(n)]}:1:C:w" for n in outs] + [f"{NB_NAMES[dt(n)]}:1:C:r" for n in arrays] + ["int64:1:C:r"]
    )
    return {"source": "\n".join(src) + "\n", "fn": "kernel", "signature": sig, "parallel": par}


def _depthwise_source(
    dt: str, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pt: int, pl: int, par: bool
) -> str:
    """A 2-D depthwise convolution with its geometry as constants: each channel's plane is copied
    once into a zero-bordered buffer, then every output row is one loop over the output columns
    whose body is the fully unrolled sum of the taps (weights held in locals), with the bias folded
    in; with stride 1 that loop vectorises."""
    taps = [(a, e) for a in range(kh) for e in range(kw)]
    src = [
        "import numpy as np",
        "from numba import prange",
        "",
        "",
        "def kernel(out, x, w, bias):",
        "    nb = out.shape[0]",
        "    nc = out.shape[1]",
        "    ho = out.shape[2]",
        "    wo = out.shape[3]",
        "    hi = x.shape[2]",
        "    wi = x.shape[3]",
        f"    hb = max((ho - 1) * {sh} + {(kh - 1) * dh + 1}, {pt} + hi)",
        f"    wb = max((wo - 1) * {sw} + {(kw - 1) * dw + 1}, {pl} + wi)",
        f"    for t in {'prange' if par else 'range'}(nb * nc):",
        "        b = t // nc",
        "        c = t % nc",
        f"        buf = np.zeros((hb, wb), dtype=np.{dt})",
        "        for r in range(hi):",
        f"            brow = buf[{pt} + r]",
        "            xrow = x[b, c, r]",
        "            for s in range(wi):",
        f"                brow[{pl} + s] = xrow[s]",
    ]
    src += [f"        w{a}_{e} = w[c, {a}, {e}]" for a, e in taps]
    src += ["        bv = bias[c]", "        for i in range(ho):"]
    src += [f"            r{a} = buf[i * {sh} + {a * dh}]" for a in range(kh)]
    src += ["            o = out[b, c, i]", "            for j in range(wo):"]
    col = "j" if sw == 1 else f"j * {sw}"
    terms = " + ".join(f"r{a}[{col} + {e * dw}] * w{a}_{e}" for a, e in taps)
    src += [f"                o[j] = bv + {terms}"]
    return "\n".join(src) + "\n"


def _depthwise_kernel(graph: Any, node: Any, parallel: Callable[[int | None], bool]) -> dict[str, Any] | None:
    """A compiled kernel for a 2-D depthwise convolution (one filter per channel) with explicit
    non-negative pads, which BLAS serves badly; None for any other convolution."""
    w = graph.constant_value(node.inputs[1])
    dt = _dtype(graph, node.inputs[0])
    if (
        w is None
        or w.ndim != 4
        or w.shape[1] != 1
        or int(node.attr("group", 1)) != w.shape[0]
        or dt not in FLOAT_DTYPES
    ):
        return None
    if _rank(graph, node.inputs[0]) != 4 or node.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    pads = list(node.attr("pads") or [0, 0, 0, 0])
    sh, sw = (list(node.attr("strides") or [1, 1]) + [1, 1])[:2]
    dh, dw = (list(node.attr("dilations") or [1, 1]) + [1, 1])[:2]
    if len(pads) != 4 or min(pads) < 0 or w.shape[2] * w.shape[3] > 64:
        return None
    par = parallel(_static_numel(graph, node.outputs[0]))
    source = _depthwise_source(
        dt, int(w.shape[2]), int(w.shape[3]), int(sh), int(sw), int(dh), int(dw), int(pads[0]), int(pads[1]), par
    )
    nb = NB_NAMES[dt]
    return {
        "source": source,
        "fn": "kernel",
        "signature": f"{nb}:4:C:w,{nb}:4:C:r,{nb}:3:C:r,{nb}:1:C:r",
        "parallel": par,
    }


def _same_static_shape(graph: Any, a: str, b: str) -> bool:
    """Both shapes known and equal dim by dim (equal ints or the same symbolic name)."""
    sa, sb = _static_shape(graph, a), _static_shape(graph, b)
    return (
        sa is not None
        and sb is not None
        and len(sa) == len(sb)
        and all(
            x == y and (isinstance(x, int) or (isinstance(x, str) and x != "")) for x, y in zip(sa, sb, strict=True)
        )
    )


def _static_shape(graph: Any, name: str) -> tuple[Any, ...] | None:
    info = graph.value_info(name)
    return None if info is None or info.shape is None else tuple(info.shape)


def _static_numel(graph: Any, name: str) -> int | None:
    info = graph.value_info(name)
    if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
        return None
    return int(np.prod(info.shape)) if info.shape else 1


def weight_key(array: np.ndarray) -> str:
    """Content key of a weight: identical weights are stored once."""
    h = hashlib.sha256()
    h.update(f"{array.dtype.str}|{array.shape}|".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:32]

"""Kernel sources generated from a checked declarative plan (``spec``), and the plan the runner
executes. The same function runs when the EP compiles a model and when it loads a context, so a
context never needs to carry source: what is compiled (or rebuilt from signed machine code) is
always text this module wrote from fixed templates, numbers, dtypes from a fixed table and op
expressions from ``ops``.

Elementwise clusters get two kernels: a general one over N-d strided (broadcast) views, and one
over flat contiguous buffers specialised for the broadcast pattern the static shapes predicted
(the runner uses it whenever the real shapes follow that pattern). Depthwise convolutions get one
kernel per geometry, read from the step's attributes and its filter's shape."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_numba_cpu.codegen import kernel_key
from ep_numba_cpu.ops import NB_NAMES, SIGMOID_HEAD, SIGMOID_TAIL, expression, helper_source, literal
from ep_numba_cpu.spec import SpecError


@dataclass(frozen=True)
class KernelSource:
    """One generated kernel: its source (defining ``kernel``), its Numba signature, threads."""

    source: str
    signature: str
    parallel: bool

    @property
    def key(self) -> str:
        return kernel_key(self.source, self.signature, self.parallel)


def expand(
    plan: Mapping[str, Any], weights: Mapping[str, np.ndarray]
) -> tuple[dict[str, Any], dict[str, KernelSource]]:
    """The runner's plan (steps naming their kernels by key) and every kernel's source, from a
    declarative plan ``check_record`` accepted; ``SpecError`` when an item's op does not take its
    arguments' types, or a depthwise step does not match its filter."""
    kernels: dict[str, KernelSource] = {}

    def add(ks: KernelSource) -> str:
        kernels[ks.key] = ks
        return ks.key

    steps: list[dict[str, Any]] = []
    for k, step in enumerate(plan["steps"]):
        kind = step["kind"]
        if kind == "kernel":
            general, flat, deps = _cluster_sources(step, f"plan.steps[{k}]")
            outs = zip(step["outputs"], step["exports"], step["out_ranks"], strict=True)
            steps.append(
                {
                    "kind": "kernel",
                    "inputs": list(step["inputs"]),
                    "rank": step["rank"],
                    "outputs": [
                        {"name": n, "dtype": step["items"][t]["dtype"], "rank": r, "deps": deps[t]} for n, t, r in outs
                    ],
                    "spec": broadcast_groups(step["full"], step["rank"]),
                    "kernel": add(general),
                    "kernel_spec": add(flat),
                }
            )
            continue
        if kind == "node":
            # a delegated node: the reference kernel, unless compiled kernels serve it
            node: dict[str, Any] = {"kind": kind, "inputs": list(step["inputs"]), "outputs": list(step["outputs"])}
            node["node"] = step
            served = node_sources(step)
            if served is not None:
                node["kernels"] = [add(ks) for ks in served]
            steps.append(node)
            continue
        runtime = {"kind": kind, "inputs": list(step["inputs"]), "outputs": list(step["outputs"])}
        runtime["attrs"] = dict(step.get("attrs", {}))
        if kind == "conv" and step["depthwise"] is not None:
            runtime["kernel"] = add(_depthwise(step, weights, f"plan.steps[{k}]"))
        elif kind == "conv" and step.get("direct"):
            from ep_numba_cpu import direct_conv

            w = weights.get(step["inputs"][1])
            if w is None or not direct_conv.serves(step["attrs"], w.shape, str(w.dtype)):
                raise SpecError(f"plan.steps[{k}].direct: the direct kernel does not serve this convolution")
            runtime["direct"] = add(direct_conv.kernel_source())
        steps.append(runtime)
    return {"inputs": list(plan["inputs"]), "outputs": list(plan["outputs"]), "steps": steps}, kernels


def node_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    """Compiled kernels that replace a delegated node's reference kernel, or None (the runner
    builds the reference kernel): recurrent time loops (LSTM, GRU), the loops of ai.onnx.ml ops
    (tree walks, SVM coupling), DynamicQuantizeLSTM's integer recurrent product, cell and time
    loop, and the VNNI products of MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv
    (``int_loops``). With kernels
    here, ``runtime`` builds the node's compute with ``node_compute``."""
    loops = _loops_for(step)
    return None if loops is None else loops.kernel_sources(step)


def node_compute(step: Mapping[str, Any], kernels: Sequence[Any], weights: Mapping[str, np.ndarray], host: Any) -> Any:
    """The compute of a delegated node ``node_sources`` served, from its compiled ``kernels``."""
    from ep_numba_cpu import recurrent

    loops = _loops_for(step)
    if loops is recurrent:
        return recurrent.make_compute(step, kernels)
    if loops is None:
        raise SpecError(f"{step['op']} has no compiled loops")
    return loops.make_compute(step, kernels, weights, host)


def _loops_for(step: Mapping[str, Any]) -> Any:
    """The module whose compiled loops may serve this delegated node, or None."""
    if step["op"] in ("LSTM", "GRU") and step["domain"] in ("", "ai.onnx"):
        from ep_numba_cpu import recurrent  # (imports this module)

        return recurrent
    from ep_numba_cpu import int_loops, ml_loops  # (they import this module)

    if step["op"] in ml_loops.OPS and step["domain"] == ml_loops.ML:
        return ml_loops
    return int_loops if int_loops.serves(step) else None


def broadcast_groups(full: Sequence[Sequence[bool]], rank: int) -> dict[str, Any]:
    """From the per-argument, per-dimension flags (``True`` where the argument spans the output,
    ``False`` where its dim is 1): the output dims coalesced into groups over which every argument
    is uniformly full or broadcast (dims where every argument broadcasts dropped), and each
    argument's flag per group. The runner checks the real shapes against ``full``."""
    dims = [d for d in range(rank) if any(f[d] for f in full)]
    groups: list[list[int]] = []
    for d in dims:
        if groups and all(f[groups[-1][-1]] == f[d] for f in full):
            groups[-1].append(d)
        else:
            groups.append([d])
    if not groups:
        groups = [list(range(rank))]
    return {"full": [list(f) for f in full], "groups": groups, "group_full": [[f[g[0]] for g in groups] for f in full]}


_NARROW_INTS = frozenset({"int8", "int16", "int32", "uint8", "uint16", "uint32"})


def _cluster_sources(step: Mapping[str, Any], path: str) -> tuple[KernelSource, KernelSource, list[list[int]]]:
    """The general and the specialised kernel of a cluster, and each item's array dependencies."""
    arrays, rank, par = step["arrays"], step["rank"], step["parallel"]
    lines: list[str] = []
    dts: list[str] = []
    deps: list[set[int]] = []
    for t, item in enumerate(step["items"]):
        args, adt, dep = [], [], set()
        for ref in item["args"]:
            if ref is None:
                args.append("")
                adt.append("")
            elif ref[0] == "a":
                args.append(f"x{ref[1]}")
                adt.append(arrays[ref[1]])
                dep.add(ref[1])
            elif ref[0] == "v":
                args.append(f"v{ref[1]}")
                adt.append(dts[ref[1]])
                dep |= deps[ref[1]]
            else:
                args.append(literal(ref[2], ref[1]))
                adt.append(ref[1])
        e = expression(item["op"], item["params"], args, adt, item["dtype"])
        if e is None:
            raise SpecError(f"{path}.items[{t}]: {item['op']} does not take {adt} to {item['dtype']}")
        if item["dtype"] in _NARROW_INTS:  # Numba computes int32 + int32 in int64: wrap it as the type does
            e = f"np.{item['dtype']}({e})"
        lines.append(f"v{t} = {e}")
        dts.append(item["dtype"])
        deps.append(dep)
    outs = list(step["exports"])
    params = ", ".join([f"o{m}" for m in range(len(outs))] + [f"a{j}" for j in range(len(arrays))])
    idx = ", ".join(f"i{d}" for d in range(rank))
    body = [f"        x{j} = a{j}[{idx}]" for j in range(len(arrays))]
    body += [f"        {ln}" for ln in lines]
    body += [f"        o{m}[{idx}] = v{t}" for m, t in enumerate(outs)]
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
    out_types = [NB_NAMES[dts[t]] for t in outs]
    in_types = [NB_NAMES[d] for d in arrays]
    sig = ",".join([f"{n}:{rank}:C:w" for n in out_types] + [f"{n}:{rank}:A:r" for n in in_types])
    general = KernelSource("\n".join(src) + "\n", sig, par)
    flat_src = _flat_source(broadcast_groups(step["full"], rank), params, lines, outs, len(arrays), par)
    flat_sig = ",".join([f"{n}:1:C:w" for n in out_types] + [f"{n}:1:C:r" for n in in_types] + ["int64:1:C:r"])
    return general, KernelSource(flat_src, flat_sig, par), [sorted(d) for d in deps]


def _prelude(lines: Sequence[str]) -> list[str]:
    """Imports, and the definitions of the helpers (``ops.HELPERS``) the kernel body calls."""
    helpers = helper_source("\n".join(lines))
    head = [
        "import math",
        "import numpy as np",
        "from numba import njit, prange" if helpers else "from numba import prange",
    ]
    return head + ([helpers.rstrip("\n"), ""] if helpers else []) + ["", ""]


def _flat_source(
    spec: Mapping[str, Any], params: str, lines: Sequence[str], outs: Sequence[int], n_arrays: int, par: bool
) -> str:
    """The kernel over flat contiguous buffers for one broadcast pattern: nested loops over the
    coalesced dims, each argument read at a base offset plus the innermost index where it spans the
    innermost dims, or as one value hoisted out of the innermost loop where it broadcasts there; no
    per-element index arithmetic, so the innermost loop vectorises."""
    k, gf = len(spec["groups"]), spec["group_full"]
    src = _prelude(lines) + [f"def kernel({params}, dims):"]
    src += [f"    n{g} = dims[{g}]" for g in range(k)]
    # stride of argument j along group g: the product of the later groups it spans
    for j in range(n_arrays):
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
    for j in range(n_arrays):
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
    reads = [f"x{j} = r{j}[t]" for j in range(n_arrays) if gf[j][last]]
    writes = [f"q{m}[t] = v{t}" for m, t in enumerate(outs)]
    head = None if loop == "prange" else _sigmoid_head(lines)
    bounds = f"n{last}"
    if head is not None:  # blocks of the row without the sigmoid's tail; again with it where an argument needs it
        # (each block through its own slices, indexed from 0: a loop over range(t0, t1) ran 4x slower)
        fast, args = head
        tail = " | ".join(f"({a} < np.float32({SIGMOID_TAIL!r}))" for a in args)
        src += [
            f"{ind}for t0 in range(0, n{last}, {SIGMOID_BLOCK}):",
            f"{ind}    nt = min(n{last} - t0, {SIGMOID_BLOCK})",
        ]
        ind += "    "
        src += [f"{ind}rb{j} = r{j}[t0:t0 + nt]" for j in range(n_arrays) if gf[j][last]]
        src += [f"{ind}qb{m} = q{m}[t0:t0 + nt]" for m in range(len(outs))]
        reads = [f"x{j} = rb{j}[t]" for j in range(n_arrays) if gf[j][last]]
        writes = [f"qb{m}[t] = v{t}" for m, t in enumerate(outs)]
        src += [f"{ind}low = False", f"{ind}for t in range(nt):"]
        src += [f"{ind}    {ln}" for ln in [*reads, *fast, *writes, f"low |= {tail}"]]
        src.append(f"{ind}if low:")
        ind += "    "
        bounds = "nt"
    src.append(f"{ind}for t in {loop}({bounds}):")
    src += [f"{ind}    {ln}" for ln in [*reads, *lines, *writes]]
    return "\n".join(src) + "\n"


# values a block of a row with a Sigmoid runs without its tail before checking: one value past the
# tail computes its block again, not its whole row (a row can be a whole tensor; detection logits
# are mostly past it)
SIGMOID_BLOCK = 512


_SIGMOID_CALL = re.compile(r"_sigmoid32\(([xv]\d+)\)")


def _sigmoid_head(lines: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """``lines`` with each ``_sigmoid32(arg)`` as its value at or above ``SIGMOID_TAIL``, and the
    args, when they call it only on plain values (None when they do not call it). A row whose args
    all stay there gives the same values, the same expressions; any other row is computed again by
    the lines as they are (outputs never share memory with inputs: the row still reads its inputs)."""
    text = "\n".join(lines)
    if "_sigmoid32(" not in text or text.count("_sigmoid32(") != len(_SIGMOID_CALL.findall(text)):
        return None
    args = list(dict.fromkeys(_SIGMOID_CALL.findall(text)))
    fast = [_SIGMOID_CALL.sub(lambda m: SIGMOID_HEAD.format(x=m.group(1)), ln) for ln in lines]
    return fast, args


Geometry = tuple[int, int, int, int, int, int, int, int]


def depthwise_geometry(attrs: Mapping[str, Any], w_shape: Sequence[int]) -> Geometry | None:
    """``(kh, kw, sh, sw, dh, dw, pt, pl)`` of a 2-D depthwise convolution (one filter per
    channel) with explicit non-negative pads and at most 64 taps, the kind a compiled kernel
    serves; None for any other convolution."""
    if len(w_shape) != 4 or w_shape[1] != 1 or int(attrs.get("group", 1)) != w_shape[0]:
        return None
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    sh, sw = (list(attrs.get("strides") or [1, 1]) + [1, 1])[:2]
    dh, dw = (list(attrs.get("dilations") or [1, 1]) + [1, 1])[:2]
    if len(pads) != 4 or min(pads) < 0 or w_shape[2] * w_shape[3] > 64:
        return None
    return int(w_shape[2]), int(w_shape[3]), int(sh), int(sw), int(dh), int(dw), int(pads[0]), int(pads[1])


def _depthwise(step: Mapping[str, Any], weights: Mapping[str, np.ndarray], path: str) -> KernelSource:
    dt, par = step["depthwise"]["dtype"], step["depthwise"]["parallel"]
    w = weights.get(step["inputs"][1])
    geometry = None if w is None else depthwise_geometry(step["attrs"], w.shape)
    if w is None or geometry is None or str(w.dtype) != dt:
        raise SpecError(f"{path}.depthwise: the convolution's attributes and filter are not a {dt} depthwise one")
    nb = NB_NAMES[dt]
    sig = f"{nb}:4:C:w,{nb}:4:C:r,{nb}:3:C:r,{nb}:1:C:r,{nb}:2:C:w"
    return KernelSource(_depthwise_source(dt, *geometry, par), sig, par)


def depthwise_plane(geometry: Geometry, x_hw: tuple[int, int], out_hw: tuple[int, int]) -> int:
    """Values of one channel's scratch in ``_depthwise_source``'s kernel: its zero-bordered plane,
    then (stride 1) the output rows at the plane's width (``_flat``)."""
    kh, kw, sh, sw, dh, dw, pt, pl = geometry
    (hi, wi), (ho, wo) = x_hw, out_hw
    wb = max((wo - 1) * sw + (kw - 1) * dw + 1, pl + wi)
    return max((ho - 1) * sh + (kh - 1) * dh + 1, pt + hi) * wb + (ho * wb if _flat(geometry) else 0)


def _flat(geometry: Geometry) -> bool:
    """Whether the kernel computes the output as one run over the plane's flat rows (stride 1 and
    more than one column of taps; a (k, 1) filter keeps its own loop)."""
    kh, kw, sh, sw = geometry[:4]
    return sh == sw == 1 and kw > 1


def _depthwise_source(
    dt: str, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pt: int, pl: int, par: bool
) -> str:
    """A 2-D depthwise convolution with its geometry as constants: each channel's plane is copied
    once into a zero-bordered buffer of width ``wb``, then the body is the fully unrolled sum of the
    taps (weights held in locals), with the bias folded in. With stride 1 (``_flat``) it is one loop
    over the whole output at the buffer's width: output (i, j) is flat position i * wb + j, and
    tap (a, e) reads the buffer at that position + a*dh*wb + e*dw, so the loop is as long as the
    plane, not as an output row (a 14-column row is under one AVX-512 vector: MobileNet's 14x14
    and 7x7 depthwise convs ran scalar); the wb - wo columns between rows are computed and
    dropped as the rows are copied out. Strided ones loop over each output row's columns. The
    sums are the same expressions in the same order either way. A (k, 1) filter giving one output column (FSMN's memory
    blocks over (T, 1)) runs tap by tap over the rows instead, so the vectorised loop is not one
    long (a loop, not unrolled: unrolled taps in a second branch double compile time).

    The plane buffers are rows of ``scratch`` (one per thread, at least ``depthwise_plane`` values
    each), zeroed in the loop and indexed flat: a kernel that allocates or reshapes makes Numba
    import ``numba.np.arrayobj`` (~40-70 ms) whenever it is rebuilt from a context or the kernel
    cache. Only the (k, 1) branch reshapes (its output column as a unit-stride vector: 10% of
    FSMN's latency), so only (k, 1) filters pay that import."""
    taps = [(a, e) for a in range(kh) for e in range(kw)]
    flat = _flat((kh, kw, sh, sw, dh, dw, pt, pl))
    src = [
        "import numpy as np",
        "from numba import get_thread_id, prange",
        "",
        "",
        "def kernel(out, x, w, bias, scratch):",
        "    nb = out.shape[0]",
        "    nc = out.shape[1]",
        "    ho = out.shape[2]",
        "    wo = out.shape[3]",
        "    hi = x.shape[2]",
        "    wi = x.shape[3]",
        f"    hb = max((ho - 1) * {sh} + {(kh - 1) * dh + 1}, {pt} + hi)",
        f"    wb = max((wo - 1) * {sw} + {(kw - 1) * dw + 1}, {pl} + wi)",
        # Numba does not bounds-check: rows shorter than ``depthwise_plane`` return 1 (the caller
        # raises), not an overrun. (A raise here, or get_num_threads() for the row count, would make
        # the kernel unserialisable; the caller sizes the rows by get_num_threads() at each call.)
        f"    if scratch.shape[1] < hb * wb{' + ho * wb' if flat else ''} or scratch.shape[0] < 1:",
        "        return 1",
        f"    for t in {'prange' if par else 'range'}(nb * nc):",
        "        b = t // nc",
        "        c = t % nc",
        f"        buf = scratch[{'get_thread_id()' if par else '0'}]",
        "        for k in range(hb * wb):",
        f"            buf[k] = np.{dt}(0)",
        "        for r in range(hi):",
        f"            row = ({pt} + r) * wb + {pl}",
        "            xrow = x[b, c, r]",
        "            for s in range(wi):",
        "                buf[row + s] = xrow[s]",
    ]
    src += [f"        w{a}_{e} = w[c, {a}, {e}]" for a, e in taps]
    src += ["        bv = bias[c]"]
    if kw == 1:  # a (k, 1) filter: one output column when the input is one; taps summed in the same order
        # (with a one-column buffer too: no width padding, input one column) both C-contiguous vectors
        src += [
            "        if wo == 1 and wb == 1:",
            "            o = out[b, c].reshape(ho)",  # unit stride, which vectorises (a reshape: see above)
        ]
        src += ["            for i in range(ho):", "                o[i] = bv", f"            for a in range({kh}):"]
        src += ["                wv = w[c, a, 0]", "                for i in range(ho):"]
        src += [f"                    o[i] += buf[i * {sh} + a * {dh}] * wv"]
        src += ["            continue"]
    if flat:  # in blocks of rb rows (about 4 KiB of float32 at the buffer's width: they stay in L1)
        terms = " + ".join(f"r{a}[p + {e * dw}] * w{a}_{e}" for a, e in taps)
        # (a loop over block numbers: ``range(0, ho, rb)``'s variable step ran the sums 1.5-2x slower)
        src += [
            "        acc = buf[hb * wb :]",
            "        rb = max(1, 1024 // wb)",
            "        for ib in range((ho + rb - 1) // rb):",
        ]
        src += ["            i0 = ib * rb", "            i1 = min(ho, i0 + rb)"]
        src += [f"            r{a} = buf[(i0 + {a * dh}) * wb :]" for a in range(kh)]
        src += ["            for p in range((i1 - i0 - 1) * wb + wo):", f"                acc[p] = bv + {terms}"]
        src += ["            for i in range(i1 - i0):", "                o = out[b, c, i0 + i]"]
        src += ["                for j in range(wo):", "                    o[j] = acc[i * wb + j]", "    return 0"]
        return "\n".join(src) + "\n"
    src += ["        for i in range(ho):"]
    src += [f"            r{a} = buf[(i * {sh} + {a * dh}) * wb :]" for a in range(kh)]
    src += ["            o = out[b, c, i]", "            for j in range(wo):"]
    col = "j" if sw == 1 else f"j * {sw}"
    terms = " + ".join(f"r{a}[{col} + {e * dw}] * w{a}_{e}" for a, e in taps)
    src += [f"                o[j] = bv + {terms}", "    return 0"]
    return "\n".join(src) + "\n"

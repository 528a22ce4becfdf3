"""If, Loop, Scan and SequenceMap: the ops whose bodies are subgraphs.

They run their bodies through ``ctx.subgraph`` so nested nodes are partitioned and planned like
the main graph (never delegated: onnx.reference would run the body outside the session). The
node's implicit (outer-scope) inputs arrive after its explicit inputs, in ``node.implicit_inputs``
order; each body gets them by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY


def _split_args(node: Any, args: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """(explicit inputs, outer-scope values by name) from a control-flow kernel's arguments."""
    n = len(node.inputs)
    return list(args[:n]), dict(zip(node.implicit_inputs, args[n:], strict=False))


def _stack(parts: list[Any], axis: int, node: Any, out_index: int) -> np.ndarray:
    """Per-iteration scan outputs stacked on ``axis``; zero iterations give an empty array typed
    from the node's inferred output info."""
    if parts:
        return np.stack([np.asarray(p) for p in parts], axis=axis)
    info = node.output_info(out_index)
    dtype = info.np_dtype if info is not None and info.np_dtype is not None else np.float32
    shape = [0]
    if info is not None and info.shape is not None:
        shape = [0] + [d if isinstance(d, int) else 0 for d in info.shape[1:]]
    return np.zeros(shape, dtype=dtype)


def _owned(outs: list[Any]) -> tuple[Any, ...]:
    """``outs`` with read-only arrays copied: a body output computed once from constants is a
    shared read-only array (see nn_common.frozen), and a control-flow output may be a graph
    output, which the caller owns."""
    for i, v in enumerate(outs):
        if type(v) is np.ndarray and not v.flags.writeable:
            outs[i] = v.copy()
    return tuple(outs)  # the EP contract: a kernel returns a tuple


def _truthy(cond: Any, node: Any) -> bool:
    arr = np.asarray(cond)
    if arr.size != 1:
        raise ValueError(f"{node.describe()}: the condition must hold one element, got shape {arr.shape}")
    return bool(arr.reshape(()))


@REGISTRY.register("If", since=1)
def build_if(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Runs the branch the condition picks; both branches are built once at session creation."""
    then_b = ctx.subgraph("then_branch")
    else_b = ctx.subgraph("else_branch")
    n_out = len(node.outputs)
    for label, branch in (("then_branch", then_b), ("else_branch", else_b)):
        if len(branch.output_names) != n_out:
            raise ValueError(f"{node.describe()}: {label} has {len(branch.output_names)} outputs, the node has {n_out}")

    names = tuple(node.implicit_inputs)  # If's one explicit input is the condition

    def compute(cond: Any, *implicit: Any) -> tuple[Any, ...]:
        # per call (small models run If every inference): no list/slice copies, a one-element
        # array condition read directly
        take = bool(cond.reshape(-1)[0]) if type(cond) is np.ndarray and cond.size == 1 else _truthy(cond, node)
        return _owned((then_b if take else else_b).run([], dict(zip(names, implicit, strict=False))))

    return compute


@REGISTRY.register("Loop", since=1)
def build_loop(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """``for i < M while cond``: body(i, cond, carried...) -> (cond, carried..., scan parts...)."""
    body = ctx.subgraph("body")
    n_carried = len(node.inputs) - 2
    n_scan = len(body.output_names) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(
            f"{node.describe()}: body has {len(body.output_names)} outputs, needs at least cond + {n_carried} carried"
        )

    def compute(*args: Any) -> tuple[Any, ...]:
        explicit, outer = _split_args(node, args)
        max_trip, cond, carried = explicit[0], explicit[1], explicit[2:]
        limit = None if max_trip is None else int(np.asarray(max_trip).reshape(()))
        keep_going = True if cond is None else _truthy(cond, node)
        scans: list[list[Any]] = [[] for _ in range(n_scan)]
        i = 0
        while keep_going and (limit is None or i < limit):
            res = body.run([np.array(i, dtype=np.int64), np.array(keep_going), *carried], outer)
            keep_going = _truthy(res[0], node)
            carried = list(res[1 : 1 + n_carried])
            for k in range(n_scan):
                scans[k].append(res[1 + n_carried + k])
            i += 1
        return _owned(list(carried) + [_stack(scans[k], 0, node, n_carried + k) for k in range(n_scan)])

    return compute


def _scan_loop(
    node: Any,
    body: Any,
    outer: dict[str, Any],
    states: list[Any],
    scan_inputs: list[np.ndarray],
    in_axes: list[int],
    in_dirs: list[int],
    out_axes: list[int],
    out_dirs: list[int],
    n_scan_out: int,
) -> list[Any]:
    """One Scan: iterate the scan inputs along their axes, thread the states, stack the outputs."""
    lengths = {x.shape[a] for x, a in zip(scan_inputs, in_axes, strict=False)}
    if len(lengths) > 1:
        raise ValueError(f"{node.describe()}: scan inputs disagree on the sequence length: {sorted(lengths)}")
    length = lengths.pop() if lengths else 0
    n_state = len(states)
    parts: list[list[Any]] = [[] for _ in range(n_scan_out)]
    for t in range(length):
        slices = [
            np.take(x, length - 1 - t if d else t, axis=a)
            for x, a, d in zip(scan_inputs, in_axes, in_dirs, strict=False)
        ]
        res = body.run([*states, *slices], outer)
        states = list(res[:n_state])
        for k in range(n_scan_out):
            parts[k].append(np.asarray(res[n_state + k]))
    outs: list[Any] = list(states)
    for k in range(n_scan_out):
        seq = parts[k][::-1] if out_dirs[k] else parts[k]
        if seq:
            rank = seq[0].ndim + 1
            axis = out_axes[k] + rank if out_axes[k] < 0 else out_axes[k]
            outs.append(np.stack(seq, axis=axis))
        else:
            outs.append(_stack([], 0, node, n_state + k))
    return outs


@REGISTRY.register("Scan", since=9)
def build_scan(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Scan 9+: no batch axis; per-input scan axes and directions."""
    body = ctx.subgraph("body")
    m = int(node.attr("num_scan_inputs"))
    n_state = len(node.inputs) - m
    n_scan_out = len(node.outputs) - n_state
    in_axes_attr = list(node.attr("scan_input_axes", [0] * m))
    in_dirs = list(node.attr("scan_input_directions", [0] * m))
    out_axes = list(node.attr("scan_output_axes", [0] * n_scan_out))
    out_dirs = list(node.attr("scan_output_directions", [0] * n_scan_out))

    def compute(*args: Any) -> tuple[Any, ...]:
        explicit, outer = _split_args(node, args)
        states, scan_inputs = explicit[:n_state], [np.asarray(x) for x in explicit[n_state:]]
        in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes_attr, scan_inputs, strict=False)]
        return _owned(
            _scan_loop(node, body, outer, states, scan_inputs, in_axes, in_dirs, out_axes, out_dirs, n_scan_out)
        )

    return compute


@REGISTRY.register("Scan", since=8, end=8)
def build_scan8(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Scan 8: axis 0 is a batch, axis 1 the sequence; optional per-batch ``sequence_lens``."""
    body = ctx.subgraph("body")
    m = int(node.attr("num_scan_inputs"))
    n_state = len(node.inputs) - 1 - m
    n_scan_out = len(node.outputs) - n_state
    dirs = list(node.attr("directions", [0] * m))

    def compute(*args: Any) -> tuple[Any, ...]:
        explicit, outer = _split_args(node, args)
        seq_lens = explicit[0]
        states = [np.asarray(s) for s in explicit[1 : 1 + n_state]]
        scan_inputs = [np.asarray(x) for x in explicit[1 + n_state :]]
        batch = scan_inputs[0].shape[0] if scan_inputs else states[0].shape[0]
        per_batch: list[list[Any]] = []
        for b in range(batch):
            xs = [x[b] for x in scan_inputs]
            if seq_lens is not None:
                n = int(np.asarray(seq_lens)[b])
                xs = [x[:n] for x in xs]
            per_batch.append(
                _scan_loop(
                    node,
                    body,
                    outer,
                    [s[b] for s in states],
                    xs,
                    [0] * m,
                    dirs,
                    [0] * n_scan_out,
                    [0] * n_scan_out,
                    n_scan_out,
                )
            )
        return tuple(np.stack([r[k] for r in per_batch], axis=0) for k in range(n_state + n_scan_out))

    return compute


@REGISTRY.register("SequenceMap", since=17)
def build_sequence_map(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Applies the body to the i-th element of every sequence input (tensor inputs go whole)."""
    body = ctx.subgraph("body")
    n_out = len(node.outputs)

    def compute(*args: Any) -> tuple[Any, ...]:
        explicit, outer = _split_args(node, args)
        seq = explicit[0]
        if not isinstance(seq, list):
            raise TypeError(f"{node.describe()}: input_sequence must be a sequence, got {type(seq).__name__}")
        for extra in explicit[1:]:
            if isinstance(extra, list) and len(extra) != len(seq):
                raise ValueError(f"{node.describe()}: sequence inputs differ in length ({len(extra)} vs {len(seq)})")
        outs: list[list[Any]] = [[] for _ in range(n_out)]
        for i, item in enumerate(seq):
            feed = [item] + [x[i] if isinstance(x, list) else x for x in explicit[1:]]
            for k, r in enumerate(body.run(feed, outer)):
                outs[k].append(r)
        return tuple(outs)

    return compute

"""Reduce* ops. Axes moved from an attribute to an input at opset 13 for ReduceSum and 18 for the
others; ``noop_with_empty_axes`` (same opsets) makes empty axes mean "no reduction" instead of
"all axes". Reductions over empty sets give the op's identity (0, 1, -inf, +inf...)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def _wide(x: np.ndarray) -> np.ndarray:
    """Floats narrower than float32 (float16, and ml_dtypes' bfloat16 and float8 types, kind "V")
    accumulate in float32. (No ``dtype.name``: it costs ~4 us, and Scan bodies reduce per step.)"""
    return x.astype(np.float32) if x.dtype.itemsize < 4 and x.dtype.kind in "fV" else x


def _lowest(x: np.ndarray) -> Any:
    if x.dtype == bool:
        return False
    return -np.inf if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else np.iinfo(x.dtype).min


def _highest(x: np.ndarray) -> Any:
    if x.dtype == bool:
        return True
    return np.inf if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else np.iinfo(x.dtype).max


def _logsumexp(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    if x.dtype.kind in "iu" and x.size:
        # onnxruntime's integer form: exp(v - max) truncated to an integer is 1 for each maximum and
        # 0 for the rest, so max + log(how many maxima), in double, truncated toward zero by the cast
        mi = np.max(x, axis=axis, keepdims=True)
        count = np.sum(x == mi, axis=axis, keepdims=True)
        r = np.trunc(mi.astype(np.float64) + np.log(count))
        return r if keepdims else np.squeeze(r, axis=axis)
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.zeros([1] * x.ndim, x.dtype)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def _kinds(x: np.ndarray, axis: tuple[int, ...]) -> str:
    """The layout of a reduction as onnxruntime classifies it: runs of kept (K) and reduced (R)
    axes, dims of size 1 left out ("KR": trailing axes reduced, "RK": leading ones, "KRK"...)."""
    kinds = "".join("R" if i in axis else "K" for i, n in enumerate(x.shape) if n != 1)
    return "".join(k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1])


def _accumulator(x: np.ndarray, axis: tuple[int, ...] | None) -> Any:
    """float64 for a float32 sum that onnxruntime computes in an order NumPy cannot follow, else
    None (x's own type). With the dims of size 1 left out, onnxruntime sums leading axes row after
    row (its "RK" case) and NumPy does the same on a C-contiguous array: the same floats, bit for
    bit; trailing axes ("KR") and all axes take ``row_sums`` (onnxruntime's order). Axes
    with kept dims on both sides ("KRK": onnxruntime multiplies by a vector of ones in MLAS's
    blocked order) or apart accumulate in float64: adding slice after slice had twice
    onnxruntime's error on 512 terms, and a LayerNorm written as mean(x^2) - mean(x)^2 magnified it
    to 7e-4 in magika 0.6.1's probabilities (batch 2). Costs 2-3x such a reduction's time."""
    if x.dtype != np.float32 or axis is None:
        return None
    kinds = _kinds(x, axis)
    if kinds in ("", "R", "K", "KR") or (kinds == "RK" and x.flags.c_contiguous):
        return None
    return np.float64


def _trailing(x: np.ndarray, axis: tuple[int, ...]) -> tuple[int, int] | None:
    """(rows, n) when the reduced axes are x's trailing block or all of them ("KR", "R"), whose
    sums ``row_sums`` adds in onnxruntime's order; else None."""
    if _kinds(x, axis) not in ("R", "KR"):
        return None
    n = math.prod(x.shape[a] for a in axis)
    return x.size // n, n


def row_sums(x: np.ndarray, rows: int, n: int, vectorised: bool) -> np.ndarray:
    """Sums of x (C order) as ``rows`` rows of ``n``, as onnxruntime adds them: ReduceSum and
    ReduceMean, and any sum of everything (one row), through Eigen's redux of 16-byte packets
    (``vectorised``: SSE or NEON, 4 float32 or 2 float64 lanes); the other sums (SumSquare, L1,
    L2 over trailing axes) element after element. Bit for bit
    on float32 and float64, where NumPy's pairwise sum differs in half the rows: one ulp that a
    dynamically quantized T5 turned into 0.13 through the DynamicQuantizeLinear after its RMS norm."""
    x2 = np.ascontiguousarray(x).reshape(rows, n)
    if not vectorised:  # rows side by side, column after column from the first (3x cumsum's speed)
        if rows == 1:  # one row would take NumPy's pairwise loop
            return np.cumsum(x2, axis=1)[:, -1]  # type: ignore[no-any-return]
        return np.add.reduce(np.ascontiguousarray(x2.T), axis=0, initial=-0.0)  # type: ignore[no-any-return]
    lanes = 16 // x2.itemsize
    out = np.empty(rows, x2.dtype)
    # Eigen starts at a row's first element on a 16-byte boundary (onnxruntime's buffers are
    # aligned), adds the ones before it and the tail after the packets one by one
    starts = (-(np.arange(rows) * n)) % lanes
    for a in (0,) if n % lanes == 0 else np.unique(starts):
        at = slice(None) if n % lanes == 0 else np.flatnonzero(starts == a)
        out[at] = _eigen_sums(x2[at], min(int(a), n), lanes)
    return out


def _eigen_sums(x: np.ndarray, a: int, p: int) -> np.ndarray:
    """Eigen's vectorised redux of each row from element ``a``: two packet accumulators over
    pairs of packets, summed, one more packet if one is left, the lanes halved down to one."""
    k, n = x.shape
    vec = (n - a) // p * p
    if not vec:  # too short to vectorise: in element order
        return np.cumsum(x, axis=1)[:, -1]  # type: ignore[no-any-return]
    body = (n - a) // (2 * p) * (2 * p)
    if vec > p:
        blocks = x[:, a : a + body].reshape(k, body // (2 * p), 2 * p).transpose(1, 0, 2)
        # block after block from the first (NumPy would start at +0 and lose an all -0 row's sign)
        acc = np.add.reduce(np.ascontiguousarray(blocks), axis=0, initial=-0.0)
        lane = acc[:, :p] + acc[:, p:]
        if vec > body:
            lane += x[:, a + body : a + body + p]
    else:
        lane = x[:, a : a + p]
    while lane.shape[1] > 1:
        lane = lane[:, : lane.shape[1] // 2] + lane[:, lane.shape[1] // 2 :]
    r = lane[:, 0]
    for i in (*range(a), *range(a + vec, n)):
        r += x[:, i]
    return r


def _mean(x: np.ndarray, axis: Any, keepdims: bool) -> Any:
    """np.mean, but 0 over an empty axis, as onnxruntime gives it (an empty EmbeddingBag bag's mean in
    a torch export), where NumPy's 0/0 gives NaN."""
    if x.size == 0:
        return np.sum(x, axis=axis, keepdims=keepdims)
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=_accumulator(x, axis))


_REDUCERS: dict[str, Callable[[np.ndarray, Any, bool], Any]] = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k, dtype=_accumulator(x, a)),
    "ReduceMean": lambda x, a, k: _mean(x, a, k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x)),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_highest(x)),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(
        np.sum(np.square(x.astype(np.float64) if x.dtype.kind in "iu" else x), axis=a, keepdims=k)
    ),
    "ReduceSumSquare": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: _logsumexp(x, a, k),
}
# the op applies its elementwise part even when noop_with_empty_axes skips the reduction
_NOOP_MAP: dict[str, Callable[[np.ndarray], Any]] = {
    "ReduceL1": np.abs,
    "ReduceL2": np.abs,  # sqrt(x^2)
    "ReduceSumSquare": np.square,
    "ReduceLogSum": np.log,
    "ReduceLogSumExp": lambda x: x,
}
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(node: Any, op: str, x: np.ndarray, axes: list[int], keepdims: bool, noop: bool) -> np.ndarray:
    if not axes and noop:
        return np.asarray(_NOOP_MAP.get(op, lambda v: v)(x)).astype(x.dtype)
    rank = x.ndim
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ValueError(f"{node.describe()}: axis {a} is out of range for rank {rank}")
    axis = tuple(sorted({a + rank if a < 0 else a for a in axes})) if axes else None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = _REDUCERS[op](_wide(x), axis, keepdims)
    return np.asarray(r).astype(x.dtype)


# float32/float64 ufunc reductions whose np.* wrappers add only Python overhead: np.sum is
# add.reduce, np.max/np.min are maximum/minimum.reduce (NaN propagates), np.mean is add.reduce
# divided in place by the count (same accumulation, same rounding); SumSquare, L1 and L2 add
# their element-wise part first (and L2 its square root after), as _REDUCERS does
_FAST_UFUNC = {"ReduceSum": np.add, "ReduceMean": np.add, "ReduceMax": np.maximum, "ReduceMin": np.minimum}
_FAST_UFUNC |= {"ReduceSumSquare": np.add, "ReduceL1": np.add, "ReduceL2": np.add}
_BEFORE = {"ReduceSumSquare": np.square, "ReduceL1": np.abs, "ReduceL2": np.square}


def _short_last_axis(fast: np.ufunc, x: np.ndarray, keepdims: bool) -> np.ndarray:
    """``fast.reduce`` (maximum or minimum: sums take ``row_sums``) over a last axis of 2 to 7
    elements as that many whole-array ufunc calls: NumPy's reduction pays its inner-loop set-up
    per output element, 40x the time at [1, 309, 172, 2]; the same floats, NaN included."""
    r = fast(x[..., 0:1], x[..., 1:2])  # slices, not indices: an array even for a 1-D x
    for i in range(2, x.shape[-1]):
        fast(r, x[..., i : i + 1], out=r)
    return r if keepdims else r.reshape(r.shape[:-1])


def _fixed_axes(node: Any, op: str, axes: list[int], keepdims: bool, noop: bool) -> Fn:
    """Axes known at creation: the normalised axis tuple is found once per rank, and non-empty
    float32/float64 inputs of Sum/Mean/Max/Min/SumSquare/L1/L2 reduce with one ufunc call; everything else
    (empty inputs, integer and narrow types, the other reductions) takes ``_reduce``."""
    fast, before = _FAST_UFUNC.get(op), _BEFORE.get(op)
    if fast is None or (not axes and noop):
        return lambda x, *rest: (_reduce(node, op, x, axes, keepdims, noop),)
    by_rank: dict[int, tuple[int, ...]] = {}

    def plan(x: np.ndarray) -> tuple[int, ...]:
        rank = x.ndim
        for a in axes:
            if not -rank <= a < max(rank, 1):
                raise ValueError(f"{node.describe()}: axis {a} is out of range for rank {rank}")
        axis = tuple(sorted({a + rank if a < 0 else a for a in axes})) if axes else tuple(range(rank))
        by_rank[rank] = axis
        return axis

    def compute(x: np.ndarray, *rest: Any) -> tuple[Any]:
        if x.size == 0 or (x.dtype != np.float32 and x.dtype != np.float64):
            return (_reduce(node, op, x, axes, keepdims, noop),)
        axis = by_rank.get(x.ndim) or plan(x)
        if before is not None:
            with np.errstate(over="ignore"):
                x = before(x)
        # numpy's stubs overload reduce() on keepdims=True and keepdims=False literals, with none for a bool
        block = _trailing(x, axis) if fast is np.add else None
        acc = _accumulator(x, axis) if fast is np.add and block is None else None
        if block is not None:
            kept = [1 if i in axis else d for i, d in enumerate(x.shape) if keepdims or i not in axis]
            r = row_sums(x, *block, op in ("ReduceSum", "ReduceMean") or block[0] == 1).reshape(kept)
        elif acc is None and axis == (x.ndim - 1,) and 1 < x.shape[-1] < 8:
            r = _short_last_axis(fast, x, keepdims)
        else:
            r = fast.reduce(x, axis=axis, keepdims=keepdims, dtype=acc)  # type: ignore[call-overload]
        if not isinstance(r, np.ndarray):
            r = np.asarray(r)
        if op == "ReduceMean":
            count = 1
            for a in axis:
                count *= x.shape[a]
            r = np.true_divide(r, count, out=r)
        elif op == "ReduceL2":
            r = np.sqrt(r, out=r)
        return (r if acc is None else r.astype(x.dtype),)

    return compute


def _build_attr_axes(op: str) -> Callable[[Any, Any], Fn]:
    def build(node: NodeView, ctx: KernelContext) -> Fn:
        """Axes from the attribute (none: all)."""
        axes = list(node.attr("axes", []))
        keepdims = bool(node.attr("keepdims", 1))
        return _fixed_axes(node, op, [int(a) for a in axes], keepdims, False)

    return build


def _build_input_axes(op: str) -> Callable[[Any, Any], Fn]:
    def build(node: NodeView, ctx: KernelContext) -> Fn:
        """Axes from the optional second input; empty + noop_with_empty_axes: no reduction."""
        keepdims = bool(node.attr("keepdims", 1))
        noop = bool(node.attr("noop_with_empty_axes", 0))
        if len(node.inputs) < 2 or not node.inputs[1]:
            return _fixed_axes(node, op, [], keepdims, noop)
        axes_c = ctx.constant(node.inputs[1])
        if axes_c is not None:
            return _fixed_axes(node, op, [int(a) for a in np.asarray(axes_c).ravel()], keepdims, noop)

        def compute(x: Any, axes: Any = None) -> tuple[Any]:  # the constant-axes path, planned per run
            ax = [] if axes is None else [int(a) for a in np.asarray(axes).ravel()]
            return _fixed_axes(node, op, ax, keepdims, noop)(x)

        return compute

    return build


for _op in _REDUCERS:
    _since = _AXES_INPUT_SINCE.get(_op, 18)
    REGISTRY.register(_op, since=1, end=_since - 1)(_build_attr_axes(_op))
    REGISTRY.register(_op, since=_since, host_inputs=(1,))(_build_input_axes(_op))

"""Shape, layout, indexing and generator ops: Reshape ... Unique.

Shape-like inputs (Reshape's shape, Slice's starts/ends/axes/steps, Expand's shape, Tile's
repeats, Pad's pads, Squeeze/Unsqueeze axes, TopK's k, Range, ConstantOfShape, OneHot's depth,
CumSum's axis) are declared ``host_inputs``: they are read as Python ints on the host."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidGraph
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import fail, fold_frozen, frozen
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def ints(value: Any) -> list[int]:
    """A shape-like tensor (or None) as a list of Python ints."""
    return [] if value is None else [int(v) for v in np.asarray(value).ravel()]


def norm_axis(node: Any, axis: int, rank: int) -> int:
    """``axis`` in [-rank, rank) made non-negative, or a ValueError naming the node."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{node.describe()}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def const_inputs(node: NodeView, ctx: KernelContext) -> list[Any]:
    """Each input's value when known at session creation (None: missing or only known at run
    time). Builders specialise on these so compute does no parsing per inference."""
    return [ctx.constant(n) if n else None for n in node.inputs]


def param_key(v: Any) -> Any:
    """A hashable key of a small shape-like tensor's value (None stays None)."""
    if v is None:
        return None
    if type(v) is not np.ndarray:
        v = np.asarray(v)
    return (v.dtype.char, v.shape, v.tobytes())


def per_shape(plan: Callable[[tuple[int, ...]], Any]) -> Callable[[tuple[int, ...]], Any]:
    """``plan(shape)`` memoised on the input shape: validation and index arithmetic run once per
    shape, so a repeated inference pays one dict lookup. Shapes are usually few (one per feed
    shape); the memo is bounded for models fed ever-changing lengths."""
    cache: dict[tuple[int, ...], Any] = {}

    def get(shape: tuple[int, ...]) -> Any:
        r = cache.get(shape)
        if r is None:
            if len(cache) >= 256:  # shapes that change every run (streaming lengths): stay small
                cache.clear()
            r = cache[shape] = plan(shape)
        return r

    return get


# ------------------------------------------------------------------------- shape and layout
def _reshape(node: Any, x: Any, shape: Any, allowzero: int) -> Any:
    dims = ints(shape)
    if not allowzero:
        dims = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise ValueError(f"{node.describe()}: at most one -1 in the shape, got {dims}")
    try:
        return x.reshape(dims)
    except ValueError as exc:
        raise ValueError(f"{node.describe()}: cannot reshape {x.shape} to {dims}") from exc


@REGISTRY.register("Reshape", since=5, host_inputs=(1,))
def build_reshape(node: NodeView, ctx: KernelContext) -> Fn:
    """0 copies the input dim (unless opset 14's allowzero=1), -1 is inferred."""
    allowzero = int(node.attr("allowzero", 0))
    shape_c = const_inputs(node, ctx)[1]
    if shape_c is None:
        plans: dict[Any, tuple[int, ...]] = {}

        def compute(x: Any, shape: Any) -> tuple[Any]:
            """A run-time shape: the target dims are resolved once per (input shape, shape value)."""
            key = (x.shape, param_key(shape))
            dims = plans.get(key)
            if dims is None:
                if len(plans) > 64:
                    plans.clear()
                y = _reshape(node, x, shape, allowzero)
                plans[key] = y.shape
                return (y,)
            return (x.reshape(dims),)

        return compute
    # constant shape: the target dims are resolved once per input shape
    target = per_shape(lambda xs: _reshape(node, np.empty(xs, dtype=np.uint8), shape_c, allowzero).shape)
    return fold_frozen(lambda x, shape: (x.reshape(target(x.shape)),), first_only=True)


@REGISTRY.register("Reshape", since=1, end=4)
def build_reshape1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-4: the target shape is the ``shape`` attribute (0 copies the input dim, -1 is
    inferred); ``consumed_inputs`` is a legacy optimisation hint with no effect on values."""
    shape = node.attr("shape")
    if shape is None:
        raise InvalidGraph(
            f"{node.describe()}: Reshape before opset 5 takes its target from the shape attribute, which "
            "this node lacks: add it, or export at opset 5 or later (the shape as a second input)"
        )
    target = per_shape(lambda xs: _reshape(node, np.empty(xs, dtype=np.uint8), list(shape), 0).shape)
    return fold_frozen(lambda x: (x.reshape(target(x.shape)),), first_only=True)


@REGISTRY.register("Transpose", since=1)
def build_transpose(node: NodeView, ctx: KernelContext) -> Fn:
    perm = node.attr("perm")
    return fold_frozen(lambda x: (np.transpose(x, perm if perm else None),), first_only=True)


@REGISTRY.register("Concat", since=1, end=3)
def build_concat1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-3: axis is optional, default 1."""
    axis = int(node.attr("axis", 1))
    return lambda *xs: (np.concatenate(xs, axis=norm_axis(node, axis, xs[0].ndim)),)


@REGISTRY.register("Concat", since=4)
def build_concat(node: NodeView, ctx: KernelContext) -> Fn:
    axis = int(node.attr("axis"))
    if axis >= 0:
        # a non-negative axis needs no rank to resolve; concatenate itself checks the range
        def compute(*xs: Any) -> tuple[Any]:
            if axis >= xs[0].ndim:
                norm_axis(node, axis, xs[0].ndim)  # raises with the node's name
            return (np.concatenate(xs, axis=axis),)

        return fold_frozen(compute)
    return fold_frozen(lambda *xs: (np.concatenate(xs, axis=norm_axis(node, axis, xs[0].ndim)),))


@REGISTRY.register("Flatten", since=1)
def build_flatten(node: NodeView, ctx: KernelContext) -> Fn:
    axis = int(node.attr("axis", 1))

    def compute(x: Any) -> tuple[Any]:
        a = axis + x.ndim if axis < 0 else axis
        if not 0 <= a <= x.ndim:
            raise ValueError(f"{node.describe()}: axis {axis} is out of range [-{x.ndim}, {x.ndim}]")
        outer = int(np.prod(x.shape[:a], dtype=np.int64))
        inner = int(np.prod(x.shape[a:], dtype=np.int64))  # explicit: -1 is ambiguous for empty x
        return (x.reshape(outer, inner),)

    return compute


def _squeeze(node: Any, x: Any, axes: list[int]) -> Any:
    if not axes:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(norm_axis(node, a, x.ndim) for a in axes))


def _unsqueeze(node: Any, x: Any, axes: list[int]) -> Any:
    rank = x.ndim + len(axes)
    norm = sorted(norm_axis(node, a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise ValueError(f"{node.describe()}: repeated axes {axes}")
    return np.expand_dims(x, tuple(norm))


@REGISTRY.register("Squeeze", since=1, end=12)
def build_squeeze1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-12: axes is an attribute."""
    return _squeeze_fixed(node, list(node.attr("axes", [])))


def _squeeze_fixed(node: Any, axes: list[int]) -> Fn:
    """Known axes: the output shape is found once per input shape, then a reshape (a view)."""
    target = per_shape(lambda xs: _squeeze(node, np.empty(xs, dtype=np.uint8), axes).shape)
    return fold_frozen(lambda x, axes_in=None: (x.reshape(target(x.shape)),), first_only=True)


@REGISTRY.register("Squeeze", since=13, host_inputs=(1,))
def build_squeeze(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 13+: axes is an optional input."""
    if len(node.inputs) < 2 or not node.inputs[1]:
        return _squeeze_fixed(node, [])
    axes_c = const_inputs(node, ctx)[1]
    if axes_c is not None:
        return _squeeze_fixed(node, ints(axes_c))
    return lambda x, axes=None: (_squeeze(node, x, ints(axes)),)


@REGISTRY.register("Unsqueeze", since=1, end=12)
def build_unsqueeze1(node: NodeView, ctx: KernelContext) -> Fn:
    return _unsqueeze_fixed(node, list(node.attr("axes")))


def _unsqueeze_fixed(node: Any, axes: list[int]) -> Fn:
    """Known axes: the output shape is found once per input shape, then a reshape (a view)."""
    target = per_shape(lambda xs: _unsqueeze(node, np.empty(xs, dtype=np.uint8), axes).shape)
    return fold_frozen(lambda x, axes_in=None: (x.reshape(target(x.shape)),), first_only=True)


@REGISTRY.register("Unsqueeze", since=13, host_inputs=(1,))
def build_unsqueeze(node: NodeView, ctx: KernelContext) -> Fn:
    axes_c = const_inputs(node, ctx)[1]
    if axes_c is not None:
        return _unsqueeze_fixed(node, ints(axes_c))
    return lambda x, axes: (_unsqueeze(node, x, ints(axes)),)


@REGISTRY.register("Expand", since=8, host_inputs=(1,))
def build_expand(node: NodeView, ctx: KernelContext) -> Fn:
    """Bidirectional broadcast of x with the shape (a 1 in the shape keeps x's dim)."""

    def compute(x: Any, shape: Any) -> tuple[Any]:
        target = np.broadcast_shapes(x.shape, tuple(ints(shape)))
        return (np.array(np.broadcast_to(x, target)),)

    return compute


@REGISTRY.register("Tile", since=1, end=5, host_inputs=(1, 2))
def build_tile1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-5: ``tiles`` copies along the single ``axis`` input."""

    def compute(x: Any, tiles: Any, axis: Any) -> tuple[Any]:
        reps = [1] * x.ndim
        reps[norm_axis(node, ints(axis)[0], x.ndim)] = ints(tiles)[0]
        return (np.tile(x, reps),)

    return compute


@REGISTRY.register("Tile", since=6, host_inputs=(1,))
def build_tile(node: NodeView, ctx: KernelContext) -> Fn:
    return lambda x, repeats: (np.tile(x, ints(repeats)),)


@REGISTRY.register("Shape", since=1, host_outputs=(0,))
def build_shape(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 15 adds start/end (clamped, negatives count from the back)."""
    start = int(node.attr("start", 0))
    end = node.attr("end")

    def compute(x: Any) -> tuple[Any]:
        return (np.array(x.shape[start : (None if end is None else int(end))], dtype=np.int64),)

    return compute


@REGISTRY.register("Size", since=1, host_outputs=(0,))
def build_size(node: NodeView, ctx: KernelContext) -> Fn:
    return lambda x: (np.array(x.size, dtype=np.int64),)


@REGISTRY.register("Identity", since=1)
def build_identity(node: NodeView, ctx: KernelContext) -> Fn:
    """Tensors, sequences and optionals pass through (values are never mutated in place)."""
    return lambda x: (x,)


# ------------------------------------------------------------------------------- generators
def _strings_as_str(a: np.ndarray) -> np.ndarray:
    """String tensors as object arrays of ``str`` (protobuf gives bytes)."""
    if a.dtype == object or a.dtype.kind in "SU":
        return np.array([_text(v) for v in a.ravel()], dtype=object).reshape(a.shape)
    return a


def _constant_value(node: Any) -> Any:
    from onnx import numpy_helper

    attrs = node.attributes
    if "value" in attrs:
        return _strings_as_str(np.asarray(attrs["value"]))
    if "sparse_value" in attrs:
        sp = attrs["sparse_value"]
        values = numpy_helper.to_array(sp.values)
        idx = numpy_helper.to_array(sp.indices)
        dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
        if idx.ndim == 1:
            dense.reshape(-1)[idx] = values
        else:
            dense[tuple(idx.T)] = values
        return dense
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(list(attrs[key]), dtype=dtype)
    if "value_string" in attrs:
        return np.array(_text(attrs["value_string"]), dtype=object)
    if "value_strings" in attrs:
        return np.array([_text(s) for s in attrs["value_strings"]], dtype=object)
    raise ValueError(f"{node.describe()}: Constant needs one value attribute, has {sorted(attrs)}")


@REGISTRY.register("Constant", since=1)
def build_constant(node: NodeView, ctx: KernelContext) -> Fn:
    """The value is decoded once, at session creation."""
    value = _constant_value(node)
    return lambda: (value,)


@REGISTRY.register("ConstantOfShape", since=9, host_inputs=(0,))
def build_constant_of_shape(node: NodeView, ctx: KernelContext) -> Fn:
    """Default value: float32 zero."""
    v = node.attr("value")
    fill = np.asarray(v).reshape(-1) if v is not None else np.zeros(1, dtype=np.float32)

    def compute(shape: Any) -> tuple[Any]:
        return (np.full(tuple(ints(shape)), fill[0], dtype=fill.dtype),)

    return compute


@REGISTRY.register("Range", since=11, host_inputs=(0, 1, 2))
def build_range(node: NodeView, ctx: KernelContext) -> Fn:
    """max(ceil((limit - start) / delta), 0) elements of start's type; floats accumulate delta as
    onnxruntime does (start + i * delta drifted 0.097 from it over 10000 steps of 0.1)."""

    def compute(start: Any, limit: Any, delta: Any) -> tuple[Any]:
        s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
        if d == 0:
            raise ValueError(f"{node.describe()}: delta must not be zero")
        n = max(int(math.ceil((float(lim) - float(s)) / float(d))), 0)
        if s.dtype.kind == "f" and n:  # onnxruntime adds delta step by step in the type (x[i] = x[i-1] + delta)
            steps = np.full(n, d, dtype=s.dtype)
            steps[0] = s
            return (np.cumsum(steps, dtype=s.dtype),)
        return ((s + np.arange(n, dtype=np.float64 if s.dtype.kind == "f" else np.int64) * d).astype(s.dtype),)

    return compute


@REGISTRY.register("EyeLike", since=9)
def build_eye_like(node: NodeView, ctx: KernelContext) -> Fn:
    """Ones on diagonal k; output type is the ``dtype`` attribute or the input's."""
    from onnx import helper

    k = int(node.attr("k", 0))
    dt = node.attr("dtype")

    def compute(x: Any) -> tuple[Any]:
        dtype = helper.tensor_dtype_to_np_dtype(int(dt)) if dt is not None else x.dtype
        return (np.eye(x.shape[0], x.shape[1], k=k, dtype=dtype),)

    return compute


@REGISTRY.register("OneHot", since=9, host_inputs=(1,))
def build_one_hot(node: NodeView, ctx: KernelContext) -> Fn:
    """Negative indices count from depth; out-of-range indices give an all-off row."""
    axis = int(node.attr("axis", -1))

    def compute(indices: Any, depth: Any, values: Any) -> tuple[Any]:
        d = int(np.asarray(depth).reshape(-1)[0])
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + d, idx)
        a = norm_axis(node, axis, idx.ndim + 1)
        out = np.full(idx.shape[:a] + (d,) + idx.shape[a:], values[0], dtype=values.dtype)
        valid = (idx >= 0) & (idx < d)
        hot = values[1] if valid.all() else np.expand_dims(np.where(valid, values[1], values[0]), a)
        # one write per index (an all-off row writes "off" at 0): not a depth-wide compare per element
        np.put_along_axis(out, np.expand_dims(np.where(valid, idx, 0), a), hot, axis=a)
        return (out,)

    return compute


@REGISTRY.register("Trilu", since=14, host_inputs=(1,))
def build_trilu(node: NodeView, ctx: KernelContext) -> Fn:
    upper = int(node.attr("upper", 1))

    def compute(x: Any, k: Any = None) -> tuple[Any]:
        kk = int(np.asarray(k).reshape(())) if k is not None else 0
        return ((np.triu(x, kk) if upper else np.tril(x, kk)).astype(x.dtype),)

    return compute


# ------------------------------------------------------------------------ split and slicing
def _split_bounds(node: Any, n: int, sizes: list[int] | None, n_out: int) -> list[int]:
    if sizes:
        if sum(sizes) != n:
            raise ValueError(f"{node.describe()}: split {sizes} does not sum to the axis length {n}")
        if len(sizes) != n_out:
            raise ValueError(f"{node.describe()}: split has {len(sizes)} sizes for {n_out} outputs")
        return list(np.cumsum(sizes)[:-1])
    chunk = -(-n // n_out)  # ceil: opset 18 lets the last chunk be smaller
    return [min(chunk * i, n) for i in range(1, n_out)]


def _split_fixed(node: Any, axis: int, sizes: list[int] | None, n_out: int) -> Fn:
    """Known sizes (or equal parts): the output index tuples are built once per input shape, and
    a run is ``n_out`` basic-indexing views (np.split's Python-level loop costs ~10 us)."""

    def plan(xs: tuple[int, ...]) -> list[tuple[slice, ...]]:
        a = norm_axis(node, axis, len(xs))
        bounds = [0] + [int(v) for v in _split_bounds(node, xs[a], sizes, n_out)] + [xs[a]]
        lead = (slice(None),) * a
        return [lead + (slice(lo, hi),) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]

    index = per_shape(plan)

    def compute(x: Any, split: Any = None) -> tuple[Any, ...]:
        return tuple(x[i] for i in index(x.shape))

    return compute


@REGISTRY.register("Split", since=1, end=1, host_inputs=(1,))
def build_split1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 1: sizes from the optional second input, else the ``split`` attribute, else equal parts."""
    if len(node.inputs) >= 2 and node.inputs[1]:
        return build_split(node, ctx)
    return build_split2(node, ctx)


@REGISTRY.register("Split", since=2, end=12)
def build_split2(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 2-12: sizes in the ``split`` attribute, else equal parts."""
    return _split_fixed(node, int(node.attr("axis", 0)), list(node.attr("split", [])) or None, len(node.outputs))


@REGISTRY.register("Split", since=13, host_inputs=(1,))
def build_split(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 13+: sizes as an optional input; 18+: ``num_outputs`` with a smaller last part."""
    axis = int(node.attr("axis", 0))
    n_out = len(node.outputs)
    if len(node.inputs) < 2 or not node.inputs[1]:
        return _split_fixed(node, axis, None, n_out)
    split_c = ctx.constant(node.inputs[1])
    if split_c is not None:
        return _split_fixed(node, axis, ints(split_c) or None, n_out)

    def compute(x: Any, split: Any = None) -> tuple[Any, ...]:
        a = norm_axis(node, axis, x.ndim)
        return tuple(np.split(x, _split_bounds(node, x.shape[a], ints(split) or None, n_out), axis=a))

    return compute


def _slice(
    node: Any, x: Any, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None
) -> Any:
    index = [slice(None)] * x.ndim
    axes = axes if axes else list(range(len(starts)))
    steps = steps if steps else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        if st == 0:
            raise ValueError(f"{node.describe()}: slice step must not be 0")
        dim = x.shape[norm_axis(node, a, x.ndim)]
        if st > 0:  # clamp the way the spec does: huge sentinels (INT64_MAX/MIN) become the bounds
            index[norm_axis(node, a, x.ndim)] = slice(max(-dim - 1, min(s, dim)), max(-dim - 1, min(e, dim)), st)
            continue
        # a negative step: start in [0, dim - 1] (one below -dim takes the first element), end in
        # [-1, dim - 1] with -1 "through the first" (the spec's, as onnx infers the shape; onnxruntime
        # alone reads an end of INT64_MAX as -1 too, where the spec and inference give nothing)
        s = min(max(s + dim if s < 0 else s, 0), dim - 1)
        e = min(max(e + dim if e < 0 else e, -1), dim - 1)
        index[norm_axis(node, a, x.ndim)] = slice(s, None if e == -1 else e, st) if dim else slice(0, 0)
    return x[tuple(index)]


@REGISTRY.register("Slice", since=1, end=9)
def build_slice1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-9: starts/ends/axes are attributes, steps are 1."""
    starts, ends = list(node.attr("starts")), list(node.attr("ends"))
    axes = list(node.attr("axes", [])) or None
    return _slice_fixed(node, starts, ends, axes, None)


class _Index:
    """Records the index ``_slice`` builds, so a known slice is planned once per shape."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.ndim = len(shape)

    def __getitem__(self, index: Any) -> Any:
        return index


def _slice_fixed(node: Any, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None) -> Fn:
    """Known starts/ends/axes/steps: the index tuple is built once per input shape."""
    index = per_shape(lambda xs: _slice(node, _Index(xs), starts, ends, axes, steps))
    return fold_frozen(lambda x, *params: (x[index(x.shape)],), first_only=True)


@REGISTRY.register("Slice", since=10, host_inputs=(1, 2, 3, 4))
def build_slice(node: NodeView, ctx: KernelContext) -> Fn:
    consts = const_inputs(node, ctx)
    n = len(node.inputs)
    if all(i >= n or not node.inputs[i] or consts[i] is not None for i in range(1, 5)):
        get = lambda i: ints(consts[i]) if i < n and consts[i] is not None else []  # noqa: E731
        fixed = _slice_fixed(node, get(1), get(2), get(3) or None, get(4) or None)
        if consts[0] is not None:
            # slicing a constant (weights cut into gates): done once at creation
            value = frozen(fixed(consts[0])[0])
            return lambda *args: (value,)
        return fixed

    plans: dict[Any, Any] = {}

    key_of = param_key

    def compute(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> tuple[Any]:
        """Parameters computed at run time (often the same values every run: shape arithmetic
        the core folded): the index is planned once per (shape, parameter values)."""
        key = (x.shape, key_of(starts), key_of(ends), key_of(axes), key_of(steps))
        index = plans.get(key)
        if index is None:
            if len(plans) > 64:  # values that change every run: keep the memo small
                plans.clear()
            index = plans[key] = _slice(
                node, _Index(x.shape), ints(starts), ints(ends), ints(axes) or None, ints(steps) or None
            )
        return (x[index],)

    return compute


def _pad_plan(node: Any, shape: tuple[int, ...], pads: tuple[int, ...], mode: str, axes: tuple[int, ...] | None) -> Any:
    """(crop, width) for one input shape: negative pads become a crop index (None when there is
    none), the rest per-axis (before, after) widths."""
    rank = len(shape)
    ax = [norm_axis(node, a, rank) for a in axes] if axes else list(range(rank))
    if len(pads) != 2 * len(ax):
        raise ValueError(f"{node.describe()}: pads has {len(pads)} values for {len(ax)} axes")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ValueError(f"{node.describe()}: mode must be constant, reflect, edge or wrap, got {mode!r}")
    width = [(0, 0)] * rank
    for i, a in enumerate(ax):
        width[a] = (pads[i], pads[i + len(ax)])
    crop = None
    if any(b < 0 or e < 0 for b, e in width):
        crop = tuple(slice(max(-b, 0), shape[k] - max(-e, 0)) for k, (b, e) in enumerate(width))
    return crop, [(max(b, 0), max(e, 0)) for b, e in width]


def _pad_axis(x: Any, axis: int, b: int, e: int, mode: str) -> Any:
    """Reflect or edge padding of one axis as one concatenate of (reversed) slices; None where
    NumPy's general np.pad is needed (reflect wider than the axis, empty axes)."""
    n = x.shape[axis]
    lead = (slice(None),) * axis
    if mode == "reflect":
        if n < 2 or b > n - 1 or e > n - 1:
            return None
        before = x[lead + (slice(b, 0, -1),)]
        stop = n - 2 - e
        after = x[lead + (slice(n - 2, stop if stop >= 0 else None, -1),)]
    else:  # edge
        if n < 1:
            return None
        before = np.repeat(x[lead + (slice(0, 1),)], b, axis=axis)
        after = np.repeat(x[lead + (slice(n - 1, n),)], e, axis=axis)
    return np.concatenate((before, x, after), axis=axis)


def _pad(node: Any, x: Any, pads: list[int], mode: str, value: Any, axes: list[int] | None) -> Any:
    crop, width = _pad_plan(node, x.shape, tuple(pads), mode, tuple(axes) if axes else None)
    return _pad_apply(x, crop, width, mode, value)


def _pad_apply(x: Any, crop: Any, width: list[tuple[int, int]], mode: str, value: Any) -> Any:
    """Constant padding writes x into a filled buffer (one allocation, one copy); reflect and
    edge concatenate slices per padded axis; wrap (and the odd cases) use np.pad."""
    if crop is not None:
        x = x[crop]  # negative pads crop first
    if mode == "constant":
        out = np.full(
            tuple(d + b + e for d, (b, e) in zip(x.shape, width, strict=True)),
            value if value is not None else 0,
            dtype=x.dtype,
        )
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, width, strict=True))] = x
        return out
    if mode in ("reflect", "edge"):
        y = x
        for axis, (b, e) in enumerate(width):
            if b or e:
                y = _pad_axis(y, axis, b, e, mode)
                if y is None:
                    return np.pad(x, width, mode="reflect" if mode == "reflect" else "edge")
        return y if y is not x else x.copy()
    return np.pad(x, width, mode="wrap")  # the last mode _pad_plan admits


@REGISTRY.register("Pad", since=1, end=1)
def build_pad1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 1: the pads attribute is called ``paddings``."""
    pads = list(node.attr("paddings"))
    mode = _text(node.attr("mode", "constant"))
    value = float(node.attr("value", 0.0))
    return lambda x: (_pad(node, x, pads, mode, np.asarray(value, dtype=x.dtype), None),)


@REGISTRY.register("Pad", since=2, end=10)
def build_pad2(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 2-10: pads and value are attributes."""
    pads = list(node.attr("pads"))
    mode = _text(node.attr("mode", "constant"))
    value = float(node.attr("value", 0.0))
    return lambda x: (_pad(node, x, pads, mode, np.asarray(value, dtype=x.dtype), None),)


@REGISTRY.register("Pad", since=11, host_inputs=(1, 2, 3))
def build_pad(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 11+: pads/constant_value inputs; 18+: axes; 19+: wrap mode."""
    mode = _text(node.attr("mode", "constant"))
    plans: dict[Any, Any] = {}  # (shape, pads, axes) -> (crop, width)

    def compute(x: Any, pads: Any, value: Any = None, axes: Any = None) -> tuple[Any]:
        key = (
            x.shape,
            tuple(pads.tolist()) if isinstance(pads, np.ndarray) else tuple(ints(pads)),
            None if axes is None else tuple(ints(axes)),
        )
        plan = plans.get(key)
        if plan is None:
            if len(plans) > 64:  # pads computed from data could vary without bound
                plans.clear()
            plan = plans[key] = _pad_plan(node, x.shape, tuple(int(v) for v in key[1]), mode, key[2] or None)
        v = None if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0]
        return (_pad_apply(x, plan[0], plan[1], mode, v),)

    return compute


# --------------------------------------------------------------------------------- gathering
@REGISTRY.register("Gather", since=1)
def build_gather(node: NodeView, ctx: KernelContext) -> Fn:
    """Negative indices count from the back of the axis."""
    axis = int(node.attr("axis", 0))
    consts = const_inputs(node, ctx)
    idx_c = consts[1]
    if idx_c is not None:
        idx_c = np.asarray(idx_c).astype(np.int64)

        def plan(xs: tuple[int, ...]) -> tuple[int, Any]:
            """The axis and the indices with negatives resolved, for one input shape."""
            a = norm_axis(node, axis, len(xs))
            idx = np.where(idx_c < 0, idx_c + xs[a], idx_c)
            if idx.size and (idx.min() < 0 or idx.max() >= xs[a]):
                raise IndexError(f"{node.describe()}: indices out of range for axis {a} of size {xs[a]}")
            if idx.ndim == 0:
                # one index: a plain basic-indexing view, no gather
                return a, (slice(None),) * a + (int(idx), Ellipsis)  # Ellipsis: a 0-d array, never a scalar
            return a, idx

        get = per_shape(plan)

        def compute(x: Any, indices: Any) -> tuple[Any]:
            a, idx = get(x.shape)
            if type(idx) is tuple:
                return (x[idx],)
            return (np.take(x, idx, axis=a),)

        if consts[0] is not None:
            value = frozen(compute(consts[0], idx_c)[0])
            return lambda *args: (value,)
        return fold_frozen(compute, first_only=True)

    def gather(x: Any, indices: Any) -> tuple[Any]:
        a = norm_axis(node, axis, x.ndim)
        idx = indices if indices.dtype == np.int64 else indices.astype(np.int64)
        return (np.take(x, np.where(idx < 0, idx + x.shape[a], idx), axis=a),)

    return gather


@REGISTRY.register("GatherElements", since=11)
def build_gather_elements(node: NodeView, ctx: KernelContext) -> Fn:
    axis = int(node.attr("axis", 0))

    def compute(x: Any, indices: Any) -> tuple[Any]:
        """Indices may be shorter than the data on the other axes (torch.gather exports so): the
        data's leading part there is read, as onnxruntime reads it."""
        a = norm_axis(node, axis, x.ndim)
        if indices.ndim != x.ndim or any(i > d for k, (i, d) in enumerate(zip(indices.shape, x.shape)) if k != a):
            raise fail(
                node, f"indices of shape {list(indices.shape)} do not fit data of shape {list(x.shape)} off axis {a}"
            )
        x = x[tuple(slice(None) if k == a else slice(0, i) for k, i in enumerate(indices.shape))]
        idx = indices.astype(np.int64)
        return (np.take_along_axis(x, np.where(idx < 0, idx + x.shape[a], idx), axis=a),)

    return compute


@REGISTRY.register("GatherND", since=11)
def build_gather_nd(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 12's batch_dims: the first b dims of data and indices are matched, not indexed."""
    b = int(node.attr("batch_dims", 0))

    def compute(x: Any, indices: Any) -> tuple[Any]:
        k = indices.shape[-1]
        batch = x.shape[:b]
        nb = int(np.prod(batch, dtype=np.int64))
        data = x.reshape((nb,) + x.shape[b:])
        if k == 0:  # an empty index tuple selects the whole slice, once per tuple
            m = int(np.prod(indices.shape[b:-1], dtype=np.int64))
            return (
                np.broadcast_to(data[:, None], (nb, m) + x.shape[b:]).reshape(indices.shape[:-1] + x.shape[b:]).copy(),
            )
        idx = indices.astype(np.int64).reshape(nb, -1, k)
        idx = np.where(idx < 0, idx + np.array(x.shape[b : b + k]), idx)
        rows = np.arange(nb).repeat(idx.shape[1])
        flat = idx.reshape(-1, k)
        out = data[(rows,) + tuple(flat.T)]
        return (out.reshape(indices.shape[:-1] + x.shape[b + k :]),)

    return compute


_SCATTER_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: Any) -> Any:
    r = _text(node.attr("reduction", "none"))
    if r != "none" and r not in _SCATTER_REDUCE:
        raise ValueError(f"{node.describe()}: reduction must be none, add, mul, max or min, got {r!r}")
    return None if r == "none" else _SCATTER_REDUCE[r]


def _scatter_elements(node: Any, x: Any, indices: Any, updates: Any, axis: int, ufunc: Any) -> Any:
    a = norm_axis(node, axis, x.ndim)
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + x.shape[a], idx)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[a] = idx
    out = x.copy()
    if ufunc is None:
        out[tuple(grid)] = updates
        return out
    where = tuple(g.reshape(-1) for g in np.broadcast_arrays(*grid))
    if _extreme_meets_nan(ufunc, out, where, updates):
        _scatter_extreme_with_nan(out, where, updates.reshape(-1), ufunc is np.maximum)
    else:
        ufunc.at(out, where, updates.reshape(-1))
    return out


@REGISTRY.register("Scatter", since=9, end=10)
def build_scatter(node: NodeView, ctx: KernelContext) -> Fn:
    """The deprecated opset 9-10 name of ScatterElements (no reduction)."""
    axis = int(node.attr("axis", 0))
    return lambda x, i, u: (_scatter_elements(node, x, i, u, axis, None),)


@REGISTRY.register("ScatterElements", since=11)
def build_scatter_elements(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 16 adds reduction add/mul, 18 max/min; duplicates accumulate via ``ufunc.at``."""
    axis = int(node.attr("axis", 0))
    ufunc = _reduction(node)
    return lambda x, i, u: (_scatter_elements(node, x, i, u, axis, ufunc),)


@REGISTRY.register("ScatterND", since=11)
def build_scatter_nd(node: NodeView, ctx: KernelContext) -> Fn:
    ufunc = _reduction(node)

    def compute(x: Any, indices: Any, updates: Any) -> tuple[Any]:
        k = indices.shape[-1]
        idx = indices.astype(np.int64).reshape(-1, k)
        idx = np.where(idx < 0, idx + np.array(x.shape[:k]), idx)
        upd = updates.reshape((-1,) + x.shape[k:])
        out = x.copy()
        if ufunc is None:
            out[tuple(idx.T)] = upd  # duplicate indices are undefined by the spec
        elif _extreme_meets_nan(ufunc, out, tuple(idx.T), upd):
            _scatter_extreme_with_nan(out, tuple(idx.T), upd, ufunc is np.maximum)
        else:
            ufunc.at(out, tuple(idx.T), upd)
        return (out,)

    return compute


def _extreme_meets_nan(ufunc: Any, out: np.ndarray, where: tuple[np.ndarray, ...], upd: np.ndarray) -> bool:
    """Whether a max/min scatter has a NaN on either side (then NumPy's rule is not onnxruntime's)."""
    if ufunc not in (np.maximum, np.minimum) or out.dtype.kind != "f":
        return False
    return bool(np.isnan(upd).any() or np.isnan(out[where]).any())


def _scatter_extreme_with_nan(out: np.ndarray, where: tuple[np.ndarray, ...], upd: np.ndarray, largest: bool) -> None:
    """onnxruntime's max/min scatters (ScatterND and ScatterElements) where a NaN is involved:
    std::max(update, data), which keeps the update when either is NaN (NumPy's maximum takes any
    NaN, fmax drops it), one index at a time in index order as duplicates accumulate. Only this
    rare path loops."""
    for i in range(len(where[0])):
        at = tuple(w[i] for w in where)
        d, u = out[at], upd[i]
        out[at] = np.where((u < d) if largest else (d < u), d, u)


@REGISTRY.register("Compress", since=9)
def build_compress(node: NodeView, ctx: KernelContext) -> Fn:
    axis = node.attr("axis")

    def compute(x: Any, condition: Any) -> tuple[Any]:
        c = np.asarray(condition, dtype=bool)
        if axis is None:
            return (np.compress(c, x.ravel()),)
        return (np.compress(c, x, axis=norm_axis(node, int(axis), x.ndim)),)

    return compute


# --------------------------------------------------------------------- sorting and searching
@REGISTRY.register("CumSum", since=11, host_inputs=(1,))
def build_cumsum(node: NodeView, ctx: KernelContext) -> Fn:
    exclusive = int(node.attr("exclusive", 0))
    reverse = int(node.attr("reverse", 0))
    if exclusive not in (0, 1) or reverse not in (0, 1):  # onnxruntime refuses other values too
        raise ValueError(f"{node.describe()}: exclusive ({exclusive}) and reverse ({reverse}) must be 0 or 1")

    def compute(x: Any, axis: Any) -> tuple[Any]:
        a = norm_axis(node, int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        y = np.flip(x, a) if reverse else x
        s = np.cumsum(y, axis=a, dtype=x.dtype)
        if exclusive and s.shape[a]:  # (an empty axis has nothing to shift)
            s = np.concatenate(
                [np.zeros_like(np.take(s, [0], axis=a)), np.take(s, np.arange(s.shape[a] - 1), axis=a)], axis=a
            )
        return ((np.flip(s, a) if reverse else s).astype(x.dtype),)

    return compute


def _sort_key(x: Any, largest: bool) -> Any:
    key = x.astype(np.float64) if x.dtype.kind in "iub" or x.dtype.itemsize < 4 else x
    return -key if largest else key


def _topk(node: Any, x: Any, k: int, axis: int, largest: bool, sorted_: bool) -> tuple[Any, Any]:
    a = norm_axis(node, axis, x.ndim)
    if not 0 <= k <= x.shape[a]:
        raise ValueError(f"{node.describe()}: k={k} is out of range for axis length {x.shape[a]}")
    key = _sort_key(x, largest)
    n = x.shape[a]
    if 0 < k and 8 * k < n and not (key.dtype.kind == "f" and np.isnan(key).any()):
        idx = np.moveaxis(
            _few_smallest(np.moveaxis(key, a, -1).reshape(-1, n), k).reshape(*np.moveaxis(key, a, -1).shape[:-1], k),
            -1,
            a,
        )
    else:
        idx = np.take(np.argsort(key, axis=a, kind="stable"), np.arange(k), axis=a)  # ties: lower index first
    return (np.take_along_axis(x, idx, axis=a), idx.astype(np.int64))


def _few_smallest(rows: np.ndarray, k: int) -> np.ndarray:
    """The k smallest of each row, ties to the lower index, in order: a partition finds each row's
    k-th value, the rows' entries below it and its first ties are the k (one O(n) pass, where a
    full sort of a 100000-long axis for k = 100 was 150x onnxruntime)."""
    kth = np.take_along_axis(rows, np.argpartition(rows, k - 1, axis=1)[:, k - 1 : k], axis=1)
    less, tie = rows < kth, rows == kth
    chosen = less | (tie & (np.cumsum(tie, axis=1) <= k - less.sum(axis=1, keepdims=True)))
    idx = np.flatnonzero(chosen).reshape(rows.shape[0], k) % rows.shape[1]
    return np.take_along_axis(idx, np.argsort(np.take_along_axis(rows, idx, axis=1), axis=1, kind="stable"), axis=1)


@REGISTRY.register("TopK", since=1, end=9)
def build_topk1(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-9: k is an attribute."""
    k, axis = int(node.attr("k")), int(node.attr("axis", -1))
    return lambda x: _topk(node, x, k, axis, True, True)


@REGISTRY.register("TopK", since=10, host_inputs=(1,))
def build_topk(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 10+: k is an input; 11+: largest and sorted attributes."""
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))
    sorted_ = bool(node.attr("sorted", 1))
    return lambda x, k: _topk(node, x, int(np.asarray(k).reshape(-1)[0]), axis, largest, sorted_)


def _arg(fn: Callable[..., Any]) -> Callable[[Any, Any], Fn]:
    def build(node: NodeView, ctx: KernelContext) -> Fn:
        """keepdims keeps the reduced axis; select_last_index (12+) picks the last tie. A NaN is
        passed over as onnxruntime's comparisons pass it (numpy's first NaN wins): it is the
        answer only at index 0 (KBinsDiscretizer put a whole row with one NaN in the last bin)."""
        axis = int(node.attr("axis", 0))
        keepdims = int(node.attr("keepdims", 1))
        last = int(node.attr("select_last_index", 0))

        def compute(x: Any) -> tuple[Any]:
            a = norm_axis(node, axis, x.ndim)
            nan = np.isnan(x) if x.dtype.kind == "f" else None
            if nan is not None and nan.any():  # onnxruntime's scan: a NaN never wins, unless it comes first
                x = np.where(nan, -np.inf if fn is np.argmax else np.inf, x)
            if last:
                r = x.shape[a] - 1 - fn(np.flip(x, a), axis=a)
            else:
                r = fn(x, axis=a)
            if nan is not None and nan.any() and x.shape[a]:
                r = np.where(np.take(nan, 0, axis=a), 0, r)
            r = r.astype(np.int64)
            return (np.expand_dims(r, a) if keepdims else r,)

        return compute

    return build


REGISTRY.register("ArgMax", since=1)(_arg(np.argmax))
REGISTRY.register("ArgMin", since=1)(_arg(np.argmin))


@REGISTRY.register("NonZero", since=9)
def build_nonzero(node: NodeView, ctx: KernelContext) -> Fn:
    """A scalar is a one-element tensor there, as onnxruntime reads it: indices of shape (1, nnz)."""
    return lambda x: (np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64).reshape(max(x.ndim, 1), -1),)


@REGISTRY.register("Unique", since=11)
def build_unique(node: NodeView, ctx: KernelContext) -> Fn:
    """sorted=0 orders the unique values by first occurrence."""
    axis = node.attr("axis")
    sorted_ = int(node.attr("sorted", 1))
    n_out = len(node.outputs)  # outputs 2-4 are optional: one value per declared output

    def compute(x: Any) -> tuple[Any, ...]:
        a = None if axis is None else norm_axis(node, int(axis), x.ndim)
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=a)
        inverse = inverse.reshape(-1)
        if not sorted_:
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if a is None else a)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))[:n_out]

    return compute


@REGISTRY.register("ReverseSequence", since=10)
def build_reverse_sequence(node: NodeView, ctx: KernelContext) -> Fn:
    batch_axis = int(node.attr("batch_axis", 1))
    time_axis = int(node.attr("time_axis", 0))

    def compute(x: Any, lens: Any) -> tuple[Any]:
        out = x.copy()
        for b, n in enumerate(ints(lens)):
            src: list[Any] = [slice(None)] * x.ndim
            src[batch_axis] = b
            src[time_axis] = slice(0, n)
            out[tuple(src)] = np.flip(x[tuple(src)], axis=time_axis - (1 if batch_axis < time_axis else 0))
        return (out,)

    return compute


@REGISTRY.register("CenterCropPad", since=18, host_inputs=(1,))
def build_center_crop_pad(node: NodeView, ctx: KernelContext) -> Fn:
    """Per listed axis: crop a centred window (start rounded down) or zero-pad around the input
    (the odd pixel goes to the end)."""
    axes_attr = node.attr("axes")

    def compute(x: Any, shape: Any) -> tuple[Any]:
        target = ints(shape)
        axes = [norm_axis(node, a, x.ndim) for a in axes_attr] if axes_attr else list(range(x.ndim))
        if len(axes) != len(target):
            raise ValueError(f"{node.describe()}: shape has {len(target)} values for {len(axes)} axes")
        out_shape = list(x.shape)
        src: list[Any] = [slice(None)] * x.ndim
        dst: list[Any] = [slice(None)] * x.ndim
        for a, t in zip(axes, target, strict=False):
            n = x.shape[a]
            out_shape[a] = t
            if n >= t:
                start = (n - t) // 2
                src[a] = slice(start, start + t)
            else:
                start = (t - n) // 2
                dst[a] = slice(start, start + n)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return (out,)

    return compute

"""Ops that move elements without arithmetic: Transpose, Slice and Expand are one strided-gather
kernel with different strides; Concat scatters each input into place; Gather and Pad have their
own index kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.kernels.shape_ops import gather_strided, strided_scatter
from ep_cuda_numba.launch import Runtime, c_strides, flat, prod, scalar_arg
from ep_cuda_numba.registry import ANY_T, INDEX_T, register_versions, support_check


@register_versions("Transpose", 1, {"T": ANY_T})
def build_transpose(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    perm_attr = node.attr("perm")

    def compute(x: Any) -> tuple[Any]:
        nd = len(x.shape)
        perm = list(range(nd - 1, -1, -1)) if perm_attr is None else [int(p) for p in perm_attr]
        st = c_strides(x.shape)
        out_shape = tuple(int(x.shape[p]) for p in perm)
        if nd == 0:
            return (x,)
        return (gather_strided(rt, x, out_shape, tuple(st[p] for p in perm), 0),)

    return compute


@register_versions("Concat", 4, {"T": ANY_T})
def build_concat(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    axis_attr = int(node.attr("axis"))

    def compute(*xs: Any) -> tuple[Any]:
        xs = tuple(x for x in xs if x is not None)
        nd = len(xs[0].shape)
        axis = axis_attr % nd
        out_shape = list(xs[0].shape)
        out_shape[axis] = sum(int(x.shape[axis]) for x in xs)
        out = rt.empty(tuple(out_shape), xs[0].dtype)
        ost = c_strides(out_shape)
        off = 0
        for x in xs:
            n = prod(x.shape)
            if n:
                rt.launch1d(
                    strided_scatter, n, flat(out), flat(x), tuple(int(s) for s in x.shape), ost, off * ost[axis]
                )
            off += int(x.shape[axis])
        return (out,)

    return compute


def slice_plan(
    shape: tuple[int, ...], starts: Any, ends: Any, axes: Any, steps: Any
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(out shape, element strides, base offset) of an ONNX Slice on a C-contiguous array."""
    nd = len(shape)
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(a) % nd for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    st = c_strides(shape)
    out_shape = list(shape)
    strides = list(st)
    base = 0
    for s, e, a, k in zip(starts, ends, axes, steps, strict=False):
        if k == 0:
            raise InvalidArgument("Slice: steps must not be 0")
        r = slice(s, e, k).indices(shape[a])
        length = len(range(*r))
        out_shape[a] = length
        strides[a] = st[a] * k
        base += r[0] * st[a] if length else 0
    return tuple(out_shape), tuple(strides), base


@register_versions("Slice", 10, {"T": ANY_T, "Tind": INDEX_T}, host_inputs=(1, 2, 3, 4))
def build_slice(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)

    def compute(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> tuple[Any]:
        shape, strides, base = slice_plan(tuple(int(s) for s in x.shape), starts, ends, axes, steps)
        return (gather_strided(rt, x, shape, strides, base),)

    return compute


@cuda.jit
def gather_kernel(out, data, idx, axis_len, inner, n_idx):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        k = i % inner
        j = (i // inner) % n_idx
        o = i // (inner * n_idx)
        v = idx[j]
        if v < 0:
            v += axis_len
        out[i] = data[(o * axis_len + v) * inner + k]


@register_versions("Gather", 1, {"T": ANY_T, "Tind": INDEX_T})
def build_gather(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    axis_attr = int(node.attr("axis", 0))

    def compute(data: Any, idx: Any) -> tuple[Any]:
        shape = tuple(int(s) for s in data.shape)
        axis = axis_attr % len(shape)
        ishape = tuple(int(s) for s in idx.shape)
        out_shape = shape[:axis] + ishape + shape[axis + 1 :]
        out = rt.empty(out_shape, data.dtype)
        n = prod(out_shape)
        if n:
            rt.launch1d(
                gather_kernel,
                n,
                flat(out),
                flat(data),
                flat(idx),
                shape[axis],
                prod(shape[axis + 1 :]),
                max(prod(ishape), 1),
            )
        return (out,)

    return compute


@cuda.jit
def pad_kernel(out, x, oshape, ishape, pads_begin, mode, value):
    """mode 0 constant, 1 reflect, 2 edge, 3 wrap."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        rem = i
        j = 0
        mul = 1
        inside = True
        for d in range(len(oshape) - 1, -1, -1):
            c = rem % oshape[d] - pads_begin[d]
            rem = rem // oshape[d]
            n = ishape[d]
            if c < 0 or c >= n:
                if mode == 0:
                    inside = False
                elif mode == 1:
                    period = 2 * (n - 1) if n > 1 else 1
                    c = c % period
                    if c < 0:
                        c += period
                    if c >= n:
                        c = period - c
                elif mode == 2:
                    c = 0 if c < 0 else n - 1
                else:
                    c = c % n
                    if c < 0:
                        c += n
            j += c * mul
            mul *= n
        if inside:
            out[i] = x[j]
        else:
            out[i] = value


_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


@support_check("Pad")
def _pad_ok(node: Any) -> str | None:
    mode = node.attr("mode", "constant")
    return None if mode in _PAD_MODES else f"Pad mode {mode!r} is not supported (supported: {list(_PAD_MODES)})"


@register_versions("Pad", 11, {"T": ANY_T, "Tind": INDEX_T}, host_inputs=(1, 2, 3))
def build_pad(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    mode = _PAD_MODES[node.attr("mode", "constant")]

    def compute(x: Any, pads: Any, cval: Any = None, axes: Any = None) -> tuple[Any]:
        shape = tuple(int(s) for s in x.shape)
        nd = len(shape)
        p = [int(v) for v in np.asarray(pads).reshape(-1)]
        ax = list(range(nd)) if axes is None else [int(a) % nd for a in np.asarray(axes).reshape(-1)]
        begin, end = [0] * nd, [0] * nd
        for k, a in enumerate(ax):
            begin[a], end[a] = p[k], p[k + len(ax)]
        if any(b < 0 or e < 0 for b, e in zip(begin, end, strict=False)):
            raise InvalidArgument(f"{node.describe()}: negative pads (cropping) are not supported")
        oshape = tuple(s + b + e for s, b, e in zip(shape, begin, end, strict=False))
        out = rt.empty(oshape, x.dtype)
        v = np.dtype(x.dtype).type(0 if cval is None or np.size(cval) == 0 else np.asarray(cval).reshape(-1)[0])
        if prod(oshape):
            rt.launch1d(pad_kernel, prod(oshape), flat(out), flat(x), oshape, shape, tuple(begin), mode, scalar_arg(v))
        return (out,)

    return compute

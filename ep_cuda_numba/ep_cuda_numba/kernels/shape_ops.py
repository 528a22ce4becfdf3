"""Metadata-only ops on device arrays (Reshape, Flatten, Squeeze, Unsqueeze, Identity-like) and
the ops whose result is a shape (Shape, Size: outputs stay on the host) or comes from one
(Constant, ConstantOfShape, Expand). Reshaping a C-contiguous device array is a view: no kernel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.launch import Runtime, c_strides, flat, prod, scalar_arg
from ep_cuda_numba.registry import ANY_T, register_versions


def _norm_axes(axes: Sequence[int], rank: int, what: str) -> list[int]:
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise InvalidArgument(f"{what}: axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    return out


def _reshape_target(shape: tuple[int, ...], spec: np.ndarray, allowzero: bool) -> tuple[int, ...]:
    dims = [int(d) for d in np.asarray(spec).reshape(-1)]
    out = []
    for i, d in enumerate(dims):
        out.append(shape[i] if d == 0 and not allowzero else d)
    if -1 in out:
        known = prod([d for d in out if d != -1])
        out[out.index(-1)] = prod(shape) // known if known else 0
    if prod(out) != prod(shape):
        raise InvalidArgument(f"cannot reshape {list(shape)} to {dims}")
    return tuple(out)


@register_versions("Reshape", 5, {"T": ANY_T}, host_inputs=(1,))
def build_reshape(node: NodeView, ctx: KernelContext) -> Any:
    allowzero = bool(node.attr("allowzero", 0))

    def compute(x: Any, shape: Any) -> tuple[Any]:
        return (x.reshape(_reshape_target(tuple(x.shape), shape, allowzero)),)

    return compute


@register_versions("Flatten", 1, {"T": ANY_T})
def build_flatten(node: NodeView, ctx: KernelContext) -> Any:
    axis = int(node.attr("axis", 1))

    def compute(x: Any) -> tuple[Any]:
        a = axis % len(x.shape) if axis < 0 else axis
        return (x.reshape((prod(x.shape[:a]), prod(x.shape[a:]))),)

    return compute


@register_versions("Squeeze", 1, {"T": ANY_T}, host_inputs=(1,))
def build_squeeze(node: NodeView, ctx: KernelContext) -> Any:
    attr_axes = node.attr("axes")

    def compute(x: Any, axes: Any = None) -> tuple[Any]:
        ax = attr_axes if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        shape = tuple(x.shape)
        if ax is None:
            new = tuple(d for d in shape if d != 1)
        else:
            drop = set(_norm_axes(ax, len(shape), node.describe()))
            new = tuple(d for i, d in enumerate(shape) if i not in drop)
        return (x.reshape(new),)

    return compute


@register_versions("Unsqueeze", 1, {"T": ANY_T}, host_inputs=(1,))
def build_unsqueeze(node: NodeView, ctx: KernelContext) -> Any:
    attr_axes = node.attr("axes")

    def compute(x: Any, axes: Any = None) -> tuple[Any]:
        ax = attr_axes if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        rank = len(x.shape) + len(ax)
        ins = set(_norm_axes(ax, rank, node.describe()))
        it = iter(x.shape)
        return (x.reshape(tuple(1 if i in ins else next(it) for i in range(rank))),)

    return compute


@register_versions("Shape", 1, {"T": ANY_T, "T1": ("tensor(int64)",)}, host_outputs=(0,))
def build_shape(node: NodeView, ctx: KernelContext) -> Any:
    start = node.attr("start", 0)
    end = node.attr("end", None)

    def compute(x: Any) -> tuple[np.ndarray]:
        shape = tuple(x.shape)
        return (np.array(shape[start:end], dtype=np.int64),)

    return compute


@register_versions("Size", 1, {"T": ANY_T, "T1": ("tensor(int64)",)}, host_outputs=(0,))
def build_size(node: NodeView, ctx: KernelContext) -> Any:
    def compute(x: Any) -> tuple[np.ndarray]:
        return (np.array(prod(x.shape), dtype=np.int64),)

    return compute


@register_versions("Constant", 1, {"T": ANY_T})
def build_constant(node: NodeView, ctx: KernelContext) -> Any:
    value = node.graph.constant_value(node.outputs[0])
    if value is None:
        raise InvalidArgument(f"{node.describe()}: only value/value_float(s)/value_int(s) constants are supported")
    dev = Runtime.of(ctx).to_device(np.asarray(value))

    def compute() -> tuple[Any]:
        return (dev,)

    return compute


@cuda.jit
def fill_kernel(out, value):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = value


@register_versions("ConstantOfShape", 9, {"T1": ("tensor(int64)",), "T2": ANY_T}, host_inputs=(0,))
def build_constant_of_shape(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    v = node.attr("value")
    value = np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)[:1]

    def compute(shape: Any) -> tuple[Any]:
        out = rt.empty(tuple(int(s) for s in np.asarray(shape).reshape(-1)), value.dtype)
        rt.launch1d(fill_kernel, prod(out.shape), flat(out), scalar_arg(value.dtype.type(value[0])))
        return (out,)

    return compute


@cuda.jit
def strided_gather(out, x, shape, xstrides, base):
    """out[i] = x[base + sum(coord_d(i) * xstrides_d)]: Transpose, Slice, Expand in one kernel."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        rem = i
        j = base
        for d in range(len(shape) - 1, -1, -1):
            c = rem % shape[d]
            rem = rem // shape[d]
            j += c * xstrides[d]
        out[i] = x[j]


@cuda.jit
def strided_scatter(out, x, shape, ostrides, base):
    """out[base + sum(coord_d(i) * ostrides_d)] = x[i]: writes one Concat input into place."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        rem = i
        j = base
        for d in range(len(shape) - 1, -1, -1):
            c = rem % shape[d]
            rem = rem // shape[d]
            j += c * ostrides[d]
        out[j] = x[i]


def gather_strided(rt: Runtime, x: Any, out_shape: tuple[int, ...], xstrides: tuple[int, ...], base: int) -> Any:
    out = rt.empty(out_shape, x.dtype)
    n = prod(out_shape)
    if n:
        rt.launch1d(strided_gather, n, flat(out), flat(x), out_shape or (1,), xstrides or (0,), base)
    return out


@register_versions("Expand", 8, {"T": ANY_T}, host_inputs=(1,))
def build_expand(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)

    def compute(x: Any, shape: Any) -> tuple[Any]:
        target = tuple(int(s) for s in np.asarray(shape).reshape(-1))
        out_shape = tuple(int(s) for s in np.broadcast_shapes(tuple(x.shape), target))
        nd = len(out_shape)
        padded = (1,) * (nd - len(x.shape)) + tuple(x.shape)
        st = c_strides(padded)
        xst = tuple(0 if padded[d] == 1 and out_shape[d] != 1 else st[d] for d in range(nd))
        return (gather_strided(rt, x, out_shape, xst, 0),)

    return compute

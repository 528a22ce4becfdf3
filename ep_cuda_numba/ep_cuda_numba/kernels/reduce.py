"""Row-wise ops, one block per row with a shared-memory tree reduction: ReduceX, Softmax,
LogSoftmax, LayerNormalization, GlobalAveragePool, GlobalMaxPool.

Every op is first viewed as ``(outer, R, inner)`` over a C-contiguous array, reducing R; reduced
axes that are not adjacent are made adjacent by one strided-gather transpose. Accumulation is in
float64 (exact for float32 inputs and int sums below 2**53; float16 inputs too, rounded once at the
store). No warp shuffles, so the same code runs under the simulator."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda, float64
from onnx import helper

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.kernels.shape_ops import gather_strided
from ep_cuda_numba.launch import SIM, Runtime, c_strides, flat, prod
from ep_cuda_numba.registry import FLOAT16_T, NUM16_T, register_versions

THREADS = 32 if SIM else 256  # power of two: the tree reduction halves it

# pre-op, combine, post-op codes
PRE_ID, PRE_SQUARE, PRE_ABS, PRE_EXP = 0, 1, 2, 3
COMB_SUM, COMB_MAX, COMB_MIN, COMB_PROD = 0, 1, 2, 3
POST_ID, POST_MEAN, POST_SQRT, POST_LOG = 0, 1, 2, 3


@cuda.jit(device=True)
def _combine(a, b, comb):
    if comb == 0:
        return a + b
    if comb == 1:
        return a if a > b else b
    if comb == 2:
        return a if a < b else b
    return a * b


@cuda.jit(device=True)
def _init(comb):
    if comb == 0:
        return 0.0
    if comb == 1:
        return -math.inf
    if comb == 2:
        return math.inf
    return 1.0


@cuda.jit
def reduce_rows(x, out, n_rows, R, inner, pre, comb, post):
    sh = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, n_rows, cuda.gridDim.x):
        o = row // inner
        k = row % inner
        base = o * R * inner + k
        acc = _init(comb)
        for r in range(tid, R, cuda.blockDim.x):
            v = float64(x[base + r * inner])
            if pre == 1:
                v = v * v
            elif pre == 2:
                v = abs(v)
            elif pre == 3:
                v = math.exp(v)
            acc = _combine(acc, v, comb)
        sh[tid] = acc
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s:
                sh[tid] = _combine(sh[tid], sh[tid + s], comb)
            cuda.syncthreads()
            s //= 2
        if tid == 0:
            res = sh[0]
            if post == 1:
                res = res / R
            elif post == 2:
                res = math.sqrt(res)
            elif (
                post == 3
            ):  # log of 0 (an empty set) is -inf, of a negative NaN, as on the device (the simulator raises)
                res = math.log(res) if res > 0 else (-math.inf if res == 0 else math.nan)
            out[row] = res
        cuda.syncthreads()


@cuda.jit
def softmax_rows(x, out, n_rows, R, inner, log):
    sh = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, n_rows, cuda.gridDim.x):
        o = row // inner
        k = row % inner
        base = o * R * inner + k
        m = -math.inf
        for r in range(tid, R, cuda.blockDim.x):
            v = float64(x[base + r * inner])
            m = v if v > m else m
        sh[tid] = m
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s and sh[tid + s] > sh[tid]:
                sh[tid] = sh[tid + s]
            cuda.syncthreads()
            s //= 2
        m = sh[0]
        cuda.syncthreads()
        acc = 0.0
        for r in range(tid, R, cuda.blockDim.x):
            acc += math.exp(float64(x[base + r * inner]) - m)
        sh[tid] = acc
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s:
                sh[tid] += sh[tid + s]
            cuda.syncthreads()
            s //= 2
        total = sh[0]
        cuda.syncthreads()
        for r in range(tid, R, cuda.blockDim.x):
            v = float64(x[base + r * inner]) - m
            if log:
                out[base + r * inner] = v - math.log(total)
            else:
                out[base + r * inner] = math.exp(v) / total


@cuda.jit
def layernorm_rows(x, scale, bias, out, mean_out, rstd_out, n_rows, R, eps, has_bias, write_stats):
    sh = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, n_rows, cuda.gridDim.x):
        base = row * R
        acc = 0.0
        for r in range(tid, R, cuda.blockDim.x):
            acc += float64(x[base + r])
        sh[tid] = acc
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s:
                sh[tid] += sh[tid + s]
            cuda.syncthreads()
            s //= 2
        mean = sh[0] / R
        cuda.syncthreads()
        acc = 0.0
        for r in range(tid, R, cuda.blockDim.x):
            d = float64(x[base + r]) - mean
            acc += d * d
        sh[tid] = acc
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s:
                sh[tid] += sh[tid + s]
            cuda.syncthreads()
            s //= 2
        rstd = 1.0 / math.sqrt(sh[0] / R + eps)
        cuda.syncthreads()
        for r in range(tid, R, cuda.blockDim.x):
            v = (float64(x[base + r]) - mean) * rstd * scale[r]
            if has_bias:
                v += bias[r]
            out[base + r] = v
        if write_stats and tid == 0:
            mean_out[row] = mean
            rstd_out[row] = rstd


def as_rows(rt: Runtime, x: Any, axes: Sequence[int]) -> tuple[Any, int, int, int, tuple[int, ...]]:
    """(array, outer, R, inner, kept shape) with the reduced axes adjacent (transposing if needed)."""
    shape = tuple(int(s) for s in x.shape)
    nd = len(shape)
    axes = sorted(set(a % nd for a in axes)) if nd else []
    kept = tuple(d for i, d in enumerate(shape) if i not in axes)
    if not axes:
        return x, prod(shape), 1, 1, kept
    if axes == list(range(axes[0], axes[-1] + 1)):
        return x, prod(shape[: axes[0]]), prod(shape[axes[0] : axes[-1] + 1]), prod(shape[axes[-1] + 1 :]), kept
    perm = [i for i in range(nd) if i not in axes] + axes
    st = c_strides(shape)
    moved = gather_strided(rt, x, tuple(shape[p] for p in perm), tuple(st[p] for p in perm), 0)
    return moved, prod(kept), prod([shape[a] for a in axes]), 1, kept


_REDUCE = {
    "ReduceSum": (PRE_ID, COMB_SUM, POST_ID),
    "ReduceMean": (PRE_ID, COMB_SUM, POST_MEAN),
    "ReduceMax": (PRE_ID, COMB_MAX, POST_ID),
    "ReduceMin": (PRE_ID, COMB_MIN, POST_ID),
    "ReduceProd": (PRE_ID, COMB_PROD, POST_ID),
    "ReduceSumSquare": (PRE_SQUARE, COMB_SUM, POST_ID),
    "ReduceL1": (PRE_ABS, COMB_SUM, POST_ID),
    "ReduceL2": (PRE_SQUARE, COMB_SUM, POST_SQRT),
    "ReduceLogSumExp": (PRE_EXP, COMB_SUM, POST_LOG),
    "ReduceLogSum": (PRE_ID, COMB_SUM, POST_LOG),
}


def reduce(rt: Runtime, x: Any, axes: Sequence[int] | None, keepdims: bool, codes: tuple[int, int, int]) -> Any:
    shape = tuple(int(s) for s in x.shape)
    nd = len(shape)
    ax = list(range(nd)) if axes is None else [int(a) % nd for a in axes]
    arr, outer, R, inner, kept = as_rows(rt, x, ax)
    out_shape = tuple(1 if i in ax else d for i, d in enumerate(shape)) if keepdims else kept
    out = rt.empty(out_shape, x.dtype)
    rows = outer * inner
    if rows:
        rt.launch_blocks(reduce_rows, rows, THREADS, flat(arr), flat(out), rows, R, inner, *codes)
    return out


def build_reduce(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    codes = _REDUCE[node.op_type]
    keepdims = bool(node.attr("keepdims", 1))
    noop_empty = bool(node.attr("noop_with_empty_axes", 0))
    attr_axes = node.attr("axes")

    def compute(x: Any, axes: Any = None) -> tuple[Any]:
        ax = attr_axes if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        if not ax:
            if noop_empty:  # only the axes-as-input versions have this attribute
                return (x,)
            ax = None
        return (reduce(rt, x, ax, keepdims, codes),)

    return compute


for _op in _REDUCE:
    register_versions(
        _op,
        1,
        {"T": NUM16_T if _op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean") else FLOAT16_T},
        host_inputs=(1,),
    )(build_reduce)


def _softmax_builder(log: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        axis_attr = int(node.attr("axis", -1 if node.opset >= 13 else 1))

        def compute(x: Any) -> tuple[Any]:
            shape = tuple(int(s) for s in x.shape)
            nd = len(shape)
            axis = axis_attr % nd
            if node.opset >= 13:
                outer, R, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1 :])
            else:  # opset < 13 coerces to 2-D [prod(:axis), prod(axis:)]
                outer, R, inner = prod(shape[:axis]), prod(shape[axis:]), 1
            out = rt.empty(shape, x.dtype)
            rows = outer * inner
            if rows and R:
                rt.launch_blocks(softmax_rows, rows, THREADS, flat(x), flat(out), rows, R, inner, log)
            return (out,)

        return compute

    return build


register_versions("Softmax", 1, {"T": FLOAT16_T})(_softmax_builder(False))
register_versions("LogSoftmax", 1, {"T": FLOAT16_T})(_softmax_builder(True))


@register_versions("LayerNormalization", 17, {"T": FLOAT16_T, "U": FLOAT16_T})
def build_layernorm(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    axis_attr = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    want_stats = any(node.outputs[1:])
    n_out = len(node.outputs)  # the EP contract: one value per declared output
    stat_dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("stash_type", 1)))  # Mean/InvStdDev's type U

    def compute(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
        shape = tuple(int(s) for s in x.shape)
        axis = axis_attr % len(shape)
        rows, R = prod(shape[:axis]), prod(shape[axis:])
        scale_f = _full_param(rt, scale, shape[axis:])
        bias_f = _full_param(rt, bias, shape[axis:]) if bias is not None else scale_f
        out = rt.empty(shape, x.dtype)
        stat_shape = shape[:axis] + (1,) * (len(shape) - axis)
        mean = rt.empty(stat_shape, stat_dtype)
        rstd = rt.empty(stat_shape, stat_dtype)
        if rows and R:
            rt.launch_blocks(
                layernorm_rows,
                rows,
                THREADS,
                flat(x),
                flat(scale_f),
                flat(bias_f),
                flat(out),
                flat(mean),
                flat(rstd),
                rows,
                R,
                eps,
                bias is not None,
                want_stats,
            )
        return (out, mean, rstd)[:n_out]

    return compute


def _full_param(rt: Runtime, p: Any, shape: tuple[int, ...]) -> Any:
    """Scale/bias broadcast to the normalized shape (usually already that shape: no copy)."""
    if tuple(int(s) for s in p.shape) == shape:
        return p
    nd = len(shape)
    padded = (1,) * (nd - len(p.shape)) + tuple(int(s) for s in p.shape)
    st = c_strides(padded)
    return gather_strided(rt, p, shape, tuple(0 if padded[d] == 1 else st[d] for d in range(nd)), 0)


def _global_pool(codes: tuple[int, int, int]) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)

        def compute(x: Any) -> tuple[Any]:
            shape = tuple(int(s) for s in x.shape)
            rows, R = shape[0] * shape[1], prod(shape[2:])
            out = rt.empty(shape[:2] + (1,) * (len(shape) - 2), x.dtype)
            if rows:
                rt.launch_blocks(reduce_rows, rows, THREADS, flat(x), flat(out), rows, R, 1, *codes)
            return (out,)

        return compute

    return build


register_versions("GlobalAveragePool", 1, {"T": FLOAT16_T})(_global_pool((PRE_ID, COMB_SUM, POST_MEAN)))
register_versions("GlobalMaxPool", 1, {"T": FLOAT16_T})(_global_pool((PRE_ID, COMB_MAX, POST_ID)))

"""Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LpNormalization, LRN and MeanVarianceNormalization.

BatchNormalization folds constant statistics into one scale and shift at build time; it trains
(batch statistics, the running statistics updated by momentum, before opset 14 also the saved
mean and inverse standard deviation) with training_mode=1 from opset 14, and before it whenever
the statistics outputs are asked for, as onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import as_compute, centred, compute_dtype, fail, first_since
from ep_cpu_reference.registry import REGISTRY


def _param_shape(p: np.ndarray, ndim: int) -> tuple[int, ...]:
    """Per-channel (C,) or per-activation (C, D1..) parameters, broadcast against (N, C, ...)."""
    if p.ndim <= 1:
        return (1, -1) + (1,) * (ndim - 2)
    return (1,) + p.shape + (1,) * (ndim - 1 - p.ndim)


@REGISTRY.register("BatchNormalization", since=first_since("BatchNormalization"))
def build_batch_norm(node: NodeView, ctx: KernelContext) -> Any:
    eps = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))
    n_out = len(node.outputs)
    # before opset 14 onnxruntime trains whenever the statistics outputs are asked for
    training = bool(node.attr("training_mode", 0)) if node.opset >= 14 else n_out > 1
    consts = [ctx.constant(n) if n else None for n in node.inputs[1:5]]
    all_const = all(c is not None for c in consts)
    folded: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def fold(scale: Any, bias: Any, mean: Any, var: Any, dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        b = bias.astype(np.float64) - mean.astype(np.float64) * a
        return a.astype(dt), b.astype(dt)

    def compute(x: np.ndarray, scale: Any, bias: Any, mean: Any, var: Any) -> tuple[Any, ...]:
        odt = x.dtype
        xc = as_compute(x)
        dt = xc.dtype
        if training:
            axes = tuple(i for i in range(x.ndim) if i != 1)
            bm = xc.mean(axis=axes)
            bv = xc.var(axis=axes)
            a, b = fold(scale, bias, bm, bv, dt)
            y = xc * a.reshape(_param_shape(a, x.ndim)) + b.reshape(_param_shape(b, x.ndim))
            rm = (mean * momentum + bm * (1 - momentum)).astype(mean.dtype)
            rv = (var * momentum + bv * (1 - momentum)).astype(var.dtype)
            saved = (bm.astype(mean.dtype), (1 / np.sqrt(bv + eps)).astype(var.dtype))  # mean, inverse std
            return (y.astype(odt), rm, rv, *saved)[:n_out]
        got = folded.get((dt, x.ndim)) if all_const else None
        if got is None:
            a, b = fold(scale, bias, mean, var, dt)
            got = (a.reshape(_param_shape(a, x.ndim)), b.reshape(_param_shape(b, x.ndim)))
            if all_const:
                folded[(dt, x.ndim)] = got
        y = xc * got[0]
        y += got[1]
        y = y if y.dtype == odt else y.astype(odt)
        return (y,)

    if all_const and not training and n_out == 1:
        full: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

        def inference(x: np.ndarray, *params: Any) -> tuple[Any, ...]:
            """Constant statistics, float32/float64 x: the folded scale and shift, two ufuncs.
            Up to 64K elements the scale and shift are kept broadcast to x's full shape: NumPy's
            contiguous loops are ~2.5x faster there than its stride-0 broadcast loops (measured on
            PP-OCR cls shapes); larger tensors keep the (1, C, 1...) form (cache-bound)."""
            got = full.get(x.shape)
            if got is None or got[0].dtype != x.dtype:
                got = folded.get((x.dtype, x.ndim))
                if got is None or (x.dtype != np.float32 and x.dtype != np.float64):
                    return compute(x, *params)
                if x.size <= 1 << 16 and len(full) < 8:
                    got = full[x.shape] = (
                        np.broadcast_to(got[0], x.shape).copy(),
                        np.broadcast_to(got[1], x.shape).copy(),
                    )
            y = x * got[0]
            y += got[1]
            return (y,)

        return inference
    return compute


@REGISTRY.register("InstanceNormalization", since=first_since("InstanceNormalization"))
def build_instance_norm(node: NodeView, ctx: KernelContext) -> Any:
    eps = float(node.attr("epsilon", 1e-5))

    def compute(x: np.ndarray, scale: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        xc = as_compute(x)
        axes = tuple(range(2, x.ndim))
        mean = xc.mean(axis=axes, keepdims=True)
        var = xc.var(axis=axes, keepdims=True)
        shp = (1, -1) + (1,) * (x.ndim - 2)
        y = (xc - mean) / np.sqrt(var + eps) * scale.astype(xc.dtype).reshape(shp) + b.astype(xc.dtype).reshape(shp)
        return (y.astype(x.dtype),)

    return compute


def _stash(node: Any, x: np.ndarray) -> np.ndarray:
    st = int(node.attr("stash_type", 1))
    return x.astype(np.float32) if st == 1 and x.dtype != np.float64 else as_compute(x)


@REGISTRY.register("LayerNormalization", since=first_since("LayerNormalization"))
def build_layer_norm(node: NodeView, ctx: KernelContext) -> Any:
    from onnx import helper

    axis_attr = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    stat_dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("stash_type", 1)))  # Mean/InvStdDev's type U
    n_out = len(node.outputs)

    def compute(x: np.ndarray, scale: np.ndarray, b: Any = None) -> tuple[Any, ...]:
        axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
        if not 0 <= axis < x.ndim:
            raise fail(node, f"axis={axis_attr} is outside the input rank {x.ndim}")
        xc = _stash(node, x)
        axes = tuple(range(axis, x.ndim))
        mean, d = centred(xc, axes)
        var = np.mean(d * d, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + eps)
        y = d * inv * scale.astype(xc.dtype)
        if b is not None:
            y = y + b.astype(xc.dtype)
        return (y.astype(x.dtype), mean.astype(stat_dtype), inv.astype(stat_dtype))[:n_out]

    return compute


@REGISTRY.register("GroupNormalization", since=first_since("GroupNormalization"))
def build_group_norm(node: NodeView, ctx: KernelContext) -> Any:
    """GroupNormalization: opset 18 takes per-group scale/bias, opset 21 per-channel."""
    eps = float(node.attr("epsilon", 1e-5))
    g = int(node.attr("num_groups"))

    def compute(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray]:
        n, c = x.shape[:2]
        if c % g:
            raise fail(node, f"{c} channels do not split into num_groups={g}")
        xc = _stash(node, x)
        xr = xc.reshape(n, g, -1)
        mean = xr.mean(axis=2, keepdims=True)
        var = xr.var(axis=2, keepdims=True)
        yn = (xr - mean) / np.sqrt(var + eps)
        shp = (1, -1) + (1,) * (x.ndim - 2)
        if scale.size == g and g != c:
            y = yn * scale.astype(xc.dtype).reshape(1, g, 1) + bias.astype(xc.dtype).reshape(1, g, 1)
            y = y.reshape(x.shape)
        else:
            y = yn.reshape(x.shape) * scale.astype(xc.dtype).reshape(shp) + bias.astype(xc.dtype).reshape(shp)
        return (y.astype(x.dtype),)

    return compute


@REGISTRY.register("RMSNormalization", since=first_since("RMSNormalization"))
def build_rms_norm(node: NodeView, ctx: KernelContext) -> Any:
    axis_attr = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))

    def compute(x: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray]:
        axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
        xc = _stash(node, x)
        ms = np.mean(xc * xc, axis=tuple(range(axis, x.ndim)), keepdims=True)
        y = xc / np.sqrt(ms + eps) * scale.astype(xc.dtype)
        return (y.astype(x.dtype),)

    return compute


@REGISTRY.register("LpNormalization", since=first_since("LpNormalization"))
def build_lp_norm(node: NodeView, ctx: KernelContext) -> Any:
    axis = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise fail(node, f"p={p}; allowed 1, 2")

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        xc = as_compute(x)
        norm = np.abs(xc).sum(axis=axis, keepdims=True) if p == 1 else np.sqrt((xc * xc).sum(axis=axis, keepdims=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(norm == 0, 0, xc / norm)
        return (y.astype(x.dtype),)

    return compute


@REGISTRY.register("LRN", since=first_since("LRN"))
def build_lrn(node: NodeView, ctx: KernelContext) -> Any:
    """LRN: the channel-window sum of squares is a difference of cumulative sums."""
    size = int(node.attr("size"))
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        xc = as_compute(x)
        c = x.shape[1]
        sq = xc * xc
        cs = np.concatenate([np.zeros_like(sq[:, :1]), np.cumsum(sq, axis=1)], axis=1)
        idx = np.arange(c)
        top = np.minimum(idx + hi + 1, c)
        bot = np.maximum(idx - lo, 0)
        s = np.take(cs, top, axis=1) - np.take(cs, bot, axis=1)
        y = xc / (bias + alpha / size * s) ** beta
        return (y.astype(x.dtype),)

    return compute


@REGISTRY.register("MeanVarianceNormalization", since=first_since("MeanVarianceNormalization"))
def build_mvn(node: NodeView, ctx: KernelContext) -> Any:
    """MeanVarianceNormalization: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), the function body."""
    axes = tuple(int(a) for a in node.attr("axes", [0, 2, 3]))

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        xc = as_compute(x)
        mean = xc.mean(axis=axes, keepdims=True)
        var = (xc * xc).mean(axis=axes, keepdims=True) - mean * mean
        y = (xc - mean) / (np.sqrt(np.maximum(var, 0)) + 1e-9)
        return (y.astype(x.dtype),)

    return compute


del compute_dtype

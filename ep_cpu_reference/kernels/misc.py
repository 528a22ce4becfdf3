"""Small ops that fit no bigger family: Dropout, the random generators (incl. Multinomial),
the signal windows, CumProd, Det, Swish, SwiGLU, BitCast.

Random ops with a ``seed`` draw from ``numpy.random.RandomState(seed)`` (the stream the
ONNX reference and its test data use, so seeded results agree); without a seed each node has its
own generator, seeded from the OS once at session creation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.tensor_ops import ints, norm_axis
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


SEED: list[int | None] = [None]  # set_random_seed's (onnxruntime's set_seed): seeds the ops without a seed


def _rng(node: Any) -> Callable[[], np.random.RandomState]:
    """Per-run generator: a fresh seeded stream each run if ``seed`` is set, else one stream
    (from ``SEED`` when set when the session was created, as onnxruntime's global seed)."""
    seed = node.attr("seed")
    if seed is not None:
        s = int(seed)
        return lambda: np.random.RandomState(s)
    state = np.random.RandomState(SEED[0])
    return lambda: state


# ----------------------------------------------------------------------------------- Dropout
def _dropout(x: Any, ratio: float, training: bool, rng: Callable[[], Any], want_mask: bool) -> tuple[Any, ...]:
    if not training or ratio == 0:
        out = x
        mask = np.ones(x.shape, dtype=bool)
    else:
        mask = rng().uniform(0.0, 1.0, x.shape) >= ratio
        out = (mask * x * (1.0 / (1.0 - ratio))).astype(x.dtype)
    return (out, mask) if want_mask else (out,)


@REGISTRY.register("Dropout", since=1, end=11)
def build_dropout_attr(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-11: inference only (identity). The mask is all zeros (typed like the input before
    opset 10, bool from 10 on), as onnxruntime's identity kernel fills it ("no values dropped" in
    its reading), although opset 12's kernel, like the ONNX reference, gives all True."""
    if len(node.outputs) < 2:  # one value per declared output, even an omitted one
        return lambda x: (x,)
    mask_dtype = None if node.opset < 10 else bool
    return lambda x: (x, np.zeros(x.shape, dtype=mask_dtype or x.dtype))


@REGISTRY.register("Dropout", since=12, host_inputs=(1, 2))
def build_dropout(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 12+: ratio and training_mode are inputs; training drops with probability ratio
    and scales the kept values by 1/(1-ratio)."""
    want_mask = len(node.outputs) > 1  # one value per declared output, even an omitted one
    rng = _rng(node)

    def compute(x: Any, ratio: Any = None, training: Any = None) -> tuple[Any, ...]:
        r = 0.5 if ratio is None else float(np.asarray(ratio))
        t = False if training is None else bool(np.asarray(training))
        if t and not 0 <= r < 1:
            raise ValueError(f"{node.describe()}: ratio must be in [0, 1), got {r}")
        return _dropout(x, r, t, rng, want_mask)

    return compute


# ---------------------------------------------------------------------------- random values
def _out_dtype(node: Any, like: Any = None) -> Any:
    dt = node.attr("dtype")
    if dt is not None and int(dt):
        return helper.tensor_dtype_to_np_dtype(int(dt))
    return like.dtype if like is not None else np.float32


@REGISTRY.register("RandomNormal", since=1)
def build_random_normal(node: NodeView, ctx: KernelContext) -> Fn:
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
    shape, rng, dtype = tuple(node.attr("shape")), _rng(node), _out_dtype(node)
    return lambda: (rng().normal(mean, scale, shape).astype(dtype),)


@REGISTRY.register("RandomUniform", since=1)
def build_random_uniform(node: NodeView, ctx: KernelContext) -> Fn:
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    shape, rng, dtype = tuple(node.attr("shape")), _rng(node), _out_dtype(node)
    return lambda: (rng().uniform(low, high, shape).astype(dtype),)


@REGISTRY.register("RandomNormalLike", since=1)
def build_random_normal_like(node: NodeView, ctx: KernelContext) -> Fn:
    mean, scale, rng = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0)), _rng(node)
    return lambda x: (rng().normal(mean, scale, x.shape).astype(_out_dtype(node, x)),)


@REGISTRY.register("RandomUniformLike", since=1)
def build_random_uniform_like(node: NodeView, ctx: KernelContext) -> Fn:
    low, high, rng = float(node.attr("low", 0.0)), float(node.attr("high", 1.0)), _rng(node)
    return lambda x: (rng().uniform(low, high, x.shape).astype(_out_dtype(node, x)),)


@REGISTRY.register("Bernoulli", since=15)
def build_bernoulli(node: NodeView, ctx: KernelContext) -> Fn:
    """1 with probability x (elementwise), as ``dtype`` or the input's type."""
    rng = _rng(node)
    return lambda x: ((rng().uniform(0.0, 1.0, x.shape) < x).astype(_out_dtype(node, x)),)


# ----------------------------------------------------------------------------------- windows
def _window(coeffs: tuple[float, ...]) -> Callable[[Any, Any], Fn]:
    """A generalized cosine window sum_k (-1)^k a_k cos(2 pi k n / N'), N' = N (periodic) or N-1."""

    def build(node: NodeView, ctx: KernelContext) -> Fn:
        periodic = int(node.attr("periodic", 1))
        dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("output_datatype", 1)))

        def compute(size: Any) -> tuple[Any]:
            n = int(np.asarray(size).reshape(()))
            denom = n if periodic else n - 1
            k = np.arange(n, dtype=np.float64)
            w = np.zeros(n)
            for i, a in enumerate(coeffs):
                w += (-1) ** i * a * np.cos(2 * math.pi * i * k / denom) if denom else (a if i == 0 else 0)
            return (w.astype(dtype),)

        return compute

    return build


REGISTRY.register("HannWindow", since=17, host_inputs=(0,))(_window((0.5, 0.5)))
REGISTRY.register("HammingWindow", since=17, host_inputs=(0,))(_window((25 / 46, 21 / 46)))
REGISTRY.register("BlackmanWindow", since=17, host_inputs=(0,))(_window((0.42, 0.5, 0.08)))


# -------------------------------------------------------------------------------------- math
@REGISTRY.register("CumProd", since=26, host_inputs=(1,))
def build_cumprod(node: NodeView, ctx: KernelContext) -> Fn:
    exclusive = int(node.attr("exclusive", 0))
    reverse = int(node.attr("reverse", 0))
    if exclusive not in (0, 1) or reverse not in (0, 1):  # as CumSum
        raise ValueError(f"{node.describe()}: exclusive ({exclusive}) and reverse ({reverse}) must be 0 or 1")

    def compute(x: Any, axis: Any) -> tuple[Any]:
        a = norm_axis(node, ints(axis)[0], x.ndim)
        y = np.flip(x, a) if reverse else x
        p = np.cumprod(y, axis=a, dtype=x.dtype)
        if exclusive and x.shape[a]:
            ones = np.ones_like(np.take(p, [0], axis=a))
            p = np.concatenate([ones, np.take(p, np.arange(p.shape[a] - 1), axis=a)], axis=a)
        return ((np.flip(p, a) if reverse else p).astype(x.dtype),)

    return compute


@REGISTRY.register("Det", since=11)
def build_det(node: NodeView, ctx: KernelContext) -> Fn:
    """Determinants of the trailing [M, M] matrices (LAPACK has no half precision: float16 and
    bfloat16 go through float32)."""

    def compute(x: Any) -> tuple[Any]:
        wide = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        return (np.asarray(np.linalg.det(wide)).astype(x.dtype),)

    return compute


def _swish(x: Any, alpha: float) -> Any:
    xf = x.astype(np.float64)
    z = alpha * xf
    sig = np.where(z >= 0, 1 / (1 + np.exp(-z)), np.exp(z) / (1 + np.exp(z)))
    return xf * sig


@REGISTRY.register("Swish", since=24)
def build_swish(node: NodeView, ctx: KernelContext) -> Fn:
    alpha = float(node.attr("alpha", 1.0))
    return lambda x: (_swish(x, alpha).astype(x.dtype),)


@REGISTRY.register("SwiGLU", since=28)
def build_swiglu(node: NodeView, ctx: KernelContext) -> Fn:
    alpha = float(node.attr("alpha", 1.0))

    def compute(a: Any, b: Any) -> tuple[Any]:
        if a.shape != b.shape:
            raise ValueError(f"{node.describe()}: A {a.shape} and B {b.shape} must have the same shape")
        return ((_swish(a, alpha) * b.astype(np.float64)).astype(a.dtype),)

    return compute


@REGISTRY.register("BitCast", since=26)
def build_bitcast(node: NodeView, ctx: KernelContext) -> Fn:
    """Same bits, new type: the element widths must match (little-endian bytes)."""
    target = np.dtype(helper.tensor_dtype_to_np_dtype(int(node.attr("to"))))

    def compute(x: Any) -> tuple[Any]:
        if x.dtype == object or x.dtype.itemsize != target.itemsize:
            raise ValueError(f"{node.describe()}: cannot bit-cast {x.dtype} to {target} (widths differ)")
        return (np.ascontiguousarray(x).view(target).reshape(x.shape),)

    return compute


@REGISTRY.register("Multinomial", since=7)
def build_multinomial(node: NodeView, ctx: KernelContext) -> Fn:
    """``sample_size`` class indices per batch row, drawn with probabilities softmax(input)
    (the input holds unnormalised log-probabilities)."""
    n = int(node.attr("sample_size", 1))
    dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("dtype", 6)))
    rng = _rng(node)

    def compute(x: Any) -> tuple[Any]:
        logits = x.astype(np.float64)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        gen = rng()
        # inverse-CDF sampling, vectorised over the batch
        cdf = np.cumsum(p, axis=1)
        u = gen.uniform(0.0, 1.0, (x.shape[0], n)) * cdf[:, -1:]
        idx = (
            np.stack([np.searchsorted(cdf[b], u[b], side="right") for b in range(x.shape[0])])
            if x.shape[0]
            else np.zeros((0, n))
        )
        return (np.minimum(idx, x.shape[1] - 1).astype(dtype),)

    return compute

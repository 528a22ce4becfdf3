"""com.microsoft contrib ops that exported transformer models use: Gelu, FastGelu, BiasGelu,
QuickGelu, BiasAdd, SkipLayerNormalization, SkipSimplifiedLayerNormalization,
LayerNormalization, SimplifiedLayerNormalization and FusedMatMul.

onnx ships no schemas for this domain, so ``onnx.checker`` would reject models using them; the
schemas are registered here (once, before any model is checked) with onnxruntime's inputs,
outputs and attributes. Semantics follow onnxruntime's CPU contrib kernels."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._ms_schema import MS, attr, inp, register
from ep_cpu_reference.kernels.elementwise import sigmoid
from ep_cpu_reference.kernels.nn_common import as_compute, centred, fail, feeds_quantizer
from ep_cpu_reference.kernels.special import gelu, gelu_tanh, mlas_logistic
from ep_cpu_reference.registry import REGISTRY


def _register_schemas() -> None:
    """Schemas for the contrib ops, so models using them pass onnx.checker."""
    schema = register
    eps = attr("epsilon", 1e-12)  # onnxruntime's default for the Skip* norms
    schema("Gelu", [inp("X")], [inp("Y")], [], "x * 0.5 * (1 + erf(x / sqrt(2)))")
    schema("FastGelu", [inp("X"), inp("bias", True)], [inp("Y")], [], "tanh approximation of Gelu")
    schema("BiasGelu", [inp("A"), inp("B")], [inp("C")], [], "Gelu(A + B)")
    schema("QuickGelu", [inp("X")], [inp("Y")], [attr("alpha", 1.702)], "x * sigmoid(alpha * x)")
    schema("BiasAdd", [inp("X"), inp("bias"), inp("skip")], [inp("Y")], [], "X + bias + skip")
    schema(
        "SkipLayerNormalization",
        [inp("input"), inp("skip"), inp("gamma"), inp("beta", True), inp("bias", True)],
        [inp("output"), inp("mean", True, "U"), inp("inv_std_var", True, "U"), inp("input_skip_bias_sum", True)],
        [eps],
        "LayerNormalization(input + skip + bias) over the last axis",
    )
    schema(
        "SkipSimplifiedLayerNormalization",
        [inp("input"), inp("skip"), inp("gamma"), inp("bias", True)],
        [inp("output"), inp("mean", True, "U"), inp("inv_std_var", True, "U"), inp("input_skip_bias_sum", True)],
        [eps],
        "RMS normalization of input + skip + bias over the last axis",
    )
    schema(
        "LayerNormalization",
        [inp("X"), inp("Scale"), inp("B", True)],
        [inp("Y"), inp("Mean", True, "U"), inp("InvStdDev", True, "U")],
        [attr("axis", -1), attr("epsilon", 1e-5), attr("stash_type", 1)],
        "LayerNormalization as in opset 17",
    )
    schema(
        "SimplifiedLayerNormalization",
        [inp("X"), inp("scale")],
        [inp("Y"), inp("inv_std_var", True, "U")],
        [attr("axis", -1), attr("epsilon", 1e-5), attr("stash_type", 1)],
        "RMS normalization",
    )
    schema(
        "FusedMatMul",
        [inp("A"), inp("B")],
        [inp("Y")],
        [attr("alpha", 1.0), attr("transA", 0), attr("transB", 0), attr("transBatchA", 0), attr("transBatchB", 0)],
        "alpha * op(A) @ op(B)",
    )


_register_schemas()


def _unary(fn: Any) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        def compute(*xs: np.ndarray) -> tuple[np.ndarray]:
            odt = xs[0].dtype
            return (fn(node, *[None if v is None else as_compute(v) for v in xs]).astype(odt, copy=False),)

        return compute

    return build


REGISTRY.register("Gelu", domain=MS)(_unary(lambda node, x: gelu(x)))
REGISTRY.register("BiasGelu", domain=MS)(_unary(lambda node, a, b: gelu(a + b)))


def _fast_gelu(node: Any, x: np.ndarray, bias: Any = None) -> np.ndarray:
    """onnxruntime's FastGelu: the tanh approximation of Gelu(x + bias), bias optional."""
    return gelu_tanh(x if bias is None else x + bias)


REGISTRY.register("FastGelu", domain=MS)(_unary(_fast_gelu))


@REGISTRY.register("QuickGelu", domain=MS)
def build_quick_gelu(node: NodeView, ctx: KernelContext) -> Any:
    """x * sigmoid(alpha * x) as onnxruntime's kernel: alpha * x rounded to the type (skipped for
    alpha 1), the Sigmoid op's logistic, times x; so the same floats as the Mul, Sigmoid and Mul
    the QuickGelu fusion replaces (MLAS's logistic exactly where the result feeds a quantizer, as
    the Sigmoid op there)."""
    alpha = float(node.attr("alpha", 1.702))
    exact = feeds_quantizer(node)

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        xc = as_compute(x)
        t = xc if alpha == 1.0 else np.multiply(xc, xc.dtype.type(alpha))
        y = mlas_logistic(t) if exact and t.dtype == np.float32 else sigmoid(t)
        np.multiply(y, xc, out=y)
        return (y.astype(x.dtype, copy=False),)

    return compute


REGISTRY.register("BiasAdd", domain=MS)(_unary(lambda node, x, b, s: x + b + s))


def _skip_norm(simplified: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        eps = float(node.attr("epsilon", 1e-12))  # onnxruntime's default for both Skip* norms
        n_out = len(node.outputs)

        def compute(x, skip, gamma, *rest):  # type: ignore[no-untyped-def]
            if simplified:
                beta, bias = None, (rest[0] if rest else None)
            else:
                beta = rest[0] if len(rest) > 0 else None
                bias = rest[1] if len(rest) > 1 else None
            odt = x.dtype
            if skip.shape[-1] != x.shape[-1] or gamma.shape[-1] != x.shape[-1]:
                raise fail(
                    node,
                    f"input {list(x.shape)}, skip {list(skip.shape)} and gamma {list(gamma.shape)} "
                    "must share the hidden (last) size",
                )
            s = np.add(as_compute(x), as_compute(skip))
            if bias is not None:
                s += as_compute(bias)
            s32 = s.astype(np.float32, copy=False) if s.dtype != np.float64 else s
            if simplified:
                mean = np.zeros(s.shape[:-1] + (1,), dtype=s32.dtype)
                d = s32
            else:
                mean, d = centred(s32, (s32.ndim - 1,))
            sq = np.multiply(d, d)
            inv = np.mean(sq, axis=-1, keepdims=True)
            inv += eps
            np.sqrt(inv, out=inv)
            np.divide(1.0, inv, out=inv)
            y = np.multiply(d, inv, out=sq)  # d * inv * gamma (+ beta), in that order
            y *= as_compute(gamma)
            if beta is not None and not simplified:
                y += as_compute(beta)
            outs = (y, mean, inv, s)[:n_out]
            return tuple(v.astype(odt if i in (0, 3) else np.float32, copy=False) for i, v in enumerate(outs))

        return compute

    return build


REGISTRY.register("SkipLayerNormalization", domain=MS)(_skip_norm(False))
REGISTRY.register("SkipSimplifiedLayerNormalization", domain=MS)(_skip_norm(True))


def _layer_norm(simplified: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        axis_attr = int(node.attr("axis", -1))
        eps = float(node.attr("epsilon", 1e-5))
        n_out = len(node.outputs)

        def compute(x, scale, b=None):  # type: ignore[no-untyped-def]
            axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
            xc = x.astype(np.float32) if x.dtype != np.float64 else x
            axes = tuple(range(axis, x.ndim))
            if simplified:
                inv = 1.0 / np.sqrt(np.mean(xc * xc, axis=axes, keepdims=True) + eps)
                y = xc * inv * as_compute(scale)
                return tuple([y.astype(x.dtype), inv][:n_out])
            mean, d = centred(xc, axes)
            inv = 1.0 / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + eps)
            y = d * inv * as_compute(scale)
            if b is not None:
                y = y + as_compute(b)
            return tuple([y.astype(x.dtype), mean, inv][:n_out])

        return compute

    return build


REGISTRY.register("LayerNormalization", domain=MS)(_layer_norm(False))
REGISTRY.register("SimplifiedLayerNormalization", domain=MS)(_layer_norm(True))


@REGISTRY.register("FusedMatMul", domain=MS)
def build_fused_matmul(node: NodeView, ctx: KernelContext) -> Any:
    """FusedMatMul: alpha * op(A) @ op(B), op moving the first axis behind the batch axes when
    transBatch (a Transpose perm [1, ..., r-2, 0, r-1], as onnxruntime's MatMulTransposeFusion reads
    it: nn.MultiheadAttention's in-projection), then transposing the last two axes when trans."""
    alpha = float(node.attr("alpha", 1.0))
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    batch_a, batch_b = bool(node.attr("transBatchA", 0)), bool(node.attr("transBatchB", 0))

    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        odt = a.dtype
        ac, bc = as_compute(a), as_compute(b)
        if batch_a and ac.ndim > 2:
            ac = np.moveaxis(ac, 0, -2)
        if batch_b and bc.ndim > 2:
            bc = np.moveaxis(bc, 0, -2)
        if ta:
            ac = ac.T if ac.ndim == 1 else np.swapaxes(ac, -1, -2)
        if tb:
            bc = bc.T if bc.ndim == 1 else np.swapaxes(bc, -1, -2)
        y = np.matmul(ac, bc)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        return (y.astype(odt, copy=False),)

    return compute

"""The legacy experimental ai.onnx ops onnxruntime's CPU EP still serves for opsets 1-9 (Affine,
Crop, DynamicSlice, ImageScaler, ParametricSoftplus, Scale, ScaledTanh; deprecated at opset 10,
where onnxruntime refuses them too, so the kernels end at 9), and onnxruntime's ai.onnx
SimplifiedLayerNormalization (the com.microsoft kernel's builder, one source of truth). onnx 1.23
has no schemas for these: _contrib_misc_schemas registers onnxruntime's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_misc_schemas import register_schemas
from ep_cpu_reference.kernels.contrib_ms import _layer_norm
from ep_cpu_reference.kernels.nn_common import as_compute, fail
from ep_cpu_reference.kernels.tensor_ops import build_slice
from ep_cpu_reference.registry import REGISTRY

register_schemas()

LAST_OPSET = 9  # onnxruntime deprecates these schemas at opset 10 and refuses them from there


def _required(node: NodeView, name: str) -> float:
    value = node.attr(name)
    if value is None:
        raise fail(node, f"attribute {name!r} is required (onnxruntime refuses the node without it)")
    return float(value)


def _elementwise(fn: Callable[[NodeView], Callable[[np.ndarray], np.ndarray]]) -> Any:
    """A builder for an elementwise op computed in float32 (float64 stays) and cast back."""

    def build(node: NodeView, ctx: KernelContext) -> Any:
        f = fn(node)

        def compute(x: np.ndarray) -> tuple[np.ndarray]:
            return (f(as_compute(x)).astype(x.dtype, copy=False),)

        return compute

    return build


def _affine(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 0.0))
    return lambda x: x * x.dtype.type(alpha) + x.dtype.type(beta)


def _scale(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    scale = float(node.attr("scale", 1.0))
    return lambda x: x * x.dtype.type(scale)


def _scaled_tanh(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    alpha, beta = _required(node, "alpha"), _required(node, "beta")
    return lambda x: x.dtype.type(alpha) * np.tanh(x * x.dtype.type(beta))


def _parametric_softplus(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    alpha, beta = _required(node, "alpha"), _required(node, "beta")
    return lambda x: x.dtype.type(alpha) * np.logaddexp(x.dtype.type(0), x * x.dtype.type(beta))


for _op, _fn in (
    ("Affine", _affine),
    ("Scale", _scale),
    ("ScaledTanh", _scaled_tanh),
    ("ParametricSoftplus", _parametric_softplus),
):
    REGISTRY.register(_op, since=1, end=LAST_OPSET)(_elementwise(_fn))


@REGISTRY.register("ImageScaler", since=1, end=LAST_OPSET)
def build_image_scaler(node: NodeView, ctx: KernelContext) -> Any:
    """scale * x + bias[c] over an (N, C, H, W) image."""
    scale = float(node.attr("scale", 1.0))
    bias = [float(b) for b in node.attr("bias") or []]

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim != 4:
            raise fail(node, f"input rank {x.ndim}; ImageScaler takes (N, C, H, W)")
        if len(bias) != x.shape[1]:
            raise fail(node, f"bias has {len(bias)} values for {x.shape[1]} channels")
        xc = as_compute(x)
        b = np.asarray(bias, dtype=xc.dtype).reshape(1, -1, 1, 1)
        return ((xc * xc.dtype.type(scale) + b).astype(x.dtype, copy=False),)

    return compute


@REGISTRY.register("Crop", since=1, end=LAST_OPSET)
def build_crop(node: NodeView, ctx: KernelContext) -> Any:
    """Cut border = (left, top, right, bottom) off an (N, C, H, W) image; with scale = (height,
    width) the crop keeps that many rows and columns from the top-left border instead."""
    border = [int(b) for b in node.attr("border") or []]
    scale = [int(s) for s in node.attr("scale") or []]
    if len(border) < 4:
        raise fail(node, f"border needs four values (left, top, right, bottom), got {border}")
    left, top, right, bottom = border[:4]

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim < 4:
            raise fail(node, f"input rank {x.ndim}; Crop takes (N, C, H, W)")
        h, w = x.shape[2], x.shape[3]
        if h < top + bottom or w < left + right:
            raise fail(node, f"border {border} does not fit an image of {h}x{w}")
        bottom_limit, right_limit = h - bottom, w - right
        if scale:
            bottom_limit, right_limit = top + scale[0], left + scale[1]
            if h < bottom_limit or w < right_limit:
                raise fail(node, f"border {border} with scale {scale} does not fit an image of {h}x{w}")
        return (np.ascontiguousarray(x[:, :, top:bottom_limit, left:right_limit]),)

    return compute


# DynamicSlice is Slice-10 (starts, ends, optional axes as inputs) without steps: the same kernel.
REGISTRY.register("DynamicSlice", since=1, end=LAST_OPSET, host_inputs=(1, 2, 3))(build_slice)
REGISTRY.register("SimplifiedLayerNormalization", since=1)(_layer_norm(True))

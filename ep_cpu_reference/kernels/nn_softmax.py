"""Softmax, LogSoftmax and Hardmax.

Opsets before 13 coerce the input to 2-D at ``axis`` (default 1) and normalise each row;
opset 13+ normalise along the single ``axis`` (default -1). onnx.reference applies the opset-13
rule to older models, which is wrong for inputs of rank > 2."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import as_compute, fail, first_since, is_float
from ep_cpu_reference.registry import REGISTRY

_SAFE = 60.0  # |x| <= this: exp(x) neither overflows (a row sum of < 1e12 terms) nor leaves the normal range


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x - max) / sum along ``axis``. A row max along the last axis costs NumPy ~90 ns a row
    (half the op on attention scores of 64-wide rows), so where the whole tensor lies within
    +-_SAFE (two whole-array reductions tell) the shift is skipped: the ratio is the same up to
    rounding, within an ulp or two of the shifted form. Row sums along the last axis are one
    BLAS matrix-vector product."""
    last = axis == x.ndim - 1 and x.dtype in (np.float32, np.float64) and x.size > 0
    if last and -_SAFE <= np.minimum.reduce(x, axis=None) and np.maximum.reduce(x, axis=None) <= _SAFE:
        e = np.exp(x)
    else:
        e = np.subtract(x, x.max(axis=axis, keepdims=True))
        np.exp(e, out=e)
    if last:
        e /= np.matmul(e, np.ones((x.shape[-1], 1), x.dtype))
    else:
        e /= e.sum(axis=axis, keepdims=True)
    return e


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    d = x - x.max(axis=axis, keepdims=True)
    return d - np.log(np.exp(d).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    am = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, am, 1, axis=axis)
    return y


def _family(fn: Callable[[np.ndarray, int], np.ndarray]) -> Callable[..., Any]:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        legacy = node.opset < 13
        axis_attr = int(node.attr("axis", 1 if legacy else -1))

        def compute(x: np.ndarray) -> tuple[np.ndarray]:
            r = x.ndim
            axis = axis_attr + r if axis_attr < 0 else axis_attr
            if not 0 <= axis < max(r, 1):
                raise fail(node, f"axis={axis_attr} is outside the input rank {r}")
            if x.size == 0:  # nothing to normalise (a batch of none): onnxruntime returns it empty
                return (np.empty_like(x),)
            # half types compute natively, as the ONNX reference does (its expected values round there)
            xc = x if x.dtype.itemsize == 2 and is_float(x.dtype) else as_compute(x)
            if legacy:
                lead = int(np.prod(x.shape[:axis]))
                y = fn(xc.reshape(lead, -1), 1).reshape(x.shape)
            else:
                y = fn(xc, axis)
            return (y if y.dtype == x.dtype else y.astype(x.dtype),)

        return compute

    return build


for _op, _fn in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    REGISTRY.register(_op, since=first_since(_op))(_family(_fn))

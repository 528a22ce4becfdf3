"""com.microsoft FusedConv and FusedGemm: a Conv (plus an optional Z added before the activation)
or a Gemm with an activation applied to its output, as onnxruntime's CPU contrib kernels compute
them. The graph optimizer makes these nodes (Conv/Gemm + activation) when this EP comes first.

FusedConv takes MLAS's activations and ``activation_params`` (Relu, Tanh, Sigmoid, LeakyRelu
[alpha], Clip [min, max], HardSigmoid [alpha, beta]); FusedGemm takes onnxruntime's element-wise
functors with ``activation_alpha``/``_beta``/``_gamma``. A missing parameter or an unknown
activation is refused at build time, as onnxruntime refuses it at session creation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidGraph
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._ms_schema import FLOAT_TYPES, MS, attr, inp, register
from ep_cpu_reference.kernels.elementwise import leaky_relu, sigmoid
from ep_cpu_reference.kernels.nn_common import as_compute, fail
from ep_cpu_reference.kernels.nn_conv import build_conv
from ep_cpu_reference.kernels.nn_matmul import build_gemm
from ep_cpu_reference.registry import REGISTRY

Act = Callable[[np.ndarray], np.ndarray]


# name -> (parameters it needs, the function of x and those parameters)
_CONV: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "": (0, lambda x: x),
    "Identity": (0, lambda x: x),
    "Relu": (0, lambda x: np.maximum(x, 0)),
    "Tanh": (0, np.tanh),
    "Sigmoid": (0, sigmoid),
    "LeakyRelu": (1, leaky_relu),
    "Clip": (2, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)),
    "HardSigmoid": (2, lambda x, a, b: np.clip(x * a + b, 0, 1)),
}
_GEMM: dict[str, tuple[str, Callable[..., np.ndarray]]] = {
    "": ("", lambda x: x),
    "Relu": ("", lambda x: np.maximum(x, 0)),
    "Tanh": ("", np.tanh),
    "Sigmoid": ("", sigmoid),
    "Softsign": ("", lambda x: x / (1 + np.abs(x))),
    "Softplus": ("", lambda x: np.logaddexp(0, x)),
    "LeakyRelu": ("alpha", leaky_relu),
    "Elu": ("alpha", lambda x, a: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0)))),
    "ThresholdedRelu": ("alpha", lambda x, a: np.where(x > a, x, 0)),
    "HardSigmoid": ("alpha beta", lambda x, a, b: np.clip(x * a + b, 0, 1)),
    "Selu": ("alpha gamma", lambda x, a, g: g * np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))),
    "ScaledTanh": ("alpha beta", lambda x, a, b: a * np.tanh(b * x)),
    "ParametricSoftplus": ("alpha beta", lambda x, a, b: a * np.logaddexp(0, b * x)),
}


def _refuse(node: NodeView, msg: str) -> InvalidGraph:
    return InvalidGraph(f"{node.describe()}: {msg}")


def _conv_activation(node: NodeView) -> Act:
    name = str(node.attr("activation", "") or "")
    if name not in _CONV:
        raise _refuse(node, f"activation {name!r} is not one of FusedConv's {sorted(k for k in _CONV if k)}")
    count, fn = _CONV[name]
    params = [float(p) for p in (node.attr("activation_params") or [])]
    if count and len(params) != count:  # onnxruntime refuses too few and too many
        raise _refuse(node, f"activation {name} needs exactly {count} activation_params, got {params}")
    return lambda x: fn(x, *[x.dtype.type(p) for p in params[:count]])


def _gemm_activation(node: NodeView) -> Act:
    name = str(node.attr("activation", "") or "")
    if name not in _GEMM:
        raise _refuse(node, f"activation {name!r} is not one of FusedGemm's {sorted(k for k in _GEMM if k)}")
    names, fn = _GEMM[name]
    missing = [f"activation_{p}" for p in names.split() if node.attr(f"activation_{p}") is None]
    if missing:
        raise _refuse(node, f"activation {name} needs the attribute(s) {missing}")
    params = [float(node.attr(f"activation_{p}")) for p in names.split()]
    return lambda x: fn(x, *[x.dtype.type(p) for p in params])


def _finish(act: Act, y: np.ndarray) -> tuple[np.ndarray]:
    return (np.asarray(act(as_compute(y))).astype(y.dtype, copy=False),)


def _register_schemas() -> None:
    from onnx import defs

    kinds = defs.OpSchema.AttrType

    def optional(name: str, kind: Any) -> Any:
        return defs.OpSchema.Attribute(name, kind, "", required=False)

    conv_attrs = [optional(n, kinds.INTS) for n in ("pads", "strides", "dilations", "kernel_shape")]
    register(
        "FusedConv",
        [inp("X"), inp("W"), inp("B", True), inp("Z", True)],
        [inp("Y")],
        [*conv_attrs, attr("group", 1), attr("auto_pad", "NOTSET"), optional("activation", kinds.STRING)]
        + [optional("activation_params", kinds.FLOATS)],
        "activation(Conv(X, W, B) + Z)",
        constraints=(("T", FLOAT_TYPES[:3], "float tensors"),),
    )
    ints = ["tensor(uint32)", "tensor(uint64)", "tensor(int32)", "tensor(int64)"]
    register(
        "FusedGemm",
        [inp("A"), inp("B"), inp("C", True)],
        [inp("Y")],
        [attr("transA", 0), attr("transB", 0), attr("alpha", 1.0), attr("beta", 1.0)]
        + [optional(n, kinds.FLOAT) for n in ("activation_alpha", "activation_beta", "activation_gamma")]
        + [optional("activation", kinds.STRING)],
        "activation(alpha * A' B' + beta * C)",
        constraints=(("T", FLOAT_TYPES[:3] + ints, "numeric tensors"),),
    )


_register_schemas()


# in-place forms (the same float operations in the same order) for the convolution's own output
_CONV_INPLACE: dict[str, Callable[..., object]] = {
    "Relu": lambda y: np.maximum(y, 0, out=y),
    "Clip": lambda y, lo, hi: np.minimum(np.maximum(y, lo, out=y), hi, out=y),
    "HardSigmoid": lambda y, a, b: np.clip(np.add(np.multiply(y, a, out=y), b, out=y), 0, 1, out=y),
    "LeakyRelu": lambda y, a: leaky_relu(y, a, out=y),
}


def _conv_inplace(node: NodeView) -> Callable[[np.ndarray], object] | None:
    name = str(node.attr("activation", "") or "")
    fn = _CONV_INPLACE.get(name)
    if fn is None:
        return None
    params = [float(p) for p in (node.attr("activation_params") or [])]
    return lambda y: fn(y, *[y.dtype.type(p) for p in params])


@REGISTRY.register("FusedConv", domain=MS, types={"T": FLOAT_TYPES[:3]})
def build_fused_conv(node: NodeView, ctx: KernelContext) -> Any:
    """The Conv kernel, then Z and the activation applied in place on its fresh float32/64 output."""
    act, conv, inplace = _conv_activation(node), build_conv(node, ctx), _conv_inplace(node)

    def compute(x: np.ndarray, w: np.ndarray, b: Any = None, z: Any = None) -> tuple[np.ndarray]:
        (y,) = conv(x, w, b)
        if z is not None:
            if z.shape != y.shape:
                raise fail(node, f"Z has shape {list(z.shape)}, the convolution {list(y.shape)}: they must match")
            y = y + z
        if inplace is not None and (y.dtype == np.float32 or y.dtype == np.float64):
            inplace(y)  # the conv's (or y + z's) own array: nobody else holds it
            return (y,)
        return _finish(act, y)

    return compute


@REGISTRY.register("FusedGemm", domain=MS, types={"T": FLOAT_TYPES[:3]})
def build_fused_gemm(node: NodeView, ctx: KernelContext) -> Any:
    act, gemm = _gemm_activation(node), build_gemm(node, ctx)

    def compute(a: np.ndarray, b: np.ndarray, c: Any = None) -> tuple[np.ndarray]:
        return _finish(act, gemm(a, b, c)[0])

    return compute

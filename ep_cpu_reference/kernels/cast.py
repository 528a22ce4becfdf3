"""Cast and CastLike across every ONNX element type: the exotic ones (bfloat16, float8 variants,
float4, int4/int2, float8e8m0) are ml_dtypes types, strings are object arrays of ``str``.

``saturate`` (opset 19+) clamps out-of-range values to the float8 target's largest finite value
instead of overflowing to inf/NaN; ``round_mode`` (opset 24+) applies to float8e8m0 targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import fold_frozen
from ep_cpu_reference.registry import REGISTRY

_FLOAT8 = {
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
}
_ROUND_MODES = ("up", "down", "nearest")


def _to_e8m0(x: np.ndarray, saturate: bool, mode: str) -> np.ndarray:
    """float32 -> float8e8m0 (a bare biased exponent): round the mantissa away by ``mode``;
    NaN and inf become 0xFF; saturation keeps 0xFE from rounding up into 0xFF."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exp == 0xFF
    if mode == "up":
        bump = (bits & 0x7FFFFF) > 0
    elif mode == "nearest":
        guard = (bits & 0x400000) > 0
        rest = (bits & 0x3FFFFF) > 0
        bump = guard & (rest | (exp > 0))
    else:
        bump = np.zeros(bits.shape, dtype=bool)
    bump &= ~special
    if saturate:
        bump &= exp != 0xFE
    exp = exp + bump.astype(np.uint16)
    out = np.where(special | (exp > 0xFF), 0xFF, exp).astype(np.uint8)
    return out.view(helper.tensor_dtype_to_np_dtype(TensorProto.FLOAT8E8M0))


def cast_array(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` as ONNX element type ``to`` with the Cast op's rounding and saturation rules."""
    if to == TensorProto.STRING:
        if x.dtype == object or x.dtype.kind in "US":
            return x.astype(object)
        return x.astype(np.str_).astype(object)
    dtype = helper.tensor_dtype_to_np_dtype(to)
    if x.dtype == object or x.dtype.kind in "US":
        # strings parse through float64 (accepts "NaN", "INF", "-1e3"), integers directly
        if np.dtype(dtype).kind in "iub":
            return np.array([int(v) for v in x.ravel()], dtype=np.int64).reshape(x.shape).astype(dtype)
        x = x.astype(np.float64)
    if to == TensorProto.FLOAT8E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if to in _FLOAT8 and saturate:
        import ml_dtypes

        info = ml_dtypes.finfo(dtype)
        xf = x.astype(np.float32)
        return np.clip(xf, float(info.min), float(info.max)).astype(dtype)
    if x.dtype.name.startswith("float8") or x.dtype.name.startswith("float4"):
        # ml_dtypes casts exotic floats to integers poorly; go through float32
        x = x.astype(np.float32)
    return x.astype(dtype)


_PLAIN_KINDS = "biuf"  # NumPy's own bool/int/float types (ml_dtypes types are kind "V")


def caster(to: int, saturate: bool = True, round_mode: str = "up") -> Callable[[np.ndarray], np.ndarray]:
    """``cast_array`` for a fixed target, resolved once: between plain NumPy numeric types the
    cast is one ``astype`` (no copy when the type already matches); anything else (strings,
    float8/float4, bfloat16, int4) takes the general path."""
    if to == TensorProto.STRING or to == TensorProto.FLOAT8E8M0 or to in _FLOAT8:
        return lambda x: cast_array(x, to, saturate, round_mode)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    if dtype.kind not in _PLAIN_KINDS:
        return lambda x: cast_array(x, to, saturate, round_mode)

    def cast(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in _PLAIN_KINDS:
            return x.astype(dtype, copy=False)
        return cast_array(x, to, saturate, round_mode)

    return cast


def _attrs(node: Any) -> tuple[bool, str]:
    saturate = bool(node.attr("saturate", 1))
    mode = node.attr("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in _ROUND_MODES:
        raise ValueError(f"{node.describe()}: round_mode must be one of {_ROUND_MODES}, got {mode!r}")
    return saturate, mode


@REGISTRY.register("Cast", since=1, end=5)
def build_cast1(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Opsets 1-5: ``to`` is the type's name as a string ("FLOAT", "INT64"...)."""
    name = node.attr("to")
    try:
        to = int(name) if isinstance(name, int) else int(TensorProto.DataType.Value(str(name).upper()))
    except ValueError:
        raise ValueError(f"{node.describe()}: 'to' must name a TensorProto data type, got {name!r}") from None
    cast = caster(to)
    return fold_frozen(lambda x: (cast(x),), first_only=True)


@REGISTRY.register("Cast", since=6, end=18)
def build_cast6(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Opsets 6-18: no saturate attribute (float8 did not exist yet)."""
    cast = caster(int(node.attr("to")))
    return fold_frozen(lambda x: (cast(x),), first_only=True)


@REGISTRY.register("Cast", since=19)
def build_cast(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Opset 19+: ``saturate`` for float8 targets, 24+: ``round_mode`` for float8e8m0."""
    to = int(node.attr("to"))
    saturate, mode = _attrs(node)
    cast = caster(to, saturate, mode)
    return fold_frozen(lambda x: (cast(x),), first_only=True)


@REGISTRY.register("CastLike", since=15)
def build_cast_like(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """The target type is that of the second input, known from the graph's types."""
    saturate, mode = _attrs(node)
    info = node.input_info(1)
    to = info.elem_type if info is not None and info.elem_type else None

    def compute(x: Any, like: Any) -> tuple[Any]:
        target = to
        if target is None:
            target = helper.np_dtype_to_tensor_dtype(like.dtype) if like.dtype != object else TensorProto.STRING
        return (cast_array(x, target, saturate, mode),)

    return compute

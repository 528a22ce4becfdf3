"""Cast and CastLike across every ONNX element type: the exotic ones (bfloat16, float8 variants,
float4, int4/int2, float8e8m0) are ml_dtypes types, strings are object arrays of ``str``.

``saturate`` (opset 19+) clamps out-of-range values to the float8 target's largest finite value
instead of overflowing to inf/NaN; ``round_mode`` (opset 24+) applies to float8e8m0 targets."""

from __future__ import annotations

import re
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
        return _to_strings(x)
    dtype = helper.tensor_dtype_to_np_dtype(to)
    if x.dtype == object or x.dtype.kind in "US":
        x = _parsed(x, np.dtype(dtype))
        if x.dtype == dtype:
            return x
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
    if to in (TensorProto.INT4, TensorProto.UINT4) and x.dtype.kind not in "iub":
        # onnxruntime rounds half away from zero, then wraps to 4 bits (ml_dtypes truncated)
        xf = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            x = np.trunc(xf + np.copysign(0.5, xf)).astype(np.int64)
    return x.astype(dtype)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """As onnxruntime writes numbers: floats (float16/bfloat16 widened) in printf's ``%.8g`` with
    ``NaN``/``INF``/``-INF``, booleans ``1``/``0``, integers in decimal."""
    if x.dtype == object or x.dtype.kind in "US":
        return x.astype(object)
    if x.dtype.kind == "b":
        return np.where(x, "1", "0").astype(object)
    if x.dtype.kind in "iu":
        return x.astype(np.str_).astype(object)
    v = x.astype(np.float64)
    text = np.char.mod("%.8g", np.where(np.isfinite(v), v, 0.0)).astype(object)
    text[np.isnan(v)] = "NaN"
    text[np.isposinf(v)] = "INF"
    text[np.isneginf(v)] = "-INF"
    return text


_INT_PREFIX = re.compile(r"\s*([+-]?\d+)")
_FLOAT_PREFIX = re.compile(
    r"\s*([+-]?(?:0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?"
    r"|inf(?:inity)?|nan))",
    re.IGNORECASE,
)


def _parsed(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Strings read as onnxruntime reads them: the longest leading number, as C's stoll/stoull (to
    integers and bool: '1.5' is 1, '1_000' is 1) or strtod (to floats: hex '0x10' is 16); a string
    with no leading number is an error naming it. Integers wrap into a narrower type; floats come
    back as float64 for the caller's cast."""
    if dtype.kind in "iub":
        found = [_INT_PREFIX.match(str(v)) for v in x.flat]
        values = [_checked(m, v, int) for m, v in zip(found, x.flat, strict=True)]
        if dtype.kind == "b":
            return np.array([v != 0 for v in values], bool).reshape(x.shape)
        if dtype == np.uint64:
            return np.array([v % (1 << 64) for v in values], np.uint64).reshape(x.shape)
        if any(not -(1 << 63) <= v < 1 << 63 for v in values):
            raise ValueError(f"a string holds an integer outside int64 ({dtype} cannot be parsed from it)")
        ints = np.array(values, np.int64).reshape(x.shape)
        return ints.astype(dtype)
    found = [_FLOAT_PREFIX.match(str(v)) for v in x.flat]
    return np.array([_checked(m, v, _float) for m, v in zip(found, x.flat, strict=True)], np.float64).reshape(x.shape)


def _float(text: str) -> float:
    body = text.lstrip("+-")
    value = float.fromhex(body) if body[:2].lower() == "0x" else float(body)
    return -value if text.startswith("-") else value


def _checked(match: Any, text: Any, parse: Callable[[str], Any]) -> Any:
    if match is None:
        raise ValueError(f"the string {str(text)[:40]!r} does not start with a number")
    return parse(match.group(1))


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

"""Elementwise ops: unary math, activations, binary arithmetic, comparison, logical and bitwise
ops, variadic Sum/Mean/Max/Min, Where, Clip. NumPy ufuncs already broadcast the ONNX
(multidirectional) way; results are cast back to the input type where NumPy would promote."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import feeds_quantizer
from ep_cpu_reference.kernels.special import erf, gelu, gelu_tanh, mlas_logistic, mlas_tanh, with_mlas_tail
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def _as_type_of(r: Any, x: Any) -> Any:
    return (
        r.astype(x.dtype, copy=False)
        if isinstance(r, np.ndarray) and r.dtype != x.dtype
        else np.asarray(r, dtype=x.dtype)
    )


def _same_type(fn: Fn) -> Fn:
    """``fn`` with its result cast back to the first input's dtype (NumPy promotes scalars)."""

    def wrapped(x: Any, *rest: Any) -> Any:
        r = fn(x, *rest)
        return r if type(r) is np.ndarray and r.dtype == x.dtype else _as_type_of(r, x)

    return wrapped


def unary(fn: Fn, keep_type: bool = True) -> Callable[[Any, Any], Fn]:
    """A builder for a one-input op with no attributes. The compute is one Python frame: these
    ops run on tiny tensors hundreds of times per inference, where frames are the cost."""

    def build(node: NodeView, ctx: KernelContext) -> Fn:
        if not keep_type:
            return lambda x: (fn(x),)

        def compute(x: Any) -> tuple[Any]:
            r = fn(x)
            return (r if type(r) is np.ndarray and r.dtype == x.dtype else _as_type_of(r, x),)

        return compute

    return build


def binary(fn: Fn, keep_type: bool = True) -> Callable[[Any, Any], Fn]:
    """A builder for a two-input broadcasting op with no attributes (one Python frame, as unary)."""

    def build(node: NodeView, ctx: KernelContext) -> Fn:
        if not keep_type:
            return lambda a, b: (fn(a, b),)

        def compute(a: Any, b: Any) -> tuple[Any]:
            r = fn(a, b)
            return (r if type(r) is np.ndarray and r.dtype == a.dtype else _as_type_of(r, a),)

        return compute

    return build


def legacy_binary(fn: Fn, keep_type: bool = True) -> Callable[[Any, Any], Fn]:
    """Opsets before 7: B broadcasts to A only with ``broadcast=1``, aligned at ``axis`` when
    given (B's dims start there) or at the trailing dims otherwise."""
    f = _same_type(fn) if keep_type else fn

    def build(node: NodeView, ctx: KernelContext) -> Fn:
        bcast = int(node.attr("broadcast", 0))
        axis = node.attr("axis")

        def compute(a: Any, b: Any) -> tuple[Any]:
            if not bcast and a.shape != b.shape:
                raise ValueError(f"{node.describe()}: shapes {a.shape} and {b.shape} differ and broadcast=0")
            if bcast and axis is not None and b.ndim:
                ax = int(axis) + a.ndim if int(axis) < 0 else int(axis)
                b = b.reshape(b.shape + (1,) * (a.ndim - ax - b.ndim))
            return (f(a, b),)

        return compute

    return build


def _reg(op: str, since: int | tuple[int, ...], builder: Callable[[Any, Any], Fn], **kw: Any) -> None:
    for s in (since,) if isinstance(since, int) else since:
        REGISTRY.register(op, since=s, **kw)(builder)


# ---------------------------------------------------------------------------- unary math
def sigmoid(x: Any) -> Any:
    """float32: (tanh(x/2) + 1) / 2 in four in-place ufuncs, onnxruntime's MLAS logistic below -8
    (``with_mlas_tail``); other types the two-sided float64 form. Over [-8, 18] the tanh form is as
    close to MLAS as 1/(1+exp(-x)) (1.8e-7 at most), equal to it on 57% of inputs against 42%, and
    twice as fast (0.53 against 1.12 ms a million: NumPy's float32 tanh is vectorised, the division
    is not)."""
    if x.dtype == np.float32:
        t = np.multiply(x, np.float32(0.5), out=np.empty(x.shape, x.dtype))  # an array even for a 0-d x
        np.tanh(t, out=t)
        t += np.float32(1.0)
        t *= np.float32(0.5)
        return with_mlas_tail(x, t)
    xf = x.astype(np.float64)
    return np.where(xf >= 0, 1 / (1 + np.exp(-xf)), np.exp(xf) / (1 + np.exp(xf)))


def _round(x: Any) -> Any:
    return np.round(x)  # round half to even, as ONNX specifies


_UNARY: dict[str, tuple[int, Fn]] = {
    "Abs": (1, np.abs),
    "Neg": (1, np.negative),
    "Exp": (1, np.exp),
    "Log": (1, np.log),
    "Sqrt": (1, np.sqrt),
    "Reciprocal": (1, np.reciprocal),
    "Floor": (1, np.floor),
    "Ceil": (1, np.ceil),
    "Sin": (7, np.sin),
    "Cos": (7, np.cos),
    "Tan": (7, np.tan),
    "Asin": (7, np.arcsin),
    "Acos": (7, np.arccos),
    "Atan": (7, np.arctan),
    "Sinh": (9, np.sinh),
    "Cosh": (9, np.cosh),
    "Asinh": (9, np.arcsinh),
    "Acosh": (9, np.arccosh),
    "Atanh": (9, np.arctanh),
    "Erf": (9, erf),
    "Sign": (
        9,
        lambda x: np.nan_to_num(np.sign(x), nan=0.0) if x.dtype == np.float16 else np.sign(x),
    ),  # onnxruntime's fp16 NaN: 0
    "Round": (11, _round),
    "Softsign": (1, lambda x: x / (1 + np.abs(x))),
    "Softplus": (1, lambda x: np.logaddexp(0, x.astype(np.float64))),
    "Relu": (1, lambda x: np.maximum(x, x.dtype.type(0))),
    "Mish": (18, lambda x: x * np.tanh(np.logaddexp(0, x.astype(np.float64)))),
    "BitwiseNot": (18, np.invert),
}
for _op, (_since, _fn) in _UNARY.items():
    _reg(_op, _since, unary(_fn))


@REGISTRY.register("Sigmoid", since=1)
def build_sigmoid(node: NodeView, ctx: KernelContext) -> Fn:
    """float32 Sigmoid before a quantizer is MLAS's logistic bit for bit (``mlas_logistic``, ~7x the
    cost): onnxruntime's result differs from 1/(1+exp(-x)) by up to ~1e-7 on a third of inputs, and a quantizer
    turns that into whole quanta (the int8 OCR model's output moved by 0.16). Elsewhere the fast form."""
    exact = feeds_quantizer(node)
    fast = unary(sigmoid)(node, ctx)

    def compute(x: Any) -> tuple[Any]:
        return (mlas_logistic(x),) if x.dtype == np.float32 else fast(x)

    return compute if exact else fast


@REGISTRY.register("Tanh", since=1)
def build_tanh(node: NodeView, ctx: KernelContext) -> Fn:
    """float32 Tanh before a quantizer is MLAS's tanh bit for bit (``mlas_tanh``), as the Sigmoid
    there: NumPy's tanh is closer to the true value but differs from onnxruntime's on about 60% of
    inputs by up to 3.6e-7, and the quantizer after it flipped whole steps (text2tashkeel's int8
    bilstm: 11 uint8 values of an attention Tanh, 9.2e-4 on its logits). Elsewhere NumPy's."""
    fast = unary(np.tanh)(node, ctx)
    if not feeds_quantizer(node):
        return fast

    def compute(x: Any) -> tuple[Any]:
        return (mlas_tanh(x),) if x.dtype == np.float32 else fast(x)

    return compute


_reg("Not", 1, unary(np.logical_not, keep_type=False))
_reg("IsNaN", 9, unary(np.isnan, keep_type=False))


@REGISTRY.register("IsInf", since=10)
def build_isinf(node: NodeView, ctx: KernelContext) -> Fn:
    pos = bool(node.attr("detect_positive", 1))
    neg = bool(node.attr("detect_negative", 1))

    def compute(x: Any) -> tuple[Any]:
        return ((np.isposinf(x) & pos) | (np.isneginf(x) & neg),)

    return compute


# --------------------------------------------------------------- activations with attributes
def _activation(
    op: str, since: int, defaults: dict[str, float], fn: Callable[..., Any], fast32: Callable[..., Any] | None = None
) -> None:
    """An activation ``fn(x, **attrs)`` computed in float64, returned in x's type; ``fast32``
    (same attributes) serves float32 inputs directly where float32 arithmetic is what
    onnxruntime does anyway (no float64 round trip)."""

    def build(node: NodeView, ctx: KernelContext) -> Fn:
        attrs = {k: float(node.attr(k, v)) for k, v in defaults.items()}

        def compute(x: Any) -> tuple[Any]:
            if fast32 is not None and x.dtype == np.float32:
                return (fast32(x, **attrs),)
            return (np.asarray(fn(x.astype(np.float64), **attrs)).astype(x.dtype),)

        return compute

    build.__doc__ = f"{op}: attributes {sorted(defaults)}"
    REGISTRY.register(op, since=since)(build)


def leaky_relu(x: np.ndarray, alpha: float, out: np.ndarray | None = None) -> np.ndarray:
    """x where x >= 0, else alpha * x, in x's float type: max(x, alpha * x) for 0 < alpha <= 1
    (min for a finite alpha > 1), two plain ufuncs 25x faster than a masked multiply or
    np.where on a large plane, and bit for bit the same (-0.0 and NaN included)."""
    a = x.dtype.type(alpha)
    scaled = np.multiply(x, a)
    if 0 < a <= 1:
        return np.maximum(x, scaled, out=out)
    if 1 < a < np.inf:  # an infinite alpha makes 0 * alpha NaN, which min would pick over x's 0
        return np.minimum(x, scaled, out=out)
    picked = np.where(x < 0, scaled, x)
    if out is None:
        return picked
    out[...] = picked
    return out


_activation(
    "LeakyRelu",
    1,
    {"alpha": 0.01},
    lambda x, alpha: np.where(x < 0, alpha * x, x),
    fast32=lambda x, alpha: leaky_relu(x, alpha),
)
_activation("Elu", 1, {"alpha": 1.0}, lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x))
_activation(
    "Selu",
    1,
    {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x),
)
_activation("Celu", 12, {"alpha": 1.0}, lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)))
_activation("ThresholdedRelu", 10, {"alpha": 1.0}, lambda x, alpha: np.where(x > alpha, x, 0))


def _hard_sigmoid32(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """max(0, min(1, alpha*x + beta)) in float32 with in-place ufuncs, as onnxruntime computes it."""
    t = np.multiply(x, alpha, out=np.empty(x.shape, x.dtype))  # an array even for a 0-d x
    t += beta
    return np.clip(t, 0.0, 1.0, out=t)


def _hard_swish32(x: np.ndarray) -> np.ndarray:
    t = _hard_sigmoid32(x, 1.0 / 6.0, 0.5)
    t *= x
    return t


_activation(
    "HardSigmoid",
    1,
    {"alpha": 0.2, "beta": 0.5},
    lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
    fast32=_hard_sigmoid32,
)
_activation("HardSwish", 14, {}, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), fast32=_hard_swish32)


_activation(
    "Shrink",
    9,
    {"lambd": 0.5, "bias": 0.0},
    lambda x, lambd, bias: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)),
)


@REGISTRY.register("Gelu", since=20)
def build_gelu(node: NodeView, ctx: KernelContext) -> Fn:
    """approximate='none' uses erf, 'tanh' the tanh formula."""
    approx = node.attr("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx not in ("none", "tanh"):
        raise InvalidArgument(f"{node.describe()}: approximate must be 'none' or 'tanh', got {approx!r}")

    fn = gelu_tanh if approx == "tanh" else gelu

    def compute(x: Any) -> tuple[Any]:
        if x.dtype == np.float32 or x.dtype == np.float64:
            return (fn(x),)
        return (fn(x.astype(np.float32)).astype(x.dtype),)  # float16/bfloat16 in float32, as onnxruntime

    return compute


@REGISTRY.register("PRelu", since=1)
def build_prelu(node: NodeView, ctx: KernelContext) -> Fn:
    """slope broadcasts to x (unidirectionally); before opset 7 a 1-D slope is per channel (axis 1)."""

    def compute(x: Any, slope: Any) -> tuple[Any]:
        if node.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1]:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        return (np.where(x < 0, x * slope, x).astype(x.dtype),)

    return compute


# ------------------------------------------------------------------------------- binary math
def _div(a: Any, b: Any) -> Any:
    if a.dtype.kind in "iu":
        # C-style truncation toward zero, in integer arithmetic (no float round trip)
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
        return q + fix.astype(q.dtype)
    return np.divide(a, b)


for _op, _fn in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", _div)):
    _reg(_op, 7, binary(_fn))
    REGISTRY.register(_op, since=1, end=6)(legacy_binary(_fn))


def _pow(x: Any, y: Any) -> Any:
    """A scalar exponent of 2 or 3 multiplies, as onnxruntime does (float16 in float32): exact
    products, 100x faster than a float64 power (GPT-2's gelu_new cubes every activation)."""
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":  # onnxruntime: static_cast<T>(std::pow(double, double))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # 2 ** -1 is 0, 0 ** -1 INT_MIN
            return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)
    if x.dtype.kind == "f" and y.size == 1 and float(y.reshape(-1)[0]) in (2.0, 3.0):
        v = x if x.dtype.itemsize >= 4 else x.astype(np.float32)
        r = v * v if float(y.reshape(-1)[0]) == 2.0 else v * v * v
        shape = np.broadcast_shapes(x.shape, y.shape)  # a [1, 1] exponent still broadcasts
        return (r if r.shape == shape else np.broadcast_to(r, shape)).astype(x.dtype, copy=r.shape != shape)
    return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


REGISTRY.register("Pow", since=1, end=6)(legacy_binary(_pow))


@REGISTRY.register("Pow", since=7)
def build_pow(node: NodeView, ctx: KernelContext) -> Fn:
    """Result has X's type (opset 12+ lets the exponent differ)."""

    return lambda x, y: (_pow(x, y),)


@REGISTRY.register("Mod", since=10)
def build_mod(node: NodeView, ctx: KernelContext) -> Fn:
    """fmod=0: remainder takes the divisor's sign (integers only); fmod=1: the dividend's (C fmod)."""
    fmod = int(node.attr("fmod", 0))
    fn = np.fmod if fmod else np.mod
    return lambda a, b: (_same_type(fn)(a, b),)


for _op, _fn in (
    ("Equal", np.equal),
    ("Less", np.less),
    ("Greater", np.greater),
    ("LessOrEqual", np.less_equal),
    ("GreaterOrEqual", np.greater_equal),
):
    _reg(_op, 7 if _op in ("Equal", "Less", "Greater") else 12, binary(_fn, keep_type=False))
    if _op in ("Equal", "Less", "Greater"):
        REGISTRY.register(_op, since=1, end=6)(legacy_binary(_fn, keep_type=False))

for _op, _fn in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    _reg(_op, 7, binary(_fn, keep_type=False))
    REGISTRY.register(_op, since=1, end=6)(legacy_binary(_fn, keep_type=False))

for _op, _fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
    _reg(_op, 18, binary(_fn))


@REGISTRY.register("BitShift", since=11)
def build_bitshift(node: NodeView, ctx: KernelContext) -> Fn:
    """Shifts of the bit width or more give 0 (right shifts of negatives give -1)."""
    direction = node.attr("direction")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"{node.describe()}: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    shift = np.left_shift if direction == "LEFT" else np.right_shift

    def compute(a: Any, b: Any) -> tuple[Any]:
        bits = a.dtype.itemsize * 8
        bb = b.astype(np.int64)
        wide = (bb < 0) | (bb >= bits)
        out = shift(a, np.where(wide, 0, bb).astype(a.dtype))
        # a right shift past the width leaves only the sign: -1 for negatives, 0 otherwise
        fill = (
            np.where(a < 0, -1, 0).astype(a.dtype) if direction == "RIGHT" and a.dtype.kind == "i" else a.dtype.type(0)
        )
        return (np.where(wide, fill, out).astype(a.dtype),)

    return compute


# ---------------------------------------------------------------------------------- variadic
def _variadic(fn: Fn, mean: bool = False) -> Callable[[Any, Any], Fn]:
    def build(node: NodeView, ctx: KernelContext) -> Fn:
        def compute(*xs: Any) -> tuple[Any]:
            acc = xs[0]
            for x in xs[1:]:
                acc = fn(acc, x)
            if mean:
                acc = acc / len(xs)
            return (np.asarray(acc).astype(xs[0].dtype, copy=False),)

        return compute

    return build


# opsets before 8 require equal shapes, which NumPy accepts as a special case of broadcasting
_reg("Sum", 1, _variadic(np.add))
_reg("Mean", 1, _variadic(np.add, mean=True))
_reg("Max", 1, _variadic(np.maximum))  # NaN propagates, as the spec's reference does
_reg("Min", 1, _variadic(np.minimum))


@REGISTRY.register("Where", since=9)
def build_where(node: NodeView, ctx: KernelContext) -> Fn:
    def where(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray]:
        return (np.where(c, x, y).astype(x.dtype, copy=False),)

    return where


# -------------------------------------------------------------------------------------- Clip
def _bounds(dtype: np.dtype, lo: Any, hi: Any) -> tuple[Any, Any]:
    """Clip's bounds as onnxruntime applies them: an absent one is the type's lowest or largest
    value (so a float infinity becomes the largest finite value, as the ONNX spec says); a NaN
    one does not bound at all (onnxruntime's comparisons with NaN are false)."""
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)

    def one(v: Any, absent: Any, unbounded: float) -> Any:
        if v is None:
            return dtype.type(absent)
        v = np.asarray(v, dtype=dtype).reshape(-1)[0]
        return dtype.type(unbounded) if v != v else v

    return one(lo, info.min, -np.inf), one(hi, info.max, np.inf)


def _clip(x: Any, lo: Any, hi: Any) -> Any:
    if x.dtype.kind not in "fiu":
        return x
    lo, hi = _bounds(x.dtype, lo, hi)
    return np.asarray(np.minimum(np.maximum(x, lo), hi), dtype=x.dtype)


@REGISTRY.register("Clip", since=1, end=10, types={"T": ("tensor(float16)", "tensor(float)", "tensor(double)")})
def build_clip_attrs(node: NodeView, ctx: KernelContext) -> Fn:
    """Opsets 1-10: bounds are the ``min``/``max`` attributes."""
    lo = node.attr("min")
    hi = node.attr("max")
    return lambda x: (_clip(x, lo, hi),)


@REGISTRY.register("Clip", since=11)
def build_clip(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 11+: bounds are optional scalar inputs (see ``_bounds``). Bounds known at creation
    (ReLU6's 0 and 6) are fixed once, for one ``np.clip`` (NumPy's SIMD clip; NaN propagates)."""
    names = list(node.inputs[1:3]) + [""] * (3 - len(node.inputs))
    consts = [ctx.constant(n) if n else None for n in names[:2]]
    info = node.input_info(0)
    dtype = None if info is None or info.np_dtype is None else np.dtype(info.np_dtype)
    if all((not n) or c is not None for n, c in zip(names[:2], consts)) and dtype is not None and dtype.kind in "fiu":
        lo, hi = _bounds(dtype, *consts)
        return lambda x, *bounds: (np.clip(x, lo, hi),)
    return lambda x, lo=None, hi=None: (_clip(x, lo, hi),)

"""What the EP fuses: elementwise ops as scalar expressions for generated kernels, and the
contractions (Conv, MatMul) it runs through NumPy/BLAS before their elementwise tails.

An elementwise op is a function ``(params, args, dtypes, out) -> expression`` over the scalar
expressions of its inputs; it returns None when these params or types are not supported. ``params``
is the op's declarative parameters (``params_for(node)``, the ``PARAMS`` schema): the kernel source
is generated from them and from nothing else, at compile time and again when a context loads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_cpu_reference.kernels.nn_common import feeds_quantizer

FLOAT_DTYPES = ("float32", "float64")
KERNEL_DTYPES = ("float32", "float64", "int32", "int64", "bool")
# dtypes of values delegated nodes (``delegate``) read and make, and of the weights they store
DATA_DTYPES = KERNEL_DTYPES + ("float16", "int8", "int16", "uint8", "uint16", "uint32", "uint64")
NB_NAMES = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64", "bool": "boolean"}

Params = Mapping[str, Any]
Expr = Callable[[Params, Sequence[str], Sequence[str], str], "str | None"]


def literal(value: Any, dtype: str) -> str:
    """A scalar constant spelled in the kernel's source with its exact dtype."""
    if dtype == "bool":
        return "True" if bool(value) else "False"
    if dtype in FLOAT_DTYPES:
        v = float(value)
        if np.isnan(v):
            return f"np.{dtype}(np.nan)"
        if np.isinf(v):
            return f"np.{dtype}({'np.inf' if v > 0 else '-np.inf'})"
        return f"np.{dtype}({v!r})"
    return f"np.{dtype}({int(value)})"


def _binary(fmt: str, floats_only: bool = False) -> Expr:
    def build(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
        if len(a) != 2 or (floats_only and out not in FLOAT_DTYPES) or dt[0] != dt[1] or dt[0] == "bool":
            return None
        return fmt.format(*a)

    return build


def _unary(fmt: str) -> Expr:
    def build(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
        if len(a) != 1 or dt[0] not in FLOAT_DTYPES:
            return None
        return fmt.format(a[0], one=literal(1, out), zero=literal(0, out))

    return build


def _variadic(fn: str) -> Expr:
    def build(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
        if not a or len(set(dt)) != 1 or dt[0] not in FLOAT_DTYPES:
            return None
        expr = a[0]
        for x in a[1:]:
            expr = f"{fn}({expr}, {x})"
        return expr

    return build


def _compare(op: str) -> Expr:
    def build(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
        if len(a) != 2 or dt[0] != dt[1] or out != "bool":
            return None
        return f"({a[0]} {op} {a[1]})"

    return build


def _div(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if len(a) != 2 or dt[0] != dt[1] or out not in FLOAT_DTYPES:
        return None
    return f"({a[0]} / {a[1]})"


def _pow(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if len(a) != 2 or dt[0] not in FLOAT_DTYPES or dt[0] != out:
        return None
    if p["square"]:
        return f"({a[0]} * {a[0]})"
    if p.get("cube"):  # as onnxruntime: x * x * x, not a power
        return f"({a[0]} * {a[0]} * {a[0]})"
    if dt[1] != dt[0]:
        return None
    return f"({a[0]} ** {a[1]})"


def _clip(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """An absent bound is the type's lowest or largest value (an infinity becomes the largest
    finite value, as in the ONNX spec and onnxruntime); a NaN bound does not bound, since the
    builtins keep their first argument when a comparison with NaN fails."""
    if out not in FLOAT_DTYPES or any(d and d != dt[0] for d in dt) or (p["legacy"] and len(a) != 1):
        return None
    big = float(np.finfo(out).max)
    if p["legacy"]:
        lo, hi = p["min"], p["max"]
        lo_s, hi_s = literal(-big if lo is None else lo, out), literal(big if hi is None else hi, out)
    else:
        lo_s = a[1] if len(a) > 1 and a[1] else literal(-big, out)
        hi_s = a[2] if len(a) > 2 and a[2] else literal(big, out)
    return f"min(max({a[0]}, {lo_s}), {hi_s})"


def _leaky(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if out not in FLOAT_DTYPES:
        return None
    alpha = literal(p["alpha"], out)
    return f"({a[0]} if {a[0]} >= {literal(0, out)} else {a[0]} * {alpha})"


def _hard_sigmoid(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """Clamped with the value as the builtins' first argument, so NaN goes through (``HELPERS``)."""
    if out not in FLOAT_DTYPES:
        return None
    alpha, beta = literal(p["alpha"], out), literal(p["beta"], out)
    return f"min(max({alpha} * {a[0]} + {beta}, {literal(0, out)}), {literal(1, out)})"


def _hard_swish(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """x * HardSigmoid(x) with alpha 1/6, beta 0.5 (NaN goes through as there)."""
    if out not in FLOAT_DTYPES:
        return None
    sixth, half = literal(1.0 / 6.0, out), literal(0.5, out)
    return f"({a[0]} * min(max({sixth} * {a[0]} + {half}, {literal(0, out)}), {literal(1, out)}))"


def _cast(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if dt[0] not in KERNEL_DTYPES or out not in KERNEL_DTYPES:
        return None
    if out == "bool":
        return f"({a[0]} != 0)"
    return f"np.{out}({a[0]})"


# float32 tanh as a clamped rational function (Eigen's generic_fast_tanh_float coefficients):
# plain multiply-adds and one division, so loops over it vectorise where libm's scalar tanhf does
# not; within a few float32 ulps of tanh (tests check it against NumPy over the whole range).
# Sigmoid is 0.5 + 0.5 * tanh(x / 2) down to SIGMOID_TAIL, MLAS's logistic below (``_sigmoid32``).
# Kernels that use them get these definitions in their source.
SIGMOID_TAIL = -8.0
# _sigmoid32 of x at or above SIGMOID_TAIL (and of NaN): a loop whose arguments all stay there needs
# no tail (generate's two-pass loops), and the tail's float64 logistic computed beside every value
# (the loop vectorises both sides of the branch) made a SiLU 5x slower
SIGMOID_HEAD = "(np.float32(0.5) + np.float32(0.5) * _tanh32(np.float32(0.5) * {x}))"
HELPERS = {
    # max/min that propagate a NaN from either side, as onnxruntime's Max and Min do; on other
    # values exactly the builtins' results (signed zeros included). The builtins follow Python:
    # the first argument stays when a comparison with NaN fails, so clamps put the value first
    # (max(x, 0), min(max(t, 0), 1)) and keep their speed; max(0, min(1, NaN)) was 1
    "_maximum": """
@njit(inline="always")
def _maximum(a, b):
    return b if (b > a) | (b != b) else a
""",
    "_minimum": """
@njit(inline="always")
def _minimum(a, b):
    return b if (b < a) | (b != b) else a
""",
    "_logistic_mlas32": """
@njit(inline="always")
def _logistic_mlas32(x):
    v = np.float32(18.0) if x > np.float32(18.0) else (np.float32(-18.0) if x < np.float32(-18.0) else x)
    v2 = np.float64(v * v)
    p = np.float32(v2 * 4.370310016654777e-11 + 1.156273228275495e-07)
    p = np.float32(np.float64(p) * v2 + 6.085748827899806e-05)
    p = np.float32(np.float64(p) * v2 + 0.008513770997524261)
    p = np.float32(np.float64(p) * v2 + 0.24828794598579407)
    q = np.float32(v2 * 6.102473669618302e-13 + 5.761021437677982e-09)
    q = np.float32(np.float64(q) * v2 + 6.291068075370276e-06)
    q = np.float32(np.float64(q) * v2 + 0.0017019881634041667)
    q = np.float32(np.float64(q) * v2 + 0.1168176531791687)
    q = np.float32(np.float64(q) * v2 + 0.9931519031524658)
    r = (p * v) / q + np.float32(0.5)
    return r if r > np.float32(0.0) else (r if r != r else np.float32(0.0))
""",
    # MlasComputeTanh bit for bit (the reference EP's special.mlas_tanh): x clamped to [-9, 9],
    # Eigen's rational form with MLAS's FMA steps emulated in float64 (exact products, one rounding)
    "_tanh_mlas32": """
@njit(inline="always")
def _tanh_mlas32(x):
    v = np.float32(9.0) if x > np.float32(9.0) else (np.float32(-9.0) if x < np.float32(-9.0) else x)
    v2 = np.float64(v * v)
    p = np.float32(v2 * -2.7607683663038313e-16 + 2.0001879384549948e-13)
    p = np.float32(np.float64(p) * v2 + -8.604671836165423e-11)
    p = np.float32(np.float64(p) * v2 + 5.122297253024044e-08)
    p = np.float32(np.float64(p) * v2 + 1.4857223504805006e-05)
    p = np.float32(np.float64(p) * v2 + 0.0006372619536705315)
    p = np.float32(np.float64(p) * v2 + 0.004893524572253227)
    q = np.float32(v2 * 1.1982583600911312e-06 + 0.00011853470641653985)
    q = np.float32(np.float64(q) * v2 + 0.0022684347350150347)
    q = np.float32(np.float64(q) * v2 + 0.0048935250379145145)
    return (p * v) / q
""",
    # erff of N. Juffa as MLAS (and the reference EP's special._erf32) computes it; exp(-t) for
    # t in [0.92, 18] is Cephes' expf with 2^n made by an integer shift (n in [-27, 0]), so the
    # loop vectorises where libm's scalar erf (float64) does not: within ~2 ulps of the reference
    "_erf32": """
@njit(inline="always")
def _erf32(x):
    a = abs(x)
    a = np.float32(3.925) if a > np.float32(3.925) else a
    s = a * a
    r = s * np.float32(-5.99104969e-4) + np.float32(4.99339588e-3)
    r = r * s + np.float32(-2.67667342e-2)
    r = r * s + np.float32(1.12818025e-1)
    r = r * s + np.float32(-3.76124859e-1)
    r = r * s + np.float32(1.28379151e-1)
    small = r * a + a
    q = a * np.float32(1.72948930e-5) + np.float32(-3.83208680e-4)
    q = q * a + np.float32(3.88393435e-3)
    q = q * a + np.float32(-2.42545605e-2)
    q = q * a + np.float32(1.06777847e-1)
    q = q * a + np.float32(6.34846687e-1)
    q = q * a + np.float32(1.28717512e-1)
    v = -(q * a + a)
    v = v if v > np.float32(-20.0) else np.float32(-20.0)
    n = np.floor(v * np.float32(1.44269504) + np.float32(0.5))
    f = v - n * np.float32(0.693359375)
    f = f - n * np.float32(-2.12194440e-4)
    e = f * np.float32(1.9875691500e-4) + np.float32(1.3981999507e-3)
    e = e * f + np.float32(8.3334519073e-3)
    e = e * f + np.float32(4.1665795894e-2)
    e = e * f + np.float32(1.6666665459e-1)
    e = e * f + np.float32(5.0000001201e-1)
    e = e * (f * f) + f + np.float32(1.0)
    e = e * np.float32(np.int64(1) << np.int64(n + np.float32(62.0))) * np.float32(2.168404344971009e-19)
    big = np.float32(1.0) - e
    y = big if a > np.float32(0.921875) else small
    return np.float32(math.copysign(y, x))
""",
    # the reference EP's special._gelu, step by step: erf(x / sqrt 2), + 1, * x, * 0.5
    "_gelu32": """
@njit(inline="always")
def _gelu32(x):
    return (_erf32(x * np.float32(0.70710677)) + np.float32(1.0)) * x * np.float32(0.5)
""",
    "_tanh32": """
@njit(inline="always")
def _tanh32(v):
    c = np.float32(7.90531110763549805)
    x = c if v > c else (-c if v < -c else v)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return (x * p) / q
""",
    # below SIGMOID_TAIL, 0.5 + 0.5 * tanh(x / 2) is cancellation noise (~1e-7 absolute, >= 3e-4
    # relative) and exactly 0 past tanh's clamp (x < -15.8), where onnxruntime's MLAS logistic gives
    # up to ~3e-7 down to x = -18: its rational form there is onnxruntime's result bit for bit, so a
    # Log after the Sigmoid stays finite and close (Log(Sigmoid(-16)) = -16.6 in both)
    "_sigmoid32": f"""
@njit(inline="always")
def _sigmoid32(x):
    if x < np.float32({SIGMOID_TAIL!r}):
        return _logistic_mlas32(x)
    return {SIGMOID_HEAD.format(x="x")}
""",
}


def _tanh(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if len(a) != 1 or dt[0] not in FLOAT_DTYPES:
        return None
    if out == "float32" and p.get("exact"):
        return f"_tanh_mlas32({a[0]})"
    return f"_tanh32({a[0]})" if out == "float32" else f"np.tanh({a[0]})"


def _sigmoid(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if len(a) != 1 or dt[0] not in FLOAT_DTYPES:
        return None
    if out == "float32" and p.get("exact"):
        return f"_logistic_mlas32({a[0]})"
    if out == "float32":
        return f"_sigmoid32({a[0]})"
    return f"({literal(1, out)} / ({literal(1, out)} + np.exp(-{a[0]})))"


def helper_source(body: str) -> str:
    """Definitions of the helpers ``body`` calls and those they call (empty when it calls none),
    in ``HELPERS`` order (a helper is listed after the ones it calls)."""
    used: set[str] = set()
    text = body
    while True:
        more = {name for name in HELPERS if name not in used and f"{name}(" in text}
        if not more:
            break
        used |= more
        text = "".join(HELPERS[name] for name in more)
    return "".join(HELPERS[name] for name in HELPERS if name in used)


def _where(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if len(a) != 3 or dt[0] != "bool" or dt[1] != dt[2]:
        return None
    return f"({a[1]} if {a[0]} else {a[2]})"


def _identity(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    return a[0] if len(a) == 1 else None


def _gelu(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """Gelu with erf (ai.onnx's approximate="none", com.microsoft's Gelu) in float32; the tanh
    form and other types run the reference kernel as delegated steps."""
    return None if p["tanh"] or out != "float32" or dt[0] != "float32" else f"_gelu32({a[0]})"


def _bias_gelu(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """com.microsoft's BiasGelu: Gelu(A + B), the sum rounded to float32 first (the reference's)."""
    return f"_gelu32({a[0]} + {a[1]})" if out == "float32" and dt[0] == dt[1] == "float32" else None


def _quick_gelu(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    """com.microsoft's QuickGelu, x * sigmoid(alpha * x) in float32 (what the graph optimizer's
    QuickGelu fusion makes of x * Sigmoid(x)): the product with alpha rounded first, skipped for
    alpha 1, and the Sigmoid item's logistic, so the same floats as the nodes it replaced."""
    if out != "float32" or dt[0] != "float32":
        return None
    inner = a[0] if p["alpha"] == 1.0 else f"({a[0]} * {literal(p['alpha'], out)})"
    logistic = "_logistic_mlas32" if p.get("exact") else "_sigmoid32"
    return f"({a[0]} * {logistic}({inner}))"


def _erf(p: Params, a: Sequence[str], dt: Sequence[str], out: str) -> str | None:
    if out == "float32" and dt[0] == "float32":
        return f"_erf32({a[0]})"
    return f"np.{out}(math.erf({a[0]}))" if out in FLOAT_DTYPES else None


ELEMENTWISE: dict[str, Expr] = {
    "Add": _binary("({} + {})"),
    "Sub": _binary("({} - {})"),
    "Mul": _binary("({} * {})"),
    "Div": _div,
    "Pow": _pow,
    "Max": _variadic("_maximum"),
    "Min": _variadic("_minimum"),
    "Sum": _variadic("np.add"),
    "Neg": _unary("(-{0})"),
    "Abs": _unary("abs({0})"),
    "Sqrt": _unary("np.sqrt({0})"),
    "Exp": _unary("np.exp({0})"),
    "Log": _unary("np.log({0})"),
    "Tanh": _tanh,
    "Floor": _unary("np.floor({0})"),
    "Ceil": _unary("np.ceil({0})"),
    "Reciprocal": _unary("({one} / {0})"),
    "Sigmoid": _sigmoid,
    "Relu": _unary("max({0}, {zero})"),
    # log(1 + exp(x)) overflowed to inf from x = 89 (float32); this form is exact to rounding
    "Softplus": _unary("(max({0}, {zero}) + np.log1p(np.exp(-abs({0}))))"),
    "Erf": _erf,
    "Gelu": _gelu,
    "BiasGelu": _bias_gelu,
    "QuickGelu": _quick_gelu,
    "Clip": _clip,
    "LeakyRelu": _leaky,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Cast": _cast,
    "Equal": _compare("=="),
    "Less": _compare("<"),
    "Greater": _compare(">"),
    "LessOrEqual": _compare("<="),
    "GreaterOrEqual": _compare(">="),
    "Where": _where,
    "Identity": _identity,
}

# Items the planner makes up (not ONNX ops): inference BatchNormalization as a scale and shift,
# and a convolution's bias added in the elementwise tail.
INTERNAL: dict[str, Expr] = {
    "ScaleShift": lambda p, a, dt, out: f"({a[0]} * {a[1]} + {a[2]})",
    "BiasAdd": lambda p, a, dt, out: f"({a[0]} + {a[1]})",
}
_VARIADIC = ("Max", "Min", "Sum")
_UNARY = tuple(
    "Neg Abs Sqrt Exp Log Tanh Floor Ceil Reciprocal Sigmoid Relu Softplus Erf Gelu QuickGelu LeakyRelu HardSigmoid "
    "HardSwish Cast Identity".split()
)
COMPARISONS = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
MAX_ARGS = 64
# (fewest, most) arguments of each op an item may have; only Clip's optional bounds may be absent
ARITY: dict[str, tuple[int, int]] = {
    **{op: (2, 2) for op in ELEMENTWISE if op not in _VARIADIC + _UNARY},
    **{op: (1, MAX_ARGS) for op in _VARIADIC},
    **{op: (1, 1) for op in _UNARY},
    "Clip": (1, 3),
    "Where": (3, 3),
    "ScaleShift": (3, 3),
    "BiasAdd": (2, 2),
}
# The declarative parameters of the ops that have any (name -> "float", "float?" (or null), "bool")
PARAMS: dict[str, dict[str, str]] = {
    "Pow": {"square": "bool", "cube": "bool"},
    "Clip": {"legacy": "bool", "min": "float?", "max": "float?"},
    "LeakyRelu": {"alpha": "float"},
    "HardSigmoid": {"alpha": "float", "beta": "float"},
    "Sigmoid": {"exact": "bool"},
    "Tanh": {"exact": "bool"},
    "Gelu": {"tanh": "bool"},
    "QuickGelu": {"alpha": "float", "exact": "bool"},
}


def params_for(node: Any) -> dict[str, Any]:
    """The declarative parameters of an elementwise node (what its expression depends on beyond
    its arguments' types): attributes with their defaults, and whether Pow squares or cubes."""
    op = node.op_type
    if op == "Pow":
        e = node.graph.constant_value(node.inputs[1])
        k = float(e.reshape(-1)[0]) if e is not None and e.size == 1 else None
        return {"square": k == 2.0, "cube": k == 3.0}
    if op == "Clip":
        legacy = node.opset < 11
        lo, hi = (node.attr("min"), node.attr("max")) if legacy else (None, None)
        return {"legacy": legacy, "min": None if lo is None else float(lo), "max": None if hi is None else float(hi)}
    if op == "LeakyRelu":
        return {"alpha": float(node.attr("alpha", 0.01))}
    if op == "HardSigmoid":
        return {"alpha": float(node.attr("alpha", 0.2)), "beta": float(node.attr("beta", 0.5))}
    # before a quantizer, MLAS's logistic/tanh bit for bit (``_logistic_mlas32``, ``_tanh_mlas32``, as
    # the reference EP's, on the reference's own test of where that is): onnxruntime's result differs
    # from the fast form by ~1 ulp on a third of inputs, which a quantizer turns into whole quanta
    if op in ("Sigmoid", "Tanh"):
        return {"exact": feeds_quantizer(node)}
    if op == "QuickGelu":
        return {"alpha": float(node.attr("alpha", 1.702)), "exact": feeds_quantizer(node)}
    if op == "Gelu":  # com.microsoft's has no attribute: the erf form
        return {"tanh": node.attr("approximate", "none") == "tanh"}
    return {}


def expression(op: str, params: Params, args: Sequence[str], dtypes: Sequence[str], out: str) -> str | None:
    """The scalar expression of one item, or None when the op does not take these arguments and
    types. Beyond each op's own checks, the result type is what ONNX says: bool for comparisons,
    the chosen branch's for Where, anything for Cast, else the first argument's type."""
    fn = ELEMENTWISE.get(op) or INTERNAL.get(op)
    lo, hi = ARITY.get(op, (0, -1))
    if fn is None or not lo <= len(args) <= hi or not args[0] or (op != "Clip" and not all(args)):
        return None
    if any(d not in KERNEL_DTYPES for d in dtypes if d) or out not in KERNEL_DTYPES:
        return None
    if op in INTERNAL and len(set(dtypes)) != 1:
        return None
    want = {"Cast": out, "Where": dtypes[-1]}.get(op, "bool" if op in COMPARISONS else dtypes[0])
    return fn(params, args, dtypes, out) if out == want else None


# Gemm is not among them: the reference kernel it is delegated to lays out a constant B once
# (OpenBLAS's transposed-B product of a few rows is ~10x slower than the laid-out one)
CONTRACTIONS = ("Conv", "MatMul")

# The first default-domain opset whose semantics the generated code implements, per op this EP
# fuses: ``planner.supported`` refuses nodes of older opsets, and ``fusable_ops()`` declares
# exactly this table (with ELEMENTWISE and CONTRACTIONS) to the parity report. Binary ops start at
# 7 and variadic ones at 8 (multidirectional broadcasting; older ones had a ``broadcast``
# attribute), BatchNormalization at 9 (no
# ``spatial`` attribute).
SINCE: dict[str, int] = {
    "Add": 7,
    "Sub": 7,
    "Mul": 7,
    "Div": 7,
    "Pow": 7,
    "Equal": 7,
    "Less": 7,
    "Greater": 7,
    "Max": 8,
    "Min": 8,
    "Sum": 8,
    "LessOrEqual": 12,
    "GreaterOrEqual": 12,
    "Where": 9,
    "Neg": 6,
    "Abs": 6,
    "Sqrt": 6,
    "Exp": 6,
    "Log": 6,
    "Tanh": 6,
    "Floor": 6,
    "Ceil": 6,
    "Reciprocal": 6,
    "Sigmoid": 6,
    "Relu": 6,
    "Softplus": 1,
    "Erf": 9,
    "Gelu": 20,
    "Clip": 6,
    "LeakyRelu": 6,
    "HardSigmoid": 6,
    "HardSwish": 14,
    "Cast": 6,
    "Identity": 1,
    "Conv": 1,
    "MatMul": 1,
    "BatchNormalization": 9,
}
OTHER_FUSED = ("BatchNormalization",)  # folded into a scale-and-shift elementwise item
# com.microsoft ops compiled as the default-domain op of the same name (the graph optimizer's Gelu
# fusion makes com.microsoft::Gelu), with their first com.microsoft opset
MS_SINCE: dict[str, int] = {"Gelu": 1, "BiasGelu": 1, "QuickGelu": 1}
ONLY_FLOAT32 = ("Gelu", "BiasGelu", "QuickGelu")  # compiled for float32 only (the declared type constraints say so)


def fusable_ops() -> list[Any]:
    """What the EP runs inside its fused groups, for the parity report's fusable-ops protocol (see
    ``ep_core.tools.parity.introspect``), as ``KernelDef``s: every op compiled into kernels from its
    first opset in ``SINCE``, with the dtypes its kernels take; then the reference kernels delegated
    steps run (their type constraints cut to the dtypes a delegated value may have)."""
    from ep_core.sdk.kernels import KernelDef
    from ep_numba_cpu.delegate import declared_ops, typed

    def dtypes(op: str) -> Any:
        if op in ONLY_FLOAT32:
            return ("float32",)
        return FLOAT_DTYPES if op in CONTRACTIONS + OTHER_FUSED else KERNEL_DTYPES

    ops = sorted((set(ELEMENTWISE) & set(SINCE)) | set(CONTRACTIONS) | set(OTHER_FUSED))  # default domain
    compiled: list[Any] = [d for op in ops for d in typed(KernelDef(op, "", SINCE[op]), dtypes(op))]
    ms = [d for op, v in sorted(MS_SINCE.items()) for d in typed(KernelDef(op, "com.microsoft", v), dtypes(op))]
    ms_keys = {(d.domain, d.op_type, d.since_version) for d in ms}
    return compiled + ms + [d for d in declared_ops() if (d.domain, d.op_type, d.since_version) not in ms_keys]

"""Elementwise kernels generated from expressions, shared by the single-op kernels and by fusion.

An elementwise *program* is a list of statements ``t_k = <expr over inputs x_i, earlier t_j,
scalar params p_m>`` plus the temporaries written to each output. The generator turns it into the
source of one grid-stride CUDA kernel and compiles it with ``cuda.jit``. Inputs are addressed as
``full`` (same shape as the output: index i), ``scalar`` (one element: index 0) or ``strided``
(broadcast: per-dimension strides, 0 on broadcast axes), so common cases skip index arithmetic.

Only this module's own templates, names and dtype constructors ever reach ``exec``: programs are
built from the op table (a fused group's from a validated spec, ``spec_check``), and
``check_expression`` refuses any statement outside that grammar before the source is compiled."""

from __future__ import annotations

import hashlib
import io
import math
import re
import threading
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from numba import cuda, float32, int32, uint16, uint32

from ep_core.sdk.errors import EpFail
from ep_cuda_numba.device import simulator_requested

# ------------------------------------------------------------------------------ op table


@dataclass(frozen=True)
class EwOp:
    """One ONNX elementwise op as an expression template: ``{0}``.. are inputs, ``{p0}``.. params,
    ``F`` is the compute dtype constructor (keeps float32 math in float32 on the GPU)."""

    arity: int  # -1: variadic
    expr: str
    params: Callable[[Any], tuple[float, ...]] | None = None  # node -> scalar params
    out: str = "same"  # "same" | "bool" | "cast"


def _attrs(*spec: tuple[str, float]) -> Callable[[Any], tuple[float, ...]]:
    return lambda node: tuple(float(node.attr(k, d)) for k, d in spec)


def _gelu_expr(node: Any) -> str:
    if node is not None and node.attr("approximate", "none") == "tanh":
        return "F(0.5) * {0} * (F(1) + math.tanh(F(0.7978845608028654) * ({0} + F(0.044715) * {0} * {0} * {0})))"
    return "F(0.5) * {0} * (F(1) + math.erf({0} * F(0.7071067811865476)))"


UNARY_FLOAT: dict[str, EwOp] = {
    "Sigmoid": EwOp(1, "F(1) / (F(1) + math.exp(-{0}))"),
    "Tanh": EwOp(1, "math.tanh({0})"),
    "Exp": EwOp(1, "math.exp({0})"),
    "Log": EwOp(1, "math.log({0})"),
    "Sqrt": EwOp(1, "math.sqrt({0})"),
    "Erf": EwOp(1, "math.erf({0})"),
    "Sin": EwOp(1, "math.sin({0})"),
    "Cos": EwOp(1, "math.cos({0})"),
    "Floor": EwOp(1, "math.floor({0})"),
    "Ceil": EwOp(1, "math.ceil({0})"),
    "Reciprocal": EwOp(1, "F(1) / {0}"),
    "Softplus": EwOp(1, "math.log(F(1) + math.exp({0}))"),
    "HardSigmoid": EwOp(1, "max(F(0), min(F(1), {p0} * {0} + {p1}))", _attrs(("alpha", 0.2), ("beta", 0.5))),
    "HardSwish": EwOp(1, "{0} * max(F(0), min(F(1), F(0.16666666666666666) * {0} + F(0.5)))"),
    "LeakyRelu": EwOp(1, "{0} if {0} >= F(0) else {p0} * {0}", _attrs(("alpha", 0.01))),
    "Elu": EwOp(1, "{0} if {0} >= F(0) else {p0} * (math.exp({0}) - F(1))", _attrs(("alpha", 1.0))),
    "Gelu": EwOp(1, "GELU"),
}
UNARY_NUMERIC: dict[str, EwOp] = {
    "Relu": EwOp(1, "{0} if {0} > F(0) else F(0)"),
    "Neg": EwOp(1, "-{0}"),
    "Abs": EwOp(1, "abs({0})"),
    "Identity": EwOp(1, "{0}"),
}
BINARY_NUMERIC: dict[str, EwOp] = {
    "Add": EwOp(2, "{0} + {1}"),
    "Sub": EwOp(2, "{0} - {1}"),
    "Mul": EwOp(2, "{0} * {1}"),
    "Div": EwOp(2, "DIV"),
}
VARIADIC_NUMERIC: dict[str, EwOp] = {
    "Max": EwOp(-1, "max"),
    "Min": EwOp(-1, "min"),
    "Sum": EwOp(-1, "sum"),
    "Mean": EwOp(-1, "mean"),
}
COMPARE: dict[str, EwOp] = {
    "Equal": EwOp(2, "{0} == {1}", out="bool"),
    "Less": EwOp(2, "{0} < {1}", out="bool"),
    "Greater": EwOp(2, "{0} > {1}", out="bool"),
    "LessOrEqual": EwOp(2, "{0} <= {1}", out="bool"),
    "GreaterOrEqual": EwOp(2, "{0} >= {1}", out="bool"),
}
LOGIC: dict[str, EwOp] = {
    "And": EwOp(2, "{0} and {1}", out="bool"),
    "Or": EwOp(2, "{0} or {1}", out="bool"),
    "Xor": EwOp(2, "{0} != {1}", out="bool"),
    "Not": EwOp(1, "not {0}", out="bool"),
}
OTHER: dict[str, EwOp] = {
    "Pow": EwOp(2, "{0} ** {1}"),
    "PRelu": EwOp(2, "{0} if {0} >= F(0) else {0} * {1}"),
    "Where": EwOp(3, "{1} if {0} else {2}"),
    "Clip": EwOp(1, "min(max({0}, {p0}), {p1})"),  # params come from attributes or host inputs
    "Cast": EwOp(1, "CAST", out="cast"),
}

ALL_OPS: dict[str, EwOp] = {
    **UNARY_FLOAT,
    **UNARY_NUMERIC,
    **BINARY_NUMERIC,
    **VARIADIC_NUMERIC,
    **COMPARE,
    **LOGIC,
    **OTHER,
}


def op_expression(
    op_type: str, n_inputs: int, dtype: np.dtype, node: Any = None, out_dtype: np.dtype | None = None
) -> str:
    """The expression template of ``op_type`` for ``n_inputs`` inputs of ``dtype``."""
    op = ALL_OPS[op_type]
    if op.expr == "GELU":
        return _gelu_expr(node)
    if op.expr == "DIV":
        return "{0} / {1}" if dtype.kind == "f" else "F({0} / {1})"
    if op.expr == "CAST":
        assert out_dtype is not None
        return "{0} != 0" if out_dtype == np.bool_ else "F({0})"
    if op.expr in ("max", "min"):
        e = "{0}"
        for i in range(1, n_inputs):
            e = f"{op.expr}({e}, {{{i}}})"
        return e
    if op.expr in ("sum", "mean"):
        e = " + ".join(f"{{{i}}}" for i in range(n_inputs))
        return f"({e}) / F({n_inputs})" if op.expr == "mean" and n_inputs > 1 else f"({e})"
    return op.expr


HALF = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)


def compute_dtype(op_type: str, dtype: np.dtype, out_dtype: np.dtype) -> np.dtype:
    """The dtype an op's statement computes in: float16 math runs in float32 and is rounded once,
    when the result is stored; Cast computes in its target (float64 -> float16 rounds once, not
    twice through float32); Where only selects. bfloat16 values are float32 from their load on
    (kernels see bfloat16 as uint16 bit patterns: ``bf16_load``/``bf16_store``)."""
    dtype, out_dtype = np.dtype(dtype), np.dtype(out_dtype)
    if op_type == "Cast":
        return F32 if out_dtype == BF16 else out_dtype
    if dtype == BF16 or (dtype == HALF and op_type != "Where"):
        return F32
    return dtype


@cuda.jit(device=True)
def bf16_round_bits(u):  # type: ignore[no-untyped-def]
    """float32 bits -> bfloat16 bits, rounded to nearest even (as ml_dtypes); a NaN stays a quiet
    NaN. Integer arithmetic only: the simulator runs this very code, only the bit casts differ."""
    if (u & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
        return uint16((u >> uint32(16)) | uint32(0x40))
    return uint16((u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1))) >> uint32(16))


if simulator_requested():

    @cuda.jit(device=True)
    def bf16_load(bits):  # type: ignore[no-untyped-def]
        return np.uint32(np.uint32(bits) << np.uint32(16)).view(np.float32)

    @cuda.jit(device=True)
    def bf16_store(v):  # type: ignore[no-untyped-def]
        return bf16_round_bits(np.float32(v).view(np.uint32))

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True)
    def bf16_load(bits):  # type: ignore[no-untyped-def]
        """bfloat16 bits -> float32: the bits are the float32's upper half."""
        return libdevice.int_as_float(int32(uint32(bits) << uint32(16)))

    @cuda.jit(device=True)
    def bf16_store(v):  # type: ignore[no-untyped-def]
        return bf16_round_bits(uint32(libdevice.float_as_int(float32(v))))


def op_statement(
    op_type: str,
    args: Sequence[str],
    arg_dtypes: Sequence[np.dtype],
    dtype: np.dtype,
    out_dtype: np.dtype,
    node: Any = None,
    params: Sequence[str] = (),
) -> "Statement":
    """The statement of one op over named arguments: float16 arguments of an op computing in
    float32 are widened on use (``F(x)``), so no half-precision arithmetic is ever generated."""
    compute = compute_dtype(op_type, dtype, out_dtype)
    template = op_expression(op_type, len(args), np.dtype(dtype), node, np.dtype(out_dtype))
    widen = compute == F32 and op_type not in ("Cast", "Where")
    names = [f"F({a})" if widen and np.dtype(d) == HALF else a for a, d in zip(args, arg_dtypes, strict=True)]
    return Statement(instantiate(template, names, params), compute.name)


# ------------------------------------------------------------------------ programs


@dataclass(frozen=True)
class Statement:
    """``t{index} = expr`` where expr refers to ``x<i>``, ``t<j>`` and ``p<m>`` by name, and
    the compute type ``F<k>`` of the op (one per statement)."""

    expr: str
    compute_dtype: str


@dataclass(frozen=True)
class Program:
    n_inputs: int
    n_params: int
    statements: tuple[Statement, ...]
    outputs: tuple[int, ...]  # statement index written to each output
    bf16_inputs: tuple[int, ...] = ()  # inputs and outputs held as bfloat16 bits (uint16)
    bf16_outputs: tuple[int, ...] = ()

    def key(self) -> tuple[Any, ...]:
        return (self.n_inputs, self.n_params, self.statements, self.outputs, self.bf16_inputs, self.bf16_outputs)


def bf16_positions(dtypes: Sequence[np.dtype]) -> tuple[int, ...]:
    return tuple(i for i, d in enumerate(dtypes) if np.dtype(d) == BF16)


def instantiate(template: str, args: Sequence[str], params: Sequence[str]) -> str:
    return template.format(*args, **{f"p{i}": p for i, p in enumerate(params)})


def single_op_program(
    op_type: str, arg_dtypes: Sequence[np.dtype], n_params: int, dtype: np.dtype, out_dtype: np.dtype, node: Any = None
) -> Program:
    names = [f"x{i}" for i in range(len(arg_dtypes))]
    st = op_statement(op_type, names, arg_dtypes, dtype, out_dtype, node, [f"p{i}" for i in range(n_params)])
    return Program(len(arg_dtypes), n_params, (st,), (0,), bf16_positions(arg_dtypes), bf16_positions([out_dtype]))


_FUNCTIONS = frozenset(
    {"math", "exp", "tanh", "log", "sqrt", "erf", "sin", "cos", "floor", "ceil", "max", "min", "abs"}
)
_KEYWORDS = frozenset({"if", "else", "and", "or", "not"})
_LOCAL = re.compile(r"[vtp]\d+|F\d+")  # values, temporaries, params, compute-dtype constructors
_OPERATORS = frozenset({"+", "-", "*", "/", "**", "(", ")", ",", ".", "<", ">", "<=", ">=", "==", "!="})


def check_expression(expr: str) -> None:
    """Refuse a generated statement that is not made of the generator's own names, operators and
    numbers (a guard in front of ``exec``: whatever a model or context says, nothing else runs)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(expr).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    ok = bool(tokens) and "\n" not in expr and "\r" not in expr  # one expression, one line
    for tok in tokens:
        if tok.type == tokenize.NAME:
            ok = ok and (tok.string in _FUNCTIONS or tok.string in _KEYWORDS or bool(_LOCAL.fullmatch(tok.string)))
        elif tok.type == tokenize.OP:
            ok = ok and tok.string in _OPERATORS
        elif tok.type == tokenize.NUMBER:
            ok = ok and tok.string.replace(".", "").replace("e", "").replace("-", "").isdigit()
        else:
            ok = ok and tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)
    if not ok:
        raise EpFail(f"generated kernel statement {expr[:200]!r} is outside the generator's grammar (an EP bug)")


def generate_source(program: Program, pattern: tuple[str, ...], n_outputs: int) -> str:
    """Kernel source for ``program`` with inputs addressed by ``pattern`` (full/scalar/strided)."""
    ins = [f"x{i}" for i in range(program.n_inputs)]
    outs = [f"o{i}" for i in range(n_outputs)]
    params = [f"p{i}" for i in range(program.n_params)]
    strided = [i for i, p in enumerate(pattern) if p == "strided"]
    args = outs + ins + params + (["shape"] + [f"s{i}" for i in strided] if strided else [])
    lines = [
        f"def fused_kernel({', '.join(args)}):",
        "    n = o0.size",
        "    for i in range(cuda.grid(1), n, cuda.gridsize(1)):",
    ]
    if strided:
        lines.append("        rem = i")
        for i in strided:
            lines.append(f"        j{i} = 0")
        lines.append("        for d in range(len(shape) - 1, -1, -1):")
        lines.append("            c = rem % shape[d]")
        lines.append("            rem = rem // shape[d]")
        for i in strided:
            lines.append(f"            j{i} += c * s{i}[d]")
    for i, p in enumerate(pattern):
        idx = {"full": "i", "scalar": "0", "strided": f"j{i}"}[p]
        load = f"bf16_load(x{i}[{idx}])" if i in program.bf16_inputs else f"x{i}[{idx}]"
        lines.append(f"        v{i} = {load}")
    for k, st in enumerate(program.statements):
        expr = st.expr
        for i in range(program.n_inputs - 1, -1, -1):
            expr = expr.replace(f"x{i}", f"v{i}")
        expr = expr.replace("F(", f"F{k}(")
        check_expression(expr)
        lines.append(f"        t{k} = {expr}")
    for j, k in enumerate(program.outputs):
        lines.append(f"        o{j}[i] = bf16_store(t{k})" if j in program.bf16_outputs else f"        o{j}[i] = t{k}")
    return "\n".join(lines) + "\n"


_CACHE: dict[tuple[Any, ...], tuple[Any, str]] = {}
_LOCK = threading.Lock()


def compile_program(program: Program, pattern: tuple[str, ...], n_outputs: int) -> tuple[Any, str]:
    """(cuda.jit dispatcher, source), cached per program and addressing pattern."""
    key = (program.key(), pattern, n_outputs)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    src = generate_source(program, pattern, n_outputs)
    ns: dict[str, Any] = {"cuda": cuda, "math": math, "bf16_load": bf16_load, "bf16_store": bf16_store}
    for k, st in enumerate(program.statements):
        dt = np.dtype(st.compute_dtype)
        if dt.kind not in "biuf" or dt.name != st.compute_dtype:
            raise EpFail(f"generated kernel statement {k} computes in {st.compute_dtype!r}, not a numeric dtype")
        ns[f"F{k}"] = dt.type
    code = compile(src, f"<ep_cuda_numba elementwise {hashlib.sha1(src.encode()).hexdigest()[:8]}>", "exec")
    exec(code, ns)  # our own generated text (check_expression), never text read from a model
    kernel = cuda.jit(ns["fused_kernel"])
    with _LOCK:
        _CACHE[key] = (kernel, src)
    return kernel, src


# ------------------------------------------------------------------------ launching


def broadcast_plan(
    shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...]
) -> tuple[tuple[str, ...], list[tuple[int, ...]]]:
    """Addressing pattern and element strides of each input broadcast to ``out_shape``."""
    pattern: list[str] = []
    strides: list[tuple[int, ...]] = []
    nd = len(out_shape)
    for shp in shapes:
        size = int(np.prod(shp, dtype=np.int64)) if len(shp) else 1
        if tuple(shp) == tuple(out_shape):
            pattern.append("full")
            strides.append(())
        elif size == 1:
            pattern.append("scalar")
            strides.append(())
        else:
            padded = (1,) * (nd - len(shp)) + tuple(shp)
            st = []
            acc = 1
            for d in range(nd - 1, -1, -1):
                st.append(0 if padded[d] == 1 else acc)
                acc *= padded[d]
            pattern.append("strided")
            strides.append(tuple(reversed(st)))
    return tuple(pattern), strides


def run_program(
    rt: Any, program: Program, inputs: Sequence[Any], params: Sequence[Any], out_dtypes: Sequence[np.dtype]
) -> list[Any]:
    """Evaluate ``program`` on device arrays with ONNX broadcasting; returns the outputs."""
    shapes = [tuple(int(s) for s in x.shape) for x in inputs]
    try:
        out_shape = tuple(int(s) for s in np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        raise EpFail(f"elementwise inputs with shapes {shapes} do not broadcast") from None
    outs = [rt.empty(out_shape, dt) for dt in out_dtypes]
    n = int(np.prod(out_shape, dtype=np.int64)) if out_shape else 1
    if n == 0:
        return outs
    pattern, strides = broadcast_plan(shapes, out_shape)
    kernel, _ = compile_program(program, pattern, len(outs))
    from ep_cuda_numba.launch import flat

    args: list[Any] = [flat(o) for o in outs] + [flat(x) for x in inputs]
    ptype = np.dtype(program.statements[0].compute_dtype).type
    args += [ptype(p) for p in params]  # a bound of dtype T is exact in T's compute dtype
    if "strided" in pattern:
        args.append(out_shape if out_shape else (1,))
        args += [s if s else (0,) for s, p in zip(strides, pattern, strict=False) if p == "strided"]
    rt.launch1d(kernel, n, *args)
    return outs

"""Elementwise unary, binary, variadic and ternary ops with full ONNX broadcasting, over every
type registered here (float16 and bfloat16 included: they compute in float32 and round once at
the store).
Each node compiles (once per input dtypes and addressing pattern) a kernel generated from its
expression by ``ep_cuda_numba.codegen``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda  # noqa: F401  (the simulator wants numba.cuda imported at module level)

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.codegen import (
    BF16,
    BINARY_NUMERIC,
    COMPARE,
    LOGIC,
    UNARY_FLOAT,
    UNARY_NUMERIC,
    VARIADIC_NUMERIC,
    Program,
    run_program,
    single_op_program,
)
from ep_cuda_numba.launch import Runtime
from ep_cuda_numba.registry import ANY_T, BF16_T, BOOL_T, FLOAT16_T, NUM16_T, register_versions, support_check

FLOAT_ANY_T = FLOAT16_T + BF16_T
NUM_ANY_T = NUM16_T + BF16_T


def _onnx_to_np(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


class ElementwiseNode:
    """The parts of a node an elementwise evaluation needs; programs are built per input dtype."""

    def __init__(self, node: Any, ctx: Any, n_data: int | None = None) -> None:
        self.node = node
        self.op = node.op_type
        self.rt = Runtime.of(ctx)
        self.n_data = n_data
        self._programs: dict[tuple[tuple[np.dtype, ...], int], tuple[Program, np.dtype]] = {}

    def out_dtype(self, in_dtype: np.dtype) -> np.dtype:
        if self.op in COMPARE or self.op in LOGIC:
            return np.dtype(np.bool_)
        if self.op == "Cast":
            return _onnx_to_np(int(self.node.attr("to")))
        return in_dtype

    def program(self, dtypes: tuple[np.dtype, ...], n_params: int) -> tuple[Program, np.dtype]:
        key = (dtypes, n_params)
        hit = self._programs.get(key)
        if hit is None:
            # Where's condition is bool: the values decide the compute dtype
            dtype = dtypes[1] if self.op == "Where" else dtypes[0]
            out = self.out_dtype(dtype)
            hit = (single_op_program(self.op, dtypes, n_params, dtype, out, self.node), out)
            self._programs[key] = hit
        return hit

    def __call__(self, inputs: Sequence[Any], params: Sequence[Any] = ()) -> tuple[Any, ...]:
        dtypes = tuple(np.dtype(x.dtype) for x in inputs)
        dtype = dtypes[1] if self.op == "Where" else dtypes[0]
        program, out = self.program(dtypes, len(params))
        if self.op == "Where":
            out = dtype
        return tuple(run_program(self.rt, program, inputs, params, [out]))


def build_plain(node: NodeView, ctx: KernelContext) -> Any:
    ew = ElementwiseNode(node, ctx)
    from ep_cuda_numba.codegen import ALL_OPS

    spec = ALL_OPS[node.op_type]
    params = spec.params(node) if spec.params is not None else ()

    def compute(*inputs: Any) -> tuple[Any, ...]:
        return ew([x for x in inputs if x is not None], params)

    return compute


def _clip_bounds(dtype: np.dtype, lo: Any, hi: Any) -> tuple[Any, Any]:
    if dtype.kind == "f" or dtype == BF16:
        info_lo, info_hi = -np.inf, np.inf
    else:
        ii = np.iinfo(dtype)
        info_lo, info_hi = ii.min, ii.max
    lo_v = info_lo if lo is None or np.size(lo) == 0 else np.asarray(lo).reshape(-1)[0]
    hi_v = info_hi if hi is None or np.size(hi) == 0 else np.asarray(hi).reshape(-1)[0]
    return lo_v, hi_v


def build_clip_inputs(node: NodeView, ctx: KernelContext) -> Any:
    """Clip-11+: ``min``/``max`` are host inputs (usually constants), read per run."""
    ew = ElementwiseNode(node, ctx)

    def compute(x: Any, lo: Any = None, hi: Any = None) -> tuple[Any, ...]:
        return ew([x], _clip_bounds(np.dtype(x.dtype), lo, hi))

    return compute


def build_clip_attrs(node: NodeView, ctx: KernelContext) -> Any:
    ew = ElementwiseNode(node, ctx)
    lo, hi = node.attr("min", None), node.attr("max", None)

    def compute(x: Any) -> tuple[Any, ...]:
        return ew([x], _clip_bounds(np.dtype(x.dtype), lo, hi))

    return compute


@support_check("Identity")
def _tensor_identity(node: Any) -> str | None:
    """Identity of a sequence or an optional (opset 14/16's V) stays with the host EP: the kernels
    here move device tensors."""
    vi = node.input_info(0)
    return None if vi is None or vi.kind == "tensor" else f"Identity of a {vi.type_str} (tensors only)"


for _op in UNARY_FLOAT:
    _since = {"Gelu": 20, "HardSwish": 14, "Erf": 9, "Softplus": 1, "Sin": 7, "Cos": 7}.get(_op, 6)
    register_versions(_op, _since, {"T": FLOAT_ANY_T})(build_plain)
for _op in UNARY_NUMERIC:
    _types = {"T": NUM_ANY_T if _op != "Identity" else ANY_T, "V": ANY_T}
    register_versions(_op, 6 if _op != "Identity" else 1, _types)(build_plain)
for _op in BINARY_NUMERIC:
    register_versions(_op, 7, {"T": NUM_ANY_T})(build_plain)
for _op in VARIADIC_NUMERIC:
    register_versions(_op, 8, {"T": FLOAT_ANY_T if _op in ("Sum", "Mean") else NUM_ANY_T})(build_plain)
for _op in COMPARE:
    register_versions(_op, 7, {"T": NUM_ANY_T + (BOOL_T if _op == "Equal" else ()), "T1": BOOL_T})(build_plain)
for _op in LOGIC:
    register_versions(_op, 7 if _op != "Not" else 1, {"T": BOOL_T, "T1": BOOL_T})(build_plain)
register_versions("Pow", 7, {"T": FLOAT_ANY_T, "T1": FLOAT_ANY_T})(build_plain)
register_versions("PRelu", 9, {"T": FLOAT_ANY_T})(build_plain)
register_versions("Where", 9, {"B": BOOL_T, "T": ANY_T})(build_plain)
register_versions("Cast", 6, {"T1": ANY_T, "T2": ANY_T})(build_plain)
register_versions("Clip", 11, {"T": NUM_ANY_T}, host_inputs=(1, 2))(build_clip_inputs)
register_versions("Clip", 6, {"T": FLOAT_ANY_T}, until=10)(build_clip_attrs)

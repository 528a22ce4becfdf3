"""Element-wise ops on rank-0 (shape ()) tensors, against onnxruntime at one thread.

A real model (speechmos' PLCMOS: Gemm -> Squeeze -> Sigmoid) ends in a scalar activation, and
NumPy ufuncs return scalars, not arrays, for 0-d operands: a kernel that then writes in place
(``out=t``) failed there. Every element-wise op runs here on 0-d inputs, on the reference EP one
node at a time, and on the Numba CPU EP as one graph of all of them (one compile)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import ep_core

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
B = TensorProto.BOOL
# op -> (input names among x, y (both float32), p (bool), q (bool); output type; attributes)
UNARY = [
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor",
    "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu",
    "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu", "Shrink",
    "Celu", "Gelu",
]  # fmt: skip
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu"]
COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
LOGIC = ["And", "Or", "Xor"]
VALUES = {"x": np.array(0.37, np.float32), "y": np.array(-1.25, np.float32)}
BOOLS = {"p": np.array(True), "q": np.array(False)}
# inputs in each op's domain: acosh needs >= 1, atanh/acos/asin |x| < 1
SHIFTED = {"Acosh": "z"}
EXTRA = {"z": np.array(1.5, np.float32)}


def _cases() -> list[tuple[str, list[str], int, dict[str, Any]]]:
    cases: list[tuple[str, list[str], int, dict[str, Any]]] = []
    cases += [(op, [SHIFTED.get(op, "x")], F, {}) for op in UNARY]
    cases += [(op, ["x", "y"], F, {}) for op in BINARY]
    cases += [(op, ["x", "y"], B, {}) for op in COMPARE]
    cases += [(op, ["p", "q"], B, {}) for op in LOGIC]
    cases += [("Not", ["p"], B, {}), ("IsNaN", ["x"], B, {}), ("IsInf", ["x"], B, {})]
    cases += [("Where", ["p", "x", "y"], F, {}), ("Clip", ["x", "y", "x"], F, {}), ("Mod", ["x", "y"], F, {"fmod": 1})]
    cases += [("Cast", ["x"], TensorProto.INT32, {"to": TensorProto.INT32})]
    return cases


CASES = _cases()
FEEDS = {**VALUES, **BOOLS, **EXTRA}


def _model(cases: list[tuple[str, list[str], int, dict[str, Any]]]) -> bytes:
    used = sorted({i for _, ins, _, _ in cases for i in ins})
    inputs = [helper.make_tensor_value_info(n, B if n in BOOLS else F, []) for n in used]
    nodes = [helper.make_node(op, ins, [f"out_{op}"], name=f"{op}_0", **attrs) for op, ins, _, attrs in cases]
    outputs = [helper.make_tensor_value_info(f"out_{op}", t, []) for op, _, t, _ in cases]
    graph = helper.make_graph(nodes, "rank0", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()


def _expected(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(cases: list[Any], got: list[Any], want: list[np.ndarray]) -> None:
    for (op, *_), g, w in zip(cases, got, want, strict=True):
        assert isinstance(g, np.ndarray) and g.shape == () and g.dtype == w.dtype, f"{op}: {g!r} vs {w!r}"
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7, err_msg=op)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reference_ep_on_rank0_inputs(case: tuple[str, list[str], int, dict[str, Any]]) -> None:
    model = _model([case])
    feeds = {n: FEEDS[n] for n in case[1]}
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)
    _check([case], got, _expected(model, feeds))


def test_numba_ep_on_rank0_inputs() -> None:
    """Every case in one graph: the Numba EP fuses what it compiles and delegates the rest (the
    PLCMOS failure was a delegated Sigmoid inside a fused group)."""
    model = _model(CASES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"])
    _check(CASES, sess.run(None, FEEDS), _expected(model, FEEDS))


def test_scalar_activation_after_gemm_and_squeeze() -> None:
    """PLCMOS's tail: Gemm (1, 1) -> Squeeze -> Sigmoid, on both EPs."""
    w = helper.make_tensor("w", F, [4, 1], [0.5, -0.25, 1.0, 0.75])
    nodes = [
        helper.make_node("Gemm", ["a", "w"], ["g"], name="gemm"),
        helper.make_node("Squeeze", ["g"], ["s"], name="squeeze"),
        helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes, "tail", [helper.make_tensor_value_info("a", F, [1, 4])], [helper.make_tensor_value_info("y", F, [])], [w]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    feeds = {"a": np.array([[1.0, 2.0, -0.5, 0.25]], np.float32)}
    want = _expected(model, feeds)
    for providers in (
        ["CpuReferenceExecutionProvider"],
        ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"],
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = ep_core.InferenceSession(model, providers=providers).run(None, feeds)
        _check([("Sigmoid",)], got, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceProd", "ReduceL2", "ArgMax"])
def test_reductions_to_a_scalar_return_a_0d_array(op: str) -> None:
    """A reduction of a vector with keepdims=0 is a 0-d tensor: the session hands out a 0-d
    ndarray, as onnxruntime does, not a NumPy scalar (which has no buffer to write into)."""
    attrs: dict[str, Any] = {"keepdims": 0}
    ins = ["v"]
    inits = []
    if op == "ArgMax":
        attrs["axis"] = 0
    elif op in ("ReduceSum",):
        ins.append("axes")
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [1], [0]))
    out_type = TensorProto.INT64 if op == "ArgMax" else F
    graph = helper.make_graph(
        [helper.make_node(op, ins, ["y"], name="reduce", **attrs)],
        "reduce",
        [helper.make_tensor_value_info("v", F, [5])],
        [helper.make_tensor_value_info("y", out_type, [])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    feeds = {"v": np.array([0.5, -1.0, 2.0, 0.25, 1.5], np.float32)}
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)
    _check([(op,)], got, _expected(model, feeds))

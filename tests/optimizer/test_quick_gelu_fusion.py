"""onnxruntime's QuickGeluFusion: x * Sigmoid(x) and x * Sigmoid(alpha * x), alpha a scalar
constant, become one com.microsoft QuickGelu (the SiLU of YOLO-style detectors), with the same
bits as the nodes it replaces on both CPU EPs, onnxruntime's own fused graph beside it; a Sigmoid
read twice, a graph-output Sigmoid, a non-scalar alpha or a non-float32 x keep their nodes."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from opt_helpers import LEVELS, op_counts, session

import ep_core

EXTENDED = LEVELS.ORT_ENABLE_EXTENDED
REF = ["CpuReferenceExecutionProvider"]
node = helper.make_node


def _model(
    nodes: list, outputs: list[str], inits: dict[str, np.ndarray], dtype: int = TensorProto.FLOAT
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", dtype, [2, 3, 8, 8])],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _silu(alpha: float | None, swap: bool = False) -> onnx.ModelProto:
    """Conv -> x * Sigmoid([alpha *] x), the Mul's operands in either order."""
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [node("Conv", ["X", "W"], ["x"], pads=[1, 1, 1, 1])]
    inits: dict[str, np.ndarray] = {"W": w}
    inner = "x"
    if alpha is not None:
        inits["alpha"] = np.array(alpha, np.float32)
        nodes.append(node("Mul", ["alpha", "x"] if swap else ["x", "alpha"], ["ax"]))
        inner = "ax"
    nodes += [node("Sigmoid", [inner], ["s"]), node("Mul", ["s", "x"] if swap else ["x", "s"], ["Y"])]
    return _model(nodes, ["Y"], inits)


FEED = {"X": (np.random.default_rng(0).standard_normal((2, 3, 8, 8)) * 4).astype(np.float32)}


@pytest.mark.parametrize("provider", ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"])
@pytest.mark.parametrize(("alpha", "swap"), [(None, False), (None, True), (1.702, False), (1.702, True)])
def test_silu_becomes_quick_gelu_with_the_same_bits(
    alpha: float | None, swap: bool, provider: str, tmp_path: pathlib.Path
) -> None:
    model = _silu(alpha, swap)
    want = session(model, LEVELS.ORT_DISABLE_ALL, providers=[provider]).run(None, FEED)[0]
    fused = session(model, EXTENDED, providers=[provider])
    got = fused.run(None, FEED)[0]
    np.testing.assert_array_equal(got, want)  # bit for bit: the same float operations
    assert op_counts(fused._built.model) == {"Conv": 1, "com.microsoft::QuickGelu": 1}
    q = next(n for n in fused._built.model.graph.node if n.op_type == "QuickGelu")
    assert helper.get_attribute_value(q.attribute[0]) == pytest.approx(1.0 if alpha is None else 1.702)
    # onnxruntime fuses the same nodes into the same op, with the same alpha, and agrees to rounding
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    theirs = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ort_ops = {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}
    assert "QuickGelu" in ort_ops
    np.testing.assert_allclose(got, theirs.run(None, FEED)[0], rtol=1e-6, atol=2e-6)


def test_a_sigmoid_read_twice_or_given_out_is_kept() -> None:
    read_twice = [node("Sigmoid", ["X"], ["s"]), node("Mul", ["X", "s"], ["Y"]), node("Neg", ["s"], ["Z"])]
    as_output = [node("Sigmoid", ["X"], ["S"]), node("Mul", ["X", "S"], ["Y"])]
    other_x = [node("Neg", ["X"], ["n"]), node("Sigmoid", ["X"], ["s"]), node("Mul", ["n", "s"], ["Y"])]
    for nodes, outs in ((read_twice, ["Y", "Z"]), (as_output, ["Y", "S"]), (other_x, ["Y"])):
        fused = session(_model(nodes, outs, {}), EXTENDED, providers=REF)
        fused.run(None, FEED)
        assert "com.microsoft::QuickGelu" not in op_counts(fused._built.model), nodes


def test_a_non_scalar_alpha_and_float64_are_kept() -> None:
    vector = [node("Mul", ["X", "a"], ["ax"]), node("Sigmoid", ["ax"], ["s"]), node("Mul", ["X", "s"], ["Y"])]
    fused = session(_model(vector, ["Y"], {"a": np.full((8,), 1.5, np.float32)}), EXTENDED, providers=REF)
    fused.run(None, FEED)
    assert op_counts(fused._built.model).get("Sigmoid") == 1
    doubles = [node("Sigmoid", ["X"], ["s"]), node("Mul", ["X", "s"], ["Y"])]
    fused = session(_model(doubles, ["Y"], {}, TensorProto.DOUBLE), EXTENDED, providers=REF)
    fused.run(None, {"X": FEED["X"].astype(np.float64)})
    assert op_counts(fused._built.model) == {"Sigmoid": 1, "Mul": 1}


def test_quick_gelu_before_a_quantizer_is_mlas_logistic_exactly() -> None:
    """x * Sigmoid(x) feeding a QuantizeLinear: the Sigmoid op takes MLAS's logistic there (a 1-ulp
    difference is a whole quantum); the fused QuickGelu does too, so the fusion moves no quantum.
    int16 steps of 1/8192 over 98,304 values: the fast logistic flips 32 of them."""
    nodes = [
        node("Sigmoid", ["X"], ["s"]),
        node("Mul", ["X", "s"], ["m"]),
        node("QuantizeLinear", ["m", "scale", "zp"], ["Y"]),
    ]
    inits = {"scale": np.array(1 / 8192, np.float32), "zp": np.array(0, np.int16)}
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 128, 128])],
        [helper.make_tensor_value_info("Y", TensorProto.INT16, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    x = {"X": np.linspace(-3.9, 3.9, 98304, dtype=np.float32).reshape(2, 3, 128, 128)}
    fused = session(model, EXTENDED, providers=REF)
    got = fused.run(None, x)[0]
    assert op_counts(fused._built.model).get("com.microsoft::QuickGelu") == 1
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, session(model, LEVELS.ORT_DISABLE_ALL, providers=REF).run(None, x)[0])


def test_disabled_by_onnxruntimes_name() -> None:
    so = ep_core.SessionOptions()
    so.add_session_config_entry("optimization.disable_specified_optimizers", "QuickGeluFusion")
    s = ep_core.InferenceSession(_silu(None).SerializeToString(), so, providers=["CpuReferenceExecutionProvider"])
    s.run(None, FEED)
    assert op_counts(s._built.model) == {"Conv": 1, "Sigmoid": 1, "Mul": 1}

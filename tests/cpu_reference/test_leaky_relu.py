"""LeakyRelu, alone and as FusedConv's or FusedGemm's activation, bit for bit as onnxruntime computes
it for every sign of alpha (the reference EP takes max(x, alpha * x) for 0 < alpha <= 1 and min for
alpha > 1: two plain ufuncs where a masked multiply cost 25x more), signed zeros, infinities,
NaN and subnormals included."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession

F = TensorProto.FLOAT
SPECIAL = [0.0, -0.0, 1e-45, -1e-45, -1e-40, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan, -2.5, 2.5, 1.0, -1.0]


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array(SPECIAL, np.float32), rng.standard_normal(2034).astype(np.float32) * 4])
    return x.reshape(1, 2, 32, 32)


def _both(model: bytes, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    return got, want


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


ALPHAS = [0.0, 0.01, 0.2, 1.0, 1.5, -0.3, -2.0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_leaky_relu_op_bit_for_bit(alpha: float) -> None:
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F, None)], [helper.make_tensor_value_info("y", F, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    _same_bits(*_both(model.SerializeToString(), {"x": _values()}))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_fused_conv_and_gemm_leaky_relu_bit_for_bit(alpha: float) -> None:
    x = _values()
    # a depthwise 1x1 convolution of weight 1 passes x through: the activation meets every special value
    conv = helper.make_node(
        "FusedConv",
        ["x", "w"],
        ["y"],
        domain="com.microsoft",
        activation="LeakyRelu",
        activation_params=[alpha],
        group=2,
    )
    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")
    gemm = helper.make_node(
        "FusedGemm", ["a", "b"], ["y"], domain="com.microsoft", activation="LeakyRelu", activation_alpha=alpha
    )
    b = numpy_helper.from_array(np.eye(64, dtype=np.float32), "b")  # (rows holding inf or NaN give NaN)
    ops = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    for node, init, feed in ((conv, w, {"x": x}), (gemm, b, {"a": x.reshape(32, 64)})):
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info(next(iter(feed)), F, None)],
            [helper.make_tensor_value_info("y", F, None)],
            [init],
        )
        model = helper.make_model(graph, opset_imports=ops, ir_version=10).SerializeToString()
        got, want = _both(model, feed)
        _same_bits(got, want)

"""A float32 Tanh whose output a quantizer reads is onnxruntime's MLAS tanh bit for bit on both CPU
EPs (text2tashkeel 0.1.0's int8 bilstm: NumPy's tanh differed from onnxruntime's on 60% of an
attention Tanh's 1.6M values by up to 3.6e-7, the DynamicQuantizeLinear after it flipped 11 uint8
steps and the logits moved 9.2e-4); a Tanh read by anything else keeps the faster form."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ep_core

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _model(quantized: bool) -> bytes:
    nodes = [helper.make_node("Tanh", ["x"], ["t"])]
    outputs = [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)]
    if quantized:
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["t"], ["q", "s", "z"]))
        outputs = [
            helper.make_tensor_value_info("q", TensorProto.UINT8, None),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.UINT8, None),
        ]
    else:
        nodes.append(helper.make_node("Neg", ["t"], ["n"]))
        outputs.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 4096])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


X = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)  # tanh's whole curve


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tanh_before_a_quantizer_is_onnxruntimes_bit_for_bit(provider: str) -> None:
    model = _model(quantized=True)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": X})
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, {"x": X})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    # and the Tanh values themselves: a graph that also gives them out
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    t_want = ort.InferenceSession(_model(False), so, providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    t_fast = ep_core.InferenceSession(_model(False), providers=[provider]).run(None, {"x": X})[0]
    assert (t_fast != t_want).mean() > 0.1  # elsewhere the fast form, which differs in the last bit
    np.testing.assert_allclose(t_fast, t_want, rtol=0, atol=5e-7)

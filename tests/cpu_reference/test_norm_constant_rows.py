"""LayerNormalization and com.microsoft's SkipLayerNormalization on rows that are
constant (silence, padding, flat regions), at BERT's epsilon 1e-12: onnxruntime sums the mean in
float64, so such a row normalises to exactly the bias; a float32 mean's last-bit error divided by
sqrt(1e-12) had moved it by 0.9."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"
L = 63


def _model(op: str, domain: str) -> bytes:
    inputs = ["x", "skip", "gamma", "beta"] if op.startswith("Skip") else ["x", "gamma", "beta"]
    node = helper.make_node(
        op, inputs, ["y"], domain=domain, epsilon=1e-12, **({} if op.startswith("Skip") else {"axis": -1})
    )
    feeds = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, L])
        for n in inputs[: 2 if op.startswith("Skip") else 1]
    ]
    params = [numpy_helper.from_array(np.linspace(0.5, 1.5, L).astype(np.float32), "gamma")]
    params.append(numpy_helper.from_array(np.linspace(-1, 1, L).astype(np.float32), "beta"))
    graph = helper.make_graph([node], "g", feeds, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], params)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(MS, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


@pytest.mark.parametrize("op, domain", [("LayerNormalization", ""), ("SkipLayerNormalization", MS)])
def test_a_constant_row_normalises_to_the_bias_as_in_onnxruntime(op: str, domain: str) -> None:
    rng = np.random.default_rng(0)
    x = np.full((2, 4, L), np.float32(0.1), np.float32)
    x[0, 1] = np.float32(np.log(np.float32(1e-5)))  # a log-spectrum frame of silence
    x[1, 2] = rng.standard_normal(L).astype(np.float32)  # and an ordinary row
    feed = {"x": x, **({"skip": np.zeros_like(x)} if op.startswith("Skip") else {})}
    model = _model(op, domain)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    np.testing.assert_array_equal(got[0, 0], np.linspace(-1, 1, L).astype(np.float32))  # exactly the bias

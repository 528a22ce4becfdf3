"""Value shapes come from inference, not from the model's value_info (the author's word: torch's
dynamo exporter leaves its example's dims there); the model's value_info fills in only what
inference cannot shape."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ep_core import InferenceSession, SessionOptions

F = TensorProto.FLOAT
PROVIDERS = [["CpuReferenceExecutionProvider"], ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]]


def _model(nodes: list, inputs: list, outputs: list, value_info: list) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, value_info=value_info)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("providers", PROVIDERS)
def test_a_stale_value_info_dim_does_not_fail_a_run(providers: list[str]) -> None:
    """value_info says [B, 1] for a value that is [B, T]: onnxruntime runs it, so does ep-core."""
    if providers[0].startswith("Numba"):
        pytest.importorskip("ep_numba_cpu")
    model = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
        [helper.make_tensor_value_info("x", F, ["B", "T"])],
        [helper.make_tensor_value_info("y", F, ["B", 1])],  # stale too: a declared output only warns
        [helper.make_tensor_value_info("r", F, ["B", 1])],
    )
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = InferenceSession(model, SessionOptions(intra_op_num_threads=1), providers=providers)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
    r = next(v for v in sess._built.model.graph.value_info if v.name == "r")
    assert [d.dim_value or d.dim_param for d in r.type.tensor_type.shape.dim] == ["B", "T"]  # inference's


def test_value_info_fills_in_what_inference_cannot_shape() -> None:
    """A Reshape to a shape of unknown length fed at run time has no inferred shape, not even a
    rank: the model's [2, 3] is kept, and inference carries it on to the Relu after it."""
    model = _model(
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
        [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("s", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", F, None)],
        [helper.make_tensor_value_info("r", F, [2, 3])],
    )
    sess = InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in sess._built.model.graph.value_info}
    assert shapes["r"] == [2, 3]
    assert onnx.load_from_string(model).graph.value_info[0].name == "r"
    y = sess.run(None, {"x": np.arange(6, dtype=np.float32) - 3, "s": np.array([2, 3], np.int64)})[0]
    np.testing.assert_array_equal(y, np.maximum(np.arange(6, dtype=np.float32) - 3, 0).reshape(2, 3))
    assert sess.get_outputs()[0].shape == [2, 3]  # carried on by inference from the kept shape


@pytest.mark.parametrize("providers", PROVIDERS)
def test_an_initializer_listed_in_value_info_keeps_its_value_for_inference(providers: list[str]) -> None:
    """torch's dynamo exporter lists initializers in value_info too: their shapes stay, or inference
    loses the Slice's constant bounds and declares its input's 251 for a [n, 1, 219] output."""
    if providers[0].startswith("Numba"):
        pytest.importorskip("ep_numba_cpu")
    bounds = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("b", 16), ("e", -16), ("a", 2))]
    g = helper.make_graph(
        [helper.make_node("Slice", ["x", "b", "e", "a"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, ["n", 1, 251])],
        [helper.make_tensor_value_info("y", F, ["n", 1, None])],
        bounds,
        value_info=[helper.make_tensor_value_info(n, TensorProto.INT64, [1]) for n in "bea"],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 1, 251)).astype(np.float32)
    got = InferenceSession(model, SessionOptions(intra_op_num_threads=1), providers=providers).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x[..., 16:-16])

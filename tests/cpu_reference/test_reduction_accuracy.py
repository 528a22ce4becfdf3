"""float32 ReduceSum / ReduceMean over leading or middle axes are at least as accurate as
onnxruntime's (whose blocked sums beat adding slice after slice, what NumPy does there): the
reference EP accumulates them in float64. Trailing axes keep NumPy's pairwise float32 sum.

Why it matters: magika 0.6.1 normalises with mean(x^2) - mean(x)^2 over axis 1, where the
cancellation magnifies a sum's error ~1000x; its probabilities were 7e-4 from onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ep_core

ort = pytest.importorskip("onnxruntime")


def _reduce_model(op: str, shape: tuple[int, ...], axes: list[int]) -> bytes:
    if op == "ReduceSum":
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
        inits = [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)]
    else:
        node = helper.make_node(op, ["x"], ["y"], keepdims=1, axes=axes)
        inits = []
    graph = helper.make_graph(
        [node],
        "reduce",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize(
    "shape,axes", [((2, 512, 256), [1]), ((512, 256), [0]), ((4, 96, 1024), [1]), ((1, 1000, 64), [-2])]
)
def test_outer_axis_sums_as_accurate_as_onnxruntime(op: str, shape: tuple[int, ...], axes: list[int]) -> None:
    x = (np.random.default_rng(0).standard_normal(shape) + 3).astype(np.float32)  # a mean: errors grow
    model = _reduce_model(op, shape, axes)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ours = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    exact = getattr(np, "sum" if op == "ReduceSum" else "mean")(x.astype(np.float64), axis=tuple(axes), keepdims=True)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max()
    np.testing.assert_allclose(ours, exact, rtol=2**-23, atol=0)  # float64's sum, rounded once


def test_trailing_axis_sum_stays_float32_pairwise() -> None:
    """A sum over the last axis is NumPy's pairwise float32 sum, bit for bit (no float64 pass)."""
    x = (np.random.default_rng(1).standard_normal((8, 400, 384)) + 3).astype(np.float32)
    ours = ep_core.InferenceSession(
        _reduce_model("ReduceSum", x.shape, [2]), providers=["CpuReferenceExecutionProvider"]
    )
    np.testing.assert_array_equal(ours.run(None, {"x": x})[0], np.add.reduce(x, axis=2, keepdims=True))

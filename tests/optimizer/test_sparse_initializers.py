"""Sparse initializers run as onnxruntime loads them (densified): linear or coordinate indices,
in the main graph and in subgraphs; an index outside the dims is refused, naming the tensor."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import ep_core
from ep_core.sdk.errors import InvalidGraph


def _model(indices: list[int], shape: list[int] | None = None) -> onnx.ModelProto:
    vals = h.make_tensor("w", TP.FLOAT, [3], [1.5, -2.0, 4.0])
    idx = h.make_tensor("idx", TP.INT64, shape or [3], indices)
    g = h.make_graph(
        [h.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
        sparse_initializer=[h.make_sparse_tensor(vals, idx, [2, 4])],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    ("indices", "shape"), [([0, 4, 7], None), ([0, 0, 1, 0, 1, 3], [3, 2])], ids=["linear", "coordinates"]
)
def test_a_sparse_initializer_runs_as_onnxruntime(indices: list[int], shape: list[int] | None) -> None:
    model = _model(indices, shape)
    x = {"x": np.ones((2, 4), np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    for provider in ("CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"):
        got = ep_core.InferenceSession(model, providers=[provider]).run(None, x)
        np.testing.assert_array_equal(got[0], want[0])
    assert len(model.graph.sparse_initializer) == 1  # the caller's model is not edited


def test_a_sparse_index_outside_its_dims_is_refused() -> None:
    with pytest.raises(InvalidGraph, match="sparse initializer 'w'.*outside"):
        ep_core.InferenceSession(_model([0, 4, 8]).SerializeToString(), providers=["CpuReferenceExecutionProvider"])

"""onnx-ir writes a node without its trailing empty inputs: Loop(M, "") became Loop(M), which the
Loop schema refuses, so any change the optimizer made (a Constant lifted) dropped the whole
optimized model with a warning. The required empty inputs are restored."""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import ep_core


@pytest.mark.parametrize("provider", ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"])
def test_loop_without_a_condition_keeps_its_optimized_model(provider: str, caplog: pytest.LogCaptureFixture) -> None:
    vi = h.make_tensor_value_info
    false = h.make_node("Constant", [], ["f"], value=numpy_helper.from_array(np.array(False)))
    body = h.make_graph(
        [h.make_node("Identity", ["i"], ["io"]), false, h.make_node("Identity", ["f"], ["cout"])], "b",
        [vi("i", TP.INT64, []), vi("cin", TP.BOOL, [])], [vi("cout", TP.BOOL, []), vi("io", TP.INT64, [])],
    )  # fmt: skip
    loop = h.make_node("Loop", ["M", ""], ["ios"], body=body)
    graph = h.make_graph([loop], "g", [vi("M", TP.INT64, [])], [vi("ios", TP.INT64, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString()
    with caplog.at_level(logging.WARNING):
        session = ep_core.InferenceSession(model, providers=[provider])
    assert not [r for r in caplog.records if "graph optimizer" in r.getMessage()]
    feed = {"M": np.array(5, np.int64)}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_array_equal(session.run(None, feed)[0], want[0])

"""Graphs whose nodes are out of order run as in onnxruntime (it sorts each graph it resolves);
cycles and inputs nothing defines are refused with onnxruntime's status codes, naming the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import ep_core
from ep_core.sdk.errors import Fail, InvalidArgument, InvalidGraph

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]
X = h.make_tensor_value_info("X", TP.FLOAT, [3])
Y = h.make_tensor_value_info("Y", TP.FLOAT, None)


def _model(nodes: list[Any], outputs: list[Any] | None = None) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", [X], outputs or [Y])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _branch(name: str, nodes: list[Any], out: str) -> onnx.GraphProto:
    return h.make_graph(nodes, name, [], [h.make_tensor_value_info(out, TP.FLOAT, None)])


def _if_reading_a_later_value() -> onnx.ModelProto:
    """An If whose branches read 'late', made by a node listed after the If."""
    then = _branch("then", [h.make_node("Abs", ["late"], ["t1"]), h.make_node("Neg", ["t1"], ["t2"])], "t2")
    other = _branch("else", [h.make_node("Identity", ["late"], ["e1"])], "e1")
    return _model(
        [
            h.make_node("If", ["cond"], ["Y"], then_branch=then, else_branch=other),
            h.make_node("ReduceSum", ["X"], ["s"], keepdims=0),
            h.make_node("Greater", ["s", "zero"], ["cond"]),
            h.make_node("Mul", ["X", "X"], ["late"]),
            h.make_node("Constant", [], ["zero"], value=h.make_tensor("z", TP.FLOAT, [], [0.0])),
        ]
    )


CASES = {
    "reversed chain": lambda: _model([h.make_node("Relu", ["A"], ["Y"]), h.make_node("Neg", ["X"], ["A"])]),
    "diamond out of order": lambda: _model(
        [
            h.make_node("Add", ["B", "C"], ["Y"]),
            h.make_node("Sigmoid", ["A"], ["C"]),
            h.make_node("Neg", ["X"], ["A"]),
            h.make_node("Exp", ["A"], ["B"]),
        ]
    ),
    "if reading a later value": _if_reading_a_later_value,
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_out_of_order_graph_runs_as_onnxruntime(case: str, provider: str) -> None:
    model = CASES[case]()
    before = model.SerializeToString()
    feed = {"X": np.array([1.5, -2.0, 0.25], np.float32)}
    want = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, feed)
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert model.SerializeToString() == before  # the caller's ModelProto is not reordered


@pytest.mark.parametrize(
    ("nodes", "error", "match"),
    [
        (
            [
                h.make_node("Add", ["X", "B"], ["A"]),
                h.make_node("Relu", ["A"], ["B"]),
                h.make_node("Relu", ["A"], ["Y"]),
            ],
            Fail,
            "not acyclic: node 'Add_0' \\(op Add\\)",
        ),
        ([h.make_node("Add", ["X", "Y"], ["Y"])], Fail, "not acyclic"),
        ([h.make_node("Add", ["X", "Z"], ["Y"])], InvalidArgument, "node 'Add_0' \\(op Add\\): input 'Z' is not"),
    ],
)
def test_cycles_and_undefined_inputs_are_refused_as_onnxruntime(nodes: list[Any], error: type, match: str) -> None:
    blob = _model(nodes).SerializeToString()
    with pytest.raises(Exception, match=error.__name__.upper().replace("INVALIDARGUMENT", "INVALID_ARGUMENT")):
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    with pytest.raises(error, match=match):
        ep_core.InferenceSession(blob, providers=["CpuReferenceExecutionProvider"])


def test_a_subgraph_out_of_order_is_refused_as_onnxruntime() -> None:
    """onnxruntime runs onnx's checker on If/Loop/Scan bodies: it sorts only the main graph."""
    model = _if_reading_a_later_value()
    then = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
    then.node.reverse()
    blob = model.SerializeToString()
    with pytest.raises(Exception, match="INVALID_GRAPH"):
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    with pytest.raises(InvalidGraph, match="topologically sorted"):
        ep_core.InferenceSession(blob, providers=["CpuReferenceExecutionProvider"])


def test_a_sorted_model_is_not_copied() -> None:
    from ep_core.optimizer.toposort import sorted_topologically

    model = _model([h.make_node("Neg", ["X"], ["A"]), h.make_node("Relu", ["A"], ["Y"])])
    assert sorted_topologically(model) is model

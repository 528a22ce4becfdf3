"""If/Loop bodies are partitioned like the main graph, and they read outer-scope values."""

from __future__ import annotations

import numpy as np
import pytest
from _support.eps import FusingFactory
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core

FUSING = "FusingTestExecutionProvider"


@pytest.fixture
def fusing():
    ep_core.register_execution_provider_library(FUSING, FusingFactory())
    yield
    ep_core.unregister_execution_provider_library(FUSING)


def _if_model():
    """y = If(cond, then: (x + w) * w, else: Relu(x)); x and w come from the outer scope."""
    then_nodes = [
        helper.make_node("Add", ["x", "w"], ["t1"], name="then_add"),
        helper.make_node("Mul", ["t1", "w"], ["then_out"], name="then_mul"),
    ]
    then_g = helper.make_graph(
        then_nodes, "then_branch", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["else_out"], name="else_relu")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [3])],
    )
    nodes = [
        helper.make_node("Neg", ["x0"], ["x"], name="neg"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
    ]
    return make_model(
        nodes,
        [("x0", TensorProto.FLOAT, [3]), ("w", TensorProto.FLOAT, [3]), ("cond", TensorProto.BOOL, [])],
        [("y", TensorProto.FLOAT, [3])],
    )


def test_if_branches_are_partitioned_and_see_outer_values(fusing) -> None:
    sess = ep_core.InferenceSession(_if_model(), providers=[FUSING])
    assignment = sess.get_node_assignment()
    assert assignment["if"]["ep"] == "CpuReferenceExecutionProvider"
    assert assignment["if/then_branch/then_add"]["ep"] == FUSING
    assert assignment["if/then_branch/then_mul"]["fused_node"] == assignment["if/then_branch/then_add"]["fused_node"]
    assert assignment["if/else_branch/else_relu"]["ep"] == "CpuReferenceExecutionProvider"
    # each entry says its op: a fused node's, a subgraph's, a lone node's (names need not say it)
    ops = {k: v["op_type"] for k, v in assignment.items()}
    assert ops["if"] == "If" and ops["if/else_branch/else_relu"] == "Relu"
    assert (ops["if/then_branch/then_add"], ops["if/then_branch/then_mul"]) == ("Add", "Mul")
    x0 = np.array([1.0, -2.0, 3.0], np.float32)
    w = np.array([0.5, 2.0, -1.0], np.float32)
    x = -x0
    (then_y,) = sess.run(None, {"x0": x0, "w": w, "cond": np.array(True)})
    np.testing.assert_allclose(then_y, (x + w) * w)
    (else_y,) = sess.run(None, {"x0": x0, "w": w, "cond": np.array(False)})
    np.testing.assert_allclose(else_y, np.maximum(x, 0))


def test_loop_body_reads_outer_scope_and_carries_state() -> None:
    # sum_{i<n} (v + i*step) with v, step from outside
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["fi", "step"], ["inc"]),
            helper.make_node("Add", ["v", "inc"], ["term"]),
            helper.make_node("Add", ["acc_in", "term"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
        ],
    )
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], name="loop", body=body)
    model = make_model(
        [node],
        [
            ("n", TensorProto.INT64, []),
            ("acc0", TensorProto.FLOAT, [2]),
            ("v", TensorProto.FLOAT, [2]),
            ("step", TensorProto.FLOAT, [2]),
        ],
        [("acc", TensorProto.FLOAT, [2])],
    )
    sess = ep_core.InferenceSession(model)
    assert sess.get_node_assignment()["loop/body/Add_2"]["op_type"] == "Add"  # an unnamed node's made-up name
    v = np.array([1.0, 2.0], np.float32)
    step = np.array([0.5, -1.0], np.float32)
    (acc,) = sess.run(None, {"n": np.array(4, np.int64), "acc0": np.zeros(2, np.float32), "v": v, "step": step})
    np.testing.assert_allclose(acc, sum(v + i * step for i in range(4)))

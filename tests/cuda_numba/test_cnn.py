"""A small CNN (Conv, BatchNormalization, Relu, MaxPool, AveragePool, Gemm, Softmax) built here
runs with every node on this EP and matches the reference EP within 1e-4."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .conftest import EP, REF, all_on_ep, assert_close, session


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int, positive: bool = False) -> onnx.TensorProto:
        v = rng.uniform(0.5, 1.5, shape) if positive else rng.normal(0, 0.5, shape)
        return numpy_helper.from_array(v.astype(np.float32), name)

    inits = [
        w("w1", 4, 3, 3, 3),
        w("b1", 4),
        w("s1", 4, positive=True),
        w("o1", 4),
        w("m1", 4),
        w("v1", 4, positive=True),
        w("w2", 6, 4, 3, 3),
        w("b2", 6),
        w("s2", 6, positive=True),
        w("o2", 6),
        w("m2", 6),
        w("v2", 6, positive=True),
        w("wf", 6 * 2 * 2, 5),
        w("bf", 5),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "o1", "m1", "v1"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "s2", "o2", "m2", "v2"], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["r2"], name="relu2"),
        helper.make_node("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["g"], name="fc"),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_small_cnn_runs_every_node_on_the_ep_and_matches_the_reference() -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

    # the graph as written (the optimizer would fold each BatchNormalization into its Conv)
    so = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = session(small_cnn(), sess_options=so)
    got, ref = sess.run(None, {"x": x}), session(small_cnn(), [REF]).run(None, {"x": x})
    assert all_on_ep(sess) == {}
    assignment = sess.get_node_assignment()
    assert {n for n in assignment} == {n.name for n in small_cnn().graph.node}
    assert all(v["ep"] == EP for v in assignment.values())
    assert_close(got, ref, 1e-4, "small CNN")
    np.testing.assert_allclose(got[0].sum(axis=1), 1.0, rtol=1e-5)

"""Constant folding at session creation, and profiling that sees inside subgraphs."""

from __future__ import annotations

import json

import numpy as np
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.runtime.plan import CONSUMED


def _model():
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], name="const", value=numpy_helper.from_array(np.array([1.0, 2.0], np.float32))
        ),
        helper.make_node("Mul", ["c", "c"], ["c2"], name="square_const"),  # all inputs constant: folded
        helper.make_node("Add", ["x", "c2"], ["y"], name="add_input"),  # reads an input: runs
        helper.make_node("RandomUniformLike", ["c"], ["r"], name="random", seed=1.0),  # random: never folded
        helper.make_node("Identity", ["c2"], ["k"], name="const_out"),
    ]
    return make_model(
        nodes,
        [("x", TensorProto.FLOAT, [2])],
        [("y", TensorProto.FLOAT, [2]), ("r", TensorProto.FLOAT, [2]), ("k", TensorProto.FLOAT, [2])],
    )


def test_constant_subgraphs_fold_once_and_outputs_stay_private() -> None:
    sess = ep_core.InferenceSession(_model())
    plan = sess.program.plan()
    # the Constant node becomes an initializer and square_const (all inputs constant) is folded by the
    # graph optimizer (ep_core.optimizer) before planning; the plan folds what is left: the Identity to an output
    assert sorted(plan.folded) == ["const_out"]
    assert not {"const", "square_const"} & {n.name for n in sess._built.model.graph.node}
    assert [line.split()[2] for line in sess.get_plan()] == ["add_input", "random"]
    y, r, k = sess.run(None, {"x": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(y, [1.0, 4.0])
    np.testing.assert_array_equal(k, [1.0, 4.0])
    k[:] = 99  # a folded output handed out must be a copy
    assert sess.run(None, {"x": np.zeros(2, np.float32)})[2].tolist() == [1.0, 4.0]
    # every node still shows where it runs
    assert set(sess.get_node_assignment()) == {"add_input", "random", "const_out"}


def test_trace_includes_nodes_inside_if_branches(tmp_path) -> None:
    then_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"], name="then_neg")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["e"], name="else_abs")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    model = make_model(
        [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [("x", TensorProto.FLOAT, [2]), ("cond", TensorProto.BOOL, [])],
        [("y", TensorProto.FLOAT, [2])],
    )
    opts = ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = ep_core.InferenceSession(model, opts)
    sess.run(None, {"x": np.ones(2, np.float32), "cond": np.array(True)})
    sess.run(None, {"x": np.ones(2, np.float32), "cond": np.array(False)})
    names = [e["name"] for e in json.load(open(sess.end_profiling())) if e.get("cat") == "Node"]
    assert names.count("if_kernel_time") == 2
    assert "if/then_branch/then_neg_kernel_time" in names and "if/else_branch/else_abs_kernel_time" in names


def test_a_folded_value_is_freed_only_when_every_reader_of_the_whole_graph_folds() -> None:
    """Cast(W) feeds a folded Mul and an Add of the input. A plan for the fetch that needs only the
    Mul must not free the Cast's value: the Add's plan reads it later. A value whose readers all fold
    is freed and its bytes go back to the folding budget."""
    w = numpy_helper.from_array((np.arange(10000) % 100).astype(np.int8).reshape(100, 100), "W")
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [
        helper.make_node("Cast", ["W"], ["c"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["x", "m"], ["out1"], name="add1"),
        helper.make_node("Add", ["x", "c"], ["out2"], name="add2"),
    ]
    f, shape = TensorProto.FLOAT, [100, 100]
    model = make_model(nodes, [("x", f, shape)], [("out1", f, shape), ("out2", f, shape)], initializers=[w, s])
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    x = np.ones((100, 100), np.float32)
    c = (np.arange(10000) % 100).astype(np.float32).reshape(100, 100)
    ro = ep_core.RunOptions(only_execute_path_to_fetches=True)
    np.testing.assert_array_equal(sess.run(["out1"], {"x": x}, ro)[0], x + c * 0.5)
    np.testing.assert_array_equal(sess.run(["out2"], {"x": x}, ro)[0], x + c)

    freed = make_model(nodes[:3], [("x", f, shape)], [("out1", f, shape)], initializers=[w, s])
    sess = ep_core.InferenceSession(freed.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    plan = sess.program.plan()
    assert set(plan.folded) == {"cast", "mul"}
    assert sess.program._folded["cast"] is CONSUMED  # the float copy of W is not kept
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + c * 0.5)

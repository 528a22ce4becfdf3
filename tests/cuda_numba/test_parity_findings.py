"""Defects the parity report (`make parity`) found in the Numba-CUDA EP's node tests, each run
against the reference EP: SpaceToDepth's CRD mode was computed as DCR; an Identity of a sequence
or an optional was claimed (its kernels move device tensors); ReduceLogSum(Exp) of an empty set
took log(0), which the simulator raises on (-inf on a device)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

from .conftest import EP, REF, assert_close, run_both, session


def _model(node: object, inputs: list, outputs: list, opset: int = 18) -> bytes:
    g = h.make_graph([node], "g", inputs, outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def test_space_to_depth_crd_mode_matches_the_reference() -> None:
    """onnx's own node test (its checker takes ``mode`` there only: the case's model as onnx wrote it)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(c for c in collect_testcases() if c.name == "test_spacetodepth_crd_mode_example")
    feeds = {i.name: v for i, v in zip(case.model.graph.input, case.data_sets[0][0], strict=True)}
    got, ref, sess = run_both(case.model, feeds)
    assert_close(got, ref, tol=0, what="CRD")
    np.testing.assert_array_equal(got[0], case.data_sets[0][1][0])
    assert sess.get_node_assignment()["SpaceToDepth_0"]["ep"] == EP


def test_identity_of_a_sequence_stays_on_the_host() -> None:
    seq = h.make_tensor_sequence_value_info
    model = _model(
        h.make_node("Identity", ["s"], ["t"]),
        [seq("s", TP.FLOAT, None)], [seq("t", TP.FLOAT, None)],
    )  # fmt: skip
    sess = session(model, [EP, REF])
    assert sess.get_node_assignment()["Identity_0"]["ep"] == REF
    out = sess.run(None, {"s": [np.ones(2, np.float32), np.zeros(3, np.float32)]})[0]
    assert [a.tolist() for a in out] == [[1, 1], [0, 0, 0]]


def test_reduce_log_sum_of_an_empty_set_is_minus_infinity() -> None:
    x = np.zeros((2, 0, 4), np.float32)
    for op in ("ReduceLogSum", "ReduceLogSumExp"):
        node = h.make_node(op, ["x", "a"], ["y"], keepdims=1)
        g = h.make_graph(
            [node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 0, 4])], [h.make_tensor_value_info("y", TP.FLOAT, None)],
            [h.make_tensor("a", TP.INT64, [1], [1])],
        )  # fmt: skip
        model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8).SerializeToString()
        got, ref, sess = run_both(model, {"x": x})
        assert sess.get_node_assignment()[f"{op}_0"]["ep"] == EP
        assert got[0].shape == (2, 1, 4) and np.isneginf(got[0]).all() and np.isneginf(ref[0]).all(), op


def test_a_fused_group_with_scalar_constants_keeps_a_scalar_output() -> None:
    """plcmos ends Gemm -> Squeeze (to a 0-d score) -> Sigmoid -> Mul by a 0-d constant -> Add of
    one: the fused group's constants were uploaded 1-d (``np.ascontiguousarray`` makes 0-d arrays
    1-d), so the score came back with shape [1] where the reference returns []. Found on an H100."""
    from onnx import numpy_helper

    consts = {"w": np.full((1, 4), 0.25, np.float32), "b": np.ones(1, np.float32)}
    consts |= {"c4": np.array(4.0, np.float32), "c1": np.array(1.0, np.float32)}
    nodes = [
        h.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
        h.make_node("Squeeze", ["g"], ["s"]),
        h.make_node("Sigmoid", ["s"], ["t"]),
        h.make_node("Mul", ["t", "c4"], ["u"]),
        h.make_node("Add", ["u", "c1"], ["y"]),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
        [h.make_tensor_value_info("y", TP.FLOAT, None)],  # undeclared, as plcmos's: no contract check to catch it
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    got, ref, _ = run_both(model, {"x": np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)})
    assert got[0].shape == ref[0].shape == ()
    assert_close(got, ref, 1e-6)


def test_fused_groups_never_wait_for_each_other() -> None:
    """YOLOv8's box head (nudenet): lt = a - b and rb = a + c, then (lt + rb) / 2 and rb - lt. Grouping
    node by node put {lt, lt + rb, / 2} in one group and {rb, rb - lt} in another, each needing the
    other's output: every group convex, the pair a cycle, and the session failed with "the graph has
    a cycle". Found on an H100 with nudenet 320n."""
    f = TP.FLOAT
    nodes = [
        h.make_node("Sub", ["a", "b"], ["lt"]),
        h.make_node("Add", ["a", "c"], ["rb"]),
        h.make_node("Add", ["lt", "rb"], ["s"]),
        h.make_node("Div", ["s", "two"], ["centre"]),
        h.make_node("Sub", ["rb", "lt"], ["size"]),
        h.make_node("Concat", ["centre", "size"], ["y"], axis=1),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info(n, f, [1, 2, 8]) for n in "abc"],
        [h.make_tensor_value_info("y", f, [1, 4, 8])],
        initializer=[h.make_tensor("two", f, [], [2.0])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((1, 2, 8)).astype(np.float32) for n in "abc"}
    got, ref, sess = run_both(model, feeds)
    assert_close(got, ref, 1e-6)
    fused = {v["fused_node"] for v in sess.get_node_assignment().values() if v["fused_node"]}
    assert fused, "the elementwise nodes still fuse"

"""Partitioning across EPs, fused groups through ep_compile, and the claims the core refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _support.eps import FusingEp, FusingFactory
from _support.models import add_mul_chain, make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.sdk.errors import NotImplementedByAnyEp, StatusCode


@pytest.fixture
def fusing():
    factory = FusingFactory()
    ep_core.register_execution_provider_library("FusingTestExecutionProvider", factory)
    yield factory
    ep_core.unregister_execution_provider_library("FusingTestExecutionProvider")


@pytest.fixture
def bad_fusing():
    factory = FusingFactory(bad_claim=True)
    ep_core.register_execution_provider_library("FusingTestExecutionProvider", factory)
    yield factory
    ep_core.unregister_execution_provider_library("FusingTestExecutionProvider")


def _feed(shape=(2, 3)):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal(shape).astype(np.float32), "y": rng.standard_normal(shape).astype(np.float32)}


def _expected(feed, n=6):
    v = feed["x"]
    for i in range(n):
        v = v + feed["y"] if i % 2 == 0 else v * feed["y"]
    return v


def test_fused_chain_shows_in_assignment_and_matches(fusing):
    model = add_mul_chain(6)
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=["FusingTestExecutionProvider"])
    feed = _feed()
    (out,) = sess.run(None, feed)
    np.testing.assert_allclose(out, _expected(feed), rtol=1e-6)
    assignment = sess.get_node_assignment()
    assert {a["ep"] for a in assignment.values()} == {"FusingTestExecutionProvider"}
    fused = {a["fused_node"] for a in assignment.values()}
    assert len(fused) == 1 and next(iter(fused)).startswith("FusingTestExecutionProvider_")
    assert fusing.last_ep.compiled == [next(iter(fused))]
    assert [line.split()[1] for line in sess.get_plan()] == ["fused"]


def test_non_convex_claim_is_rejected_with_reason_and_outputs_still_match(bad_fusing):
    model = add_mul_chain(3)
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=["FusingTestExecutionProvider"])
    diagnostics = sess.get_partition_diagnostics()
    assert len(diagnostics) == 1
    assert "not convex" in diagnostics[0] and "add_0" in diagnostics[0] and "add_2" in diagnostics[0]
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {"CpuReferenceExecutionProvider"}
    feed = _feed()
    np.testing.assert_allclose(sess.run(None, feed)[0], _expected(feed, 3), rtol=1e-6)


def test_claims_checked_twice_empty_and_foreign(fusing):
    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.graph import GraphView, opset_map

    model = add_mul_chain(4)
    graph = GraphView(model.graph, opset_map(model))
    view = graph.subset([0, 1, 2])  # node 3 belongs to someone else
    support = SupportInfo("X", view, None)
    assert not support.add_nodes_to_fuse([])
    assert support.add_nodes_to_fuse([graph.all_nodes[0]])
    assert not support.add_nodes_to_fuse([graph.all_nodes[0]])
    assert not support.add_nodes_to_fuse([graph.all_nodes[3]])
    assert not support.add_single_node(graph.all_nodes[1])  # no registry
    reasons = [r.reason for r in support.rejected]
    assert reasons[0] == "empty group"
    assert "claimed twice" in reasons[1]
    assert "already assigned" in reasons[2]
    assert "no kernel registry" in reasons[3]


def test_node_nobody_runs_raises_not_implemented_with_details():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], extra_opsets=[("com.example", 3)]
    )
    with pytest.raises(NotImplementedByAnyEp) as info:
        ep_core.InferenceSession(model.SerializeToString())
    err = info.value
    assert err.code is StatusCode.NOT_IMPLEMENTED
    for part in ("'frob'", "com.example::Frobnicate", "opset 3", "CpuReferenceExecutionProvider"):
        assert part in err.message


def test_disable_cpu_fallback_leaves_unclaimed_nodes_unimplemented(fusing):
    nodes = [
        helper.make_node("Add", ["x", "y"], ["t"], name="add"),
        helper.make_node("Relu", ["t"], ["out"], name="relu"),
    ]
    model = make_model(nodes, [("x", 1, [2]), ("y", 1, [2])], [("out", 1, [2])])
    opts = ep_core.SessionOptions()
    opts.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(NotImplementedByAnyEp, match="'relu'.*FusingTestExecutionProvider"):
        ep_core.InferenceSession(model.SerializeToString(), opts, providers=["FusingTestExecutionProvider"])
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=["FusingTestExecutionProvider"])
    assert sess.get_providers() == ["FusingTestExecutionProvider", "CpuReferenceExecutionProvider"]
    assert sess.get_node_assignment()["relu"]["ep"] == "CpuReferenceExecutionProvider"
    x = np.array([-3.0, 1.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x, "y": x})[0], np.maximum(2 * x, 0))


def test_a_negative_declared_dim_is_an_unknown_dim_to_eps():
    """Some exporters (PaddlePaddle's) declare unknown dims as dim_value -1: EPs see None there, as
    for a missing dim, never a negative size (the Numba CPU EP refused PP-OCR's classifier on it)."""
    from ep_core.sdk.graph import GraphView

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, None])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    view = GraphView(graph, {"": 17})
    assert view.value_info("x").shape == (None, 3, "w")
    assert view.value_info("y").shape == (None, 3, None)


class _CrossingEp(FusingEp):
    """Claims {a1, a2} and {b1, b2} of ``_crossed_model``: each group is convex alone, but a1 feeds
    b2 and b1 feeds a2, so fused they would each wait for the other (``only`` picks one group)."""

    def __init__(self, only: str | None = None) -> None:
        super().__init__()
        self.only = only

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        by_name = {n.name: n for n in graph.nodes}
        for group in (("a1", "a2"), ("b1", "b2")):
            if self.only in (None, group[0][0]) and all(g in by_name for g in group):
                support.add_nodes_to_fuse([by_name[g] for g in group])


class _CrossingFactory(FusingFactory):
    def __init__(self, ep_name: str, only: str | None = None) -> None:
        super().__init__()
        self.ep_name = ep_name
        self.only = only

    def ep_factory_create_ep(self, devices: Any, ep_options: Any, session_options: Any) -> FusingEp:
        self.check_options(ep_options)
        self.last_ep = _CrossingEp(self.only)
        return self.last_ep


def _crossed_model():
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Add", ["x", "y"], ["a1_out"], name="a1"),
        helper.make_node("Mul", ["x", "y"], ["b1_out"], name="b1"),
        helper.make_node("Add", ["b1_out", "y"], ["a2_out"], name="a2"),
        helper.make_node("Mul", ["a1_out", "y"], ["b2_out"], name="b2"),
    ]
    return make_model(nodes, [(n, f, [2, 3]) for n in ("x", "y")], [(n, f, [2, 3]) for n in ("a2_out", "b2_out")])


def _check_crossed(sess: Any) -> None:
    feed = _feed()
    a2, b2 = sess.run(None, feed)
    x, y = feed["x"], feed["y"]
    np.testing.assert_allclose(a2, x * y + y, rtol=1e-6)
    np.testing.assert_allclose(b2, (x + y) * y, rtol=1e-6)


@pytest.mark.parametrize("two_eps", [False, True], ids=["one_ep", "two_eps"])
def test_groups_that_feed_each_other_are_refused_with_reason(two_eps):
    """Found on a GPU (nudenet's YOLOv8 head): an EP's groups, each convex, fed each other, and
    session creation failed after compiling them with "the graph has a cycle", blaming the model.
    The core now refuses the claim that closes the loop, names it, and the nodes run elsewhere;
    the same holds when the two groups come from two EPs."""
    names = (
        ["CrossATestExecutionProvider", "CrossBTestExecutionProvider"] if two_eps else ["CrossTestExecutionProvider"]
    )
    factories = [_CrossingFactory(names[0], "a" if two_eps else None)]
    if two_eps:
        factories.append(_CrossingFactory(names[1], "b"))
    for name, factory in zip(names, factories):
        ep_core.register_execution_provider_library(name, factory)
    try:
        sess = ep_core.InferenceSession(_crossed_model().SerializeToString(), providers=names)
        (diagnostic,) = sess.get_partition_diagnostics()
        assert diagnostic.startswith(f"{names[-1]} claim on ['b1', 'b2'] rejected: the group is not convex")
        assert "through 'a2' (in a group claimed before it) and re-enters at 'b2'" in diagnostic
        eps = {node: a["ep"] for node, a in sess.get_node_assignment().items()}
        assert eps == {
            "a1": names[0],
            "a2": names[0],
            "b1": "CpuReferenceExecutionProvider",
            "b2": "CpuReferenceExecutionProvider",
        }
        _check_crossed(sess)
    finally:
        for name in names:
            ep_core.unregister_execution_provider_library(name)

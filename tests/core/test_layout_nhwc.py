"""The layout transformer: an EP preferring NHWC gets its layout-sensitive nodes rewritten to the
NHWC domain, transposes cancel between them, and a second capability pass must claim them."""

from __future__ import annotations

import numpy as np
import pytest
from _support.models import make_model
from _support.nhwc_ep import NAME, NhwcFactory
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.runtime.layout import NHWC_DOMAIN


def _cnn():
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap"),
    ]
    return make_model(
        nodes, [("x", TensorProto.FLOAT, [1, 3, 8, 8])], [("y", TensorProto.FLOAT, [1, 4, 1, 1])], [w1, b1, w2]
    )


@pytest.fixture
def feed():
    return {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@pytest.fixture
def register():
    """Register an NhwcFactory variant for the test; always unregistered afterwards."""
    registered = []

    def add(factory: NhwcFactory) -> None:
        ep_core.register_execution_provider_library(NAME, factory)
        registered.append(NAME)

    yield add
    for name in registered:
        ep_core.unregister_execution_provider_library(name)


@pytest.fixture
def nhwc(register):
    register(NhwcFactory())


def test_cnn_runs_in_nhwc_with_two_transposes_and_matches(nhwc, feed) -> None:
    reference = ep_core.InferenceSession(_cnn(), providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    sess = ep_core.InferenceSession(_cnn(), providers=[NAME])
    nodes = {n.name: n for n in sess.model.graph.node}
    for name in ("conv1", "conv2", "pool", "gap"):
        assert nodes[name].domain == NHWC_DOMAIN
    transposes = [n for n in sess.model.graph.node if n.op_type == "Transpose"]
    assert [t.name for t in transposes] == ["conv1/to_nhwc", "gap/to_nchw"]  # the rest cancelled
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NAME}
    assert any("4 node(s) run in NHWC" in d for d in sess.get_partition_diagnostics())
    np.testing.assert_allclose(sess.run(None, feed)[0], reference, rtol=1e-5, atol=1e-5)


def test_ep_may_refuse_an_op(feed, register) -> None:
    register(NhwcFactory(convert_maxpool=False))
    sess = ep_core.InferenceSession(_cnn(), providers=[NAME])
    nodes = {n.name: n for n in sess.model.graph.node}
    assert nodes["pool"].domain == "" and nodes["conv2"].domain == NHWC_DOMAIN
    assert sess.get_node_assignment()["pool"]["ep"] == "CpuReferenceExecutionProvider"
    reference = ep_core.InferenceSession(_cnn(), providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], reference, rtol=1e-5, atol=1e-5)


def test_nodes_without_nhwc_kernels_stay_nchw(feed, register) -> None:
    # no NHWC Conv: the convolutions are never claimed, so only pool and gap move to NHWC
    register(NhwcFactory(with_conv=False))
    sess = ep_core.InferenceSession(_cnn(), providers=[NAME])
    assignment = sess.get_node_assignment()
    assert assignment["conv1"]["ep"] == "CpuReferenceExecutionProvider"
    assert assignment["pool"]["ep"] == NAME and assignment["gap"]["ep"] == NAME
    reference = ep_core.InferenceSession(_cnn(), providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], reference, rtol=1e-5, atol=1e-5)


def test_rewritten_node_left_unclaimed_reverts_with_a_reason(feed, monkeypatch, register) -> None:
    register(NhwcFactory())
    # the EP advertises an NHWC GlobalAveragePool for the first pass but its kernel lookup
    # fails on the rewritten node in the second
    from ep_core.sdk.kernels import KernelRegistry, LookupResult

    real = KernelRegistry.lookup

    def flaky(self, node, domain=None):  # noqa: ANN001
        if node.op_type == "GlobalAveragePool" and node.domain == NHWC_DOMAIN and domain is None:
            return LookupResult(None, "refused on purpose")
        return real(self, node, domain)

    monkeypatch.setattr(KernelRegistry, "lookup", flaky)
    with pytest.warns(RuntimeWarning, match="reverted to NCHW"):
        sess = ep_core.InferenceSession(_cnn(), providers=[NAME])
    monkeypatch.undo()  # the reference run below needs the real lookup
    assert all(n.domain == "" for n in sess.model.graph.node)
    assert any("did not claim the rewritten node(s) ['gap']" in d for d in sess.get_partition_diagnostics())
    reference = ep_core.InferenceSession(_cnn(), providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], reference, rtol=1e-5, atol=1e-5)

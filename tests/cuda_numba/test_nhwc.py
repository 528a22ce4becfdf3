"""NHWC on the Numba-CUDA EP (CUDA plugin EP design 5.3.1): with prefer_nhwc=1 the core's layout
transformer rewrites Conv, pooling, BatchNormalization, Resize and friends into
com.ms.internal.nhwc, and this EP claims and runs the rewritten nodes with its channels-last
kernels. Every test checks the structure (internal-domain nodes, their kernel defs, the inserted
Transposes, all on this EP), not just the numbers, since an NCHW fallback would pass numerically."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import EP, REF, all_on_ep, assert_close, session

NHWC = "com.ms.internal.nhwc"
ON = [(EP, {"prefer_nhwc": "1"})]


def _model(nodes: list, x_shape: list[int], inits: dict[str, np.ndarray], outs: list[str], opset: int = 17) -> Any:
    graph = helper.make_graph(
        nodes,
        "nhwc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def cnn() -> Any:
    """Every NHWC family in one chain: im2col Conv, Relu, MaxPool, BatchNormalization, grouped
    Conv, AveragePool, Resize, ConvTranspose, DepthToSpace, SpaceToDepth, GlobalAveragePool."""
    rng = np.random.default_rng(0)
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    inits = {
        "w1": f(8, 4, 3, 3),  # C*KH*KW = 36: im2col + GEMM
        "b1": f(8),
        "s": f(8),
        "bb": f(8),
        "m": f(8),
        "v": rng.uniform(0.5, 2, 8).astype(np.float32),
        "w2": f(8, 2, 3, 3),  # group=4: the direct kernel
        "roi": np.zeros(0, np.float32),
        "sc": np.array([1, 1, 2, 2], np.float32),
        "wt": f(8, 4, 2, 2),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["p1", "s", "bb", "m", "v"], ["n1"], name="bn"),
        helper.make_node("Conv", ["n1", "w2"], ["c2"], name="conv2", group=4, pads=[1, 1, 1, 1]),
        helper.make_node(
            "AveragePool", ["c2"], ["p2"], name="avgpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
        ),
        helper.make_node("Resize", ["p2", "roi", "sc"], ["rz"], name="resize", mode="linear"),
        helper.make_node("ConvTranspose", ["rz", "wt"], ["ct"], name="convt", strides=[2, 2]),
        helper.make_node("DepthToSpace", ["ct"], ["d2s"], name="d2s", blocksize=2, mode="CRD"),
        helper.make_node("SpaceToDepth", ["d2s"], ["s2d"], name="s2d", blocksize=2),
        helper.make_node("GlobalAveragePool", ["s2d"], ["y"], name="gap"),
    ]
    return _model(nodes, [1, 4, 4, 4], inits, ["y", "rz"])


LAYOUT_NODES = ["conv1", "maxpool", "bn", "conv2", "avgpool", "resize", "convt", "d2s", "s2d", "gap"]


def test_prefer_nhwc_runs_the_rewritten_graph_on_this_ep() -> None:
    model = cnn()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 4, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no revert to NCHW, no declined rewritten node
        sess = session(model, ON)
    ep = sess.execution_providers[0]
    assert ep.call("ep_get_preferred_data_layout") == "NHWC"
    # structure: every layout-sensitive node is now an internal-domain node, claimed by this EP
    # through its internal-domain kernel def; Transposes were inserted (and cancelled in between)
    graph, partition = sess.graph, sess.program.partition
    for name in LAYOUT_NODES:
        node = graph.node(name)
        assert node.domain == NHWC, name
        ep_i, kdef = partition.singles[node.index]
        assert sess.execution_providers[ep_i].name == EP and kdef.domain == NHWC, (name, kdef)
    transposes = [n for n in graph.all_nodes if n.op_type == "Transpose"]
    assert {n.name for n in transposes} == {"conv1/to_nhwc", "resize/to_nchw", "convt/to_nhwc", "gap/to_nchw"}
    assert all_on_ep(sess) == {}, sess.get_partition_diagnostics()
    assert any("10 node(s) run in NHWC" in d for d in sess.get_partition_diagnostics())
    # numbers: equal to the NCHW run on this EP and to the reference EP
    got = sess.run(None, {"x": x})
    nchw = session(model).run(None, {"x": x})
    assert session(model).graph.node("conv1").domain == ""
    ref = session(model, [REF]).run(None, {"x": x})
    assert_close(got, nchw, 1e-4, "NHWC vs NCHW on this EP")
    assert_close(got, ref, 1e-4, "NHWC vs the reference EP")


RANK_CASES = {
    "conv1d": (
        [1, 3, 7],
        [helper.make_node("Conv", ["x", "w"], ["y"], name="op", pads=[1, 2], strides=[2])],
        (4, 3, 3),
    ),
    "conv3d_im2col": (
        [1, 4, 3, 3, 3],
        [helper.make_node("Conv", ["x", "w"], ["y"], name="op", pads=[0, 1, 0, 1, 0, 1])],
        (2, 4, 2, 2, 2),
    ),
    "conv3d_direct": (
        [1, 2, 3, 4, 3],
        [helper.make_node("Conv", ["x", "w"], ["y"], name="op", strides=[1, 2, 1])],
        (2, 2, 2, 2, 2),
    ),
    "maxpool3d": (
        [1, 3, 3, 4, 4],
        [helper.make_node("MaxPool", ["x"], ["y"], name="op", kernel_shape=[2, 2, 2], strides=[1, 2, 2])],
        None,
    ),
    "avgpool1d": (
        [2, 3, 6],
        [helper.make_node("AveragePool", ["x"], ["y"], name="op", kernel_shape=[3], pads=[1, 1])],
        None,
    ),
    "globalmax3d": ([1, 3, 2, 2, 3], [helper.make_node("GlobalMaxPool", ["x"], ["y"], name="op")], None),
    "bn3d": (
        [1, 3, 2, 2, 2],
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="op")],
        None,
    ),
}


@pytest.mark.parametrize("case", list(RANK_CASES))
def test_nhwc_kernels_serve_1d_and_3d_nodes(case: str) -> None:
    shape, nodes, w_shape = RANK_CASES[case]
    rng = np.random.default_rng(2)
    inits: dict[str, np.ndarray] = {}
    if w_shape is not None:
        inits["w"] = rng.uniform(-1, 1, w_shape).astype(np.float32)
    if case == "bn3d":
        inits.update({k: rng.uniform(0.5, 1.5, 3).astype(np.float32) for k in ("s", "b", "m", "v")})
    model = _model(nodes, shape, inits, ["y"])
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    sess = session(model, ON)
    assert sess.graph.node("op").domain == NHWC and all_on_ep(sess) == {}
    assert_close(sess.run(None, {"x": x}), session(model, [REF]).run(None, {"x": x}), 1e-4, case)


def test_the_nhwc_allowlist_is_the_registry() -> None:
    from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS
    from ep_cuda_numba.layout import nhwc_ops, should_convert
    from ep_cuda_numba.registry import registry

    reg = registry()
    nhwc_defs = [d for d in reg.kernel_defs() if d.domain == NHWC]
    assert set(nhwc_ops(reg)) == {d.op_type for d in nhwc_defs} == set(LAYOUT_SENSITIVE_OPS)
    # every internal-domain def mirrors an NCHW def (same opsets, types, host inputs) ...
    nchw = {
        (d.op_type, d.since_version, d.end_version, tuple(d.type_constraints.items()), d.host_inputs)
        for d in reg.kernel_defs()
        if d.domain_key == "ai.onnx"
    }
    for d in nhwc_defs:
        assert (d.op_type, d.since_version, d.end_version, tuple(d.type_constraints.items()), d.host_inputs) in nchw
    # ... and the EP asks to convert exactly those ops, and only when prefer_nhwc is on
    for op in (*LAYOUT_SENSITIVE_OPS, "Relu", "LRN"):
        assert should_convert(True, reg, "", op, "NHWC") is (op in nhwc_ops(reg)), op
        assert should_convert(False, reg, "", op, "NHWC") is False
    assert should_convert(True, reg, "", "Conv", "NCHW") is None


def test_nhwc_is_advertised_only_for_ops_with_an_internal_domain_kernel() -> None:
    from ep_core.sdk.kernels import KernelRegistry
    from ep_cuda_numba.layout import preferred_layout, should_convert

    empty = KernelRegistry("test")
    layout, why = preferred_layout(True, empty)
    assert layout == "NCHW" and "no com.ms.internal.nhwc kernel" in why
    partial = KernelRegistry("test")
    partial.register("Conv", domain=NHWC)(lambda node, ctx: None)
    layout, why = preferred_layout(True, partial)
    assert layout == "NHWC" and "['Conv'] convert" in why and "'MaxPool'" in why
    assert should_convert(True, partial, "", "Conv", "NHWC") is True
    assert should_convert(True, partial, "", "MaxPool", "NHWC") is False  # never a node it cannot claim
    assert preferred_layout(False, partial)[0] == "NCHW"
    plain = session(cnn())
    assert plain.execution_providers[0].call("ep_get_preferred_data_layout") == "NCHW"


def _rewritten_conv(dtype: int, opset: int) -> Any:
    from ep_core.sdk.graph import GraphView, opset_map

    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", domain=NHWC)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", dtype, [1, 3, 3, 2]),
            helper.make_tensor_value_info("w", dtype, [2, 2, 1, 1]),
        ],
        [helper.make_tensor_value_info("y", dtype, [1, 3, 3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(NHWC, opset)])
    return GraphView(model.graph, opset_map(model)).all_nodes[0]


def test_a_missing_internal_domain_kernel_names_domain_op_opset_and_types() -> None:
    from ep_core.sdk.kernels import KernelRegistry
    from ep_cuda_numba.layout import nhwc_miss

    reg = KernelRegistry("TestEp")
    reg.register("Conv", 11, domain=NHWC, types={"T": ["tensor(float)"]})(lambda node, ctx: None)
    assert nhwc_miss(reg, _rewritten_conv(TensorProto.FLOAT, 17)) is None
    typed = nhwc_miss(reg, _rewritten_conv(TensorProto.DOUBLE, 17))
    assert typed == (
        "TestEp has no kernel for com.ms.internal.nhwc::Conv (node 'conv', opset 17) with types "
        "T=['tensor(double)'] (registered ['tensor(float)'])"
    )
    versioned = nhwc_miss(reg, _rewritten_conv(TensorProto.FLOAT, 9))
    assert (
        versioned == "TestEp's com.ms.internal.nhwc::Conv kernels cover opsets ['11+'], not "
        "com.ms.internal.nhwc::Conv (node 'conv', opset 9)"
    )
    missing = nhwc_miss(KernelRegistry("TestEp"), _rewritten_conv(TensorProto.FLOAT, 17))
    assert missing is not None and missing.startswith(
        "TestEp has no kernel for com.ms.internal.nhwc::Conv (node 'conv'"
    )


def test_a_rewritten_node_the_ep_cannot_serve_is_declined_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry whose internal-domain Conv lacks double: the EP declines the rewritten node
    naming domain/op/opset/type, and the core reverts to NCHW (and says so) instead of failing."""
    from ep_core.sdk.kernels import KernelRegistry
    from ep_cuda_numba import ep as ep_module
    from ep_cuda_numba.layout import nhwc_miss

    narrow = KernelRegistry("NumbaCudaExecutionProvider")
    narrow.register("Conv", 11, domain=NHWC, types={"T": ["tensor(float)"]})(lambda node, ctx: None)
    monkeypatch.setattr(ep_module, "nhwc_miss", lambda registry, node: nhwc_miss(narrow, node))
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1)), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.warns(RuntimeWarning) as caught:
        sess = session(model, ON)
    text = " | ".join(str(w.message) for w in caught)
    assert "no kernel for com.ms.internal.nhwc::Conv (node 'conv', opset 17) with types T=['tensor(double)']" in text
    assert "reverted to NCHW" in text
    assert sess.graph.node("conv").domain == "" and all_on_ep(sess) == {}
    x = np.ones((1, 3, 2, 2))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.full((1, 2, 2, 2), 3.0))

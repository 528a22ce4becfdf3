"""The Numba CPU EP declares what it fuses (the ``ep_factory_get_fusable_ops`` hook the parity
report reads) from its real op table, and refuses nodes of opsets older than the table says."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_core.tools.parity import build_report  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"


def _op(st, op):
    return next(o for o in st["ops"] if o["op_type"] == op and o["domain"] in ("", "ai.onnx"))


def test_declared_ops_are_the_supported_op_table():
    from ep_numba_cpu.factory import factory
    from ep_numba_cpu.ops import CONTRACTIONS, ELEMENTWISE, SINCE, fusable_ops

    declared = fusable_ops()
    names = [op for _, op, _, _ in declared]
    assert set(names) == set(ELEMENTWISE) | set(CONTRACTIONS) | {"BatchNormalization"}
    assert all(d == "" and end is None and since == SINCE[op] for d, op, since, end in declared)
    assert factory.ep_factory_get_fusable_ops() == declared
    assert factory.ep_factory_api_version() == 2  # the hook is version 2: an older factory is never asked


def test_parity_static_mode_shows_the_fusable_ops():
    data = build_report(NUMBA, static=True).data
    st = data["static"]
    assert st["fusable_declared"] and data["ep"]["fusable_declared"]
    assert data["ep"]["kind"] == "kernels+compile"  # EPContext kernel + fused ops
    assert "ai.onnx::Tanh 6+" in st["fusable_ops"] and "ai.onnx::Conv 1+" in st["fusable_ops"]
    assert "ai.onnx::HardSwish 14+" in st["fusable_ops"]
    tanh = _op(st, "Tanh")
    assert tanh["ep"]["fusable"] and "(fusable)" in tanh["ep"]["summary"]
    assert "ai.onnx::Softmax" not in " ".join(st["fusable_ops"])  # not fused: not declared


def test_nodes_older_than_the_declared_opset_are_not_fused():
    # Add before opset 7 had legacy broadcasting: outside the declared range, left to other EPs
    def model(opset):
        g = helper.make_graph(
            [
                helper.make_node("Add", ["x", "x"], ["a"], name="Add"),
                helper.make_node("Relu", ["a"], ["y"], name="Relu"),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()

    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    for opset, fused in ((6, {"Relu"}), (13, {"Add", "Relu"})):
        sess = InferenceSession(model(opset), providers=[NUMBA, "CpuReferenceExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(2 * x, 0))
        ops = {n for n, a in sess.get_node_assignment().items() if a["ep"] == NUMBA}
        assert ops == fused, sess.get_node_assignment()

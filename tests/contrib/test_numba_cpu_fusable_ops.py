"""The Numba CPU EP declares what it fuses (the ``ep_factory_get_fusable_ops`` hook the parity
report reads) from its real op table, and refuses nodes of opsets older than the table says."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_core.tools.parity import build_report  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"


def _op(st, op):
    return next(o for o in st["ops"] if o["op_type"] == op and o["domain"] in ("", "ai.onnx"))


def test_declared_ops_are_the_compiled_op_table_and_the_delegated_reference_kernels():
    from ep_core.sdk.kernels import KernelDef
    from ep_cpu_reference.registry import registry
    from ep_numba_cpu.factory import factory
    from ep_numba_cpu.ops import CONTRACTIONS, ELEMENTWISE, MS_SINCE, SINCE, fusable_ops

    declared = fusable_ops()
    assert all(isinstance(d, KernelDef) for d in declared)
    assert factory.ep_factory_get_fusable_ops() == declared
    assert factory.ep_factory_api_version() == 2  # the hook is version 2: an older factory is never asked
    compiled = (set(ELEMENTWISE) - set(MS_SINCE).difference(SINCE)) | set(CONTRACTIONS) | {"BatchNormalization"}
    # com.microsoft ops compiled (the optimizer's Gelu fusions), declared in their domain, float32
    for op, since in MS_SINCE.items():
        ms = [d for d in declared if d.op_type == op and d.domain == "com.microsoft"]
        assert ms and min(d.since_version for d in ms) == since
        assert all(set(t) == {"tensor(float)"} for d in ms for t in d.type_constraints.values()), ms
    # compiled ops from the first opset of the op table, with the dtypes the kernels take
    for op in compiled:
        first = min(d.since_version for d in declared if d.op_type == op and d.domain == "")
        assert first <= SINCE[op]
    conv = [d for d in declared if d.op_type == "Conv" and d.since_version >= SINCE["Conv"] and not d.end_version]
    assert any(d.type_constraints["T"] == ("tensor(double)", "tensor(float)") for d in conv)
    # delegated ops: what the reference registry serves, but never control flow or string-only ops
    names = {(d.domain_key, d.op_type) for d in declared}
    ref = {(d.domain_key, d.op_type) for d in registry().kernel_defs()}
    assert names - {("ai.onnx", op) for op in compiled} <= ref
    assert {
        ("ai.onnx", "Softmax"),
        ("ai.onnx", "Reshape"),
        ("ai.onnx", "LSTM"),
        ("ai.onnx", "QLinearConv"),
        ("com.microsoft", "QLinearAdd"),
    } <= names
    assert not names & {("ai.onnx", "If"), ("ai.onnx", "Loop"), ("ai.onnx", "Scan"), ("ai.onnx", "StringNormalizer")}
    for d in declared:
        for types in d.type_constraints.values():
            assert types and not {"tensor(string)", "tensor(bfloat16)"} & set(types), d


def test_parity_static_mode_shows_the_fusable_ops():
    data = build_report(NUMBA, static=True).data
    st = data["static"]
    assert st["fusable_declared"] and data["ep"]["fusable_declared"]
    assert data["ep"]["kind"] == "kernels+compile"  # EPContext kernel + fused ops
    assert "ai.onnx::Tanh 6-12" in st["fusable_ops"] and "ai.onnx::Conv 11-21" in st["fusable_ops"]
    assert "ai.onnx::HardSwish 14-21" in st["fusable_ops"]
    tanh = _op(st, "Tanh")
    assert tanh["ep"]["fusable"] and "(fusable)" in tanh["ep"]["summary"]
    assert "ai.onnx::Softmax 13+" in st["fusable_ops"]  # delegated to the reference kernel inside a group
    assert "missing types T: bfloat16" in _op(st, "Softmax")["ep"]["summary"]  # no bfloat16 values
    assert not any(op.startswith(("ai.onnx::If ", "ai.onnx::Loop ")) for op in st["fusable_ops"])
    assert st["bad_type_constraints"] == []


def test_nodes_older_than_the_compiled_opset_are_delegated_not_compiled():
    # Add before opset 7 had legacy broadcasting: outside the compiled op table's range, so the
    # group runs it through the reference kernel (a delegated step), never the generated one
    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu.planner import compiled

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
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)

    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    for opset, kinds in ((6, {"Add": False, "Relu": True}), (13, {"Add": True, "Relu": True})):
        m = model(opset)
        inferred = onnx.shape_inference.infer_shapes(m)
        view = GraphView(inferred.graph, opset_map(inferred))
        assert {n.op_type: compiled(n) for n in view.nodes} == kinds
        sess = InferenceSession(m.SerializeToString(), providers=[NUMBA, "CpuReferenceExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(2 * x, 0))
        ops = {n for n, a in sess.get_node_assignment().items() if a["ep"] == NUMBA}
        assert ops == {"Add", "Relu"}, sess.get_node_assignment()

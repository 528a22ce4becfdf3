"""The reference EP's kernel registry: valid against onnx's schemas, version lookup, misses that
say what exists, delegated kernels flagged."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from ep_core.graph import GraphView, opset_map
from ep_core.kernels import KernelRegistry
from ep_cpu_reference.registry import registry


def _node(op: str, opset: int, inputs: list[tuple[str, int]], outputs: list[tuple[str, int]], **attrs: object):
    """A NodeView of a one-node model, typed, at ``opset``."""
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    view = GraphView(model.graph, opset_map(model))
    return view.nodes[0]


def test_registry_validates_against_onnx_schemas() -> None:
    assert registry().validate() == []


def test_validate_reports_bad_constraints() -> None:
    reg = KernelRegistry("test")
    reg.register("Add", since=14, types={"T": ("tensor(string)",)})(lambda n, c: None)
    reg.register("Add", since=7, types={"Q": ("tensor(float)",)})(lambda n, c: None)
    problems = reg.validate()
    assert any("tensor(string)" in p for p in problems)
    assert any("'Q' does not exist" in p for p in problems)


def test_lookup_picks_newest_version_not_above_opset() -> None:
    reg = registry()
    f = TensorProto.FLOAT
    for opset, want_since in ((7, 1), (10, 1), (11, 11), (13, 11), (21, 11)):
        node = _node("Clip", opset, [("x", f)], [("y", f)])
        found = reg.lookup(node)
        assert found, found.reason
        kd = found.entry.kernel_def
        assert kd.covers(opset) and kd.since_version == want_since
        assert not kd.delegated
        newer = [e.kernel_def.since_version for e in reg if e.kernel_def.op_type == "Clip" and e.kernel_def.covers(opset)]
        assert kd.since_version == max(newer)


def test_lookup_miss_names_what_exists() -> None:
    reg = KernelRegistry("test")
    reg.register("Relu", since=14, types={"T": ("tensor(float)",)})(lambda n, c: None)
    old = reg.lookup(_node("Relu", 6, [("x", TensorProto.FLOAT)], [("y", TensorProto.FLOAT)]))
    assert not old and "14-" in old.reason and "opset 6" in old.reason
    typed = reg.lookup(_node("Relu", 14, [("x", TensorProto.INT8)], [("y", TensorProto.INT8)]))
    assert not typed and "tensor(int8)" in typed.reason and "tensor(float)" in typed.reason
    none = reg.lookup(_node("Abs", 14, [("x", TensorProto.FLOAT)], [("y", TensorProto.FLOAT)]))
    assert not none and "Abs" in none.reason


def test_delegated_kernels_are_flagged_and_never_for_control_flow() -> None:
    defs = registry().kernel_defs()
    delegated = {d.op_type for d in defs if d.delegated}
    native = {d.op_type for d in defs if not d.delegated}
    assert delegated, "delegation covers the rare ops"
    assert not delegated & native, f"ops both native and delegated: {sorted(delegated & native)}"
    for op in ("If", "Loop", "Scan", "SequenceMap"):
        assert op in native and op not in delegated


@pytest.mark.parametrize("op", ["Add", "Cast", "Reshape", "ReduceSum", "Gather", "If", "QuantizeLinear"])
def test_core_ops_are_native(op: str) -> None:
    defs = [d for d in registry().kernel_defs() if d.op_type == op and d.domain_key == "ai.onnx"]
    assert defs and not any(d.delegated for d in defs)


def test_shape_inputs_are_host_inputs() -> None:
    defs = {(d.op_type, d.since_version): d for d in registry().kernel_defs()}
    assert 1 in defs[("Reshape", 5)].host_inputs
    assert {1, 2} <= set(defs[("Slice", 10)].host_inputs)
    assert onnx.defs.has("Reshape")

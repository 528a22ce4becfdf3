"""The reference EP's kernel registry: valid against onnx's schemas, version lookup, misses that
say what exists, delegated kernels flagged."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from ep_core.sdk.graph import GraphView, opset_map
from ep_core.sdk.kernels import KernelRegistry
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
        newer = [
            e.kernel_def.since_version for e in reg if e.kernel_def.op_type == "Clip" and e.kernel_def.covers(opset)
        ]
        assert kd.since_version == max(newer)


def test_lookup_miss_names_what_exists() -> None:
    reg = KernelRegistry("test")
    reg.register("Relu", since=14, types={"T": ("tensor(float)",)})(lambda n, c: None)
    old = reg.lookup(_node("Relu", 6, [("x", TensorProto.FLOAT)], [("y", TensorProto.FLOAT)]))
    assert not old and "covers opsets 14+" in old.reason and "imports ai.onnx opset 6" in old.reason
    typed = reg.lookup(_node("Relu", 14, [("x", TensorProto.INT8)], [("y", TensorProto.INT8)]))
    assert not typed and "tensor(int8)" in typed.reason and "tensor(float)" in typed.reason
    none = reg.lookup(_node("Abs", 14, [("x", TensorProto.FLOAT)], [("y", TensorProto.FLOAT)]))
    assert not none and "Abs" in none.reason


def test_delegated_kernels_are_flagged_and_never_for_control_flow() -> None:
    defs = registry().kernel_defs()
    delegated = [d for d in defs if d.delegated]  # may be empty: issue 14 made every op native
    for d in delegated:
        # delegation only fills versions no native kernel serves, and never the newest one
        natives = [n for n in defs if not n.delegated and n.op_type == d.op_type and n.domain_key == d.domain_key]
        for n in natives:
            assert d.end_version is not None and d.end_version < n.since_version, (d, n)
    for op in ("If", "Loop", "Scan", "SequenceMap"):
        assert not any(d.op_type == op for d in delegated)
        assert any(d.op_type == op and not d.delegated for d in defs)


# ops delegated to onnx.reference that onnx's node suite does not exercise; each is proven by a
# hand-made case in test_node_conformance.py (name given) or is listed here with why not
PROVEN_BY_HAND_CASE = {
    ("ai.onnx.ml", "SVMRegressor"): "svm_regressor_linear_kernel",
    ("ai.onnx.ml", "TreeEnsembleRegressor"): "tree_ensemble_regressor_one_split",
    ("ai.onnx.ml", "TreeEnsembleClassifier"): "tree_ensemble_classifier_3_classes",
    ("ai.onnx.ml", "SVMClassifier"): "svm_classifier_rbf_3_classes",  # against onnxruntime
}
UNPROVEN: dict[tuple[str, str], str] = {}


def _ops_in(graph: onnx.GraphProto, opsets: dict[str, int], found: set[tuple[str, str, int]]) -> None:
    for n in graph.node:
        domain = "ai.onnx" if n.domain in ("", "ai.onnx") else n.domain
        found.add((domain, n.op_type, opsets.get(domain, 0)))
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _ops_in(g, opsets, found)


def test_every_delegated_op_is_proven_by_tests() -> None:
    """Each delegated (op, version range) runs in at least one node case that is not excluded
    (those cases pass in test_node_conformance), or in a hand-made case."""
    from pathlib import Path

    from ep_core.tools import conformance

    exclusions = conformance.load_exclusions(
        Path(__file__).resolve().parents[2] / "docs/conformance/cpu_reference.toml"
    )
    used: set[tuple[str, str, int]] = set()
    for case in conformance.collect():
        if exclusions.reason(case.name) is None:
            opsets = {
                ("ai.onnx" if o.domain in ("", "ai.onnx") else o.domain): o.version for o in case.model.opset_import
            }
            _ops_in(case.model.graph, opsets, used)
    unproven = []
    for d in registry().kernel_defs():
        if not d.delegated or (d.domain_key, d.op_type) in UNPROVEN:
            continue
        if (d.domain_key, d.op_type) in PROVEN_BY_HAND_CASE:
            continue
        if not any(dom == d.domain_key and op == d.op_type and d.covers(v) for dom, op, v in used):
            unproven.append(f"{d.domain_key}::{d.op_type} {d.version_range()}")
    assert not unproven, f"delegated without a passing node test: {unproven}"


def test_hand_case_names_exist() -> None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_nc", Path(__file__).with_name("test_node_conformance.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in PROVEN_BY_HAND_CASE.values():
        assert name in mod._EXTRA or name in mod.ORT_CLASSIFIERS


@pytest.mark.parametrize("op", ["Add", "Cast", "Reshape", "ReduceSum", "Gather", "If", "QuantizeLinear"])
def test_core_ops_are_native(op: str) -> None:
    defs = [d for d in registry().kernel_defs() if d.op_type == op and d.domain_key == "ai.onnx"]
    assert defs and not any(d.delegated for d in defs)


def test_shape_inputs_are_host_inputs() -> None:
    defs = {(d.op_type, d.since_version): d for d in registry().kernel_defs()}
    assert 1 in defs[("Reshape", 5)].host_inputs
    assert {1, 2} <= set(defs[("Slice", 10)].host_inputs)
    assert onnx.defs.has("Reshape")

"""The reference EP's kernel registry: valid against onnx's schemas, version lookup, misses that
say what exists, delegated kernels flagged."""

from __future__ import annotations

from typing import Any

import numpy as np
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


def test_every_op_is_native_from_its_first_version() -> None:
    """With every ai.onnx / ai.onnx.ml / preview op native from its first schema version, the
    delegated registration never asks onnx.reference's op tables (importing them costs every
    process ~60 ms); an op onnx adds later is still delegated, after that check."""
    import subprocess
    import sys

    from onnx import defs

    from ep_cpu_reference.kernels import delegated

    natives: dict[tuple[str, str], int] = {}
    for d in registry().kernel_defs():
        if not d.delegated:
            key = (d.domain_key, d.op_type)
            natives[key] = min(natives.get(key, d.since_version), d.since_version)
    firsts: dict[tuple[str, str], int] = {}
    for s in defs.get_all_schemas_with_history():
        if s.domain in delegated.DOMAINS and s.name not in delegated.NEVER_DELEGATE and not s.deprecated:
            key = ("ai.onnx" if s.domain == "" else s.domain, s.name)
            firsts[key] = min(firsts.get(key, s.since_version), s.since_version)
    late = sorted(
        f"{d}::{op} {v} (native from {natives.get((d, op))})"
        for (d, op), v in firsts.items()
        if (d, op) in natives and natives[(d, op)] > v
    )
    assert not late, f"native kernels start after the op's first version: {late}"
    code = (
        "import sys, ep_cpu_reference.registry as r; r.registry(); print('onnx.reference.ops._op_list' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "extra", "want"),
    [
        ("Reshape", 1, {"shape": [0, -1]}, {}, lambda x: [x.reshape(2, 12)]),
        ("Reshape", 4, {"shape": [-1, 4], "consumed_inputs": [0]}, {}, lambda x: [x.reshape(6, 4)]),
        ("Split", 1, {"axis": 2, "split": [1, 3]}, {}, lambda x: np.split(x, [1], axis=2)),
        ("Split", 1, {"axis": 1}, {"s": [2.0, 1.0]}, lambda x: np.split(x, [2], axis=1)),
    ],
)
def test_opset_1_reshape_and_split(op: str, opset: int, attrs: dict, extra: dict, want: Any) -> None:
    """Reshape 1-4 (shape attribute) and Split 1 (sizes from the second input or the attribute):
    onnxruntime runs the Reshapes alike; it has no Split-1 kernel, onnx.reference neither."""
    import ep_core

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    outs = ["y"] if op == "Reshape" else ["a", "b"]
    node = helper.make_node(op, ["x", *extra], outs, **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["x", *extra]]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=3).SerializeToString()
    feed = {"x": x, **{k: np.array(v, np.float32) for k, v in extra.items()}}
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    expected = want(x)
    if op == "Reshape":
        ort = pytest.importorskip("onnxruntime")
        so = ort.SessionOptions()
        so.log_severity_level = 3
        expected = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)
    assert len(got) == len(expected)
    for g, w in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, w)


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


def test_opset_4_reshape_without_its_shape_attribute_is_refused() -> None:
    import ep_core
    from ep_core.sdk.errors import InvalidGraph

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 4)], ir_version=3)
    with pytest.raises(InvalidGraph, match="Reshape_0.*lacks: add it, or export at opset 5 or later"):
        ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])


_LOAD_ORDER = """
import sys
from ep_cpu_reference.kernels import conv_plan, delegated, nn_common  # helpers, and a family imported first
from ep_cpu_reference.registry import REGISTRY
print("families" if "ep_cpu_reference.families" in sys.modules else "light")
print(REGISTRY.has_op("Relu"))  # a query about one op loads the families that register it
print("families" if "ep_cpu_reference.families" in sys.modules else "light")
print(sorted((d.domain_key, d.op_type, d.since_version, d.delegated) for d in REGISTRY.kernel_defs()))
"""


def test_helpers_load_no_family_and_a_whole_query_loads_all_in_order() -> None:
    """Importing the kernel helpers (what the Numba CPU EP imports) loads no family, and importing
    ``delegated`` registers nothing (``families`` calls it after every native kernel): the reference
    EP's ~70 ms of registration waits for a query. One about an op loads only its families
    (``family_index``); one about every kernel then registers the rest as ``registry()`` does."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _LOAD_ORDER], capture_output=True, text=True, check=True)
    light, has_relu, still_light, defs = run.stdout.strip().splitlines()
    assert (light, has_relu, still_light) == ("light", "True", "light")
    assert defs == str(
        sorted((d.domain_key, d.op_type, d.since_version, d.delegated) for d in registry().kernel_defs())
    )


_CUSTOM_CLASH = """
import numpy as np
from onnx import TensorProto, defs, helper
import ep_core
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import KernelRegistry

NAME = "ClashTestExecutionProvider"


class Factory(HostEpFactory):
    ep_name, ep_vendor, ep_version = NAME, "tests", "1.0.0"

    def ep_factory_create_ep(self, devices, ep_options, session_options):
        return RegistryEp(NAME, KernelRegistry(NAME))

    def ep_factory_get_custom_op_domains(self):
        p = defs.OpSchema.FormalParameter
        return [defs.OpSchema("Gelu", "my.custom", 1, inputs=[p("X", "T")], outputs=[p("Y", "T")],
                              type_constraints=[("T", ["tensor(float)"], "")])]


ep_core.register_execution_provider_library(NAME, Factory())
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
s = ep_core.InferenceSession(m, providers=[NAME, "CpuReferenceExecutionProvider"])
print(s.run(None, {"x": np.array([-1, 1], np.float32)})[0].tolist())
"""


def test_an_eps_custom_op_named_like_an_onnx_op_leaves_the_reference_ep_working() -> None:
    """An EP declaring my.custom::Gelu (ai.onnx has a Gelu) beside the reference EP, in a fresh
    process: onnx.reference, which the reference kernels load and which refuses to import once a
    name repeats across domains, is imported before the custom schema is registered."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _CUSTOM_CLASH], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[0.0, 1.0]"


_FAILED_LOAD = """
import sys
from ep_core.sdk.kernels import KernelRegistry
from ep_cpu_reference.registry import REGISTRY

calls, real = [0], KernelRegistry.add


def add(self, kernel_def, builder):
    calls[0] += 1
    if calls[0] == int(sys.argv[1]):
        raise KeyboardInterrupt("interrupted while registering")
    return real(self, kernel_def, builder)


KernelRegistry.add = add
first = REGISTRY.kernel_defs if sys.argv[2] == "whole" else (lambda: REGISTRY.has_op("Relu"))
for query in (first, lambda: REGISTRY.has_op("Relu"), REGISTRY.kernel_defs):
    try:
        query()
        print("served")
    except BaseException as exc:
        print(type(exc).__name__, str(exc))
"""


@pytest.mark.parametrize(("at", "first_query"), [(150, "whole"), (3, "one op")])
def test_a_load_that_fails_part_way_keeps_raising_its_first_failure(at: int, first_query: str) -> None:
    """A family load interrupted part-way, by a query about every kernel or about one op, cannot be
    retried (the families before it stay imported; re-running the failed one would register its
    kernels twice): every later query, of either kind, raises an EP_FAIL naming the first failure,
    not a misleading duplicate-registration error."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _FAILED_LOAD, str(at), first_query], capture_output=True, text=True, check=True
    )
    first, *later = run.stdout.strip().splitlines()
    assert first == "KeyboardInterrupt interrupted while registering"
    assert len(later) == 2
    for line in later:
        assert line.startswith("EpFail ") and "KeyboardInterrupt: interrupted while registering" in line
        assert "start a new process" in line and "twice" not in line

"""Static coverage: numbers for the reference EP and planted facts in a test EP's registry."""

from __future__ import annotations

import pytest
from onnx import defs

from ep_core.sdk.kernels import KernelDef
from ep_core.tools.parity import EpLoadFailure, FusableOpsError, build_report, normalize_fusable
from ep_core.tools.parity.introspect import describe_ep
from ep_core.tools.parity.static import SchemaVersion, _Def, op_segments, schema_index, static_report

REF = "CpuReferenceExecutionProvider"


@pytest.fixture(scope="module")
def ref_static() -> dict:
    return build_report(REF, static=True).data["static"]


def _op(static: dict, op: str, domain: str = "ai.onnx") -> dict:
    return next(o for o in static["ops"] if o["op_type"] == op and o["domain"] == domain)


def test_reference_static_totals_match_the_pinned_onnx_schemas(ref_static: dict) -> None:
    onnx_domains = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview"}
    schemas = [s for s in defs.get_all_schemas_with_history() if s.domain in onnx_domains]  # EPs may add others
    latest: dict[tuple[str, str], tuple[int, bool]] = {}
    for s in schemas:
        key = (s.domain or "ai.onnx", s.name)
        if key not in latest or s.since_version >= latest[key][0]:
            latest[key] = (s.since_version, s.deprecated)
    live = sum(1 for _, dep in latest.values() if not dep)
    cov = ref_static["coverage_vs_onnx"]
    assert cov["ops_latest"]["total"] == live == ref_static["counts"]["onnx_ops"]
    versions = sum(1 for s in schemas if not s.deprecated and not latest[(s.domain or "ai.onnx", s.name)][1])
    assert cov["op_versions"]["total"] == versions


def test_reference_covers_itself_fully_and_most_of_onnx(ref_static: dict) -> None:
    assert ref_static["coverage_vs_reference"]["percent"] == 100.0
    assert ref_static["ep_only"] == [] and ref_static["reference_only"] == []
    # the reference EP delegates what it has no native kernel for, so nearly every live op is there
    assert ref_static["coverage_vs_onnx"]["ops_latest"]["percent"] >= 95.0
    registry = describe_ep(REF).kernel_registry
    assert registry is not None
    native_ops = {(k.domain_key, k.op_type) for k in registry.kernel_defs() if not k.delegated}
    delegated = {tuple(s.split("::")) for s in ref_static["delegated_ops"]}
    assert not (delegated & native_ops)  # a native kernel always takes over from a delegated one
    assert ref_static["counts"]["ep_kernel_defs"] == len(registry.kernel_defs())


def test_version_segments_follow_schema_versions() -> None:
    versions = schema_index()[("ai.onnx", "Softmax")]
    assert [v.since for v in versions] == [1, 11, 13]
    segs = op_segments([_Def(KernelDef("Softmax", since_version=11), "kernel")], versions, 28)
    text = ", ".join(
        f"{s['from']}{'+' if s['to'] is None else ('' if s['to'] == s['from'] else '-' + str(s['to']))} {s['status']}"
        for s in segs
    )
    assert text == "1-10 missing, 11-12 ok, 13+ ok"


def test_planted_registry_facts_are_reported(planted_static_ep: str) -> None:
    st = build_report(planted_static_ep, static=True).data["static"]
    soft = _op(st, "Softmax")
    assert soft["ep"]["summary"].startswith("1-12 missing, 13+ partial")  # adjacent gaps merge
    assert soft["ep"]["segments"][-1]["missing_types"] == {
        "T": ["tensor(bfloat16)", "tensor(double)", "tensor(float16)"]
    }
    add = _op(st, "Add")
    covered = [s for s in add["ep"]["segments"] if s["status"] != "missing"]
    assert [(s["from"], s["to"], s["status"]) for s in covered] == [(7, 12, "partial")]  # floats only
    assert "tensor(int32)" in covered[0]["missing_types"]["T"]
    assert "13+" in add["gaps_vs_reference"]
    assert any("Elu" in p and "'T3' does not exist" in p for p in st["registry_problems"])  # refused
    assert any("Add 7-12" in p and "bfloat16" in p for p in st["bad_type_constraints"])  # not allowed before 13
    assert "com.example::MyOp" in st["ep_only"]
    assert _op(st, "MyOp", "com.example")["in_onnx"] is False
    assert st["delegated_ops"] == ["ai.onnx::Tanh"]
    assert "(delegated)" in _op(st, "Tanh")["ep"]["summary"]
    assert "ai.onnx::Conv" in st["reference_only"]
    assert st["counts"]["ep_ops"] == 5
    assert st["coverage_vs_onnx"]["ops_latest"]["covered"] == 3  # Softmax (partial), Relu, Tanh; Add stops at 12


def test_fusable_ops_protocol_is_read_and_shown(fusing_ep: str) -> None:
    data = build_report(fusing_ep, static=True).data
    st = data["static"]
    assert data["ep"]["kind"] == "compile" and st["fusable_declared"]
    relu = _op(st, "Relu")
    assert relu["ep"]["fusable"] and relu["ep"]["summary"].endswith("14+ ok (fusable)")
    assert st["fusable_ops"] == ["ai.onnx::Conv 11+", "ai.onnx::Relu 14+"]


def test_ep_that_declares_nothing_has_zero_coverage(claims_nothing_ep: str) -> None:
    data = build_report(claims_nothing_ep, static=True).data
    assert data["ep"]["kind"] == "undeclared" and not data["ep"]["fusable_declared"]
    assert data["static"]["counts"]["ep_ops"] == 0
    assert data["summary"]["score"] == 0.0


def test_malformed_fusable_ops_name_the_ep_and_the_item() -> None:
    assert normalize_fusable("X", [("", "Relu", 14, None)])[0].op_type == "Relu"
    with pytest.raises(FusableOpsError, match=r"X.ep_factory_get_fusable_ops\(\) item \('Relu', 14\)"):
        normalize_fusable("X", [("Relu", 14)])


def test_unknown_ep_is_a_load_failure() -> None:
    with pytest.raises(EpLoadFailure, match="NoSuchExecutionProvider.*ep-core providers"):
        build_report("NoSuchExecutionProvider")


def test_onnx_totals_ignore_schemas_eps_register_at_run_time() -> None:
    from ep_core.tools.parity.static import ONNX_DOMAINS

    before = build_report(REF).data["static"]["coverage_vs_onnx"]
    # sessions let EPs register custom-domain schemas into onnx.defs (ep_factory_get_custom_op_domains)
    if not defs.has("ParityTestOp", 1, "com.parity.test"):
        defs.register_schema(defs.OpSchema("ParityTestOp", "com.parity.test", 1, inputs=[], outputs=[]))
    assert defs.has("ParityTestOp", 1, "com.parity.test")
    schema_index.cache_clear()
    assert {d for d, _ in schema_index()} <= set(ONNX_DOMAINS)
    assert build_report(REF).data["static"]["coverage_vs_onnx"] == before


def test_every_registered_op_has_segments_and_a_summary() -> None:
    ref = describe_ep(REF)
    st = static_report(ref, ref)
    for o in st["ops"]:
        if o["ep"]["registered"]:
            assert o["ep"]["segments"] and o["ep"]["summary"] != "not registered", o["op_type"]
            assert all(isinstance(v, SchemaVersion) for v in schema_index().get((o["domain"], o["op_type"]), []))

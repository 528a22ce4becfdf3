"""Runtime parity: planted defects are caught, fallbacks are never passes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ep_core.tools.parity import build_report
from ep_core.tools.parity.compare import compare_arrays
from ep_core.tools.parity.runtime import STATUSES

REF = "CpuReferenceExecutionProvider"


def _runtime(ep: str, **kw: object) -> dict:
    return build_report(ep, static=False, runtime=True, **kw).data["runtime"]  # type: ignore[arg-type]


def test_planted_wrong_add_fails_every_case(wrong_add_ep: str) -> None:
    report = build_report(wrong_add_ep, static=False, runtime=True, ops=["Add"])
    rt = report.data["runtime"]
    assert rt["cases"] and {c["op_type"] for c in rt["cases"]} == {"Add"}
    assert {c["status"] for c in rt["cases"]} == {"fail"}, [(c["name"], c["status"], c["reason"]) for c in rt["cases"]]
    float_case = next(c for c in rt["cases"] if c["name"] == "test_add")
    assert float_case["nodes_on_ep"] == float_case["nodes_total"] == 1
    assert math.isclose(float_case["max_abs_err"], 1e-2, rel_tol=1e-3)
    assert float_case["vs_expected"]["ok"] is False and float_case["vs_reference"]["ok"] is False
    assert "vs expected outputs" in float_case["reason"]
    assert rt["pass_rate"] == 0.0 and rt["defects"] == len(rt["cases"])
    assert report.exit_code() == 1
    (op,) = rt["ops"]
    assert op["status"] == "fail" and op["counts"]["fail"] == op["cases"]


def test_correct_add_passes_on_the_ep_itself(exact_add_ep: str) -> None:
    report = build_report(exact_add_ep, static=False, runtime=True, ops=["Add"], include_expanded=False)
    rt = report.data["runtime"]
    assert {c["status"] for c in rt["cases"]} == {"pass"}
    assert all(c["ep_counts"] == {exact_add_ep: 1} and c["max_abs_err"] == 0.0 for c in rt["cases"])
    assert report.exit_code(fail_under=100) == 0


def test_ep_that_claims_nothing_shows_only_fallbacks(claims_nothing_ep: str) -> None:
    rt = _runtime(claims_nothing_ep, ops=["Add", "Relu"], models=["magika"])
    cases = rt["cases"] + rt["models"]
    assert cases and {c["status"] for c in cases} == {"fallback"}
    assert rt["totals"]["pass"] == 0 and rt["pass_rate"] == 0.0 and rt["observed_ops"] == {}
    # a full fallback measures the reference EP, so no error is charged to the EP under test
    assert all(o["max_abs_err"] is None and o["status"] == "fallback" for o in rt["ops"])
    for c in cases:
        assert c["nodes_on_ep"] == 0 and c["fallback_nodes"] and {n["ep"] for n in c["fallback_nodes"]} == {REF}
        assert c["reason"].startswith(f"no node ran on {claims_nothing_ep}")


def test_partial_fallback_names_the_nodes_that_fell_back(exact_add_ep: str) -> None:
    rt = _runtime(exact_add_ep, node_tests=False, models=["magika"])
    (m,) = rt["models"]
    assert m["status"] == "fallback" and m["reason"].startswith("partial fallback")
    assert 0 < m["nodes_on_ep"] < m["nodes_total"] == len(m["assignment"])
    assert sum(1 for ep in m["assignment"].values() if ep == exact_add_ep) == m["nodes_on_ep"]
    assert {n["op_type"] for n in m["fallback_nodes"]} >= {"Conv", "MatMul"} and "Add" not in {
        n["op_type"] for n in m["fallback_nodes"]
    }
    assert m["vs_reference"]["ok"] is True and m["vs_expected"] is None
    assert m["ops_on_ep"] == ["Add"] and rt["observed_ops"] == {"Add": 1}
    conv = next(n for n in m["fallback_nodes"] if n["op_type"] == "Conv")
    assert conv["why"] == f"{exact_add_ep} has no kernel for ai.onnx::Conv"


def test_fallback_says_why_the_ep_declined(exact_add_ep: str) -> None:
    rt = _runtime(exact_add_ep, ops=["Sub"], include_expanded=False)
    assert all(c["status"] == "fallback" for c in rt["cases"])
    assert all("has no kernel for ai.onnx::Sub" in n["why"] for c in rt["cases"] for n in c["fallback_nodes"])


def test_crashing_kernel_is_an_error_and_a_defect(crashing_add_ep: str) -> None:
    report = build_report(crashing_add_ep, static=False, runtime=True, ops=["Add"], include_expanded=False)
    rt = report.data["runtime"]
    assert {c["status"] for c in rt["cases"]} == {"error"}
    assert all("planted crash in Add" in c["reason"] and c["reference_status"] == "ok" for c in rt["cases"])
    assert rt["defects"] == len(rt["cases"]) and report.exit_code() == 1


def test_filters_and_size_limit_select_and_skip_with_reasons() -> None:
    rt = _runtime(REF, filter=r"^test_relu$|^Softmax$", include_expanded=False, max_elements=10)
    names = {c["name"] for c in rt["cases"]}
    assert "test_relu" in names and all(c["op_type"] in ("Relu", "Softmax") for c in rt["cases"])
    assert {c["op_type"] for c in rt["cases"]} == {"Relu", "Softmax"}
    skipped = [c for c in rt["cases"] if c["status"] == "skipped"]
    assert skipped and all("over the limit of 10" in c["reason"] for c in skipped)
    assert rt["totals"]["ran"] == rt["totals"]["total"] - len(skipped)
    assert sum(rt["totals"][s] for s in STATUSES) == rt["totals"]["total"]


def test_compare_rules() -> None:
    f = np.array([1.0, np.nan, np.inf], dtype=np.float32)
    assert compare_arrays(f, f.copy(), 1e-3, 1e-7).ok
    assert not compare_arrays(np.array([1.0, 2.0], np.float32), np.array([1.0, np.nan], np.float32), 1e-3, 0).ok
    assert "dtype" in (compare_arrays(np.zeros(2, np.float64), np.zeros(2, np.float32), 1e-3, 0).mismatch or "")
    assert "shape" in (compare_arrays(np.zeros(2), np.zeros(3), 1e-3, 0).mismatch or "")
    c = compare_arrays(np.array([1.001], np.float32), np.array([1.0], np.float32), 1e-2, 0)
    assert c.ok and c.max_abs_err == pytest.approx(1e-3, rel=1e-3)
    assert compare_arrays(np.array(["a"], dtype=object), np.array(["a"]), 0, 0).ok
    assert not compare_arrays([np.ones(2)], [np.ones(2), np.ones(2)], 0, 0).ok


def test_compile_based_ep_runs_fused_groups_and_says_what_it_did_not_fuse(fusing_ep: str) -> None:
    rt = _runtime(fusing_ep, ops=["Relu", "Add"], include_expanded=False)
    relu = [c for c in rt["cases"] if c["op_type"] == "Relu"]
    add = [c for c in rt["cases"] if c["op_type"] == "Add"]
    assert relu and all(c["status"] == "pass" and c["fused_groups"] == 1 and c["ops_on_ep"] == ["Relu"] for c in relu)
    assert add and all(c["status"] == "fallback" for c in add)
    assert {n["why"] for c in add for n in c["fallback_nodes"]} == {
        f"{fusing_ep} did not put it in a fused group and has no kernel for ai.onnx::Add"
    }
    assert rt["observed_ops"] == {"Relu": len(relu)}

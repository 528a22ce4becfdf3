"""Every registered kernel matches the reference EP on a small case of each registered type; the
cases come from the registry itself (see cases.py), so a new kernel is covered automatically."""

from __future__ import annotations

import pytest

from .cases import Case, build_cases
from .conftest import all_on_ep, assert_close, run_both, session


def _defs() -> list:
    try:
        from ep_cuda_numba.registry import registry

        return registry().kernel_defs()
    except Exception:  # numba missing: conftest skips the module's tests anyway
        return []


CASES = build_cases(_defs())


def test_registry_validates_against_onnx_schemas() -> None:
    from ep_cuda_numba.registry import registry

    assert registry().validate() == []


def test_every_registered_kernel_has_a_case() -> None:
    missing = [c for c in CASES if isinstance(c, str)]
    assert not missing, f"kernels without a test case builder in tests/cuda_numba/cases.py: {missing}"


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c, Case)], ids=lambda c: c.id)
def test_kernel_matches_reference(case: Case) -> None:
    if case.oracle is not None:
        # the reference EP would be judged by onnx.reference here, which departs from the spec
        sess = session(case.model, case.providers)
        got, ref = sess.run(None, case.feeds), case.oracle(case.feeds)
    else:
        got, ref, sess = run_both(case.model, case.feeds, case.providers)
    assert all_on_ep(sess) == {}, sess.get_partition_diagnostics()
    if case.nhwc_node:  # the internal-domain kernel ran, not the NCHW one (design 5.3.1.3)
        assert sess.graph.node(case.nhwc_node).domain == "com.ms.internal.nhwc", sess.get_partition_diagnostics()
    assert_close(got, ref, max(case.tol, 1e-6), f"{case.id} {case.oracle_reason}")

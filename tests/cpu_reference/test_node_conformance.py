"""Every onnx node test case (``onnx.backend.test.case.node``) through the reference EP.

Cases in ``ep_cpu_reference.conformance.EXCLUDED`` are skipped with their written reason; the
comparison is the conformance runner's (dtype, shape, per-case rtol/atol, sequences, optionals)."""

from __future__ import annotations

import warnings

import pytest

from ep_cpu_reference import conformance

_CASES = conformance.collect()


@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_node_case(case: object) -> None:
    reason = conformance.exclusion_reason(case.name)  # type: ignore[attr-defined]
    if reason is not None:
        pytest.skip(reason)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case)


def test_case_count_is_the_pinned_onnx_suite() -> None:
    """The suite is onnx 1.23's 1884 node cases: a different count means a different onnx."""
    import onnx

    if onnx.__version__ == "1.23.2":
        assert len(_CASES) == 1884


def test_exclusions_have_reasons_and_match_cases() -> None:
    """Each exclusion is written down and still matches a case (no stale entries)."""
    import re

    names = [c.name for c in _CASES]
    for pattern, reason in conformance.EXCLUDED.items():
        assert len(reason) > 30, pattern
        assert any(re.search(pattern, n) for n in names), f"exclusion {pattern!r} matches no case"


def test_comparison_is_strict() -> None:
    """The runner's comparison catches dtype, shape, value, string and sequence differences."""
    import numpy as np

    close = conformance.assert_close
    close(np.float32([1.0]), np.float32([1.0005]), 1e-3, 0.0)
    for expected, actual in (
        (np.float32([1.0]), np.float64([1.0])),
        (np.float32([1.0]), np.float32([[1.0]])),
        (np.float32([1.0]), np.float32([1.1])),
        (np.array(["a"], dtype=object), np.array(["b"], dtype=object)),
        ([np.int64([1])], [np.int64([1]), np.int64([2])]),
        (None, np.int64([1])),
        (np.int32([1, 2]), np.int32([1, 3])),
    ):
        with pytest.raises(AssertionError):
            close(expected, actual, 1e-3, 1e-7)

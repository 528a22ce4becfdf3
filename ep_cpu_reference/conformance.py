"""ONNX node conformance for the reference EP: every case of
``onnx.backend.test.case.node.collect_testcases()`` run through ``ep_core.InferenceSession``.

``python -m ep_cpu_reference.conformance [--filter RE] [--json PATH]`` prints failures per op
and a final ``conformance: P passed, F failed of N (X%)`` line. Cases that cannot run here are
listed, with the reason, in ``EXCLUDED``; they still count as failed in the percentage.
The comparison follows onnx's backend runner: same dtype and shape, strings and bools exact,
floats within the case's rtol/atol, sequences element by element, ``None`` for empty optionals."""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

# One table: case-name regex -> why the case cannot pass on this machine. Matched with re.search.
EXCLUDED: dict[str, str] = {
    r"^test_bernoulli": (
        "Bernoulli samples are random: the expected outputs come from an unseeded NumPy draw "
        "at export time, so no implementation can reproduce them (onnx excludes them too)"
    ),
    r"^test_image_decoder_decode_(jpeg|jpeg2k|webp)_": (
        "JPEG, JPEG 2000 and WebP need a codec library (Pillow), which is not a dependency of "
        "this project; the reference EP decodes BMP, PNM, PNG and TIFF itself and uses Pillow "
        "for these when it is installed (then these cases run)"
    ),
}


def exclusion_reason(name: str) -> str | None:
    """The written reason a case is excluded, or None if it must run."""
    for pattern, reason in EXCLUDED.items():
        if re.search(pattern, name):
            if pattern.startswith(r"^test_image_decoder_") and _have_pillow():
                return None
            return reason
    return None


def _have_pillow() -> bool:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def collect(filter_re: str | None = None) -> list[Any]:
    """The onnx node test cases, optionally only those whose name matches ``filter_re``."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    if filter_re:
        rx = re.compile(filter_re)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def to_feed_value(value: Any) -> Any:
    """A test-case input as a session input: TensorProto -> array (ml_dtypes for float8,
    bfloat16, int4), NumPy scalar -> 0-d array, sequences element-wise, None stays None."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return [to_feed_value(v) for v in value]
    return value


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype.kind == "V" or a.dtype.name.startswith(("float8", "bfloat", "float4")) else a


def assert_close(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> None:
    """Raise AssertionError if ``actual`` differs from ``expected`` the way onnx's runner checks."""
    from onnx import TensorProto, numpy_helper

    if isinstance(expected, TensorProto):
        expected = numpy_helper.to_array(expected)
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{where}: expected an empty optional (None), got {type(actual).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise AssertionError(f"{where}: expected a sequence, got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise AssertionError(f"{where}: expected {len(expected)} sequence elements, got {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            assert_close(e, a, rtol, atol, f"{where}[{i}]")
        return
    expected = np.asarray(expected)
    if not isinstance(actual, np.ndarray):
        if isinstance(actual, np.generic):
            actual = np.asarray(actual)
        else:
            raise AssertionError(f"{where}: expected numpy.ndarray, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {actual.shape} != expected {expected.shape}")
    if expected.dtype == object or expected.dtype.kind in "US":
        if actual.dtype != object and actual.dtype.kind not in "US":
            raise AssertionError(f"{where}: dtype {actual.dtype} != expected strings")
        if actual.tolist() != expected.tolist():
            raise AssertionError(f"{where}: strings differ: {actual.tolist()!r} != {expected.tolist()!r}")
        return
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {actual.dtype} != expected {expected.dtype}")
    if expected.dtype.kind in "biu" or expected.dtype == bool or expected.dtype.name.startswith(("int", "uint")):
        if expected.dtype.name.startswith(("int2", "int4", "uint2", "uint4")):
            actual, expected = actual.astype(np.int8), expected.astype(np.int8)
        np.testing.assert_array_equal(actual, expected, err_msg=where)
        return
    r = rtol
    if expected.dtype.name == "bfloat16":
        r = max(rtol, 2**-6)  # two bfloat16 ULPs, as onnx's runner allows
    np.testing.assert_allclose(_as_float(actual), _as_float(expected), rtol=r, atol=atol, err_msg=where)


def run_case(case: Any) -> None:
    """Run one case through a fresh session; raise on any difference."""
    import ep_core

    sess = ep_core.InferenceSession(case.model.SerializeToString())
    names = [i.name for i in case.model.graph.input]
    outs = [o.name for o in case.model.graph.output]
    for inputs, expected in case.data_sets:
        feed = {n: to_feed_value(v) for n, v in zip(names, inputs, strict=False)}
        got = sess.run(outs, feed)
        if len(got) != len(expected):
            raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, got, strict=False)):
            assert_close(e, a, case.rtol, case.atol, f"output {i} ({outs[i]})")


_OP_NAMES: list[str] = []


def main_op(case: Any) -> str:
    """The op a case tests: the longest ONNX op name the case name starts with (so expanded
    function cases count under their op, not the first body node), else the first node's op."""
    if not _OP_NAMES:
        from onnx import defs

        _OP_NAMES.extend(sorted({s.name for s in defs.get_all_schemas_with_history()}, key=len, reverse=True))
    key = case.name[len("test_") :].replace("_", "").lower()
    for name in _OP_NAMES:
        if key.startswith(name.lower()):
            return name
    nodes = case.model.graph.node
    return nodes[0].op_type if nodes else "?"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filter", help="only cases whose name matches this regex")
    ap.add_argument("--json", help="write per-case results (status, reason) here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failure's reason")
    ap.add_argument("--min-percent", type=float, help="exit 1 if fewer than this percentage of cases pass")
    args = ap.parse_args(argv)

    cases = collect(args.filter)
    results: dict[str, dict[str, str]] = {}
    by_op: dict[str, list[str]] = collections.defaultdict(list)
    passed = 0
    t0 = time.perf_counter()
    for case in cases:
        reason = exclusion_reason(case.name)
        if reason is not None:
            results[case.name] = {"status": "excluded", "op": main_op(case), "reason": reason}
            by_op[main_op(case)].append(case.name)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
            msg = f"{type(exc).__name__}: {exc}"
            results[case.name] = {"status": "failed", "op": main_op(case), "reason": msg}
            by_op[main_op(case)].append(case.name)
            continue
        results[case.name] = {"status": "passed", "op": main_op(case), "reason": ""}
        passed += 1
    elapsed = time.perf_counter() - t0

    for op, names in sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{op}: {len(names)} failed")
        for n in names:
            r = results[n]
            tag = "excluded" if r["status"] == "excluded" else "FAILED"
            reason = r["reason"] if args.verbose else r["reason"].splitlines()[0][:160] if r["reason"] else ""
            print(f"    {n} [{tag}] {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    total = len(cases)
    failed = total - passed
    pct = 100.0 * passed / total if total else 0.0
    print(f"({elapsed:.1f}s)", file=sys.stderr)
    print(f"conformance: {passed} passed, {failed} failed of {total} ({pct:.2f}%)")
    return 1 if args.min_percent is not None and pct < args.min_percent else 0


if __name__ == "__main__":
    sys.exit(main())

"""Numeric comparison of one run's outputs against another's, with the ONNX backend tests' rule:
``|actual - expected| <= atol + rtol * |expected|`` elementwise, NaNs where NaNs are expected,
same shapes and dtypes. Besides ok/not ok it keeps the worst absolute and relative errors, which
the report charts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Comparison:
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    mismatch: str | None = None

    def merge(self, other: "Comparison") -> "Comparison":
        return Comparison(
            self.ok and other.ok,
            max(self.max_abs_err, other.max_abs_err),
            max(self.max_rel_err, other.max_rel_err),
            self.mismatch or other.mismatch,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "max_abs_err": json_float(self.max_abs_err),
            "max_rel_err": json_float(self.max_rel_err),
            "mismatch": self.mismatch,
        }


def json_float(x: float | None) -> float | str | None:
    """JSON has no inf/nan: they become the strings ``"inf"`` / ``"nan"`` (see the schema)."""
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf"
    return float(x)


def _as_float64(a: np.ndarray) -> np.ndarray | None:
    if a.dtype.kind in "fiu" or a.dtype.kind == "V" or str(a.dtype) in ("bfloat16",) or a.dtype.kind == "b":
        try:
            return a.astype(np.float64)
        except (TypeError, ValueError):
            return None
    return None


def compare_arrays(
    actual: Any, expected: Any, rtol: float, atol: float, where: str = "output", check_values: bool = True
) -> Comparison:
    """Compare one output value (array, scalar, sequence as list, optional None); with
    ``check_values=False`` only structure, shapes and dtypes (for random ops)."""
    if expected is None or actual is None:
        if expected is None and actual is None:
            return Comparison(True)
        return Comparison(
            False,
            mismatch=f"{where}: got {'None' if actual is None else type(actual).__name__}, "
            f"expected {'None' if expected is None else type(expected).__name__}",
        )
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            n = len(actual) if isinstance(actual, (list, tuple)) else type(actual).__name__
            return Comparison(False, mismatch=f"{where}: got sequence {n}, expected a sequence of {len(expected)}")
        out = Comparison(True)
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            out = out.merge(compare_arrays(a, e, rtol, atol, f"{where}[{i}]", check_values))
        return out
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return Comparison(False, mismatch=f"{where}: map keys differ")
        out = Comparison(True)
        for k in expected:
            out = out.merge(compare_arrays(actual[k], expected[k], rtol, atol, f"{where}[{k!r}]", check_values))
        return out
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return Comparison(False, mismatch=f"{where}: shape {list(a.shape)}, expected {list(e.shape)}")
    strings = a.dtype.kind in "OSU" and e.dtype.kind in "OSU"  # str arrays may come back as object or <U
    if a.dtype != e.dtype and not strings:
        return Comparison(False, mismatch=f"{where}: dtype {a.dtype}, expected {e.dtype}")
    if not check_values:
        return Comparison(True)
    if strings:
        bad = sum(1 for x, y in zip(a.ravel().tolist(), e.ravel().tolist(), strict=True) if str(x) != str(y))
        return Comparison(
            bad == 0, float(bad > 0), float(bad > 0), None if bad == 0 else f"{where}: {bad} of {e.size} strings differ"
        )
    if e.dtype.kind == "b":
        bad = int(np.count_nonzero(a != e)) if a.size else 0
        return Comparison(
            bad == 0, float(bad > 0), float(bad > 0), None if bad == 0 else f"{where}: {bad} of {e.size} values differ"
        )
    af: np.ndarray | None
    ef: np.ndarray | None
    if e.dtype.kind == "c":
        af, ef = a.astype(np.complex128), e.astype(np.complex128)
    else:
        af, ef = _as_float64(a), _as_float64(e)
    if af is None or ef is None:  # a dtype NumPy cannot widen: compare the bytes
        nbytes = int(np.count_nonzero(a.view(np.uint8) != e.view(np.uint8))) if a.size else 0
        return Comparison(nbytes == 0, mismatch=None if nbytes == 0 else f"{where}: {nbytes} bytes differ ({e.dtype})")
    if af.size == 0:
        return Comparison(True)
    nan_a, nan_e = np.isnan(af), np.isnan(ef)
    if np.any(nan_a != nan_e):
        n = int(np.count_nonzero(nan_a != nan_e))
        return Comparison(False, math.nan, math.nan, f"{where}: NaN in {n} places where the other side has a number")
    mask = ~nan_e
    with np.errstate(invalid="ignore", over="ignore"):
        inf_e = np.isinf(ef) & mask
        if np.any(af[inf_e] != ef[inf_e]):
            return Comparison(False, math.inf, math.inf, f"{where}: infinities differ")
        fin = mask & ~inf_e
        diff = np.abs(af[fin] - ef[fin])
        mag = np.abs(ef[fin])
    if diff.size == 0:
        return Comparison(True)
    max_abs = float(np.max(diff))
    nz = mag > 0
    max_rel = float(np.max(diff[nz] / mag[nz])) if np.any(nz) else (0.0 if max_abs == 0 else math.inf)
    nbad = int(np.count_nonzero(diff > atol + rtol * mag))
    if nbad:
        return Comparison(
            False,
            max_abs,
            max_rel,
            f"{where}: {nbad} of {diff.size} values off (max abs {max_abs:.3g}, max rel {max_rel:.3g}; "
            f"rtol {rtol:g}, atol {atol:g})",
        )
    return Comparison(True, max_abs, max_rel)


def compare_outputs(
    actual: list[Any], expected: list[Any], names: list[str], rtol: float, atol: float, check_values: bool = True
) -> Comparison:
    if len(actual) != len(expected):
        return Comparison(False, mismatch=f"{len(actual)} outputs, expected {len(expected)}")
    out = Comparison(True)
    for a, e, n in zip(actual, expected, names, strict=False):
        out = out.merge(compare_arrays(a, e, rtol, atol, f"output {n!r}", check_values))
    return out

"""What the model answered, summarised: statistics of every output, the top-k classes of a
classifier's rows (named by the zoo model's labels when its wheel has them), and ``--save-outputs``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import InvalidArgument


def _is_distribution(a: Any) -> bool:
    import numpy as np

    return bool(a.size) and bool(np.all(a >= 0)) and bool(np.allclose(a.sum(axis=-1), 1.0, atol=1e-3))


def summarize(name: str, value: Any, labels: list[str] | None, top_k: int) -> dict[str, Any]:
    """Shape, dtype and statistics of one output; ``top_k`` per row for a classifier's scores (a
    2-d float output whose rows are probability distributions, or whose width matches ``labels``)."""
    import numpy as np

    if isinstance(value, (list, tuple, dict)):
        return {"name": name, "kind": type(value).__name__, "length": len(value)}
    a = np.asarray(value)
    out: dict[str, Any] = {"name": name, "shape": list(a.shape), "dtype": str(a.dtype)}
    if a.dtype.kind in "fiu" and a.size:
        f = a.astype(np.float64)
        finite = f[np.isfinite(f)]
        out["stats"] = {
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "mean": float(finite.mean()) if finite.size else None,
            "std": float(finite.std()) if finite.size else None,
            "nan": int(np.isnan(f).sum()),
            "inf": int(np.isinf(f).sum()),
        }
    elif a.dtype == np.bool_:
        out["stats"] = {"true": int(a.sum()), "false": int(a.size - a.sum())}
    named = labels is not None and a.ndim == 2 and a.shape[1] == len(labels)
    if a.dtype.kind == "f" and a.ndim == 2 and a.shape[1] >= 2 and (named or _is_distribution(a)):
        k = min(top_k, a.shape[1])
        out["top_k"] = []
        for row in a.astype(np.float64):
            best = np.argsort(-row, kind="stable")[:k]
            out["top_k"].append(
                [
                    {"index": int(i), "label": labels[i] if named and labels else None, "score": float(row[i])}
                    for i in best
                ]
            )
    return out


def stats_line(s: dict[str, Any]) -> str:
    """``[1, 214] float32  min 0 max 0.98 mean 0.0047 std 0.067`` (and NaN/Inf counts when there are any)."""
    if "kind" in s:
        return f"{s['kind']} of {s['length']}"
    text = f"{s['shape']} {s['dtype']}"
    st = s.get("stats")
    if st and "min" in st and st["min"] is not None:
        text += f"  min {st['min']:.4g}  max {st['max']:.4g}  mean {st['mean']:.4g}  std {st['std']:.4g}"
    elif st and "true" in st:
        text += f"  {st['true']} true, {st['false']} false"
    if st and (st.get("nan") or st.get("inf")):
        text += f"  ({st['nan']} NaN, {st['inf']} Inf)"
    return text


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "output"


def save(names: list[str], values: list[Any], path: str) -> list[str]:
    """Write the outputs: one ``.npz`` (arrays under their output names) when ``path`` ends in .npz,
    else one ``NAME.npy`` per output in the folder ``path``. Returns the files written."""
    import numpy as np

    target = Path(path)
    arrays = {n: np.asarray(v) for n, v in zip(names, values) if not isinstance(v, (list, tuple, dict))}
    try:
        if target.suffix == ".npz":
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:
                savez: Any = np.savez  # arrays by output name (np.savez types its keywords as its own options)
                savez(fh, **arrays)
            return [str(target)]
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for n, a in arrays.items():
            f = target / f"{_file_name(n)}.npy"
            np.save(f, a, allow_pickle=False)
            written.append(str(f))
        return written
    except OSError as exc:
        raise InvalidArgument(
            f"--save-outputs {path}: cannot write there: {exc.strerror or exc}; give a writable .npz file or folder"
        ) from None

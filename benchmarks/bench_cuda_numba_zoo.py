"""Every zoo model on the Numba-CUDA EP, on a real GPU: parity against the reference EP and latency
against onnxruntime in the same run.

For each model: a session with the Numba-CUDA EP first and the reference EP as the fallback for
what the GPU EP does not claim; the share of compute nodes on the GPU; the largest error against
the reference EP's answer relative to that output's scale (its largest magnitude, at least 1:
the bar is 1e-3 for float32 models, 1e-2 for float16 ones); cold session creation; the median
latency of ``--runs`` runs after warm-up, against onnxruntime's CPU EP (all cores and one thread)
and, where the installed onnxruntime has it, its CUDA EP. Inputs are the test suite's
``model_feed``: the shapes and ranges each model's own package uses.

Without a real GPU (or under NUMBA_ENABLE_CUDASIM=1) it says so and exits 0.
Run: ``python benchmarks/bench_cuda_numba_zoo.py [--models ...] [--json out.json]``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cpu_reference"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cuda_numba import gpu_or_exit, median_s  # noqa: E402
from test_real_models import MODELS, model_feed  # noqa: E402

EP = "NumbaCudaExecutionProvider"
REF = "CpuReferenceExecutionProvider"
SHAPE_OPS = {"Shape", "Constant", "ConstantOfShape", "Size"}
FLOAT16_MODELS = {"silero_vad_half"}


def scaled_error(got: list[Any], want: list[Any]) -> tuple[float, str]:
    """The largest error relative to its output's scale, and why it is infinite when it is."""
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("inf"), f"output {i}: {g.dtype}{list(g.shape)} != reference {w.dtype}{list(w.shape)}"
        if w.size == 0:
            continue
        if w.dtype.kind in "fc":
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            if not np.array_equal(np.isnan(g64), np.isnan(w64)):
                return float(
                    "inf"
                ), f"output {i}: NaN in {int(np.isnan(g64).sum())} values, reference {int(np.isnan(w64).sum())}"
            finite = np.isfinite(w64)
            scale = max(1.0, float(np.max(np.abs(w64[finite]))) if finite.any() else 1.0)
            worst = max(worst, float(np.nanmax(np.abs(g64 - w64))) / scale)
        elif not np.array_equal(g, w):
            return float("inf"), f"output {i}: {int((g != w).sum())} of {w.size} values differ"
    return worst, ""


def onnxruntime_sessions(path: str) -> dict[str, Any]:
    try:
        import onnxruntime as ort
    except Exception:
        return {}
    out: dict[str, Any] = {}
    for label, providers, threads in (
        ("ort_cpu_all", ["CPUExecutionProvider"], 0),
        ("ort_cpu_1", ["CPUExecutionProvider"], 1),
        ("ort_cuda", ["CUDAExecutionProvider"], 0),
    ):
        if providers[0] not in ort.get_available_providers():
            continue
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = threads
        try:
            out[label] = ort.InferenceSession(path, so, providers=providers)
        except Exception as exc:
            print(f"# {path}: onnxruntime {providers[0]} failed: {exc}", file=sys.stderr)
    return out


def one_model(name: str, runs: int) -> dict[str, Any]:
    import ep_core
    from ep_core.tools.zoo import fetch_model

    path = str(fetch_model(name))
    feeds = model_feed(name)
    row: dict[str, Any] = {"model": name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        sess = ep_core.InferenceSession(path, providers=[EP, REF])
        row["create_s"] = time.perf_counter() - t0
        compute = {k: v for k, v in sess.get_node_assignment().items() if v["op_type"] not in SHAPE_OPS}
        on_gpu = sum(1 for v in compute.values() if v["ep"] == EP)
        row["gpu_nodes"] = f"{on_gpu}/{len(compute)}"
        row["off_gpu_ops"] = sorted({v["op_type"] for v in compute.values() if v["ep"] != EP})
        got = sess.run(None, feeds)
        want = ep_core.InferenceSession(path, providers=[REF]).run(None, feeds)
        row["err"], row["why"] = scaled_error(got, want)
        row["bar"] = 1e-2 if name in FLOAT16_MODELS else 1e-3
        row["ok"] = row["err"] <= row["bar"]
        row["ep_ms"] = median_s(lambda: sess.run(None, feeds), runs, warmup=1) * 1e3
        for label, ort_sess in onnxruntime_sessions(path).items():
            row[label + "_ms"] = median_s(lambda s=ort_sess: s.run(None, feeds), runs, warmup=1) * 1e3
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    dev = gpu_or_exit()
    print(f"# device: {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}", flush=True)
    rows = []
    for name in args.models:
        try:
            rows.append(one_model(name, args.runs))
        except Exception as exc:
            traceback.print_exc()
            rows.append({"model": name, "failed": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    cols = ["ort_cpu_all_ms", "ort_cpu_1_ms", "ort_cuda_ms"]
    print("\n| model | GPU nodes | err / scale | ok | create s | EP ms | " + " | ".join(cols) + " |")
    print("|---|---|---:|---|---:|---:|" + "---:|" * len(cols))
    for r in rows:
        if "failed" in r:
            print(f"| {r['model']} | failed: {r['failed'][:120]} |")
            continue
        extra = " | ".join(f"{r[c]:.2f}" if c in r else "n/a" for c in cols)
        print(
            f"| {r['model']} | {r['gpu_nodes']} | {r['err']:.1e} | {'yes' if r['ok'] else 'NO'} | "
            f"{r['create_s']:.1f} | {r['ep_ms']:.2f} | {extra} |" + (f" {r['why']}" if r["why"] else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

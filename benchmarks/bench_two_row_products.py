"""Two-row products (``nn_common.few_rows``): one BLAS product against a gemv per row, on whole
zoo models through the reference EP, both in one session and one process, taken in turns (six
rounds, best of each), every engine at one thread. Prints the BLAS kernels NumPy loaded and which
way ``few_rows`` decides on them, then one row per model.

    .venv/bin/python benchmarks/bench_two_row_products.py [--models m ...]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cpu_reference"))
from test_real_models import model_feed  # noqa: E402

MODELS = ["romanizer_decoder", "dksplit_int8", "ddddocr_int8", "romanizer_encoder"]


def _best(sess, feed, runs: int) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feed)
    return (time.perf_counter() - t) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=MODELS)
    args = parser.parse_args()
    from threadpoolctl import threadpool_info

    import ep_core
    from ep_core.tools import zoo
    from ep_cpu_reference.kernels import nn_common

    decided = nn_common._two_row_gemm_pays()
    blas = ", ".join(f"{i.get('internal_api')} {i.get('architecture')}" for i in threadpool_info())
    print(f"# BLAS: {blas}; few_rows takes one product on these kernels: {decided}")
    print("| model | one product (ms) | gemv per row (ms) | ratio | same outputs |")
    print("|---|---:|---:|---:|---|")
    for name in args.models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = ep_core.InferenceSession(str(zoo.fetch_model(name)), providers=["CpuReferenceExecutionProvider"])
        feed = model_feed(name)
        runs = max(1, int(0.3 / max(_best(sess, feed, 3), 1e-6)))
        best, outs = {True: float("inf"), False: float("inf")}, {}
        for _ in range(6):
            for one_product in (True, False):
                nn_common._two_row_gemm_pays = lambda v=one_product: v  # type: ignore[assignment]
                outs[one_product] = sess.run(None, feed)
                best[one_product] = min(best[one_product], _best(sess, feed, runs))
        same = all(np.array_equal(a, b) for a, b in zip(outs[True], outs[False], strict=True))
        ratio = best[True] / best[False]
        print(f"| {name} | {best[True] * 1e3:.3f} | {best[False] * 1e3:.3f} | {ratio:.2f} | {same} |")


if __name__ == "__main__":
    main()

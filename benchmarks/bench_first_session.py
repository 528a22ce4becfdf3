"""A process's first session of a model on ep-core's reference EP against onnxruntime's CPU EP:
creation and the first run, each sample a fresh process, both at one thread.

    .venv/bin/python benchmarks/bench_first_session.py [--models m ...] [--rounds N]

What the clock covers: ``InferenceSession(model)`` and one ``run``. Imports are done before it on
both sides (``onnxruntime``; ``ep_core`` with its runtime and ``onnx``), so the figures are what a
session costs in a process that has already imported its engine. ep-core columns:
- "no cache": the graph optimizer's on-disk cache is empty (a model the machine has not seen);
- "cached": a second process finds what the first wrote (``EP_CORE_OPTIMIZER_CACHE_DIR``);
- "families": how many of the reference EP's kernel modules the session imported (a query about
  an op imports only the modules registering it, ``ep_cpu_reference.family_index``).
Each figure is the best of ``--rounds`` fresh processes."""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "cpu_reference"))

DEFAULT_MODELS = ["magika", "ppocr_det", "ppocr_rec", "minilm_l6", "svc_digits", "forest_digits", "silero_vad"]


def child(engine: str, name: str) -> None:
    """One sample: import the engine, then time session creation and the first run."""
    import warnings

    import numpy as np  # noqa: F401
    from test_real_models import model_feed

    from ep_core.tools.zoo import fetch_model

    path, feed = str(fetch_model(name)), model_feed(name)
    if engine == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        t0 = time.perf_counter()
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    else:
        import onnx  # noqa: F401

        import ep_core

        session_class = ep_core.InferenceSession  # resolves the runtime (imported before the clock)
        so = ep_core.SessionOptions(intra_op_num_threads=1)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = session_class(path, so, providers=["CpuReferenceExecutionProvider"])
    t1 = time.perf_counter()
    sess.run(None, feed)
    t2 = time.perf_counter()
    families = sum(1 for m in sys.modules if m.startswith("ep_cpu_reference.kernels."))
    print(json.dumps({"create": t1 - t0, "first_run": t2 - t1, "families": families}))


def _sample(engine: str, name: str, cache: str) -> dict:
    env = dict(os.environ, EP_CORE_OPTIMIZER_CACHE_DIR=cache)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", engine, name], capture_output=True, text=True, env=env, check=False
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{engine} {name}: {proc.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def _best(samples: list[dict]) -> dict:
    return min(samples, key=lambda s: s["create"] + s["first_run"])


def measure(name: str, rounds: int) -> dict:
    """Best of ``rounds`` fresh processes per column (the engines take turns within a round)."""
    out: dict[str, list[dict]] = {"ort": [], "cold": [], "cached": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            out["ort"].append(_sample("ort", name, f"{tmp}/unused"))
            out["cold"].append(_sample("ep", name, f"{tmp}/cold{r}"))  # a new empty cache each round
            out["cached"].append(_sample("ep", name, f"{tmp}/cold{r}"))  # the cache the line above wrote
    return {k: _best(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "MODEL"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    print(
        "| model | onnxruntime create + first run (ms) | ep-core no cache (ms) | ep-core cached (ms) "
        "| cached / onnxruntime | families imported |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    ratios = []
    for name in args.models:
        r = measure(name, args.rounds)
        total = {k: 1e3 * (v["create"] + v["first_run"]) for k, v in r.items()}
        ratios.append(total["cached"] / total["ort"])
        print(
            f"| {name} | {total['ort']:.1f} | {total['cold']:.1f} | {total['cached']:.1f} "
            f"| {ratios[-1]:.2f} | {r['cached']['families']} |",
            flush=True,
        )
    print(f"\ngeometric mean cached / onnxruntime: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")


if __name__ == "__main__":
    main()

"""EPContext: session creation from a ctx model vs a cold compile, and inference latency of the
Numba CPU EP vs the CPU reference EP vs onnxruntime's CPU EP, on magika and PP-OCRv4 det.

Every session-creation sample runs in a fresh Python process (nothing compiled survives between
samples: the EP compiles with Numba's disk cache off, its in-process kernel cache starts empty, and
each sample gets its own empty per-machine kernel cache directory via
``$EP_NUMBA_CPU_KERNEL_CACHE_DIR``, so "cold" is a true first compile, store of its cache entries
included, and no context load is served from the user's ``~/.cache/ep-numba-cpu``),
after ep_core, NumPy and Numba are imported, so imports cost the same on both sides. Two numbers
per sample: the first session of the process (every one-time cost included: plugin imports, device
probing, Numba's own initialisation), and a second measurement after a warm-up session of an
unrelated one-node model (what a server creating its second session sees). The EP's own share
(``ep_compile`` when compiling, building the EPContext kernels when loading) is reported too.
Latencies are measured in one process after two warm-up runs. BLAS and onnxruntime run one thread
(``--threads``): on a shared machine multi-threaded BLAS latencies are noise.

    .venv/bin/python benchmarks/bench_epcontext.py [--repeat 3] [--runs 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"


def feed_for(name: str):  # type: ignore[no-untyped-def]
    import numpy as np

    rng = np.random.RandomState(0)
    if name == "magika":
        return {"bytes": rng.randint(0, 257, size=(1, 2048)).astype(np.int32)}
    return {"x": rng.rand(1, 3, 256, 256).astype(np.float32)}


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        "warmup",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def child(mode: str, model: str, out: str | None, warm: bool) -> None:
    """One fresh-process sample: create a session and print its creation time."""
    import numba  # noqa: F401  (imported before timing on both sides)
    import numpy  # noqa: F401

    from ep_core import InferenceSession, SessionOptions
    from ep_numba_cpu.ep import NumbaCpuEp

    ep_time = [0.0]
    compile_orig, build_orig = NumbaCpuEp.ep_compile, NumbaCpuEp._build_context_kernel

    def ep_compile(self, graphs, fused_nodes):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return compile_orig(self, graphs, fused_nodes)
        finally:
            ep_time[0] += time.perf_counter() - t

    def build(self, node, ctx):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return build_orig(self, node, ctx)
        finally:
            ep_time[0] += time.perf_counter() - t

    NumbaCpuEp.ep_compile, NumbaCpuEp._build_context_kernel = ep_compile, build
    if warm:
        InferenceSession(_tiny_model(), providers=[NUMBA]).close()
    so = SessionOptions()
    if mode == "cold":
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", out)
        so.add_session_config_entry("ep.context_overwrite", "1")
    t0 = time.perf_counter()
    sess = InferenceSession(model, so, providers=[NUMBA])
    dt = time.perf_counter() - t0
    from ep_numba_cpu.codegen import STATS

    print(
        json.dumps(
            {
                "seconds": dt,
                "ep_seconds": ep_time[0],
                "compiled": STATS["compiled"],
                "rebuilt": STATS["rebuilt"],
                "fused": sum(1 for a in sess.get_node_assignment().values() if a["ep"] == NUMBA),
            }
        )
    )


def sample(mode: str, model: Path, out: Path | None = None, warm: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "warm" if warm else "first", str(model)] + (
        [str(out)] if out else []
    )
    with tempfile.TemporaryDirectory(prefix="bench_epcontext_kernels_") as kernels:
        env = dict(os.environ, EP_NUMBA_CPU_KERNEL_CACHE_DIR=kernels)  # empty: a cold compile stays cold
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def latency(sess, feed, runs: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(2):
        sess.run(None, feed)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process samples per creation measurement")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per latency measurement")
    ap.add_argument("--models", default="magika,ppocr_det")
    ap.add_argument("--threads", type=int, default=1, help="BLAS and onnxruntime threads (0: their defaults)")
    args = ap.parse_args()
    if args.threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)

    import numpy as np
    import onnxruntime as ort

    from ep_core import InferenceSession
    from ep_core.tools.zoo import fetch_model

    work = Path(tempfile.mkdtemp(prefix="bench_epcontext_"))
    rows_create, rows_lat = [], []
    try:
        for name in args.models.split(","):
            src = work / f"{name}.onnx"
            shutil.copy(fetch_model(name), src)
            ctx = work / f"{name}_ctx.onnx"
            for warm_first in (False, True):
                cold = [sample("cold", src, ctx, warm_first) for _ in range(args.repeat)]
                load = [sample("ctx", ctx, None, warm_first) for _ in range(max(args.repeat, 3))]
                c = statistics.median(s["seconds"] for s in cold)
                w = statistics.median(s["seconds"] for s in load)
                ce = statistics.median(s["ep_seconds"] for s in cold)
                we = statistics.median(s["ep_seconds"] for s in load)
                rows_create.append(
                    (
                        name,
                        "after warm-up session" if warm_first else "first session",
                        cold[0]["fused"],
                        cold[0]["compiled"],
                        load[0]["rebuilt"],
                        c,
                        w,
                        c / w,
                        ce,
                        we,
                        max(s["compiled"] for s in load),
                    )
                )

            feed = feed_for(name)
            numba_sess = InferenceSession(str(ctx), providers=[NUMBA])
            ref_sess = InferenceSession(str(src), providers=[REF])
            so = ort.SessionOptions()
            if args.threads:
                so.intra_op_num_threads = args.threads
                so.inter_op_num_threads = args.threads
            ort_sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
            a, b, o = (numba_sess.run(None, feed)[0], ref_sess.run(None, feed)[0], ort_sess.run(None, feed)[0])
            err = float(max(np.abs(a - o).max(), np.abs(a - b).max()))
            runs = args.runs if name == "magika" else max(3, args.runs // 4)
            rows_lat.append(
                (
                    name,
                    latency(numba_sess, feed, runs),
                    latency(ref_sess, feed, runs),
                    latency(ort_sess, feed, runs),
                    err,
                    {k: list(v.shape) for k, v in feed.items()},
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    import numba

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), "
        f"onnxruntime {ort.__version__}\n"
    )
    print(f"BLAS/onnxruntime threads: {args.threads or 'default'}; {args.repeat} fresh processes per cold compile\n")
    print(
        "| model | session | nodes fused | kernels compiled (cold) | kernels loaded (ctx) | cold compile (s) | "
        "from ctx model (s) | speed-up | EP share: compile (s) | EP share: load (s) | EP speed-up | "
        "compilations when loading |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, when, fused, comp, reb, c, w, r, ce, we, lc in rows_create:
        print(
            f"| {name} | {when} | {fused} | {comp} | {reb} | {c:.2f} | {w:.3f} | {r:.1f}x | {ce:.2f} | {we:.3f} | "
            f"{ce / we:.0f}x | {lc} |"
        )
    print(
        "\n| model | input | Numba CPU EP (ms) | CPU reference EP (ms) | onnxruntime CPU (ms) | "
        "reference / Numba (>1: Numba faster) | Numba / onnxruntime (>1: onnxruntime faster) | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, n, r, o, err, shapes in rows_lat:
        print(
            f"| {name} | {shapes} | {n * 1e3:.2f} | {r * 1e3:.2f} | {o * 1e3:.2f} | {r / n:.2f} | "
            f"{n / o:.2f} | {err:.1e} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None, sys.argv[3] == "warm")
    else:
        main()

"""Latency of the real zoo models on the NumPy reference EP, onnxruntime CPU (1 thread) and
onnx.reference.ReferenceEvaluator, in one run, with per-model ratios and geometric means.

Usage: python benchmarks/bench_cpu_reference_models.py [--runs-seconds S] [--ref-timeout S]

BLAS and OpenMP are pinned to one thread before NumPy loads, so every engine gets one core.
Each engine reports its best (minimum) and median wall-clock latency and its median CPU time
(``time.process_time``, all threads of the process) over the same time budget, taken in
interleaved slices (``interleaved``). On a shared machine the wall clock includes time the process
waited for a core; CPU time does not. The first line printed names the BLAS kernels NumPy runs
(threadpoolctl) and ``OPENBLAS_CORETYPE`` when the environment forces them.
ReferenceEvaluator runs in a child process under a time limit (it can crash or take minutes);
its outputs are also compared with onnxruntime and a mismatch is reported, not hidden."""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cpu_reference"))
from test_real_models import MODELS, model_feed  # noqa: E402


def _latency(fn, budget_s: float, min_runs: int = 3, max_runs: int = 500) -> tuple[float, float, float]:
    """(best wall, median wall, median CPU) seconds per call after one warm-up call. CPU time
    (this process's, all threads) is what a call costs whatever else the machine is running."""
    fn()  # warm-up (plans, caches)
    walls: list[float] = []
    cpus: list[float] = []
    start = time.perf_counter()
    while len(walls) < min_runs or (time.perf_counter() - start < budget_s and len(walls) < max_runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return float(np.min(walls)), float(np.median(walls)), float(np.median(cpus))


def interleaved(fns: dict, budget_s: float, rounds: int = 5) -> tuple[dict, dict]:
    """``_latency`` of each engine in ``fns`` (name -> call), the budget split into ``rounds``
    slices taken in turn (A B C, B C A, ...): on a shared host whose speed drifts by 10-40% over
    minutes, engines timed one after the other would see different machines; each ratio here
    compares samples taken over the same minutes. Returns (name -> (best, median, CPU median),
    name -> error of an engine that raised, which is dropped from the later rounds)."""
    errors: dict = {}
    walls: dict = {k: [] for k in fns}
    cpus: dict = {k: [] for k in fns}

    def sample(name: str) -> bool:
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            fns[name]()
        except Exception as exc:  # reported beside the table, not hidden
            errors[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            return False
        walls[name].append(time.perf_counter() - t0)
        cpus[name].append(time.process_time() - c0)
        return True

    for name in list(fns):
        if sample(name):  # warm-up (plans, caches): not kept
            walls[name].clear()
            cpus[name].clear()
    names = [n for n in fns if n not in errors]
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)] if names else []:
            start = time.perf_counter()
            while name not in errors and (
                len(walls[name]) <= r
                or (time.perf_counter() - start < budget_s / rounds and len(walls[name]) < 500 * (r + 1) // rounds)
            ):
                sample(name)
    done = {k: (float(np.min(walls[k])), float(np.median(walls[k])), float(np.median(cpus[k]))) for k in names}
    return {k: v for k, v in done.items() if k not in errors}, errors


def blas_note() -> str:
    """Which BLAS kernels NumPy and SciPy run (threadpoolctl), and whether the environment chose
    them (``OPENBLAS_CORETYPE``): conv and matmul latencies of both NumPy-based EPs follow it."""
    from threadpoolctl import threadpool_info

    libs = sorted(
        {
            f"{i['internal_api']} {i.get('version')} {i.get('architecture')}"
            for i in threadpool_info()
            if i["user_api"] == "blas"
        }
    )
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return "BLAS: " + "; ".join(libs) + (f" (OPENBLAS_CORETYPE={forced} set by the environment)" if forced else "")


def _max_err(got, want) -> float:
    return max(
        (float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)))) if np.size(w) else 0.0)
        for g, w in zip(got, want, strict=False)
    )


def _ort(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ref_child(name: str, budget_s: float) -> None:
    """Child process: time ReferenceEvaluator on one model, print one JSON line."""
    from onnx.reference import ReferenceEvaluator

    from ep_core.tools.zoo import fetch_model

    path = str(fetch_model(name))
    feed = model_feed(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ev = ReferenceEvaluator(path)
            c0 = time.process_time()
            t0 = time.perf_counter()
            got = ev.run(None, feed)
            first = time.perf_counter() - t0
            first_cpu = time.process_time() - c0
            # a first run longer than the budget is the measurement (one sample)
            lat = (
                (first, first, first_cpu)
                if first > budget_s
                else _latency(lambda: ev.run(None, feed), budget_s, min_runs=1)
            )
        except Exception as exc:  # recorded, not hidden
            print(json.dumps({"status": "crash", "error": f"{type(exc).__name__}: {str(exc)[:120]}"}))
            return
    want = _ort(path).run(None, feed)
    err = _max_err(got, want)
    ok = all(
        np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), atol=1e-4, rtol=1e-3)
        for g, w in zip(got, want, strict=False)
    )
    print(
        json.dumps(
            {"status": "ok" if ok else "wrong", "latency": lat[0], "median": lat[1], "cpu": lat[2], "max_err": err}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs-seconds", type=float, default=2.0, help="time budget per engine and model")
    ap.add_argument("--ref-timeout", type=float, default=120.0, help="limit for ReferenceEvaluator per model")
    ap.add_argument("--ref-child", help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*", default=MODELS)
    args = ap.parse_args()
    if args.ref_child:
        ref_child(args.ref_child, args.runs_seconds)
        return

    import ep_core
    from ep_core.tools.zoo import fetch_model

    try:
        import scipy.linalg  # noqa: F401  (its BLAS too, for blas_note)
    except ImportError:  # not a dependency of the reference EP
        pass
    print(f"# {blas_note()}", flush=True)
    rows = []
    failed: list[tuple[str, str]] = []  # (model, why): the reference EP could not run it
    for name in args.models:
        path = str(fetch_model(name))
        feed = model_feed(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                opts = ep_core.SessionOptions(intra_op_num_threads=1)  # as onnxruntime's side: one thread each
                sess = ep_core.InferenceSession(path, opts, providers=["CpuReferenceExecutionProvider"])
                got = sess.run(None, feed)
            except Exception as exc:  # reported under the table, not hidden
                failed.append((name, f"{type(exc).__name__}: {str(exc)[:160]}"))
                print(f"# {name}: the reference EP failed: {failed[-1][1]}", file=sys.stderr, flush=True)
                continue
        ort_sess = _ort(path)
        lat, errors = interleaved(
            {"ep": lambda s=sess, f=feed: s.run(None, f), "ort": lambda s=ort_sess, f=feed: s.run(None, f)},
            args.runs_seconds,
        )
        if errors:  # a run that failed while being timed: reported under the table
            failed.append((name, "; ".join(f"{k} failed while timed: {v}" for k, v in errors.items())))
            print(f"# {name}: {failed[-1][1]}", file=sys.stderr, flush=True)
            continue
        (ep_lat, ep_med, ep_cpu), (ort_lat, ort_med, ort_cpu) = lat["ep"], lat["ort"]
        ep_err = _max_err(got, ort_sess.run(None, feed))
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--ref-child", name, "--runs-seconds", str(args.runs_seconds)],
                capture_output=True,
                text=True,
                timeout=args.ref_timeout,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            ref = json.loads(lines[-1]) if lines else {"status": "crash", "error": f"exit {proc.returncode}"}
        except subprocess.TimeoutExpired:
            ref = {"status": "timeout"}
        rows.append((name, ep_lat, ep_med, ep_cpu, ort_lat, ort_med, ort_cpu, ep_err, ref))
        print(
            f"# {name}: ep {ep_lat * 1e3:.2f}/{ep_med * 1e3:.2f}/cpu {ep_cpu * 1e3:.2f} ms, "
            f"ort {ort_lat * 1e3:.2f}/{ort_med * 1e3:.2f}/cpu {ort_cpu * 1e3:.2f} ms, ref {ref}",
            file=sys.stderr,
            flush=True,
        )

    print(
        "| model | ref EP best / median / CPU (ms) | ORT 1 thread best / median / CPU (ms) | EP / ORT best (median; CPU) "
        "| EP max abs err vs ORT | ReferenceEvaluator best / CPU (ms) | RefEval / EP best (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    ort_ratios, med_ratios, cpu_ratios, ref_ratios, ref_cpu_ratios, ref_lower = [], [], [], [], [], False
    for name, ep_lat, ep_med, ep_cpu, ort_lat, ort_med, ort_cpu, ep_err, ref in rows:
        r = ep_lat / ort_lat
        ort_ratios.append(r)
        med_ratios.append(ep_med / ort_med)
        cpu_ratios.append(ep_cpu / ort_cpu)
        st = ref["status"]
        if st in ("ok", "wrong"):
            ref_cell = f"{ref['latency'] * 1e3:.1f} / {ref['cpu'] * 1e3:.1f}" + (
                "" if st == "ok" else f" (wrong: max err {ref['max_err']:.2g})"
            )
            sp = ref["latency"] / ep_lat
            ref_ratios.append(sp)
            ref_cpu_ratios.append(ref["cpu"] / ep_cpu)
            sp_cell = f"{sp:.1f}x ({ref['cpu'] / ep_cpu:.1f}x)"
        elif st == "timeout":
            ref_cell = f"timeout > {args.ref_timeout:.0f} s"
            sp = args.ref_timeout / ep_lat
            ref_ratios.append(sp)
            ref_cpu_ratios.append(args.ref_timeout / ep_cpu)
            ref_lower = True
            sp_cell = f"> {sp:.0f}x"
        else:
            ref_cell = f"crash ({ref.get('error', '')[:60]})"
            sp_cell = "n/a"
        print(
            f"| {name} | {ep_lat * 1e3:.2f} / {ep_med * 1e3:.2f} / {ep_cpu * 1e3:.2f} "
            f"| {ort_lat * 1e3:.2f} / {ort_med * 1e3:.2f} / {ort_cpu * 1e3:.2f} "
            f"| {r:.2f} ({ep_med / ort_med:.2f}; {ep_cpu / ort_cpu:.2f}) | {ep_err:.2g} | {ref_cell} | {sp_cell} |"
        )

    for name, why in failed:
        print(f"| {name} | failed: {why} | | | | | |")

    def gmean(v: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")

    print()
    print(
        f"geometric mean EP / ORT-1-thread: {gmean(ort_ratios):.2f}x best-vs-best, {gmean(med_ratios):.2f}x "
        f"median-vs-median, {gmean(cpu_ratios):.2f}x CPU time, over {len(ort_ratios)} models"
    )
    print(
        f"geometric mean ReferenceEvaluator / EP: {gmean(ref_ratios):.1f}x best-vs-best, {gmean(ref_cpu_ratios):.1f}x CPU time, "
        f"over {len(ref_ratios)} models where it ran"
        + (" (timeouts counted at the limit: a lower bound)" if ref_lower else "")
        + "; runs with wrong outputs are included and marked in the table"
    )


if __name__ == "__main__":
    main()

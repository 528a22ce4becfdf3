"""ep-core's latency ratio to onnxruntime over the zoo, on a quiet machine and with CPU-bound
processes running beside it (issue 13: the loaded ratio must stay within 1.3x of the quiet one).

Usage: python benchmarks/bench_contention.py [--seconds S] [--rounds R] [--busy N] [--models NAME ...]

Both engines at default options, then both at ``intra_op_num_threads=1``: ep-core on
``CpuReferenceExecutionProvider``, onnxruntime on ``CPUExecutionProvider``, each in its own
worker process (one session per model, made and warmed up once), so neither engine's thread pool
or settings reach the other. "loaded" runs ``N`` (default: the CPUs this process may use)
``python -c "while True: pass"`` processes beside them; they are started once, stopped
(SIGSTOP) for the quiet measurements and resumed (SIGCONT) for the loaded ones, and killed at
the end. Measurements are interleaved, so a change in the machine's other load hits both
engines and both conditions alike: ``R`` rounds, each measuring quiet then loaded (loaded first
in odd rounds), each model on both engines in turn, ``S`` seconds (at least 3 runs) per model,
engine and round. The figure is the median wall-clock latency over all of a cell's runs; the
median CPU time of the worker process per run is reported beside it. Nothing is pinned or set in
the environment: the engines size their own thread pools."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cpu_reference"))

CONFIGS = (("default options", 0), ("intra_op_num_threads=1", 1))
ENGINES = ("ep-core", "onnxruntime")
CONDITIONS = ("quiet", "loaded")


def worker(engine: str, threads: int, models: list[str]) -> None:
    """Make a session per model, then answer ``<model> <seconds>`` lines with the runs' times."""
    from test_real_models import model_feed

    from ep_core.tools.zoo import fetch_model

    if engine == "ep-core":
        import ep_core

        def session(path: str) -> Any:
            opts = ep_core.SessionOptions(intra_op_num_threads=threads)
            return ep_core.InferenceSession(path, opts, providers=["CpuReferenceExecutionProvider"])
    else:
        import onnxruntime as ort

        def session(path: str) -> Any:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            if threads:
                so.intra_op_num_threads = threads
            return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    warnings.simplefilter("ignore")
    sessions = {name: (session(str(fetch_model(name))), model_feed(name)) for name in models}
    for sess, feed in sessions.values():
        for _ in range(2):
            sess.run(None, feed)
    print("ready", flush=True)
    for line in sys.stdin:
        name, seconds = line.split()
        sess, feed = sessions[name]
        walls: list[float] = []
        cpus: list[float] = []
        start = time.perf_counter()
        while len(walls) < 3 or time.perf_counter() - start < float(seconds):
            c0, t0 = time.process_time(), time.perf_counter()
            sess.run(None, feed)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(json.dumps({"wall": walls, "cpu": cpus}), flush=True)


def _start_worker(engine: str, threads: int, models: list[str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--worker", engine, str(threads), "--models", *models]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the {engine} worker (threads={threads}) failed to start")
    return proc


def _ask(proc: subprocess.Popen[str], name: str, seconds: float) -> dict[str, list[float]]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{name} {seconds}\n")
    proc.stdin.flush()
    answer: dict[str, list[float]] = json.loads(proc.stdout.readline())
    return answer


def _median(values: list[float]) -> float:
    s = sorted(values)
    return (s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2


def _gmean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    from test_real_models import MODELS

    from ep_core.host.threads import available_cpus

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.3, help="timed runs per model, engine, condition and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=available_cpus(), help="CPU-bound processes for 'loaded'")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.models)
        return

    began = time.time()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    samples: dict[tuple[int, str, str, str], dict[str, list[float]]] = {}
    loads: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    try:
        for _, threads in CONFIGS:
            workers = {engine: _start_worker(engine, threads, args.models) for engine in ENGINES}
            try:
                for r in range(args.rounds):
                    for condition in CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]:
                        for p in busy:
                            p.send_signal(signal.SIGCONT if condition == "loaded" else signal.SIGSTOP)
                        time.sleep(0.5)
                        for i, name in enumerate(args.models):
                            for engine in ENGINES if (i + r) % 2 == 0 else ENGINES[::-1]:
                                got = _ask(workers[engine], name, args.seconds)
                                cell = samples.setdefault((threads, condition, engine, name), {"wall": [], "cpu": []})
                                cell["wall"] += got["wall"]
                                cell["cpu"] += got["cpu"]
                        loads[condition].append(os.getloadavg()[0])
                    print(f"# threads={threads} round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
            finally:
                for proc in workers.values():
                    proc.kill()
                    proc.wait()
    finally:
        for p in busy:
            p.kill()
            p.wait()

    print(
        f"CPUs this process may use: {available_cpus()}; CPU-bound processes beside it when loaded: {args.busy}; "
        f"{args.rounds} rounds of {args.seconds} s per model, engine and condition; "
        f"{time.time() - began:.0f} s in all"
    )
    print(
        "1-minute load average at the end of each block: quiet "
        + ", ".join(f"{v:.1f}" for v in loads["quiet"])
        + "; loaded "
        + ", ".join(f"{v:.1f}" for v in loads["loaded"])
        + "\n"
    )
    verdicts = []
    for label, threads in CONFIGS:
        print(f"{label}:\n")
        print(
            "| model | quiet: ep-core / ORT ms (CPU ms) | quiet ratio | loaded: ep-core / ORT ms (CPU ms) "
            "| loaded ratio | loaded / quiet |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        ratios: dict[str, list[float]] = {c: [] for c in CONDITIONS}
        for name in args.models:
            cells = []
            for condition in CONDITIONS:
                ep = samples[(threads, condition, "ep-core", name)]
                ort = samples[(threads, condition, "onnxruntime", name)]
                ep_wall, ort_wall = _median(ep["wall"]), _median(ort["wall"])
                ratios[condition].append(ep_wall / ort_wall)
                cells += [
                    f"{ep_wall * 1e3:.2f} / {ort_wall * 1e3:.2f} "
                    f"({_median(ep['cpu']) * 1e3:.2f} / {_median(ort['cpu']) * 1e3:.2f})",
                    f"{ep_wall / ort_wall:.2f}",
                ]
            print(f"| {name} | {' | '.join(cells)} | {ratios['loaded'][-1] / ratios['quiet'][-1]:.2f}x |")
        quiet, loaded = _gmean(ratios["quiet"]), _gmean(ratios["loaded"])
        verdicts.append((label, loaded / quiet))
        print(f"| **geometric mean** | | **{quiet:.2f}** | | **{loaded:.2f}** | **{loaded / quiet:.2f}x** |\n")
    for label, v in verdicts:
        print(f"{label}: loaded ratio / quiet ratio = {v:.2f}x ({'within' if v <= 1.3 else 'NOT within'} 1.3x)")


if __name__ == "__main__":
    main()

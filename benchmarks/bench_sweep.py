"""Sweeps in this process, in local worker processes under the case timeout, and on a local Ray
cluster (``ep_core.tools.sweep``): wall time of the same sweep in each, every result checked
identical apart from timings.

Three sweeps: ``nodes``, the parity report of ``--ep`` (default the Numba CPU EP) on the ONNX node
tests of the ops it declares (``--only-ep-ops``; each case runs on the EP and on the reference
EP); ``models``, its parity report on the zoo's real models; ``conformance``, ``ep-core
conformance`` of the reference EP on every ONNX node test with its exclusions file (random ops
out; one run per case, no JIT). Workers are fresh processes, so each compiles the Numba EP's
kernels again (JIT: most of a cold Numba sweep); "warm" rows run after the kernels were compiled
in that process (in-process) or in those workers (Ray, cluster kept up).

    NUMBA_ENABLE_CUDASIM=1 .venv/bin/python benchmarks/bench_sweep.py [--ep NAME] [--cpus 2] \\
        [--sweeps nodes,models,conformance]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ep_core.tools.parity import build_report
from ep_core.tools.parity.cases import node_cases
from ep_core.tools.sweep import LocalProcessExecutor

EXCLUSIONS = Path(__file__).resolve().parents[1] / "docs" / "conformance" / "cpu_reference.toml"


def strip_timings(data: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    data.pop("generated_at")
    for c in data["runtime"]["cases"] + data["runtime"]["models"]:
        c.pop("seconds")
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ep", default="NumbaCpuExecutionProvider")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster, and local workers")
    parser.add_argument("--sweeps", default="nodes,models,conformance")
    args = parser.parse_args()
    import ray

    from ep_core.tools.conformance import run_conformance
    from ep_core.tools.sweep.ray_executor import connect
    from ep_core.tools.zoo import MODELS

    def parity(**kw: Any) -> Callable[..., tuple[Any, int]]:
        def sweep(**where: Any) -> tuple[Any, int]:
            data = build_report(args.ep, static=False, runtime=True, **kw, **where).data
            return strip_timings(data), data["runtime"]["totals"]["total"]

        return sweep

    def conformance(**where: Any) -> tuple[Any, int]:
        run = run_conformance("CpuReferenceExecutionProvider", exclusions=EXCLUSIONS, **where)  # random ops out
        return run.results, len(run.results)

    sweeps = {
        "nodes": parity(only_ep_ops=True),
        "models": parity(node_tests=False, models=list(MODELS)),
        "conformance": conformance,
    }
    node_cases()  # collect the onnx test cases once, outside every timing
    t0 = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="warning", log_to_driver=False)
    ray.shutdown()
    start_stop = time.perf_counter() - t0
    table: dict[str, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for name in args.sweeps.split(","):
        sweep, results, times = sweeps[name], [], table.setdefault(name, {})

        def timed(label: str, **where: Any) -> None:
            t0 = time.perf_counter()
            result, sizes[name] = sweep(**where)  # noqa: B023
            times[label] = time.perf_counter() - t0  # noqa: B023
            results.append(result)  # noqa: B023

        timed("in this process (--case-timeout 0)")
        timed("in this process, warm")
        timed("1 local worker process (--case-timeout 120)", case_timeout=120)
        timed(f"{args.cpus} local worker processes", cluster=LocalProcessExecutor(120, workers=args.cpus))
        timed(f"Ray --cluster local ({args.cpus} CPUs), cluster start included", cluster="local")
        with connect("local", num_cpus=args.cpus):
            timed(f"Ray, {args.cpus}-CPU cluster up, new workers", cluster="local")
            timed(f"Ray, {args.cpus}-CPU cluster up, warm workers", cluster="local")
        assert all(r == results[0] for r in results), f"{name}: the results differ apart from timings"

    print(
        f"\n{args.ep} parity (nodes, models: 2 runs per case), reference EP conformance: "
        f"{', '.join(f'{k} = {n} cases' for k, n in sizes.items())}; {os.cpu_count()} cores {platform.machine()}, "
        f"Python {platform.python_version()}, Ray {ray.__version__}; a {args.cpus}-CPU local Ray cluster starts and "
        f"stops in {start_stop:.1f} s; every sweep's results identical apart from timings\n"
    )
    print("| where the cases ran | " + " | ".join(f"{k}: s (cases/s)" for k in table) + " |")
    print("|---|" + "---:|" * len(table))
    for label in next(iter(table.values())):
        rates = {k: sizes[k] / t[label] for k, t in table.items()}
        cells = [f"{t[label]:.1f} ({rates[k]:.{2 if rates[k] < 10 else 0}f})" for k, t in table.items()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

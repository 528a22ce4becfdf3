"""Batch inference: a single-process ``InferenceSession`` loop against Ray Data with 1 and 2
actors (``Dataset.map_batches(EpCoreBatchPredictor, ...)``) on a local Ray cluster, and an
actor's start-up with and without an EPContext model.

magika (file-type classifier, 1x2048 int32 per row) on ``--provider`` (default the Numba CPU EP,
whose kernels are compiled at session creation unless an EPContext model brings them). The
driver compiles the EPContext model once (``compile_context_model``); the loop and the actors all
load it, so the throughput rows compare running, not compiling. Every mode's outputs are checked
equal to the loop's. "wall" is end to end (for Ray: starting the actors, scheduling, moving
rows); "running" is the loop's runs, or for Ray the span from the first batch's start to the last
batch's end in any actor.

    .venv/bin/python benchmarks/bench_batch.py [--rows 1024] [--batch 64] [--cpus 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

import numpy as np

from ep_core import InferenceSession, SessionOptions
from ep_core.tools.batch import EpCoreBatchPredictor, compile_context_model
from ep_core.tools.zoo import fetch_model


def loop(model: Any, data: np.ndarray, batch: int, provider: str, threads: int) -> tuple[float, float, np.ndarray]:
    t0 = time.perf_counter()
    sess = InferenceSession(model, SessionOptions(intra_op_num_threads=threads), providers=[provider])
    t1 = time.perf_counter()
    out = np.concatenate([sess.run(None, {"bytes": data[s : s + batch]})[0] for s in range(0, len(data), batch)])
    return t1 - t0, time.perf_counter() - t1, out


class Timed(EpCoreBatchPredictor):
    """The predictor, adding when each batch started and ended (to split start-up from running)."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        t0 = time.time()
        out = super().__call__(batch)
        n = len(out["target_label"])
        return {**out, "t0": np.full(n, t0), "t1": np.full(n, time.time())}


def ray_run(
    ray: Any, model: Any, data: np.ndarray, batch: int, provider: str, actors: int
) -> tuple[float, float, np.ndarray]:
    """(wall seconds, seconds from the first batch's start to the last one's end, outputs in row order)."""
    # 8 blocks (work for every actor), each a whole number of batches: Ray's batches are the loop's
    block = -(-len(data) // (8 * batch)) * batch
    items = [{"id": i, "bytes": data[i]} for i in range(len(data))]
    ds = ray.data.from_items(items, override_num_blocks=-(-len(data) // block)).materialize()
    kwargs = {
        "model": model,
        "providers": [provider],
        "session_options": {"intra_op_num_threads": 1},
        "keep_columns": ["id"],
    }
    t0 = time.time()
    got = ds.map_batches(
        Timed,
        fn_constructor_kwargs=kwargs,
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        batch_size=batch,
        batch_format="numpy",
        num_cpus=1,
    ).take_batch(len(data) + 1, batch_format="numpy")
    wall = time.time() - t0
    return wall, got["t1"].max() - got["t0"].min(), got["target_label"][np.argsort(got["id"])]


def actor_startup(ray: Any, model: Any, provider: str) -> tuple[float, float, int]:
    """(wall seconds until the actor answers, seconds its session took, EPContext nodes)."""
    t0 = time.perf_counter()
    actor = ray.remote(EpCoreBatchPredictor).options(num_cpus=1).remote(model, providers=[provider])
    info = ray.get(actor.describe.remote())
    wall = time.perf_counter() - t0
    ray.kill(actor)
    return wall, info["startup_seconds"], info["epcontext_nodes"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    ap.add_argument("--provider", default="NumbaCpuExecutionProvider")
    args = ap.parse_args()
    import ray

    source = str(fetch_model("magika"))
    data = np.random.RandomState(0).randint(0, 257, size=(args.rows, 2048)).astype(np.int32)
    t0 = time.perf_counter()
    ctx = compile_context_model(source, providers=[args.provider])
    compile_s = time.perf_counter() - t0
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"ray {ray.__version__}, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"# magika, {args.rows} rows, batch {args.batch}, {args.provider}; EPContext compiled on the driver in "
        f"{compile_s:.2f} s ({len(ctx) / 1e6:.1f} MB)"
    )
    rows = []
    for threads in (1, 2):
        create, run, want = loop(ctx, data, args.batch, args.provider, threads)
        rows.append((f"single-process loop, {threads} thread(s)", create + run, run))
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="warning")
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        for actors in (1, 2):
            wall, span, got = ray_run(ray, ctx, data, args.batch, args.provider, actors)
            np.testing.assert_array_equal(got, want)
            rows.append((f"Ray Data, {actors} actor(s) x 1 CPU", wall, span))
        starts = [
            (what, *actor_startup(ray, m, args.provider))
            for what, m in (("EPContext model", ctx), ("plain model", source))
        ]
    finally:
        ray.shutdown()
    print("\n| mode | wall (s) | rows/s | running (s) | rows/s running |\n|---|---:|---:|---:|---:|")
    for what, total, run in rows:
        print(f"| {what} | {total:.2f} | {args.rows / total:.0f} | {run:.2f} | {args.rows / run:.0f} |")
    print("\n| actor loads | actor ready (s) | session created (s) | EPContext nodes |\n|---|---:|---:|---:|")
    for what, wall, session, nodes in starts:
        print(f"| {what} | {wall:.2f} | {session:.2f} | {nodes} |")


if __name__ == "__main__":
    main()

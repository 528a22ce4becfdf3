"""Numba-CUDA EP on a real GPU: three questions, each answered against a peer measured in the
same run.

1. Elementwise bandwidth: the EP's generated Add kernel, as a fraction of the device's peak DRAM
   bandwidth computed from its attributes (2 x memory clock x bus width, DDR).
2. MatMul: the EP's tiled shared-memory GEMM against cuBLAS (through CuPy or PyTorch, whichever
   is importable).
3. Model latency: magika, PP-OCR cls and PP-OCR det on this EP against onnxruntime's CPU EP.

Without a real GPU (or under NUMBA_ENABLE_CUDASIM=1) it says so and exits 0: simulator timings
mean nothing. Run: ``python benchmarks/bench_cuda_numba.py``."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

EP = "NumbaCudaExecutionProvider"


def gpu_or_exit() -> Any:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("bench_cuda_numba: NUMBA_ENABLE_CUDASIM is set; simulator timings are meaningless. Skipping.")
        sys.exit(0)
    try:
        from numba import cuda
    except Exception as exc:
        print(f"bench_cuda_numba: numba-cuda is not importable ({exc}); pip install ./ep_cuda_numba. Skipping.")
        sys.exit(0)
    try:
        if not cuda.is_available():
            raise RuntimeError("numba.cuda.is_available() is False")
        return cuda.get_current_device()
    except Exception as exc:
        print(f"bench_cuda_numba: no usable NVIDIA GPU here ({exc}). Skipping; nothing to measure.")
        sys.exit(0)


def cuda_time(fn: Callable[[], None], stream: Any, reps: int) -> float:
    """Median seconds per call, timed with CUDA events on ``stream``."""
    from numba import cuda

    fn()
    stream.synchronize()
    times = []
    for _ in range(reps):
        start, end = cuda.event(), cuda.event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def runtime() -> Any:
    from numba import cuda

    from ep_cuda_numba.factory import factory
    from ep_cuda_numba.launch import Runtime

    stream = cuda.stream()
    rt = Runtime(SimpleNamespace(stream=stream, allocator=factory.arena(0)))
    return rt, stream


def bench_bandwidth(dev: Any) -> None:
    from numba import cuda

    from ep_cuda_numba.codegen import run_program, single_op_program

    clock_khz = int(dev.MEMORY_CLOCK_RATE)
    bus_bits = int(dev.GLOBAL_MEMORY_BUS_WIDTH)
    peak = 2 * clock_khz * 1e3 * bus_bits / 8
    rt, stream = runtime()
    prog = single_op_program("{0} + {1}", 2, 0, np.dtype(np.float32))
    print(
        f"\n## Elementwise bandwidth ({dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, "
        f"peak {peak / 1e9:.0f} GB/s from {clock_khz / 1e3:.0f} MHz x {bus_bits} bit DDR)"
    )
    print("| elements | GB/s | fraction of peak |\n|---:|---:|---:|")
    for n in (1 << 20, 1 << 24, 1 << 26):
        a = cuda.to_device(np.random.rand(n).astype(np.float32))
        b = cuda.to_device(np.random.rand(n).astype(np.float32))
        t = cuda_time(lambda a=a, b=b: run_program(rt, prog, [a, b], [], [np.dtype(np.float32)]), stream, 20)
        gbs = 3 * n * 4 / t
        print(f"| {n:,} | {gbs / 1e9:.1f} | {gbs / peak:.2f} |")


def cublas_peer() -> tuple[str, Callable[[np.ndarray, np.ndarray], Callable[[], None]]] | None:
    try:
        import cupy as cp

        def make(a: np.ndarray, b: np.ndarray) -> Callable[[], None]:
            da, db = cp.asarray(a), cp.asarray(b)
            return lambda: (cp.matmul(da, db), cp.cuda.Stream.null.synchronize())

        return "cuBLAS (CuPy)", make
    except Exception:
        pass
    try:
        import torch

        if torch.cuda.is_available():

            def make(a: np.ndarray, b: np.ndarray) -> Callable[[], None]:
                ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
                return lambda: (torch.matmul(ta, tb), torch.cuda.synchronize())

            return "cuBLAS (PyTorch)", make
    except Exception:
        pass
    return None


def wall(fn: Callable[[], Any], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_matmul() -> None:
    from numba import cuda

    from ep_cuda_numba.kernels.matmul import matmul

    rt, stream = runtime()
    peer = cublas_peer()
    print("\n## MatMul (float32, square)")
    print(f"| n | EP GFLOP/s | {peer[0] if peer else 'cuBLAS'} GFLOP/s | EP / cuBLAS |\n|---:|---:|---:|---:|")
    for n in (512, 1024, 2048, 4096):
        a = np.random.rand(n, n).astype(np.float32)
        b = np.random.rand(n, n).astype(np.float32)
        da, db = cuda.to_device(a), cuda.to_device(b)
        t = cuda_time(lambda da=da, db=db: matmul(rt, da, db), stream, 5)
        flops = 2 * n**3
        if peer is None:
            print(f"| {n} | {flops / t / 1e9:.0f} | n/a (install cupy or torch) | n/a |")
            continue
        tp = wall(peer[1](a, b), 5)
        print(f"| {n} | {flops / t / 1e9:.0f} | {flops / tp / 1e9:.0f} | {tp / t:.2f} |")


MODEL_INPUTS = {
    "magika": lambda rng: {"bytes": rng.integers(0, 257, size=(1, 2048)).astype(np.int32)},
    "ppocr_cls": lambda rng: {"x": rng.uniform(-1, 1, size=(1, 3, 48, 192)).astype(np.float32)},
    "ppocr_det": lambda rng: {"x": rng.uniform(-1, 1, size=(1, 3, 640, 640)).astype(np.float32)},
}


def bench_models() -> None:
    from ep_core import InferenceSession
    from ep_core.tools.zoo import fetch_model

    try:
        import onnxruntime as ort
    except Exception:
        ort = None
    print("\n## Model latency (batch 1, median of 20 runs after warm-up)")
    print("| model | EP ms | onnxruntime CPU ms | CPU / EP | session creation s |\n|---|---:|---:|---:|---:|")
    for name, make in MODEL_INPUTS.items():
        path = str(fetch_model(name))
        feeds = make(np.random.default_rng(0))
        t0 = time.perf_counter()
        sess = InferenceSession(path, providers=[EP])
        created = time.perf_counter() - t0
        t_ep = wall(lambda: sess.run(None, feeds), 20)  # noqa: B023
        if ort is None:
            print(f"| {name} | {t_ep * 1e3:.2f} | n/a | n/a | {created:.1f} |")
            continue
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        t_cpu = wall(lambda: ref.run(None, feeds), 20)  # noqa: B023
        print(f"| {name} | {t_ep * 1e3:.2f} | {t_cpu * 1e3:.2f} | {t_cpu / t_ep:.2f} | {created:.1f} |")


def main() -> int:
    dev = gpu_or_exit()
    bench_bandwidth(dev)
    bench_matmul()
    bench_models()
    return 0


if __name__ == "__main__":
    sys.exit(main())

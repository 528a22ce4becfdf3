"""Numba-CUDA EP on a real GPU, each figure against a peer measured in the same run.

1. Elementwise bandwidth: a one-node Add session and a fused four-node chain, inputs and outputs
   bound on the device (IOBinding), as a share of the device-to-device copy bandwidth measured here
   (bytes read plus bytes written).
2. MatMul float32 and float16: a one-node session on device-bound inputs against cuBLAS (CuPy, or
   PyTorch where CuPy is missing) on the same operands.
3. Conv float32 (3x3, stride 1, same padding) against cuDNN through PyTorch (onnxruntime-gpu is not
   installed on the device machines this project is lent; PyTorch's cuDNN is the CUDA peer there).
4. CUDA graphs: a 32-node elementwise chain with ``enable_cuda_graph=1`` against plain launches.
5. Models: ``bench_cuda_numba_zoo.py`` (every zoo model, parity and latency).

Timing: wall clock around ``run_with_iobinding`` plus ``synchronize_outputs`` (what a caller waits
for), median of repeated runs after warm-up; peers are timed the same way, synchronised each call.
Without a real GPU (or under NUMBA_ENABLE_CUDASIM=1) it says so and exits 0.
Run: ``python benchmarks/bench_cuda_numba.py``."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

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


def device_name(dev: Any) -> str:
    return dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)


def median_s(fn: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def model(
    nodes: list[Any],
    inputs: list[tuple[str, int, list[Any]]],
    outputs: list[tuple[str, int, list[Any]]],
    inits: list[Any] | None = None,
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def bound_runner(sess: Any, feeds: dict[str, np.ndarray], outputs: list[str]) -> Callable[[], None]:
    """A closure running ``sess`` on device-resident inputs into device-resident outputs."""
    from numba import cuda

    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_input(name, cuda.to_device(value), "cuda:0")
    for name in outputs:
        binding.bind_output(name, "cuda:0")

    def go() -> None:
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()

    go()
    return go


def session(data: bytes, options: dict[str, str] | None = None) -> Any:
    from ep_core import InferenceSession

    return InferenceSession(data, providers=[(EP, options or {})])


def copy_bandwidth(n: int) -> float:
    """Bytes per second of a device-to-device copy of ``n`` float32 (read + write counted)."""
    from numba import cuda

    src = cuda.to_device(np.random.rand(n).astype(np.float32))
    dst = cuda.device_array_like(src)

    def go() -> None:
        dst.copy_to_device(src)
        cuda.synchronize()

    return 2 * n * 4 / median_s(go, 20)


def bench_elementwise(dev: Any) -> None:
    F = TensorProto.FLOAT
    n = 1 << 27  # 512 MiB per operand: launch and host overhead are a small share
    copy = copy_bandwidth(n)
    print(f"\n## Elementwise ({device_name(dev)}; device-to-device copy {copy / 1e9:.0f} GB/s, read + write)")
    print("| graph | elements | GB/s | share of copy |\n|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    add = model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", F, [n]), ("b", F, [n])], [("y", F, [n])])
    chain = model(
        [
            helper.make_node("Add", ["a", "b"], ["t0"]),
            helper.make_node("Mul", ["t0", "a"], ["t1"]),
            helper.make_node("Relu", ["t1"], ["t2"]),
            helper.make_node("Sigmoid", ["t2"], ["y"]),
        ],
        [("a", F, [n]), ("b", F, [n])],
        [("y", F, [n])],
    )
    for label, data in (("Add", add), ("Add-Mul-Relu-Sigmoid (fused)", chain)):
        sess = session(data)
        t = median_s(bound_runner(sess, {"a": a, "b": b}, ["y"]), 20)
        gbs = 3 * n * 4 / t
        print(f"| {label} | {n:,} | {gbs / 1e9:.0f} | {gbs / copy:.2f} |", flush=True)


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


def bench_matmul() -> None:
    peer = cublas_peer()
    name = peer[0] if peer else "cuBLAS"
    print("\n## MatMul (square, both operands on the device)")
    print(f"| dtype | n | EP TFLOP/s | {name} TFLOP/s | EP / cuBLAS |\n|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for dtype, onnx_type in ((np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)):
        for n in (1024, 2048, 4096):
            a = rng.standard_normal((n, n)).astype(dtype)
            b = rng.standard_normal((n, n)).astype(dtype)
            data = model(
                [helper.make_node("MatMul", ["a", "b"], ["y"])],
                [("a", onnx_type, [n, n]), ("b", onnx_type, [n, n])],
                [("y", onnx_type, [n, n])],
            )
            t = median_s(bound_runner(session(data), {"a": a, "b": b}, ["y"]), 10)
            flops = 2 * n**3
            tp = median_s(peer[1](a, b), 10) if peer else float("nan")
            print(
                f"| {np.dtype(dtype).name} | {n} | {flops / t / 1e12:.1f} | {flops / tp / 1e12:.1f} | {tp / t:.2f} |",
                flush=True,
            )


def bench_conv() -> None:
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA in torch")
    except Exception as exc:
        print(f"\n## Conv: no peer ({exc})")
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # the EP computes in float32; so does the peer
    F = TensorProto.FLOAT
    print("\n## Conv float32, 3x3, stride 1, same padding (batch, channels in -> out, size)")
    print("| shape | EP ms | cuDNN (PyTorch) ms | EP / cuDNN time |\n|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for batch, cin, cout, hw in ((1, 64, 64, 56), (1, 128, 128, 28), (8, 64, 64, 56), (1, 32, 32, 160)):
        x = rng.standard_normal((batch, cin, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, 3, 3)) * 0.05).astype(np.float32)
        data = model(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
            [("x", F, list(x.shape))],
            [("y", F, [batch, cout, hw, hw])],
            [numpy_helper.from_array(w, "w")],
        )
        t = median_s(bound_runner(session(data), {"x": x}, ["y"]), 20)
        tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()

        def peer(tx: Any = tx, tw: Any = tw) -> None:
            torch.nn.functional.conv2d(tx, tw, padding=1)
            torch.cuda.synchronize()

        tp = median_s(peer, 20)
        print(f"| {batch}x{cin}->{cout}x{hw}x{hw} | {t * 1e3:.3f} | {tp * 1e3:.3f} | {t / tp:.2f} |", flush=True)


def bench_cuda_graph() -> None:
    F = TensorProto.FLOAT
    n, depth = 1 << 16, 32
    ops = ["Relu", "Neg", "Abs", "Sigmoid"]
    nodes = [helper.make_node(ops[i % 4], ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"]) for i in range(depth)]
    nodes.append(helper.make_node("Identity", [f"t{depth - 1}"], ["y"]))
    data = model(nodes, [("x", F, [n])], [("y", F, [n])])
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    print(f"\n## CUDA graph replay ({depth}-node chain on {n:,} elements, fusion off: one launch per node)")
    print("| mode | us per run |\n|---|---:|")
    for label, opts in (
        ("plain launches", {"enable_fusion": "0"}),
        ("CUDA graph replay", {"enable_fusion": "0", "enable_cuda_graph": "1"}),
    ):
        t = median_s(bound_runner(session(data, opts), {"x": x}, ["y"]), 200, warmup=5)
        print(f"| {label} | {t * 1e6:.1f} |", flush=True)


def main() -> int:
    dev = gpu_or_exit()
    for part in (bench_elementwise, bench_matmul, bench_conv, bench_cuda_graph):
        try:
            part(dev) if part is bench_elementwise else part()
        except Exception as exc:  # each part's failure is reported, the rest still run
            import traceback

            traceback.print_exc()
            print(f"\n## {part.__name__} failed: {type(exc).__name__}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dense float32 convolutions of the zoo's shapes, one thread each: onnxruntime's CPU EP (MLAS),
the reference EP's im2col + BLAS plan (what the Numba CPU EP ran before), and the Numba CPU EP's
compiled direct kernel (``ep_numba_cpu.direct_conv``), with each one's GFLOP/s.

    .venv/bin/python benchmarks/bench_direct_conv.py

Each time is the best of five slices of 0.1 s after three warm-up calls; the direct kernel's time
includes splitting the input into its stride phases (``Plan.fill``), as a run does. The outputs
are checked against onnxruntime's (max error relative to the output's largest value)."""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

# (input channels, output channels, plane side, kernel side, stride, groups): nudenet's, ppocr's
# and orinet's 3x3 convolutions, a stem, a grouped one
SHAPES = [
    (64, 64, 40, 3, 1, 1),
    (64, 64, 20, 3, 1, 1),
    (32, 32, 40, 3, 1, 1),
    (128, 128, 10, 3, 1, 1),
    (256, 64, 10, 3, 1, 1),
    (16, 16, 80, 3, 1, 1),
    (16, 32, 160, 3, 2, 1),
    (64, 128, 40, 3, 2, 1),
    (3, 16, 320, 3, 2, 1),
    (24, 48, 56, 3, 1, 2),
]


def best_ms(fn: Callable[[], Any]) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(5):
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.1:
            fn()
            n += 1
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e3


def row(c: int, m: int, side: int, k: int, s: int, group: int, kernel: Any, rng: np.random.Generator) -> str:
    """One table row: the three engines on one convolution."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from ep_cpu_reference.kernels.conv_plan import plan_conv
    from ep_numba_cpu import direct_conv

    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    p = k // 2
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[p] * 4, strides=[s, s], group=group)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    out = (side + 2 * p - k) // s + 1
    geometry = ((k, k), (s, s), (1, 1), (p, p), (p, p), (out, out))
    blas = plan_conv(x.shape, x.dtype, w, group, *geometry, b.reshape(1, m, 1, 1))
    dp = direct_conv.plan(x.shape, w, group, (s, s), (1, 1), (p, p), (out, out))
    assert dp is not None
    y = np.empty(dp.out_shape, np.float32)
    xpad, yflat = np.empty(dp.xpad_size, np.float32), np.empty(dp.yflat_size, np.float32)

    def direct() -> None:
        dp.fill(x, xpad)
        if kernel(y, xpad, dp.weights, dp.offsets, b, yflat, dp.geometry):
            raise RuntimeError("the direct kernel refused its buffers")

    direct()
    err = float(np.abs(y - want).max() / np.abs(want).max())
    times = [best_ms(lambda: sess.run(None, {"x": x})), best_ms(lambda: blas(x)), best_ms(direct)]
    gflop = 2 * m * (c // group) * k * k * out * out / 1e9
    rates = " / ".join(f"{gflop / t * 1e3:.0f}" for t in times)
    name = f"{c} -> {m}, {side}x{side}, {k}x{k}" + (f", stride {s}" if s > 1 else "")
    name += f", {group} groups" if group > 1 else ""
    cells = [name, *(f"{t:.3f}" for t in times), rates, f"{times[2] / times[0]:.2f}", f"{err:.1e}"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    import onnxruntime as ort

    from ep_numba_cpu import codegen, direct_conv

    ks = direct_conv.kernel_source()
    kernel = codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher
    print(f"# onnxruntime {ort.__version__}; AVX-512 for the direct kernel: {direct_conv.available()}")
    print(
        "| convolution | onnxruntime (ms) | im2col + BLAS (ms) | direct (ms) | GFLOP/s (ORT / BLAS / direct) "
        "| direct / ORT | max rel. err |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        print(row(*shape, kernel, rng))


if __name__ == "__main__":
    main()

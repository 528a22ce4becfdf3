"""The int8 floor of the CPU EPs: one uint8 x int8 product, exact, four ways, at one thread.

onnxruntime's MatMulInteger (MLAS: AVX-512 VNNI where the CPU has it), the reference EP's exact
float32 BLAS product (every partial sum of 8-bit operands below 2^24 is exact in float32: what
``nn_matmul.exact_matmul`` runs), a Numba loop of 4x4 int32 dot products over int8 operands
(which LLVM turns into VNNI word dot products, 16 bits at a time), and the Numba CPU EP's
``vnni`` kernel (``vpdpbusd`` through intrinsics, B packed once; its time includes converting A
from the float A' the reference kernels hand it, as in the EP). It shows why the int8 models stay
slow on the reference EP (NumPy has no integer GEMM) and what VNNI gives the Numba CPU EP.

    .venv/bin/python benchmarks/bench_int8_gemm.py
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from bench_cpu_reference_models import interleaved  # noqa: E402  (engines timed in turns, as every benchmark here)

SHAPES = [(1500, 384, 384), (1500, 384, 1536), (48, 768, 1536), (2, 384, 1536), (64, 1152, 3136)]
# smart_turn, dksplit (input projection, recurrent step), a conv


def _numba_dot4x4() -> Callable[..., None]:
    from numba import njit

    @njit(boundscheck=False)
    def kernel(a, bt, out):  # type: ignore[no-untyped-def]
        # sums kept in int32 (np.int32(...) each step: Numba widens int32 arithmetic to int64)
        m, k_len = a.shape
        n = bt.shape[0]
        for i in range(0, m - 3, 4):
            for j in range(0, n - 3, 4):
                c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = np.int32(0)
                c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = np.int32(0)
                for k in range(k_len):
                    a0, a1 = np.int32(a[i, k]), np.int32(a[i + 1, k])
                    a2, a3 = np.int32(a[i + 2, k]), np.int32(a[i + 3, k])
                    b0, b1 = np.int32(bt[j, k]), np.int32(bt[j + 1, k])
                    b2, b3 = np.int32(bt[j + 2, k]), np.int32(bt[j + 3, k])
                    c00, c01 = np.int32(c00 + a0 * b0), np.int32(c01 + a0 * b1)
                    c02, c03 = np.int32(c02 + a0 * b2), np.int32(c03 + a0 * b3)
                    c10, c11 = np.int32(c10 + a1 * b0), np.int32(c11 + a1 * b1)
                    c12, c13 = np.int32(c12 + a1 * b2), np.int32(c13 + a1 * b3)
                    c20, c21 = np.int32(c20 + a2 * b0), np.int32(c21 + a2 * b1)
                    c22, c23 = np.int32(c22 + a2 * b2), np.int32(c23 + a2 * b3)
                    c30, c31 = np.int32(c30 + a3 * b0), np.int32(c31 + a3 * b1)
                    c32, c33 = np.int32(c32 + a3 * b2), np.int32(c33 + a3 * b3)
                out[i, j], out[i, j + 1], out[i, j + 2], out[i, j + 3] = c00, c01, c02, c03
                out[i + 1, j], out[i + 1, j + 1], out[i + 1, j + 2], out[i + 1, j + 3] = c10, c11, c12, c13
                out[i + 2, j], out[i + 2, j + 1], out[i + 2, j + 2], out[i + 2, j + 3] = c20, c21, c22, c23
                out[i + 3, j], out[i + 3, j + 1], out[i + 3, j + 2], out[i + 3, j + 3] = c30, c31, c32, c33

    return kernel


def _ort_matmul_integer(b: np.ndarray, m: int) -> Callable[[np.ndarray], object]:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, b.shape[0]])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda a: sess.run(None, {"A": a})


def _vnni() -> tuple[Any, Any] | None:
    """The EP's module and compiled VNNI kernel, or None on a CPU without VNNI."""
    from ep_numba_cpu import codegen, vnni

    if not vnni.available():
        return None
    ks = vnni.gemm_kernel()
    return vnni, codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher


def _row(
    rng: np.random.Generator, kernel: Callable[..., None], fast: tuple[Any, Any] | None, m: int, k: int, n: int
) -> str:
    """One shape's table row; every product is checked exact against int64 arithmetic."""
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    bt = np.ascontiguousarray(b.T)
    out = np.empty((m, n), np.int32)
    ort_run = _ort_matmul_integer(b, m)
    fns = {"ort": lambda: ort_run(a), "blas": lambda: np.matmul(af, bf)}
    if m % 4 == 0 and n % 4 == 0:  # the 4x4 loop covers whole blocks only
        fns["numba"] = lambda: kernel(a, bt, out)
    if fast is not None:
        vnni, fn = fast
        packed = vnni.pack(bf)
        fns["vnni"] = lambda: vnni.product(fn, packed, af)
    best, errors = interleaved(fns, 3.0)
    assert not errors, errors
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(np.matmul(af, bf), want), "the float32 product is not exact"
    assert "numba" not in fns or np.array_equal(out, want), "the Numba loop's product is not exact"
    assert "vnni" not in fns or np.array_equal(fns["vnni"](), want), "the VNNI product is not exact"
    assert np.array_equal(ort_run(a)[0], want), "onnxruntime's product differs"
    macs = m * k * n / 1e6
    names = ("ort", "blas", "numba", "vnni")
    cells = " | ".join(f"{best[k][0] * 1e3:.3f}" if k in best else "n/a" for k in names)
    rates = " / ".join(f"{macs / (best[k][0] * 1e3):.0f}" if k in best else "-" for k in names)
    return f"| {m} x {k} x {n} | {cells} | {rates} |"


def main() -> None:
    rng = np.random.default_rng(0)
    kernel = _numba_dot4x4()
    fast = _vnni()
    print(
        "| M x K x N | onnxruntime MatMulInteger (ms) | float32 BLAS, exact (ms) | Numba int32 dots (ms) "
        "| Numba CPU EP's VNNI kernel (ms) | GMAC/s (ORT / BLAS / Numba / VNNI) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for m, k, n in SHAPES:
        print(_row(rng, kernel, fast, m, k, n))


if __name__ == "__main__":
    main()

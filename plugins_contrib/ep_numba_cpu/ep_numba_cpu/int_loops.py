"""DynamicQuantizeLSTM's recurrent product as a compiled integer loop.

Why: each time step of com.microsoft DynamicQuantizeLSTM multiplies the quantized state (B, H) by
the integer recurrent weights of four gates. The reference EP holds those weights as float32 (or
float64) so that BLAS computes the exact integer sums, and at H = 384 that is 2.4 MB read per step,
more than a core's L2: ~100 us a step on a 2-core EPYC, where the same product over int16 weights
(1.2 MB) in a Numba loop whose integer dot products LLVM vectorises takes ~22 us. The loop writes
``float32(exact int32 sum)``, the float the reference EP gets from its exact BLAS product, so the
results are the reference EP's to the bit. Everything else of the op (quantizing the input and the
state, the input projection of all steps, where 48+ rows keep float32 BLAS 2x faster than this
loop, scales, bias, the LSTM cell) stays the reference kernel, handed this product through its
``recurrent_product`` parameter.

Bounds: every |R - R_zp| and |q - zp| is at most 255, so a sum over H stays in int32 while
H * 255 * 255 < 2^31 (H < 33,000); larger states keep BLAS's product. The kernel source is fixed
text; no string of a record reaches it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_numba_cpu.generate import KernelSource
from ep_numba_cpu.recurrent import readonly

MS = "com.microsoft"
OPS = ("DynamicQuantizeLSTM",)
_MAX_K = (2**31 - 1) // (255 * 255)

_PRODUCT = """import numpy as np


def kernel(a, w, out):
    n_b, n_k = a.shape
    n_g, _, n_h = out.shape
    acc = np.empty((n_b, w.shape[0]), np.int32)
    for b in range(n_b):
        for n in range(w.shape[0]):
            s = np.int32(0)
            for k in range(n_k):
                s += np.int32(a[b, k]) * np.int32(w[n, k])
            acc[b, n] = s
    for g in range(n_g):
        for b in range(n_b):
            for j in range(n_h):
                out[g, b, j] = np.float32(acc[b, g * n_h + j])
"""
# (the sums land in an int32 array and become float32 in a second pass: storing each float into
# the (G, B, H) output inside the product loop kept LLVM from vectorising it, 49 us against 22 us
# a step at H = 384)


def product_kernel() -> KernelSource:
    """a (B, K) int16, w (G*H, K) int16 (a gate's columns as rows), out (G, B, H) float32."""
    return KernelSource(_PRODUCT, "int16:2:C:r,int16:2:C:r,float32:3:C:w", False)


def kernel_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    if step.get("domain") != MS or step.get("op") not in OPS:
        return None
    return [product_kernel()]


def make_compute(
    step: Mapping[str, Any], kernels: Sequence[Any], weights: Mapping[str, np.ndarray], host: Any
) -> Callable[..., Any]:
    """The reference EP's DynamicQuantizeLSTM kernel with the compiled recurrent product."""
    from ep_numba_cpu import delegate

    fn = kernels[0]
    return delegate.build(step, weights, host, recurrent_product=lambda v: _product(fn, v))


def _product(fn: Any, v: np.ndarray) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """``product(a, out)``: ``out[j] = float32(a @ v[j])`` for one direction's integer R ``v``
    (G, K, H) (exact integers in a float dtype, sign flips applied) and the quantized state ``a``
    (B, K) (integers within +-255 in a float dtype); None where they do not fit the loop's bounds."""
    n_gates, n_k, n_h = v.shape
    if n_k > _MAX_K or v.size == 0 or float(np.abs(v).max()) > 255:
        return None
    w = readonly(v.transpose(0, 2, 1).reshape(n_gates * n_h, n_k).astype(np.int16))

    def product(a: np.ndarray, out: np.ndarray) -> None:
        fn(readonly(np.ascontiguousarray(a, dtype=np.int16)), w, out)

    return product

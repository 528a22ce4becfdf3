"""DynamicQuantizeLSTM's recurrent product and LSTM cell as compiled loops.

Why: each time step of com.microsoft DynamicQuantizeLSTM multiplies the quantized state (B, H) by
the integer recurrent weights of four gates. The reference EP holds those weights as float32 (or
float64) so that BLAS computes the exact integer sums, and at H = 384 that is 2.4 MB read per step,
more than a core's L2: ~100 us a step on a 2-core EPYC, where the same product over int16 weights
(1.2 MB) in a Numba loop whose integer dot products LLVM vectorises takes ~22 us. The loop writes
``float32(exact int32 sum)``, the float the reference EP gets from its exact BLAS product, so the
results are the reference EP's to the bit. Everything else of the op (quantizing the input and the
state, the input projection of all steps, where 48+ rows keep float32 BLAS 2x faster than this
loop, scales, bias) stays the reference kernel, handed this product through its ``recurrent_product``
parameter and the cell through ``lstm_cell``.

On a CPU with AVX-512 VNNI, ``vnni``'s kernel takes the place of this int16 loop (6.5 us a step
at H = 384 against 43 us) and also computes the input projection (``int_product``: 5x float32
BLAS), and it serves the constant B of MatMulInteger and QLinearMatMul (the integer products of
dynamically quantized and QDQ transformers) the same way.

The cell (``_CELL``) is the reference EP's ``mlas_lstm_cell`` (MLAS's logistic and tanh, Eigen's
rational forms in FMA steps emulated as float64 products rounded to float32, then the cell update)
element by element, the same float operations in the same order (Numba contracts no multiply-add
without fastmath), so bit for bit its result: in NumPy those ~40 array operations on (4, B, H) cost
~150 us a step at B = 2, H = 384, more than the product.

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
_N_COEFS = 7  # the longest of MLAS's logistic and tanh polynomials (tanh's numerator)
OPS = ("DynamicQuantizeLSTM",)
# ops whose constant B (weights) takes the VNNI product or convolution (``vnni``) where the CPU has it
GEMM_OPS = frozenset((d, op) for d in ("", "ai.onnx") for op in ("MatMulInteger", "QLinearMatMul"))
CONV_OPS = frozenset((d, op) for d in ("", "ai.onnx") for op in ("ConvInteger", "QLinearConv"))


def serves(domain: str, op: str) -> bool:
    """Whether this module's compiled loops may serve a delegated node of ``op``."""
    from ep_numba_cpu import vnni

    return (domain == MS and op in OPS) or ((domain, op) in GEMM_OPS | CONV_OPS and vnni.available())


_MAX_K = (2**31 - 1) // (255 * 255)

_PRODUCT = """import numpy as np


def kernel(a, w, out, acc):
    n_b, n_k = a.shape
    n_g, _, n_h = out.shape
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
# a step at H = 384. The caller passes that array: a kernel that allocates makes its rebuild from a
# context import numba.np.arrayobj, see generate._depthwise_source)


# x clamped to [-bound, bound] (NaN passes, as through NumPy's clip), then Eigen's rational
# x * p(x^2) / q(x^2) in MLAS's FMA steps: float64 products of float32 values (exact) rounded to
# float32 after each addition
_RATIONAL = f"""
                if x < -bound:
                    x = -bound
                if x > bound:
                    x = bound
                v2 = np.float64(x * x)
                p = np.float32(v2 * pc[0] + pc[1])
                q = np.float32(v2 * qc[0] + qc[1])
                for m in range(2, {_N_COEFS}):
                    p = np.float32(np.float64(p) * v2 + pc[m])
                    q = np.float32(np.float64(q) * v2 + qc[m])
                r = p * x / q"""

_CELL = f"""import numpy as np


def kernel(g, c, h, p_coefs, q_coefs, bounds):
    n_b, n_h = c.shape
    for b in range(n_b):
        for k in range(3):
            pc = p_coefs[k]
            qc = q_coefs[k]
            bound = bounds[k]
            for j in range(n_h):
                x = -g[k, b, j]{_RATIONAL}
                r = r + np.float32(0.5)
                if r < np.float32(0.0):
                    r = np.float32(0.0)
                g[k, b, j] = r
        for k in range(3, 5):
            pc = p_coefs[k]
            qc = q_coefs[k]
            bound = bounds[k]
            for j in range(n_h):
                if k == 3:
                    x = g[3, b, j]
                else:
                    x = c[b, j] * g[2, b, j]
                    x = x + g[3, b, j] * g[0, b, j]
                    c[b, j] = x{_RATIONAL}
                if k == 3:
                    g[3, b, j] = r
                else:
                    h[b, j] = r * g[1, b, j]
"""
# (k = 0..2: MLAS's logistic of the gates i, o, f from their negated sums, + 0.5, clamped below at
# 0; 3: its tanh of the candidate; 4: the new cell c = f*c + cand*i, then h = o * tanh(c). Each k
# is a loop along H with k fixed, which LLVM vectorises.)


def cell_kernel() -> KernelSource:
    """g (4, B, H) gate sums (i, o, f negated), c (B, H) in place, h (B, H) out, and the
    coefficients and bounds of ``_cell_constants``."""
    sig = "float32:3:C:w,float32:2:C:w,float32:2:C:w,float64:2:C:r,float64:2:C:r,float32:1:C:r"
    return KernelSource(_CELL, sig, False)


def _cell_constants() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step k of ``_CELL``: numerator and denominator coefficients, highest power first,
    padded with leading zeros to one length (a Horner step from 0 gives the next coefficient
    exactly), and the clamp bound: MLAS's logistic for i, o, f; its tanh for the candidate and c."""
    from ep_cpu_reference.kernels import special

    n = _N_COEFS

    def rows(logistic: tuple[Any, ...], tanh: tuple[Any, ...]) -> np.ndarray:
        padded = [special.padded(t, n) for t in (logistic,) * 3 + (tanh,) * 2]
        return readonly(np.array(padded, np.float64))

    bounds = readonly(np.array([18.0, 18.0, 18.0, 9.0, 9.0], np.float32))
    return rows(special.LOGISTIC_P, special.TANH_P), rows(special.LOGISTIC_Q, special.TANH_Q), bounds


def product_kernel() -> KernelSource:
    """a (B, K) int16, w (G*H, K) int16 (a gate's columns as rows), out (G, B, H) float32, and
    the int32 sums (B, G*H) it fills first."""
    return KernelSource(_PRODUCT, "int16:2:C:r,int16:2:C:r,float32:3:C:w,int32:2:C:w", False)


def kernel_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    """DynamicQuantizeLSTM: its recurrent product (``vnni``'s where the CPU has it, which also
    serves the input projection) and cell; MatMulInteger, QLinearMatMul: ``vnni``'s product;
    ConvInteger, QLinearConv of a known 8-bit x: ``vnni``'s convolution for that dtype."""
    from ep_numba_cpu import vnni

    if not serves(step.get("domain", ""), step.get("op", "")):
        return None
    if step["op"] in OPS:
        return [vnni.gemm_kernel() if vnni.available() else product_kernel(), cell_kernel()]
    if (step["domain"], step["op"]) in CONV_OPS:
        x_type = step["in_types"][0]
        x_dtype = x_type[0] if x_type else None
        return [vnni.conv_kernel(x_dtype)] if x_dtype in ("uint8", "int8") else None
    return [vnni.gemm_kernel()]


def make_compute(
    step: Mapping[str, Any], kernels: Sequence[Any], weights: Mapping[str, np.ndarray], host: Any
) -> Callable[..., Any]:
    """The reference EP's kernel of the node with the compiled loops of ``kernel_sources``."""
    from ep_numba_cpu import delegate

    if (step["domain"], step["op"]) in CONV_OPS:
        (conv,) = kernels
        return delegate.build(step, weights, host, int_conv=lambda wf, group: _int_conv(conv, wf, group))
    if step["op"] not in OPS:
        (gemm,) = kernels
        return delegate.build(step, weights, host, int_product=lambda bf: _int_product(gemm, bf))
    fn, cell_fn = kernels
    p_coefs, q_coefs, bounds = _cell_constants()

    def lstm_cell(g: np.ndarray, c: np.ndarray, h: np.ndarray) -> None:
        cell_fn(g, c, h, p_coefs, q_coefs, bounds)

    if _is_gemm(fn):
        return delegate.build(
            step,
            weights,
            host,
            recurrent_product=lambda v: _gemm_recurrent(fn, v),
            lstm_cell=lstm_cell,
            int_product=lambda bf: _int_product(fn, bf),
        )
    return delegate.build(step, weights, host, recurrent_product=lambda v: _product(fn, v), lstm_cell=lstm_cell)


def _is_gemm(fn: Any) -> bool:
    """Whether a compiled kernel is ``vnni.gemm_kernel`` (seven arguments) rather than
    ``product_kernel`` (four): a context records which one its plan compiled."""
    return len(fn.signatures[0]) == len(vnni_signature().split(","))


def vnni_signature() -> str:
    from ep_numba_cpu import vnni

    return vnni.gemm_kernel().signature


def _int_product(fn: Any, bf: np.ndarray) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """``nn_matmul.IntProduct`` through the VNNI kernel ``fn``: None where B' does not fit it."""
    from ep_numba_cpu import vnni

    packed = vnni.pack(bf)
    if packed is None:
        return None
    return lambda a: vnni.product(fn, packed, a)


def _int_conv(fn: Any, wf: np.ndarray, group: int) -> Callable[..., np.ndarray | None] | None:
    """``nn_conv.IntConvProduct`` through the VNNI convolution ``fn``: None where W' does not fit
    it (grouped or not 2-D, or a channel spanning more than 256 values)."""
    from ep_numba_cpu import vnni

    packed = vnni.pack_conv(wf, group)
    if packed is None:
        return None
    return lambda x, zp, bias, geometry: vnni.conv(fn, packed, x, zp, bias, geometry)


def _gemm_recurrent(fn: Any, v: np.ndarray) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """``_product``'s contract through the VNNI kernel: the four gates' columns side by side as
    one B' (K, G*H), the int32 sums moved to (G, B, H) as float32 (exact: below 2^24, the bound
    the reference EP's float32 product keeps). A state holding NaN takes the float product."""
    from ep_numba_cpu import vnni

    n_gates, n_k, n_h = v.shape
    packed = vnni.pack(v.transpose(1, 0, 2).reshape(n_k, n_gates * n_h))
    if packed is None:
        return None

    def product(a: np.ndarray, out: np.ndarray) -> None:
        got = vnni.product(fn, packed, a)
        if got is None:
            np.copyto(out, np.matmul(a.astype(v.dtype), v), casting="same_kind")
            return
        np.copyto(out, got.reshape(a.shape[0], n_gates, n_h).transpose(1, 0, 2), casting="unsafe")

    return product


def _product(fn: Any, v: np.ndarray) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """``product(a, out)``: ``out[j] = float32(a @ v[j])`` for one direction's integer R ``v``
    (G, K, H) (exact integers in a float dtype, sign flips applied) and the quantized state ``a``
    (B, K) (integers within +-255 in a float dtype); None where they do not fit the loop's bounds."""
    n_gates, n_k, n_h = v.shape
    if n_k > _MAX_K or v.size == 0 or float(np.abs(v).max()) > 255:
        return None
    w = readonly(v.transpose(0, 2, 1).reshape(n_gates * n_h, n_k).astype(np.int16))

    def product(a: np.ndarray, out: np.ndarray) -> None:
        sums = np.empty((a.shape[0], w.shape[0]), np.int32)  # per call: concurrent runs share this closure
        fn(readonly(np.ascontiguousarray(a, dtype=np.int16)), w, out, sums)

    return product

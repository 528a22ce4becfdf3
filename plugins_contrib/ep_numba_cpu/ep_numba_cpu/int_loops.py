"""The compiled loops of delegated integer ops: DynamicQuantizeLSTM's recurrent product, LSTM cell
and (on AVX-512 VNNI) whole time loop, and the VNNI products of MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv (``vnni``), each handed to the reference EP's kernel of the op.

Why: each time step of com.microsoft DynamicQuantizeLSTM multiplies the quantized state (B, H) by
the integer recurrent weights of four gates. The reference EP holds those weights as float32 (or
float64) so that BLAS computes the exact integer sums, and at H = 384 that is 2.4 MB read per step,
more than a core's L2: ~100 us a step on a 2-core EPYC, where the same product over int16 weights
(1.2 MB) in a Numba loop whose integer dot products LLVM vectorises takes ~22 us. The loop writes
``float32(exact int32 sum)``, the float the reference EP gets from its exact BLAS product, so the
results are the reference EP's to the bit. The rest of the op (quantizing the input and the state,
the input projection, scales, bias) stays the reference kernel, handed this product through its
``recurrent_product`` parameter and the cell through ``lstm_cell``.

On a CPU with AVX-512 VNNI (chosen at planning and recorded in the step, ``takes_vnni``), the
``vnni`` kernel takes the place of the int16 loop (11 us a step at H = 384) and computes the input
projection (``int_product``: 5x float32 BLAS), and ``_LOOP`` runs the whole time loop in one call
(``time_loop``: the state's quantization, the product, scales, bias and the cell, in the
reference's float32 order). The same kernels serve the constant B of MatMulInteger and
QLinearMatMul, a B they compute at run time, and the constant filters of ConvInteger and
QLinearConv (the integer products of dynamically quantized and QDQ models).

The cell (``_CELL``) is the reference EP's ``mlas_lstm_cell`` (MLAS's logistic and tanh, Eigen's
rational forms in FMA steps emulated as float64 products rounded to float32, then the cell update)
element by element, the same float operations in the same order (Numba contracts no multiply-add
without fastmath), so bit for bit its result: in NumPy those ~40 array operations on (4, B, H) cost
~150 us a step at B = 2, H = 384, more than the product.

Bounds: every |R - R_zp| and |q - zp| is at most 255, so a sum over H stays in int32 while
H * 255 * 255 < 2^31 (H < 33,000); larger states keep BLAS's product. The kernel sources are fixed
text; what a record gives them is dtype names that ``int8_problem`` checked (8-bit ones only)."""

from __future__ import annotations

import textwrap
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


def serves(step: Mapping[str, Any]) -> bool:
    """Whether this module's compiled loops serve a delegated node's step: DynamicQuantizeLSTM
    always; the others where the plan chose VNNI (``takes_vnni``, recorded as ``"int8"``: "vnni"
    or "vnni-runtime"; a context compiled where VNNI was absent keeps its float products on a CPU
    that has it, and the kernels its signature covers)."""
    key = (step.get("domain", ""), step.get("op", ""))
    return (key[0] == MS and key[1] in OPS) or (key in GEMM_OPS | CONV_OPS and step.get("int8") in INT8_KINDS)


# the record's "int8" of a step: its 8-bit products on VNNI, with weights packed once ("vnni") or
# both operands at run time ("vnni-runtime": MatMulInteger/QLinearMatMul with a computed B)
INT8_KINDS = ("vnni", "vnni-runtime")


def takes_vnni(step: Mapping[str, Any], consts: Mapping[str, np.ndarray]) -> str | None:
    """At planning: the ``INT8_KINDS`` this CPU runs the step's 8-bit products as, or None. For
    MatMulInteger and QLinearMatMul: a constant 2-D B ("vnni"), or a computed B of a known 8-bit
    dtype ("vnni-runtime"); ConvInteger and QLinearConv: a constant group-1 2-D filter over a known
    8-bit x ("vnni"): the products the kernels serve. Other ops return at once: asking for the CPU's
    features starts Numba's code generator (~60 MB), which a plan of delegated steps does not need."""
    key = (step["domain"], step["op"])
    if key not in GEMM_OPS | CONV_OPS and not (key[0] == MS and key[1] in OPS):
        return None
    from ep_numba_cpu import vnni

    if not vnni.available():
        return None
    if key[1] in OPS:
        return "vnni"
    ins, types = step["inputs"], step["in_types"]
    w_at, zp_at = _WEIGHT_AT[key[1]]
    w = consts.get(ins[w_at]) if len(ins) > w_at else None
    zp_known = len(ins) <= zp_at or not ins[zp_at] or ins[zp_at] in consts  # (the reference lays out a
    eight = [bool(types[i]) and types[i][0] in ("uint8", "int8") for i in (0, w_at)]  # constant pair)
    if key in GEMM_OPS:
        if w is not None and zp_known:
            return "vnni" if np.ndim(w) == 2 else None
        return "vnni-runtime" if w is None and all(eight) else None
    group = step["attrs"].get("group", ["int", 1])[1]
    return "vnni" if w is not None and zp_known and np.ndim(w) == 4 and group == 1 and eight[0] else None


# op -> (the weight's input index, its zero point's)
_WEIGHT_AT = {"MatMulInteger": (1, 3), "ConvInteger": (1, 3), "QLinearMatMul": (3, 5), "QLinearConv": (3, 5)}


def int8_problem(step: Mapping[str, Any]) -> str | None:
    """What is wrong with a record's ``"int8"`` for its step (checked at load, ``spec``), or None:
    the kind must be one the op has kernels for, and the dtypes its kernels are compiled for
    8-bit ones."""
    kind, key = step["int8"], (step["domain"], step["op"])
    if kind not in INT8_KINDS:
        return f"{kind!r:.40} is not one of {list(INT8_KINDS)}"
    if key not in GEMM_OPS | CONV_OPS and not (key[0] == MS and key[1] in OPS):
        return f"{key[1]!r:.40} has no 8-bit kernels"
    if kind == "vnni-runtime" and key not in GEMM_OPS:
        return f"'vnni-runtime' is for MatMulInteger and QLinearMatMul, not {key[1]!r:.40}"
    types = step["in_types"]
    at = (0,) if key in CONV_OPS else (0, _WEIGHT_AT[key[1]][0]) if kind == "vnni-runtime" else ()
    if any(not types[i] or types[i][0] not in ("uint8", "int8") for i in at):
        return f"its kernels take 8-bit inputs, and in_types gives {[types[i][0] for i in at]}"
    return None


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

_CELL_BODY = f"""    for b in range(n_b):
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
_CELL = f"""import numpy as np


def kernel(g, c, h, p_coefs, q_coefs, bounds):
    n_b, n_h = c.shape
{_CELL_BODY}"""
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


_LOOP = f"""import numpy as np
from ep_numba_cpu.vnni import gemm_rows


def kernel(xw, rs, bias, h, c, s, cb, bsum, p_coefs, q_coefs, bounds, ys, g, u, acc):
    n_t, _, n_dir, batch, hs = xw.shape
    rows = n_dir * batch
    n_blocks = s.shape[1]
    k4 = s.shape[2] // 256
    kp = 4 * k4
    np_ = 64 * n_blocks
    if s.shape[0] != n_dir or kp < hs or np_ < 4 * hs or u.shape[0] != batch or u.shape[1] != kp:
        return 2
    if acc.shape[0] != batch or acc.shape[1] != np_ or h.shape[0] != rows or h.shape[1] != hs:
        return 2
    if c.shape[0] != rows or c.shape[1] != hs or ys.shape[0] != n_t or ys.shape[1] != rows or ys.shape[2] != hs:
        return 2
    if g.shape[0] != 4 or g.shape[1] != rows or g.shape[2] != hs or rs.shape[0] != 4 or rs.shape[1] != n_dir:
        return 2
    if cb.shape[0] != n_dir or cb.shape[1] < 4 * hs or bsum.shape[0] != n_dir or bsum.shape[1] < 4 * hs:
        return 2
    if rs.shape[2] != 1 or rs.shape[3] != hs:
        return 2
    if bias.shape[0] != 0 and (bias.shape[0] != 4 or bias.shape[1] != n_dir or bias.shape[2] != 1 or bias.shape[3] != hs):
        return 2
    for t in range(n_t):
        for d in range(n_dir):
            mn = np.float32(0.0)
            mx = np.float32(0.0)
            for b in range(batch):
                for j in range(hs):
                    v = h[d * batch + b, j]
                    if v < mn:
                        mn = v
                    if v > mx:
                        mx = v
            sc = np.float32(1.0)
            if mx != mn:
                sc = np.float32(mx - mn) / np.float32(255.0)
            zf = np.float32(np.float32(0.0) - mn / sc)
            zp = np.int64(255)
            if zf == zf:
                zp = np.int64(np.rint(min(max(zf, np.float32(0.0)), np.float32(255.0))))
            lo = np.float32(-zp)
            hi = np.float32(255 - zp)
            for b in range(batch):
                for j in range(hs):
                    q = np.rint(np.float32(h[d * batch + b, j] / sc))
                    if not (q >= lo):
                        q = lo
                    if q > hi:
                        q = hi
                    u[b, j] = np.uint8(np.int64(q) + zp)
                for j in range(hs, kp):
                    u[b, j] = np.uint8(0)
            s_d = d * n_blocks * k4 * 256
            for blk in range(n_blocks):
                gemm_rows(u, kp, s, s_d + blk * k4 * 256, k4, acc, np_, blk * 64, batch)
            for b in range(batch):
                rowsum = np.int64(0)
                for j in range(hs):
                    rowsum += np.int64(u[b, j])
                for gate in range(4):
                    for j in range(hs):
                        n = gate * hs + j
                        total = np.int64(acc[b, n]) + np.int64(cb[d, n]) * rowsum - zp * np.int64(bsum[d, n])
                        scale = np.float32(rs[gate, d, 0, j] * sc)
                        g[gate, d * batch + b, j] = np.float32(np.float32(total) * scale)
        for gate in range(4):
            for d in range(n_dir):
                for b in range(batch):
                    for j in range(hs):
                        v = np.float32(g[gate, d * batch + b, j] + xw[t, gate, d, b, j])
                        if bias.shape[0] != 0:
                            v = np.float32(v + bias[gate, d, 0, j])
                        g[gate, d * batch + b, j] = v
        n_b = rows
        n_h = hs
{textwrap.indent(_CELL_BODY, "    ")}
        for row in range(rows):
            for j in range(hs):
                ys[t, row, j] = h[row, j]
    return 0
"""
# (DynamicQuantizeLSTM's whole time loop in one call, the float32 operations of the reference's
# ``_rnn_fast.dq_lstm_loop`` in its order: each direction's state quantized as
# ``_dynamic_params`` does (range with 0, scale (max - min) / 255, zero point rounded half to
# even; 255 where 0 - min / scale is NaN, a range that underflowed to a zero scale), each value
# rounded and saturated with NaN to the low end (the reference's fmax/fmin, MLAS's max/min), its
# exact product with R' on VNNI, float32(sum) * (R_scale * h_scale), + xw[t], + bias, then the
# cell of ``_CELL``. Only for finite inputs (``_time_loop``'s ``run`` checks): the NaN and
# infinities a non-finite input spreads through the state are left to the reference's loop,
# whose float semantics there this loop does not claim to repeat. Rows of the cell are
# direction-major, (d, b), as the reference's reshape of (D, B, H).)


def loop_kernel() -> KernelSource:
    """xw (T, 4, D, B, H), rs (4, D, 1, H), bias (4, D, 1, H) or (0, 0, 0, 0) float32; h (D*B, H)
    (the initial state, then each step's), c (D*B, H) float32 in place; s (D, blocks, K4*256)
    int8, cb and bsum (D, N) int32 (``vnni.pack`` per direction of R' (H, 4H)); the cell's
    constants; ys (T, D*B, H) out; scratch g (4, D*B, H) float32, u (B, 4*K4) uint8, acc
    (B, 64*blocks) int32."""
    sig = (
        "float32:5:C:r,float32:4:C:r,float32:4:C:r,float32:2:C:w,float32:2:C:w,int8:3:C:r,int32:2:C:r,"
        "int32:2:C:r,float64:2:C:r,float64:2:C:r,float32:1:C:r,float32:3:C:w,float32:3:C:w,uint8:2:C:w,"
        "int32:2:C:w"
    )
    return KernelSource(_LOOP, sig, False)


def product_kernel() -> KernelSource:
    """a (B, K) int16, w (G*H, K) int16 (a gate's columns as rows), out (G, B, H) float32, and
    the int32 sums (B, G*H) it fills first."""
    return KernelSource(_PRODUCT, "int16:2:C:r,int16:2:C:r,float32:3:C:w,int32:2:C:w", False)


def kernel_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    """DynamicQuantizeLSTM: its recurrent product (``vnni``'s where the CPU has it, which also
    serves the input projection) and cell; MatMulInteger, QLinearMatMul: ``vnni``'s product;
    ConvInteger, QLinearConv of a known 8-bit x: ``vnni``'s convolution for that dtype."""
    from ep_numba_cpu import vnni

    if not serves(step):
        return None
    if step.get("int8") in INT8_KINDS and not vnni.available():
        from ep_numba_cpu.spec import SpecError

        raise SpecError(
            f"{step['op']}: the plan runs its 8-bit products on AVX-512 VNNI, which this CPU (as Numba "
            "targets it) lacks; compile the model again on this machine"
        )
    if step["op"] in OPS:
        if step.get("int8") == "vnni":  # make_compute tells the two apart by the count
            return [vnni.gemm_kernel(), cell_kernel(), loop_kernel()]
        return [product_kernel(), cell_kernel()]
    if (step["domain"], step["op"]) in CONV_OPS:
        return [vnni.conv_kernel(step["in_types"][0][0])]
    if step["int8"] == "vnni-runtime":
        types = step["in_types"]
        return [vnni.bmm_kernel(types[0][0], types[_WEIGHT_AT[step["op"]][0]][0])]
    return [vnni.gemm_kernel()]


def make_compute(
    step: Mapping[str, Any], kernels: Sequence[Any], weights: Mapping[str, np.ndarray], host: Any
) -> Callable[..., Any]:
    """The reference EP's kernel of the node with the compiled loops of ``kernel_sources``."""
    from ep_numba_cpu import delegate

    if (step["domain"], step["op"]) in CONV_OPS:
        (conv,) = kernels
        return delegate.build(step, weights, host, int_conv=lambda wf, group: _int_conv(conv, wf, group))
    if step["op"] not in OPS and step["int8"] == "vnni-runtime":
        from ep_numba_cpu import vnni

        (bmm,) = kernels
        return delegate.build(
            step, weights, host, run_time_product=lambda a, az, b, bz: vnni.run_time_product(bmm, a, az, b, bz)
        )
    if step["op"] not in OPS:
        (gemm,) = kernels
        return delegate.build(step, weights, host, int_product=lambda bf: _int_product(gemm, bf))
    fn, cell_fn, *vnni_loop = kernels
    p_coefs, q_coefs, bounds = _cell_constants()

    def lstm_cell(g: np.ndarray, c: np.ndarray, h: np.ndarray) -> None:
        cell_fn(g, c, h, p_coefs, q_coefs, bounds)

    if vnni_loop:  # VNNI's product (fn), the cell and the whole time loop
        return delegate.build(
            step,
            weights,
            host,
            recurrent_product=lambda v: _gemm_recurrent(fn, v),
            lstm_cell=lstm_cell,
            int_product=lambda bf: _int_product(fn, bf),
            time_loop=lambda rq: _time_loop(vnni_loop[0], rq, (p_coefs, q_coefs, bounds)),
        )
    return delegate.build(step, weights, host, recurrent_product=lambda v: _product(fn, v), lstm_cell=lstm_cell)


def _time_loop(fn: Any, rq: np.ndarray, cell: tuple[np.ndarray, ...]) -> Callable[..., Any] | None:
    """The reference's ``time_loop`` through ``loop_kernel`` ``fn``: R' (D, 4, H, H) packed per
    direction as one (H, 4H) B'; None where it does not fit. The loop serves finite inputs only;
    the loop of ``dq_lstm_loop`` with this EP's product and cell serves the rest."""
    from ep_numba_cpu import vnni

    n_dir, n_gates, n_k, n_h = rq.shape
    packs = [vnni.pack(rq[d].transpose(1, 0, 2).reshape(n_k, n_gates * n_h)) for d in range(n_dir)]
    if any(p is None for p in packs):
        return None
    s = readonly(np.stack([p.s for p in packs if p is not None]))
    cb = readonly(np.stack([p.cb for p in packs if p is not None]))
    bsum = readonly(np.stack([p.bsum for p in packs if p is not None]))
    no_bias = readonly(np.zeros((0, 0, 0, 0), np.float32))

    def run(xw: np.ndarray, rs: np.ndarray, bias: np.ndarray | None, h: np.ndarray, c: np.ndarray) -> Any:
        parts = (xw, rs, h, c) if bias is None else (xw, rs, bias, h, c)
        if not all(np.isfinite(v).all() for v in parts):
            return None
        if not c.flags.c_contiguous:  # (updated in place through a view)
            return None
        n_t, _, _, batch, hs = xw.shape
        rows = n_dir * batch
        ys = np.empty((n_t, n_dir, batch, hs), np.float32)
        state = np.array(h, np.float32).reshape(rows, hs)
        cell2 = c.reshape(rows, hs)
        scratch = (np.empty((4, rows, hs), np.float32), np.empty((batch, 4 * (s.shape[2] // 256)), np.uint8))
        acc = np.empty((batch, 64 * s.shape[1]), np.int32)
        b = no_bias if bias is None else readonly(np.ascontiguousarray(bias, np.float32))
        status = fn(
            readonly(xw), readonly(rs), b, state, cell2, s, cb, bsum, *cell, ys.reshape(n_t, rows, hs), *scratch, acc
        )
        if status != 0:
            raise RuntimeError(f"DynamicQuantizeLSTM's compiled loop: its buffers do not match (status {status})")
        return ys, c

    return run


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

"""Exact 8-bit integer products on AVX-512 VNNI (``vpdpbusd``): micro-kernels, kernels, layouts.

Why: NumPy has no integer GEMM, so the reference EP computes 8-bit products exactly through
float32 BLAS (or float64), which reads 4 bytes per weight and does 16 multiply-adds per
instruction. ``vpdpbusd`` multiplies 64 unsigned by 64 signed bytes and adds them in fours to 16
int32 lanes: one instruction does 64, and a weight is one byte. On a 2-core EPYC (Zen 4) a
(1500 x 384) by (384 x 1536) product takes 6.8 ms against float32 BLAS's 16.6 ms (onnxruntime's
MLAS: 4.0 ms), and a DynamicQuantizeLSTM step's (2 x 384) by (384 x 1536) 12 us against 115 us
(``benchmarks/bench_int8_gemm.py``).

LLVM does not produce ``vpdpbusd`` from loops over bytes (it widens them to 16 bits), so the
micro-kernels are Numba intrinsics that call it by name (and ``copy_bytes``/``fill_bytes`` call
memcpy/memset, which a byte loop between two arrays does not become); they compile only for a CPU
that has the instruction (``available``), and a context compiled with them is refused on a CPU
without it (``compat``: the recorded CPU features). The products are exact: every sum is an
integer held in int32, so the results equal the reference EP's exact float products to the bit.

Operands: A' = A - a_zp and B' = B - b_zp (8-bit data minus a zero point: each row of A' and
column of B' spans at most 256 consecutive integers within [-255, 255], which is checked).
``vpdpbusd`` takes unsigned A and signed B, so each row of A' is moved by its ``ca`` (U = A' + ca
in [0, 255]) and each column of B' by ``cb[n]`` (S = B' - cb in [-128, 127]); then
    A' @ B' = U @ S + rowsum(U) * cb - ca * colsum(B')
applied in int64 before storing. The kernels: ``gemm_kernel`` (a constant B packed once,
``pack``), ``bmm_kernel`` (both operands at run time), ``conv_kernel`` (a 2-D convolution whose
filter is packed by ``pack_conv``); ``int_loops`` adds DynamicQuantizeLSTM's time loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_numba_cpu.generate import KernelSource
from ep_numba_cpu.recurrent import readonly

COLS = 64  # columns per block: four registers of 16 int32 lanes
MAX_K = 32768  # |A' @ B'| <= 255 * 255 * K stays in int32, and U @ S (255 * 128 * K) too
_FEATURES = ("avx512f", "avx512bw", "avx512vnni")


def available() -> bool:
    """Whether Numba compiles for a CPU with AVX-512 VNNI (``compat.host_has``)."""
    from ep_numba_cpu.compat import host_has

    return host_has(*_FEATURES)


def _micro(rows: int) -> Any:
    """The micro-kernel for ``rows`` rows of U by one block of 64 columns of S over all of K:
    16 * rows / 4 accumulators in registers, ``vpdpbusd`` per 4 values of K."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.extending import intrinsic

    i32x16 = ir.VectorType(ir.IntType(32), 16)
    i64 = ir.IntType(64)
    n_vec = COLS // 16

    @intrinsic
    def micro(typingctx, u, u_off, ldu, s, s_off, k4, acc, acc_off, ldacc):  # type: ignore[no-untyped-def]
        ints = (u_off, ldu, s_off, k4, acc_off, ldacc)
        if not all(isinstance(t, types.Integer) for t in ints):
            return None
        sig = types.void(u, u_off, ldu, s, s_off, k4, acc, acc_off, ldacc)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            def as_i64(i: int) -> Any:
                return context.cast(builder, args[i], signature.args[i], types.int64)

            u_ptr = builder.gep(context.make_array(signature.args[0])(context, builder, args[0]).data, [as_i64(1)])
            s_ptr = builder.gep(context.make_array(signature.args[3])(context, builder, args[3]).data, [as_i64(4)])
            a_ptr = builder.gep(context.make_array(signature.args[6])(context, builder, args[6]).data, [as_i64(7)])
            ldu_v, k4_v, ld_v = as_i64(2), as_i64(5), as_i64(8)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32x16, [i32x16] * 3), "llvm.x86.avx512.vpdpbusd.512"
            )
            zero = ir.Constant(i32x16, None)
            accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(n_vec)] for _ in range(rows)]
            with cgutils.for_range(builder, k4_v) as loop:
                k = loop.index
                base = builder.gep(s_ptr, [builder.mul(k, ir.Constant(i64, 4 * COLS))])
                svs = [
                    builder.load(
                        builder.bitcast(builder.gep(base, [ir.Constant(i64, 64 * j)]), i32x16.as_pointer()), align=1
                    )
                    for j in range(n_vec)
                ]
                for r in range(rows):
                    at = builder.add(builder.mul(ldu_v, ir.Constant(i64, r)), builder.mul(k, ir.Constant(i64, 4)))
                    four = builder.load(builder.bitcast(builder.gep(u_ptr, [at]), ir.IntType(32).as_pointer()), align=1)
                    one = builder.insert_element(zero, four, ir.Constant(ir.IntType(32), 0))
                    splat = builder.shuffle_vector(one, zero, ir.Constant(i32x16, [0] * 16))
                    for j in range(n_vec):
                        builder.store(builder.call(fn, [builder.load(accs[r][j]), splat, svs[j]]), accs[r][j])
            for r in range(rows):
                for j in range(n_vec):
                    at = builder.add(builder.mul(ld_v, ir.Constant(i64, r)), ir.Constant(i64, 16 * j))
                    dst = builder.bitcast(builder.gep(a_ptr, [at]), i32x16.as_pointer())
                    builder.store(builder.load(accs[r][j]), dst, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return micro


def _byte_ops() -> tuple[Any, Any]:
    """``copy_bytes(dst, dst_off, src, src_off, n)`` and ``fill_bytes(dst, dst_off, value, n)``
    on the flat bytes of C-contiguous uint8 arrays: one ``memcpy``/``memset`` where a byte loop
    between two arrays is not vectorised (LLVM cannot tell that they do not overlap)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.extending import intrinsic

    @intrinsic
    def copy_bytes(typingctx, dst, dst_off, src, src_off, n):  # type: ignore[no-untyped-def]
        sig = types.void(dst, dst_off, src, src_off, n)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            def at(i: int, off: int) -> Any:
                data = context.make_array(signature.args[i])(context, builder, args[i]).data
                return builder.gep(data, [context.cast(builder, args[off], signature.args[off], types.int64)])

            count = context.cast(builder, args[4], signature.args[4], types.int64)
            cgutils.raw_memcpy(builder, at(0, 1), at(2, 3), count, 1)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def fill_bytes(typingctx, dst, dst_off, value, n):  # type: ignore[no-untyped-def]
        sig = types.void(dst, dst_off, value, n)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            ptr = builder.gep(data, [context.cast(builder, args[1], signature.args[1], types.int64)])
            byte = builder.trunc(context.cast(builder, args[2], signature.args[2], types.int64), ir.IntType(8))
            cgutils.memset(builder, ptr, context.cast(builder, args[3], signature.args[3], types.int64), byte)
            return context.get_dummy_value()

        return sig, codegen

    return copy_bytes, fill_bytes


def _rows_of(micro4: Any, micro2: Any, micro1: Any) -> Any:
    """``gemm_rows(u, kp, s, s_off, k4, acc, acc_cols, col, rows)``: ``rows`` rows of U (from row
    0, ``kp`` bytes each) by one block of 64 columns of S at ``s_off``, into ``acc`` at column
    ``col``: four rows at a time, then two, then one (every kernel's dispatch, inlined)."""
    from numba import njit

    @njit(inline="always")
    def gemm_rows(u, kp, s, s_off, k4, acc, acc_cols, col, rows):  # type: ignore[no-untyped-def]
        i = 0
        while i + 4 <= rows:
            micro4(u, i * kp, kp, s, s_off, k4, acc, i * acc_cols + col, acc_cols)
            i += 4
        if i + 2 <= rows:
            micro2(u, i * kp, kp, s, s_off, k4, acc, i * acc_cols + col, acc_cols)
            i += 2
        if i < rows:
            micro1(u, i * kp, kp, s, s_off, k4, acc, i * acc_cols + col, acc_cols)

    return gemm_rows


# the generated kernels import these (compiled into their object code: a rebuild does not call them)
micro4 = _micro(4)
micro2 = _micro(2)
micro1 = _micro(1)
gemm_rows = _rows_of(micro4, micro2, micro1)
copy_bytes, fill_bytes = _byte_ops()

_GEMM = """import numpy as np
from ep_numba_cpu.vnni import gemm_rows


def kernel(a, s, cb, bsum, out, u, acc, offsets):
    n_m, n_k = a.shape
    n_n = out.shape[1]
    n_blocks = s.shape[0]
    k4 = s.shape[1] // 256
    kp = 4 * k4
    np_ = 64 * n_blocks
    if out.shape[0] != n_m or u.shape[0] < n_m or u.shape[1] != kp or acc.shape[0] < n_m or acc.shape[1] != np_:
        return 2
    if n_k > kp or n_n > np_ or cb.shape[0] < n_n or bsum.shape[0] < n_n or offsets.shape[0] < n_m or n_k == 0:
        return 2
    for i in range(n_m):
        lo = a[i, 0]
        hi = a[i, 0]
        for k in range(n_k):
            v = a[i, k]
            if v != v:
                return 1
            if v < lo:
                lo = v
            if v > hi:
                hi = v
        if not (hi - lo <= np.float32(255.0)) or lo < np.float32(-255.0) or hi > np.float32(255.0):
            return 1
        ca = np.int64(-lo)
        offsets[i] = ca
        for k in range(n_k):
            u[i, k] = np.uint8(np.int64(a[i, k]) + ca)
        for k in range(n_k, kp):
            u[i, k] = np.uint8(0)
    for blk in range(n_blocks):
        gemm_rows(u, kp, s, blk * k4 * 256, k4, acc, np_, blk * 64, n_m)
    for i in range(n_m):
        rowsum = np.int64(0)
        for k in range(n_k):
            rowsum += np.int64(u[i, k])
        ca = offsets[i]
        for j in range(n_n):
            out[i, j] = np.int32(np.int64(acc[i, j]) + np.int64(cb[j]) * rowsum - ca * np.int64(bsum[j]))
    return 0
"""
# (each row of A' moves by its own ca, so a zero point per row of A serves too; returns 1 when a
# row spans more than 256 values, leaves [-255, 255] (which keeps every sum in int32 for K <=
# MAX_K) or holds a NaN: the caller takes the float product; 2 when the buffers do not match the
# layout, which the caller raises)


def gemm_kernel() -> KernelSource:
    """a (M, K) float32 A' (exact integers), s (blocks, K4*256) int8 packed S, cb and bsum (N,)
    int32, out (M, N) int32, and the scratch u (M, 4*K4) uint8, acc (M, 64*blocks) int32 and the
    rows' moves (M,) int64."""
    sig = "float32:2:C:r,int8:2:C:r,int32:1:C:r,int32:1:C:r,int32:2:C:w,uint8:2:C:w,int32:2:C:w,int64:1:C:w"
    return KernelSource(_GEMM, sig, False)


_CONV = """import numpy as np
from ep_numba_cpu.vnni import copy_bytes, fill_bytes, gemm_rows


def kernel(x, zp, s, cb, bsum, bias, geo, out, t, tsum, u, acc, rowsum):
    n_n, n_c, n_h, n_w = x.shape
    n_m = out.shape[1]
    kh = geo[0]
    kw = geo[1]
    sh = geo[2]
    sw = geo[3]
    dh = geo[4]
    dw = geo[5]
    pt = geo[6]
    pl = geo[7]
    oh = geo[8]
    ow = geo[9]
    n_p = oh * ow
    k4 = s.shape[1] // 256
    kp = 4 * k4
    mp = 64 * s.shape[0]
    n_k = kh * kw * n_c
    rows = u.shape[0]
    if out.shape[0] != n_n or out.shape[2] != n_p or n_k > kp or u.shape[1] != kp or rows % 4 != 0 or rows == 0:
        return 2
    if acc.shape[0] != rows or acc.shape[1] != mp or rowsum.shape[0] < rows or n_m > mp:
        return 2
    if t.shape[0] != n_h or t.shape[1] != n_w or t.shape[2] != n_c or cb.shape[0] < n_m or bsum.shape[0] < n_m:
        return 2
    if tsum.shape[0] != n_h or tsum.shape[1] != n_w:
        return 2
    if bias.shape[0] < n_m:
        return 2
    z = np.int64(zp[0])
    lo = np.int64(0)
    hi = np.int64(0)
    for n in range(n_n):
        for c in range(n_c):
            for y in range(n_h):
                for q in range(n_w):
                    v = np.int64(x[n, c, y, q]) - z
                    if v < lo:
                        lo = v
                    if v > hi:
                        hi = v
    if hi - lo > 255 or lo < -255 or hi > 255:
        return 1
    ca = -lo
    pad = np.uint8(ca)
    shift = np.uint8((ca - z) & 255)
    for n in range(n_n):
        for y in range(n_h):
            for q in range(n_w):
                total = np.int64(0)
                for c in range(n_c):
                    v = np.uint8(np.uint8(x[n, c, y, q]) + shift)
                    t[y, q, c] = v
                    total += np.int64(v)
                tsum[y, q] = total
        for p0 in range(0, n_p, rows):
            r = min(rows, n_p - p0)
            for i in range(r):
                p = p0 + i
                oy = p // ow
                ox = p - oy * ow
                kk = i * kp
                total = np.int64(0)
                for a in range(kh):
                    iy = oy * sh - pt + a * dh
                    for b in range(kw):
                        ix = ox * sw - pl + b * dw
                        if iy >= 0 and iy < n_h and ix >= 0 and ix < n_w:
                            copy_bytes(u, kk, t, (iy * n_w + ix) * n_c, n_c)
                            total += tsum[iy, ix]
                        else:
                            fill_bytes(u, kk, pad, n_c)
                            total += np.int64(n_c) * ca
                        kk += n_c
                fill_bytes(u, kk, 0, kp - n_k)
                rowsum[i] = total
            for blk in range(s.shape[0]):
                gemm_rows(u, kp, s, blk * k4 * 256, k4, acc, mp, blk * 64, r)
            for m in range(n_m):
                base = np.int64(bias[m]) - ca * np.int64(bsum[m])
                scale = np.int64(cb[m])
                for i in range(r):
                    out[n, m, p0 + i] = np.float32(np.int64(acc[i, m]) + scale * rowsum[i] + base)
    return 0
"""
# (x is moved to (H, W, C) once per image, as U = x - zp + ca (in uint8 arithmetic modulo 256: the
# true value is in [0, 255]), so that each tap of an output position copies C contiguous bytes
# into its row of U; K runs over (kh, kw, C), as ``pack_conv`` lays W out, and a row's sum is its
# taps' sums over C. A padded tap is x' = 0 (QLinearConv and ConvInteger pad with the zero point).
# Rows of U are made ``rows`` output positions at a time, a block that stays in L2.)

_ROW_BYTES = 1 << 18  # U's and the sums' bytes per block of output positions


def conv_kernel(x_dtype: str) -> KernelSource:
    """x (N, C, H, W) uint8 or int8, zp (1,) int32, s/cb/bsum as ``gemm_kernel``'s (``pack_conv``),
    bias (M,) int32, geo (10,) int64 (kernel, strides, dilations, leading pads, output size, each
    (h, w)), out (N, M, P) float32: the float32 nearest conv(x - zp, W') + bias; scratch t
    (H, W, C) uint8 and its sums over C tsum (H, W) int64, u (rows, 4*K4) uint8, acc
    (rows, 64*blocks) int32, rowsum (rows,) int64."""
    sig = (
        f"{x_dtype}:4:C:r,int32:1:C:r,int8:2:C:r,int32:1:C:r,int32:1:C:r,int32:1:C:r,int64:1:C:r,"
        "float32:3:C:w,uint8:3:C:w,int64:2:C:w,uint8:2:C:w,int32:2:C:w,int64:1:C:w"
    )
    return KernelSource(_CONV, sig, False)


_BMM = """import numpy as np
from ep_numba_cpu.vnni import gemm_rows


def kernel(a, b, zp, out, u, s, acc, colsum):
    n_g, n_m, n_k = a.shape
    n_n = b.shape[2]
    n_blocks = s.shape[0]
    k4 = s.shape[1] // 256
    kp = 4 * k4
    np_ = 64 * n_blocks
    if b.shape[0] != n_g or b.shape[1] != n_k or out.shape[0] != n_g or out.shape[1] != n_m or out.shape[2] != n_n:
        return 2
    if u.shape[0] < n_m or u.shape[1] != kp or acc.shape[0] < n_m or acc.shape[1] != np_ or colsum.shape[0] < np_:
        return 2
    if kp < n_k or np_ < n_n:
        return 2
    off_a = zp[2]
    off_b = zp[3]
    ca = zp[0] + off_a
    cb = off_b - zp[1]
    if ca < 0 or ca > 255 or cb < -255 or cb > 255:
        return 1
    shift_a = np.uint8(off_a)
    shift_b = np.uint8(off_b)
    if n_k < kp or n_n < np_:  # the layout's padding holds zeros (the entries below never write it)
        for blk in range(n_blocks):
            for i in range(k4 * 256):
                s[blk, i] = np.int8(0)
    for g in range(n_g):
        for m in range(n_m):
            for k in range(n_k):
                u[m, k] = np.uint8(np.uint8(a[g, m, k]) + shift_a)
            for k in range(n_k, kp):
                u[m, k] = np.uint8(0)
        for n in range(np_):
            colsum[n] = 0
        for k in range(n_k):
            q = k >> 2
            kk = k & 3
            for n in range(n_n):
                v = np.int8(np.uint8(b[g, k, n]) - shift_b)
                s[n >> 6, q * 256 + (n & 63) * 4 + kk] = v
                colsum[n] += np.int64(v)
        for blk in range(n_blocks):
            gemm_rows(u, kp, s, blk * k4 * 256, k4, acc, np_, blk * 64, n_m)
        for n in range(n_n):
            colsum[n] = ca * (colsum[n] + np.int64(n_k) * cb)
        for m in range(n_m):
            rowsum = np.int64(0)
            for k in range(n_k):
                rowsum += np.int64(u[m, k])
            row = cb * rowsum
            for n in range(n_n):
                out[g, m, n] = np.int32(np.int64(acc[m, n]) + row - colsum[n])
    return 0
"""
# (both operands at run time, as QLinearMatMul's and MatMulInteger's attention products of QDQ
# transformers have them: U = a (uint8) or a + 128 (int8) and S = b - 128 (uint8) or b (int8), in
# byte arithmetic, so A' = U - ca and B' = S + cb with ca = a_zp (+ 128) and cb = (128 -) b_zp,
# scalars (``zp``: a_zp, b_zp, then the two moves, 0 or 128); B is laid out per batch entry into
# ``s``. Returns 1 for a zero point outside its type's range, which ONNX's checker refuses.)


def bmm_kernel(a_dtype: str, b_dtype: str) -> KernelSource:
    """a (G, M, K) and b (G, K, N) 8-bit, zp (4,) int64 (a_zp, b_zp, and the moves of ``_BMM``),
    out (G, M, N) int32; scratch u (M, 4*K4) uint8, s (blocks, K4*256) int8, acc (M, 64*blocks)
    int32, colsum (64*blocks,) int64."""
    sig = f"{a_dtype}:3:C:r,{b_dtype}:3:C:r,int64:1:C:r,int32:3:C:w,uint8:2:C:w,int8:2:C:w,int32:2:C:w,int64:1:C:w"
    return KernelSource(_BMM, sig, False)


@dataclass(frozen=True)
class PackedB:
    """B' laid out for ``gemm_kernel``: S in blocks of 64 columns, 4 values of K per column
    together (a block's k-th 256 bytes are one ``vpdpbusd`` operand per 16 columns)."""

    s: np.ndarray  # (blocks, K4 * 256) int8
    cb: np.ndarray  # (N,) int32: B' = S + cb
    bsum: np.ndarray  # (N,) int32: the column sums of B'
    k: int
    n: int


def pack(bf: np.ndarray) -> PackedB | None:
    """``bf`` (K, N): B' as exact integers in any dtype; None where the layout cannot hold it
    (a column spanning more than 256 values, a value outside [-255, 255], K beyond ``MAX_K``,
    or no values)."""
    if bf.ndim != 2 or bf.size == 0 or bf.shape[0] > MAX_K:
        return None
    lo, hi = bf.min(axis=0), bf.max(axis=0)  # (NaN reaches both)
    if not (lo.min() >= -255 and hi.max() <= 255 and (hi.astype(np.int32) - lo.astype(np.int32)).max() <= 255):
        return None  # 8-bit data minus a zero point spans at most 256 values within [-255, 255]
    b = bf.astype(np.int16)
    if not np.array_equal(b, bf):  # not integers
        return None
    k, n = b.shape
    cb = lo.astype(np.int16) + np.int16(128)
    s = np.zeros((-(-k // 4) * 4, -(-n // COLS) * COLS), np.int8)
    np.subtract(b, cb, out=s[:k, :n], casting="unsafe")  # within [-128, 127]
    blocks = s.reshape(s.shape[0] // 4, 4, s.shape[1] // COLS, COLS).transpose(2, 0, 3, 1)
    packed = np.ascontiguousarray(blocks).reshape(s.shape[1] // COLS, -1)
    bsum = b.sum(axis=0, dtype=np.int32)
    return PackedB(readonly(packed), readonly(cb.astype(np.int32)), readonly(bsum), k, n)


def product(fn: Any, packed: PackedB, a: np.ndarray) -> np.ndarray | None:
    """``a @ B'`` as int32 for ``a`` (..., K) A' (exact integers in a float array), through the
    compiled ``gemm_kernel`` ``fn``; None when a row of A' spans more than 256 values or leaves
    [-255, 255] (the caller's exact float product serves it)."""
    if a.shape[-1] != packed.k:
        raise ValueError(f"A has {a.shape[-1]} columns, B {packed.k} rows")
    lead = a.shape[:-1]
    a2 = np.ascontiguousarray(a.reshape(-1, packed.k), dtype=np.float32)
    m = a2.shape[0]
    out = np.empty((m, packed.n), np.int32)
    u = np.empty((m, 4 * (packed.s.shape[1] // 256)), np.uint8)
    acc = np.empty((m, packed.s.shape[0] * COLS), np.int32)
    status = fn(readonly(a2), packed.s, packed.cb, packed.bsum, out, u, acc, np.empty(m, np.int64))
    if status == 1:
        return None
    if status != 0:
        raise RuntimeError(f"the VNNI product's buffers do not match its layout (status {status})")
    return out.reshape(*lead, packed.n)


def pack_conv(wf: np.ndarray, group: int) -> PackedB | None:
    """W' (M, C, kh, kw) (exact integers) laid out for ``conv_kernel``: B' (kh*kw*C, M) packed;
    None for grouped or non-2-D convolutions, or a W' ``pack`` refuses."""
    if group != 1 or wf.ndim != 4:
        return None
    m = wf.shape[0]
    return pack(np.ascontiguousarray(np.asarray(wf).transpose(2, 3, 1, 0)).reshape(-1, m))


def conv(
    fn: Any,
    packed: PackedB,
    x: np.ndarray,
    zp: int,
    bias: np.ndarray | None,
    geometry: tuple[Any, ...],
) -> np.ndarray | None:
    """conv(x - zp, W') + bias as float32 (N, M, *out) through the compiled ``conv_kernel``
    ``fn`` (the float32 nearest each exact sum); None when x - zp leaves [-255, 255] (a zero
    point outside x's type, which ONNX's checker refuses).
    ``geometry``: (kernel, strides, dilations, leading pads, out), each per spatial axis."""
    kernel, strides, dil, pb, out = geometry
    n, c, h, w = x.shape
    if c * kernel[0] * kernel[1] != packed.k:
        raise ValueError(f"x has {c} channels for a {list(kernel)} kernel, W' {packed.k} values per channel")
    m = packed.n
    kp = 4 * (packed.s.shape[1] // 256)
    mp = packed.s.shape[0] * COLS
    rows = max(4, min(_ROW_BYTES // (kp + 4 * mp), -(-out[0] * out[1] // 4) * 4) // 4 * 4)
    geo = np.array([*kernel, *strides, *dil, *pb, *out], np.int64)
    b = np.zeros(m, np.int32) if bias is None else np.ascontiguousarray(np.asarray(bias).reshape(-1), np.int32)
    y = np.empty((n, m, out[0] * out[1]), np.float32)
    planes = (np.empty((h, w, c), np.uint8), np.empty((h, w), np.int64))
    blocks = (np.empty((rows, kp), np.uint8), np.empty((rows, mp), np.int32), np.empty(rows, np.int64))
    status = fn(
        readonly(np.ascontiguousarray(x)),
        readonly(np.array([zp], np.int32)),
        packed.s,
        packed.cb,
        packed.bsum,
        readonly(b),
        readonly(geo),
        y,
        *planes,
        *blocks,
    )
    if status == 1:
        return None
    if status != 0:
        raise RuntimeError(f"the VNNI convolution's buffers do not match its layout (status {status})")
    return y.reshape(n, m, *out)


def run_time_product(fn: Any, a: np.ndarray, a_zp: Any, b: np.ndarray, b_zp: Any) -> np.ndarray | None:
    """(a - a_zp) @ (b - b_zp) as int32 for 8-bit ``a`` (..., M, K) and ``b`` (..., K, N) of the
    dtypes ``fn`` (``bmm_kernel``) was compiled for, with scalar zero points and equal batch dims
    (or a 2-D ``b``); None otherwise (the caller's exact float product serves)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2] or b.shape[-2] > MAX_K or 0 in a.shape + b.shape:
        return None
    zeros = [np.zeros(1, np.int32) if z is None else np.asarray(z) for z in (a_zp, b_zp)]
    if any(z.size != 1 for z in zeros):
        return None
    if b.ndim == 2:
        lead, a3, b3 = a.shape[:-1], a.reshape(1, -1, a.shape[-1]), b[None]
    elif a.shape[:-2] == b.shape[:-2]:
        lead = a.shape[:-1]
        a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    else:
        return None
    g, m, k = a3.shape
    n = b3.shape[2]
    k4, blocks = -(-k // 4), -(-n // COLS)
    out = np.empty((g, m, n), np.int32)
    moves = (0 if a.dtype == np.uint8 else 128, 128 if b.dtype == np.uint8 else 0)
    zp = readonly(np.array([int(zeros[0].reshape(-1)[0]), int(zeros[1].reshape(-1)[0]), *moves], np.int64))
    buffers = (np.empty((m, 4 * k4), np.uint8), np.empty((blocks, k4 * 256), np.int8))
    sums = (np.empty((m, blocks * COLS), np.int32), np.empty(blocks * COLS, np.int64))
    a_in, b_in = readonly(np.ascontiguousarray(a3)), readonly(np.ascontiguousarray(b3))
    status = fn(a_in, b_in, zp, out, *buffers, *sums)
    if status == 1:
        return None
    if status != 0:
        raise RuntimeError(f"the VNNI product's buffers do not match its layout (status {status})")
    return out.reshape(*lead, n)

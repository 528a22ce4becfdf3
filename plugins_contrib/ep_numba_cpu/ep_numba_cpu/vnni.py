"""Exact 8-bit integer products on AVX-512 VNNI (``vpdpbusd``): the micro-kernels and B's layout.

Why: NumPy has no integer GEMM, so the reference EP computes 8-bit products exactly through
float32 BLAS (or float64), which reads 4 bytes per weight and does 16 multiply-adds per
instruction. ``vpdpbusd`` multiplies 64 unsigned by 64 signed bytes and adds them in fours to 16
int32 lanes: one instruction does 64, and a weight is one byte. On a 2-core EPYC (Zen 4) a
(400 x 384) by (384 x 1536) product takes 1.07 ms against float32 BLAS's 4.9 ms, and a
DynamicQuantizeLSTM step's (2 x 384) by (384 x 1536) 6.5 us against 43 us.

LLVM does not produce ``vpdpbusd`` from loops over bytes (it widens them to 16 bits), so the
micro-kernels are Numba intrinsics that call it by name; they compile only for a CPU that has
the instruction (``available``), and a context compiled with them is refused on a CPU without it
(``compat``: the recorded CPU features). The products are exact: every sum is an integer held in
int32, so the results equal the reference EP's exact float products to the bit.

Operands: A' = A - a_zp and B' = B - b_zp (8-bit data minus a zero point: each spans at most 256
consecutive integers). ``vpdpbusd`` takes unsigned A and signed B, so A' is moved by ``ca``
(U = A' + ca in [0, 255]) and each column of B' by ``cb[n]`` (S = B' - cb in [-128, 127]); then
    A' @ B' = U @ S + rowsum(U) * cb - ca * colsum(B')
which ``gemm_kernel`` applies in int64 before storing int32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_numba_cpu.generate import KernelSource

COLS = 64  # columns per block: four registers of 16 int32 lanes
MAX_K = 32768  # |A' @ B'| <= 255 * 255 * K stays in int32, and U @ S (255 * 128 * K) too
_FEATURES = ("avx512f", "avx512bw", "avx512vnni")


def available() -> bool:
    """Whether Numba compiles for a CPU with AVX-512 VNNI (its own target features: the ones a
    context records and a loading CPU is checked against)."""
    from ep_numba_cpu.compat import host_target

    enabled = {f[1:] for f in host_target()[2].split(",") if f.startswith("+")}
    return all(f in enabled for f in _FEATURES)


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


# the generated kernel imports these (compiled into its object code: a rebuild does not call them)
micro4 = _micro(4)
micro2 = _micro(2)
micro1 = _micro(1)

_GEMM = """import numpy as np
from ep_numba_cpu.vnni import micro1, micro2, micro4


def kernel(a, s, cb, bsum, out, u, acc):
    n_m, n_k = a.shape
    n_n = out.shape[1]
    n_blocks = s.shape[0]
    k4 = s.shape[1] // 256
    kp = 4 * k4
    np_ = 64 * n_blocks
    if out.shape[0] != n_m or u.shape[0] < n_m or u.shape[1] != kp or acc.shape[0] < n_m or acc.shape[1] != np_:
        return 2
    if n_k > kp or n_n > np_ or cb.shape[0] < n_n or bsum.shape[0] < n_n:
        return 2
    lo = np.float32(0.0)
    hi = np.float32(0.0)
    if n_m > 0 and n_k > 0:
        lo = a[0, 0]
        hi = a[0, 0]
    for i in range(n_m):
        for k in range(n_k):
            v = a[i, k]
            if v != v:
                return 1
            if v < lo:
                lo = v
            if v > hi:
                hi = v
    if not (hi - lo <= np.float32(255.0)):
        return 1
    ca = np.int64(-lo)
    for i in range(n_m):
        for k in range(n_k):
            u[i, k] = np.uint8(np.int64(a[i, k]) + ca)
        for k in range(n_k, kp):
            u[i, k] = np.uint8(0)
    for blk in range(n_blocks):
        s_off = blk * k4 * 256
        col = blk * 64
        r = 0
        while r + 4 <= n_m:
            micro4(u, r * kp, kp, s, s_off, k4, acc, r * np_ + col, np_)
            r += 4
        if r + 2 <= n_m:
            micro2(u, r * kp, kp, s, s_off, k4, acc, r * np_ + col, np_)
            r += 2
        if r < n_m:
            micro1(u, r * kp, kp, s, s_off, k4, acc, r * np_ + col, np_)
    for i in range(n_m):
        rowsum = np.int64(0)
        for k in range(n_k):
            rowsum += np.int64(u[i, k])
        for j in range(n_n):
            out[i, j] = np.int32(np.int64(acc[i, j]) + np.int64(cb[j]) * rowsum - ca * np.int64(bsum[j]))
    return 0
"""
# (returns 1 when A' spans more than 256 values, or holds a NaN: the caller takes the float
# product; 2 when the buffers do not match the layout, which the caller raises as a Fail)


def gemm_kernel() -> KernelSource:
    """a (M, K) float32 A' (exact integers), s (blocks, K4*256) int8 packed S, cb and bsum (N,)
    int32, out (M, N) int32, and the scratch u (M, 4*K4) uint8 and acc (M, 64*blocks) int32."""
    sig = "float32:2:C:r,int8:2:C:r,int32:1:C:r,int32:1:C:r,int32:2:C:w,uint8:2:C:w,int32:2:C:w"
    return KernelSource(_GEMM, sig, False)


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
    (a column spanning more than 256 values, K beyond ``MAX_K``, or no values)."""
    if bf.ndim != 2 or bf.size == 0 or bf.shape[0] > MAX_K:
        return None
    b = np.asarray(bf, np.float64)
    if not np.isfinite(b).all() or not np.array_equal(b, np.rint(b)):
        return None
    lo, hi = b.min(axis=0), b.max(axis=0)
    if float((hi - lo).max()) > 255.0 or float(np.abs(b).max()) > 2.0**15:
        return None
    k, n = b.shape
    cb = (lo + 128.0).astype(np.int64)
    s = np.zeros((-(-k // 4) * 4, -(-n // COLS) * COLS), np.int8)
    s[:k, :n] = (b.astype(np.int64) - cb).astype(np.int8)
    blocks = s.reshape(s.shape[0] // 4, 4, s.shape[1] // COLS, COLS).transpose(2, 0, 3, 1)
    packed = np.ascontiguousarray(blocks).reshape(s.shape[1] // COLS, -1)
    return PackedB(_readonly(packed), _readonly(cb.astype(np.int32)), _readonly(b.sum(axis=0).astype(np.int32)), k, n)


def product(fn: Any, packed: PackedB, a: np.ndarray) -> np.ndarray | None:
    """``a @ B'`` as int32 for ``a`` (..., K) A' (exact integers in a float array), through the
    compiled ``gemm_kernel`` ``fn``; None when A' spans more than 256 values (the caller's exact
    float product serves it)."""
    if a.shape[-1] != packed.k:
        raise ValueError(f"A has {a.shape[-1]} columns, B {packed.k} rows")
    lead = a.shape[:-1]
    a2 = np.ascontiguousarray(a.reshape(-1, packed.k), dtype=np.float32)
    m = a2.shape[0]
    out = np.empty((m, packed.n), np.int32)
    u = np.empty((m, 4 * (packed.s.shape[1] // 256)), np.uint8)
    acc = np.empty((m, packed.s.shape[0] * COLS), np.int32)
    status = fn(_readonly(a2), packed.s, packed.cb, packed.bsum, out, u, acc)
    if status == 1:
        return None
    if status != 0:
        raise RuntimeError(f"the VNNI product's buffers do not match its layout (status {status})")
    return out.reshape(*lead, packed.n)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.view()
    a.flags.writeable = False
    return a

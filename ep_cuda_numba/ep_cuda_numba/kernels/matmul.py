"""MatMul and Gemm: one shared-memory tiled kernel with register blocking, addressing A and B
through (row, col) strides, so transposes are free, with batch broadcasting by per-dimension
batch strides and an ``alpha*AB + beta*C`` epilogue (Gemm's C broadcast through its own strides).
float16 operands are tiled as float16 and accumulated in float32 (``accumulator``), rounded once
at the store. Conv's GEMM reuses it."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numba import cuda, from_dtype

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.launch import MAX_BLOCKS, SIM, Runtime, c_strides, flat
from ep_cuda_numba.registry import FLOAT16_T, register_versions

# block tile BM x BN over a K-slab of BK; each thread accumulates a TM x TN register tile
# (threads TX x TY). 64x64x8 with 4x4 per thread on a GPU; 8x8x4 with 2x2 (16 threads) in the
# simulator, where every thread is an OS thread.
BM, BN, BK, TM, TN = (8, 8, 4, 2, 2) if SIM else (64, 64, 8, 4, 4)
TX, TY = BN // TN, BM // TM
NT = TX * TY
_kernels: dict[np.dtype, Any] = {}
_lock = threading.Lock()


def accumulator(dtype: np.dtype) -> np.dtype:
    """float16 tiles are multiplied and summed in float32 and rounded once, at the store."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _make_kernel(dtype: np.dtype) -> Any:
    nbt = from_dtype(dtype)  # shared-memory tiles hold the operands' own type
    acc_t = from_dtype(accumulator(dtype))
    zero = accumulator(dtype).type(0)  # numba-cuda emits invalid NVVM IR for a float16 constant

    @cuda.jit
    def matmul_tiled(
        a,
        b,
        c,
        M,
        N,
        K,
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        bshape,
        a_bst,
        b_bst,
        c_bst,
        n_batch,
        alpha,
        bias,
        bias_rs,
        bias_cs,
        beta,
        has_bias,
    ):
        sa = cuda.shared.array((BK, BM), nbt)
        sb = cuda.shared.array((BK, BN), nbt)
        acc = cuda.local.array((TM, TN), acc_t)
        af = cuda.local.array(TM, acc_t)
        bf = cuda.local.array(TN, acc_t)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        tiles_m = (M + BM - 1) // BM
        tiles_n = (N + BN - 1) // BN
        per_batch = tiles_m * tiles_n
        for t in range(cuda.blockIdx.x, n_batch * per_batch, cuda.gridDim.x):
            bi = t // per_batch
            rem = t % per_batch
            row0 = (rem // tiles_n) * BM
            col0 = (rem % tiles_n) * BN
            ao = 0
            bo = 0
            co = 0
            r = bi
            for d in range(len(bshape) - 1, -1, -1):
                cd = r % bshape[d]
                r = r // bshape[d]
                ao += cd * a_bst[d]
                bo += cd * b_bst[d]
                co += cd * c_bst[d]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] = zero
            for k0 in range(0, K, BK):
                for idx in range(tid, BM * BK, NT):
                    mm = idx // BK
                    kk = idx % BK
                    gr = row0 + mm
                    gk = k0 + kk
                    sa[kk, mm] = a[ao + gr * a_rs + gk * a_cs] if gr < M and gk < K else zero
                for idx in range(tid, BK * BN, NT):
                    kk = idx // BN
                    nn = idx % BN
                    gk = k0 + kk
                    gc = col0 + nn
                    sb[kk, nn] = b[bo + gk * b_rs + gc * b_cs] if gk < K and gc < N else zero
                cuda.syncthreads()
                for kk in range(BK):
                    for i in range(TM):
                        af[i] = sa[kk, ty + i * TY]
                    for j in range(TN):
                        bf[j] = sb[kk, tx + j * TX]
                    for i in range(TM):
                        for j in range(TN):
                            acc[i, j] += af[i] * bf[j]
                cuda.syncthreads()
            for i in range(TM):
                gr = row0 + ty + i * TY
                if gr < M:
                    for j in range(TN):
                        gc = col0 + tx + j * TX
                        if gc < N:
                            v = alpha * acc[i, j]
                            if has_bias:
                                v += beta * acc_t(bias[gr * bias_rs + gc * bias_cs])
                            c[co + gr * N + gc] = v

    return matmul_tiled


def kernel_for(dtype: Any) -> Any:
    dtype = np.dtype(dtype)
    with _lock:
        k = _kernels.get(dtype)
        if k is None:
            k = _kernels[dtype] = _make_kernel(dtype)
    return k


def gemm(
    rt: Runtime,
    a: Any,
    b: Any,
    out: Any,
    M: int,
    N: int,
    K: int,
    a_strides: tuple[int, int],
    b_strides: tuple[int, int],
    batch: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((1,), (0,), (0,), (0,)),
    alpha: float = 1.0,
    bias: Any = None,
    bias_strides: tuple[int, int] = (0, 0),
    beta: float = 0.0,
) -> None:
    """out[batch, M, N] = alpha * A @ B (+ beta * bias), all flat C-contiguous device buffers."""
    bshape, a_bst, b_bst, c_bst = batch
    n_batch = int(np.prod(bshape, dtype=np.int64))
    if M == 0 or N == 0 or n_batch == 0:
        return
    dt = np.dtype(out.dtype)
    kern = kernel_for(dt)
    scalar = accumulator(dt).type
    tiles = n_batch * ((M + BM - 1) // BM) * ((N + BN - 1) // BN)
    blocks = 1 if SIM else max(1, min(tiles, MAX_BLOCKS))
    rt.launch(
        kern,
        blocks,
        (TX, TY),
        flat(a),
        flat(b),
        flat(out),
        M,
        N,
        K,
        a_strides[0],
        a_strides[1],
        b_strides[0],
        b_strides[1],
        bshape,
        a_bst,
        b_bst,
        c_bst,
        n_batch,
        scalar(alpha),
        flat(bias) if bias is not None else flat(out),
        bias_strides[0],
        bias_strides[1],
        scalar(beta),
        bias is not None,
    )


def matmul(rt: Runtime, a: Any, b: Any) -> Any:
    """NumPy ``matmul`` semantics: 1-D promotion and broadcast batch dimensions."""
    ash, bsh = tuple(int(s) for s in a.shape), tuple(int(s) for s in b.shape)
    a2 = ash if len(ash) >= 2 else (1,) + ash
    b2 = bsh if len(bsh) >= 2 else bsh + (1,)
    M, K = a2[-2], a2[-1]
    K2, N = b2[-2], b2[-1]
    if K != K2:
        raise InvalidArgument(f"MatMul: shapes {list(ash)} and {list(bsh)} do not align ({K} != {K2})")
    batch = tuple(int(s) for s in np.broadcast_shapes(a2[:-2], b2[:-2]))
    nb = len(batch)

    def bstrides(shape2: tuple[int, ...]) -> tuple[int, ...]:
        bs = (1,) * (nb - (len(shape2) - 2)) + shape2[:-2]
        st = c_strides(shape2)
        full = (0,) * (nb - (len(shape2) - 2)) + st[:-2]
        return tuple(0 if bs[d] == 1 else full[d] for d in range(nb))

    out_shape = batch + (M, N)
    out = rt.empty(out_shape, a.dtype)
    cst = c_strides(out_shape)[:-2]
    spec = (batch or (1,), bstrides(a2) or (0,), bstrides(b2) or (0,), cst or (0,))
    gemm(rt, a, b, out, M, N, K, (K, 1), (N, 1), spec)
    final = batch + ((M,) if len(ash) >= 2 else ()) + ((N,) if len(bsh) >= 2 else ())
    return out.reshape(final) if final != out_shape else out


@register_versions("MatMul", 1, {"T": FLOAT16_T})
def build_matmul(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)

    def compute(a: Any, b: Any) -> tuple[Any]:
        return (matmul(rt, a, b),)

    return compute


@register_versions("Gemm", 7, {"T": FLOAT16_T})
def build_gemm(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))

    def compute(a: Any, b: Any, c: Any = None) -> tuple[Any]:
        (r_a, c_a), (r_b, c_b) = (int(s) for s in a.shape), (int(s) for s in b.shape)
        M, K = (c_a, r_a) if ta else (r_a, c_a)
        K2, N = (c_b, r_b) if tb else (r_b, c_b)
        if K != K2:
            raise InvalidArgument(f"{node.describe()}: A {list(a.shape)} and B {list(b.shape)} do not align")
        a_st = (1, c_a) if ta else (c_a, 1)
        b_st = (1, c_b) if tb else (c_b, 1)
        out = rt.empty((M, N), a.dtype)
        bias_st = (0, 0)
        if c is not None:
            cs = tuple(int(s) for s in c.shape)
            cs2 = (1,) * (2 - len(cs)) + cs
            bias_st = (0 if cs2[0] == 1 else cs2[1], 0 if cs2[1] == 1 else 1)
        gemm(rt, a, b, out, M, N, K, a_st, b_st, alpha=alpha, bias=c, bias_strides=bias_st, beta=beta)
        return (out,)

    return compute

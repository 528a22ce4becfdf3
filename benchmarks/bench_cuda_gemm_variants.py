"""GEMM variants on one GPU call: resource report (registers, local memory) and TFLOP/s at square
and conv-shaped sizes, against cuBLAS (CuPy) on the same operands; each checked against cuBLAS."""

import statistics

import cupy as cp
import numpy as np
from numba import cuda, float32


def make(BM, BN, BK, TM, TN):
    TX, TY = BN // TN, BM // TM
    NT = TX * TY

    @cuda.jit
    def k(a, b, c, M, N, K):
        sa = cuda.shared.array((BK, BM), float32)
        sb = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        af = cuda.local.array(TM, float32)
        bf = cuda.local.array(TN, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = 0
        for k0 in range(0, K, BK):
            for idx in range(tid, BM * BK, NT):
                mm = idx // BK
                kk = idx % BK
                gr = row0 + mm
                gk = k0 + kk
                sa[kk, mm] = a[gr, gk] if gr < M and gk < K else float32(0)
            for idx in range(tid, BK * BN, NT):
                kk = idx // BN
                nn = idx % BN
                gk = k0 + kk
                gc = col0 + nn
                sb[kk, nn] = b[gk, gc] if gk < K and gc < N else float32(0)
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
                        c[gr, gc] = acc[i, j]

    def run(da, db, dc, M, N, K):
        k[((N + BN - 1) // BN, (M + BM - 1) // BM), (TX, TY)](da, db, dc, M, N, K)

    return k, run


def current():
    from ep_cuda_numba.kernels import matmul as mm

    kern = mm._make_kernel(np.dtype(np.float32))
    dummy = cuda.to_device(np.zeros(1, np.float32))

    def run(da, db, dc, M, N, K):
        tiles = ((M + mm.BM - 1) // mm.BM) * ((N + mm.BN - 1) // mm.BN)
        blocks = min(tiles, mm.MAX_BLOCKS)
        kern[blocks, (mm.TX, mm.TY)](
            da.reshape(-1),
            db.reshape(-1),
            dc.reshape(-1),
            M,
            N,
            K,
            K,
            1,
            N,
            1,
            (1,),
            (0,),
            (0,),
            (0,),
            1,
            np.float32(1),
            dummy,
            0,
            0,
            np.float32(0),
            False,
        )

    return kern, run


def timed(fn, reps=10):
    fn()
    cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = cuda.event(), cuda.event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cuda.event_elapsed_time(s, e) / 1e3)
    return statistics.median(out)


variants = {"current(64x64x8,4x4,grid-stride)": current()}
for cfg in [(64, 64, 8, 4, 4), (128, 128, 8, 8, 8), (128, 64, 8, 8, 4), (64, 64, 16, 4, 4), (32, 64, 8, 2, 4)]:
    variants["x".join(map(str, cfg))] = make(*cfg)
sizes = [(1024, 1024, 1024), (4096, 4096, 4096), (64, 3136, 576), (128, 784, 1152), (32, 25600, 288), (256, 196, 2304)]
rng = np.random.default_rng(0)
rows = []
for M, N, K in sizes:
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    ca, cb = cp.asarray(a), cp.asarray(b)
    ref = cp.asnumpy(ca @ cb)
    t_peer = timed(lambda ca=ca, cb=cb: cp.matmul(ca, cb))
    da, db = cuda.to_device(a), cuda.to_device(b)
    line = [f"{M}x{N}x{K}", f"cuBLAS {2 * M * N * K / t_peer / 1e12:.1f}"]
    for name, (_kern, run) in variants.items():
        dc = cuda.to_device(np.full((M, N), np.nan, np.float32))
        run(da, db, dc, M, N, K)
        got = dc.copy_to_host()
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        t = timed(lambda run=run, da=da, db=db, dc=dc, M=M, N=N, K=K: run(da, db, dc, M, N, K))
        line.append(f"{name} {2 * M * N * K / t / 1e12:.2f} ({t_peer / t:.2f}) err {err:.0e}")
    print(" | ".join(line), flush=True)
for name, (kern, _run) in variants.items():
    try:
        print(
            name,
            "regs",
            kern.get_regs_per_thread(),
            "local",
            kern.get_local_mem_per_thread(),
            "shared",
            kern.get_shared_mem_per_block(),
        )
    except Exception as exc:
        print(name, "resource report failed", exc)

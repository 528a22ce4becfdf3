"""The convolution plan shared by the reference EP's Conv kernels and the Numba CPU EP: the
algorithm for one input shape chosen once (few-channel tap GEMM, plain GEMM, blocked im2col,
depthwise whole rows), weights laid out, every slice and stride computed. Registers no kernel,
so another EP can use it without loading the reference EP's kernel families."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_cpu_reference.kernels.nn_common import pad_spatial

# im2col larger than this many values is done in blocks that stay in L2 (see _blocked): 512 KiB
# of float32; 256 KiB to 1.5 MiB blocks measured within noise of it on the zoo's convolutions
_BLOCK_ELEMS = 1 << 17


def _trim_padding_taps(
    spatial: Sequence[int],
    w: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    pb: Sequence[int],
    out: Sequence[int],
) -> tuple[np.ndarray, list[int], list[int], list[int]] | None:
    """(weights, kernel, pads begin, pads end) without the leading/trailing taps of each axis
    that multiply padding zeros only; None when every tap reads data somewhere. The output size is
    unchanged and the dropped terms are exact zeros, so the result is the same."""
    if min(pb, default=0) < 0 or not len(out):
        return None
    ranges = []
    for d_in, k, s_, d_, b, o_n in zip(spatial, kernel, strides, dil, pb, out, strict=True):
        used = [i for i in range(k) if any(0 <= o * s_ + i * d_ - b < d_in for o in range(o_n))]
        ranges.append((used[0], used[-1]) if used else (0, k - 1))
    if all(lo == 0 and hi == k - 1 for (lo, hi), k in zip(ranges, kernel, strict=True)):
        return None
    new_k = [hi - lo + 1 for lo, hi in ranges]
    new_pb = [b - lo * d_ for b, (lo, _), d_ in zip(pb, ranges, dil, strict=True)]
    new_pe = [
        (o_n - 1) * s_ + (k - 1) * d_ + 1 - d_in - b
        for o_n, s_, k, d_, d_in, b in zip(out, strides, new_k, dil, spatial, new_pb, strict=True)
    ]
    if min(new_pb + new_pe) < 0:
        return None
    sl = (slice(None), slice(None)) + tuple(slice(lo, hi + 1) for lo, hi in ranges)
    return np.ascontiguousarray(w[sl]), new_k, new_pb, new_pe


def plan_conv(
    x_shape: Sequence[int],
    dt: np.dtype,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    pb: Sequence[int],
    pe: Sequence[int],
    out: Sequence[int],
    bias: np.ndarray | None = None,
) -> Any:
    """A ``run(x) -> y`` for one input shape, with the algorithm chosen, weights laid out and
    every shape, slice and stride computed here, so a run is only the array work:

    * few output channels (4*M <= C, stride 1): one GEMM of all taps' weights (K*M, C) against
      the padded input, then add the K shifted output planes (no C*K*P im2col copy);
    * 1x1, stride 1, no pads: a plain (grouped) GEMM on the input;
    * otherwise im2col (one copy from a strided view) + one (grouped, batched over the groups)
      GEMM; depthwise (C/G == 1) is C batched (Mg, K) @ (K, P). An im2col matrix over
      ``_BLOCK_ELEMS`` values is made and multiplied in blocks (``_blocked``); a 2-D stride-1
      depthwise conv takes whole padded rows (``_flat_rows``).
    ``bias`` (broadcast-ready, dtype ``dt``) is added in place.

    Kernel taps that read only padding for every output position (a 5x5 kernel over a 2-row
    plane: its first and last rows) are dropped first, with the pads shrunk to match."""
    trimmed = _trim_padding_taps(x_shape[2:], w, kernel, strides, dil, pb, out)
    if trimmed is not None:
        w, kernel, pb, pe = trimmed
    n, c = int(x_shape[0]), int(x_shape[1])
    m = w.shape[0]
    cg, mg = c // group, m // group
    nd = len(out)
    ksize = int(np.prod(kernel)) if nd else 1
    p = int(np.prod(out)) if nd else 1
    out_shape = (n, m, *out)
    w = np.ascontiguousarray(w.astype(dt, copy=False))
    needs_pad = any(pb) or any(pe)
    if min(list(pb) + list(pe), default=0) < 0:

        def pad(x: np.ndarray) -> np.ndarray:  # negative pads crop: the general helper
            return np.ascontiguousarray(pad_spatial(x, pb, pe))

        pshape = (n, c) + tuple(d + b + e for d, b, e in zip(x_shape[2:], pb, pe, strict=True))
    elif needs_pad:
        pshape = (n, c) + tuple(d + b + e for d, b, e in zip(x_shape[2:], pb, pe, strict=True))
        interior = (slice(None), slice(None)) + tuple(slice(b, b + d) for b, d in zip(pb, x_shape[2:], strict=True))

        def pad(x: np.ndarray) -> np.ndarray:
            xp = np.zeros(pshape, dtype=dt)
            xp[interior] = x
            return xp
    else:
        pshape = tuple(x_shape)

        def pad(x: np.ndarray) -> np.ndarray:
            return x if x.flags.c_contiguous else np.ascontiguousarray(x)

    cstr = [dt.itemsize] * len(pshape)
    for i in range(len(pshape) - 2, -1, -1):
        cstr[i] = cstr[i + 1] * pshape[i + 1]
    view_shape = (n, c, *kernel, *out)
    view_strides = (
        tuple(cstr[:2])
        + tuple(cstr[2 + i] * dil[i] for i in range(nd))
        + tuple(cstr[2 + i] * strides[i] for i in range(nd))
    )
    taps = list(itertools.product(*[range(k) for k in kernel]))

    def im2col(xp: np.ndarray) -> np.ndarray:
        return np.ndarray(view_shape, dtype=dt, buffer=xp, strides=view_strides)

    bias_c = bias  # (1, M, 1...) for the blocked path
    if bias is not None and n * m * p <= 1 << 16:
        # small outputs: the bias broadcast to the full output once per plan; NumPy's contiguous
        # add is ~2.5x faster than its stride-0 broadcast add (PP-OCR cls: 53 convs)
        bias = np.broadcast_to(bias, out_shape).copy()

    def finish(y: np.ndarray) -> np.ndarray:
        if bias is not None:
            y += bias
        return y

    if (
        group == 1
        and ksize > 1
        and c >= 32
        and 4 * m <= c
        and all(s_ == 1 for s_ in strides)
        and min(list(pb) + list(pe), default=0) >= 0
    ):
        wk = np.ascontiguousarray(np.moveaxis(w.reshape(m, c, ksize), 2, 0).reshape(ksize * m, c))
        zshape = (n, ksize, m, *pshape[2:])
        flat = (n, c, int(np.prod(pshape[2:])))
        sls = [
            (slice(None), t, slice(None))
            + tuple(slice(o * d, o * d + q) for o, d, q in zip(offs, dil, out, strict=True))
            for t, offs in enumerate(taps)
        ]

        def run(x: np.ndarray) -> np.ndarray:
            z = np.matmul(wk, pad(x).reshape(flat)).reshape(zshape)
            y = z[sls[0]].copy()
            for sl in sls[1:]:
                y += z[sl]
            return finish(y)

        return run
    wg = w.reshape(group, mg, cg * ksize)
    direct = ksize == 1 and all(s_ == 1 for s_ in strides) and not needs_pad
    if cg == 1 < ksize and nd == 2 and max(strides) == 1 and min(pb) >= 0 <= min(pe):
        return _flat_rows(x_shape, wg, bias_c, out_shape, kernel, dil, pb, pe, dt)
    if not direct and n * c * ksize * p > _BLOCK_ELEMS:
        return _blocked(pad, im2col, wg, bias_c, out_shape, kernel, group, cg, ksize, dt)
    if direct:

        def cols_of(x: np.ndarray) -> np.ndarray:
            return x.reshape(n, group, cg, p)
    else:

        def cols_of(x: np.ndarray) -> np.ndarray:
            return im2col(pad(x)).reshape(n, group, cg * ksize, p)  # the one im2col copy

    if group == 1:
        w0 = wg[0]

        def run(x: np.ndarray) -> np.ndarray:
            return finish(np.matmul(w0, cols_of(x)[:, 0]).reshape(out_shape))
    else:
        wg1 = wg[None]

        def run(x: np.ndarray) -> np.ndarray:
            return finish(np.matmul(wg1, cols_of(x)).reshape(out_shape))

    return run


def _blocked(
    pad: Any,
    im2col: Any,
    wg: np.ndarray,
    bias: np.ndarray | None,
    out_shape: tuple[int, ...],
    kernel: Sequence[int],
    group: int,
    cg: int,
    ksize: int,
    dt: np.dtype,
) -> Any:
    """im2col in blocks of groups and rows of the first output axis, each block one (batched)
    GEMM written straight into the output, its bias added while the block is in cache. A whole
    im2col matrix of a large plane is tens of MiB written and read back from memory; a block of
    ``_BLOCK_ELEMS`` values stays in L2 (2-3x faster on the zoo's 3x3 and depthwise 5x5 convs)."""
    n, m, out = out_shape[0], out_shape[1], out_shape[2:]
    mg, col = m // group, cg * ksize
    rows0 = out[0] if out else 1
    rest = int(np.prod(out[1:])) if len(out) > 1 else 1
    p = rows0 * rest
    gb = max(1, min(group, _BLOCK_ELEMS // (col * p)))  # whole planes of gb groups per block
    rows = rows0 if gb > 1 else max(1, min(rows0, _BLOCK_ELEMS // (col * rest)))
    blocks = [
        (g0, min(group, g0 + gb), r0, min(rows0, r0 + rows))
        for g0 in range(0, group, gb)
        for r0 in range(0, rows0, rows)
    ]
    kshape = tuple(int(k) for k in kernel)
    nd = len(out)
    src = [
        (slice(g0 * cg, g1 * cg),) + (slice(None),) * nd + (slice(r0, r1),) + (slice(None),) * (nd - 1)
        for g0, g1, r0, r1 in blocks
    ]
    shapes = [((g1 - g0) * cg, *kshape, r1 - r0, *out[1:]) for g0, g1, r0, r1 in blocks]
    mats = [((g1 - g0), col, (r1 - r0) * rest) for g0, g1, r0, r1 in blocks]
    wb = [wg[g0:g1] for g0, g1, _, _ in blocks]
    bb = [None if bias is None else bias.reshape(group, mg, 1)[g0:g1] for g0, g1, _, _ in blocks]
    dst = [(slice(g0, g1), slice(None), slice(r0 * rest, r1 * rest)) for g0, g1, r0, r1 in blocks]
    size = max(int(np.prod(s_)) for s_ in shapes)

    def run(x: np.ndarray) -> np.ndarray:
        view = im2col(pad(x))
        y = np.empty(out_shape, dtype=dt)
        y4 = y.reshape(n, group, mg, p)
        buf = np.empty(size, dtype=dt)
        for i in range(n):
            vi, yi = view[i], y4[i]
            for s_, shp, mat, wk, bk, d in zip(src, shapes, mats, wb, bb, dst, strict=True):
                cols = buf[: mat[0] * mat[1] * mat[2]]
                np.copyto(cols.reshape(shp), vi[s_])
                blk = yi[d]
                np.matmul(wk, cols.reshape(mat), out=blk)
                if bk is not None:
                    blk += bk
        return y

    return run


def _flat_rows(
    x_shape: Sequence[int],
    wg: np.ndarray,
    bias: np.ndarray | None,
    out_shape: tuple[int, ...],
    kernel: Sequence[int],
    dil: Sequence[int],
    pb: Sequence[int],
    pe: Sequence[int],
    dt: np.dtype,
) -> Any:
    """2-D stride-1 depthwise conv over whole padded rows: tap (i, j) of output position (r, q)
    reads flat element (r + i*dh) * Wp + q + j*dw of the padded plane, so one im2col row is a
    contiguous run of Ho*Wp values, copied with long inner loops where the usual im2col copies runs
    of Wo values: 1.5-2x faster on 14x14 and 7x7 planes, 0-10% on wide ones. Dense convs are
    GEMM-bound and would lose by the extra columns, so they do not take it. The Wp - Wo columns
    past each row's end are computed and dropped. In blocks of groups (and rows) as ``_blocked``."""
    n, c = int(x_shape[0]), int(x_shape[1])
    group, mg, col = wg.shape[0], wg.shape[1], wg.shape[2]
    cg = c // group
    ho, wo = out_shape[2], out_shape[3]
    hp, wp = x_shape[2] + pb[0] + pe[0], x_shape[3] + pb[1] + pe[1]
    interior = (slice(None), slice(None), slice(pb[0], pb[0] + x_shape[2]), slice(pb[1], pb[1] + x_shape[3]))
    gb = max(1, min(group, _BLOCK_ELEMS // (col * ho * wp)))
    rows = ho if gb > 1 else max(1, min(ho, _BLOCK_ELEMS // (col * wp)))
    blocks = [
        (g0, min(group, g0 + gb), r0, min(ho, r0 + rows)) for g0 in range(0, group, gb) for r0 in range(0, ho, rows)
    ]
    isz = dt.itemsize
    bias_g = None if bias is None else bias.reshape(group, mg, 1, 1)
    size = max((g1 - g0) * col * (r1 - r0) * wp for g0, g1, r0, r1 in blocks)
    tsize = max((g1 - g0) * mg * (r1 - r0) * wp for g0, g1, r0, r1 in blocks)

    def run(x: np.ndarray) -> np.ndarray:
        xp = np.zeros((n, c, hp + 1, wp), dtype=dt)  # one spare row: the last taps run past the end
        xp[interior] = x
        y = np.empty(out_shape, dtype=dt)
        y5 = y.reshape(n, group, mg, ho, wo)
        buf, tmp = np.empty(size, dtype=dt), np.empty(tsize, dtype=dt)
        cs, rs = xp.strides[1], xp.strides[2]
        for i in range(n):
            for g0, g1, r0, r1 in blocks:
                run_len = (r1 - r0) * wp
                src = np.ndarray(
                    ((g1 - g0) * cg, kernel[0], kernel[1], run_len),
                    dtype=dt,
                    buffer=xp,
                    offset=i * xp.strides[0] + g0 * cg * cs + r0 * rs,
                    strides=(cs, rs * dil[0], isz * dil[1], isz),
                )
                cols = buf[: (g1 - g0) * col * run_len]
                np.copyto(cols.reshape(src.shape), src)
                blk = tmp[: (g1 - g0) * mg * run_len].reshape(g1 - g0, mg, run_len)
                np.matmul(wg[g0:g1], cols.reshape(g1 - g0, col, run_len), out=blk)
                dst = y5[i, g0:g1, :, r0:r1]
                dst[...] = blk.reshape(g1 - g0, mg, r1 - r0, wp)[..., :wo]
                if bias_g is not None:
                    dst += bias_g[g0:g1]
        return y

    return run

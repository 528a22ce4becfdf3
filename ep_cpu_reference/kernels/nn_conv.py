"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv and Col2Im.

Conv is im2col over a zero-copy sliding-window view plus one (grouped) matmul, in cache-sized
blocks for large planes; 1x1 stride-1 convolutions skip im2col. Constant weights
are reshaped once at build time. Transposed convolution is one matmul followed by a per-tap
strided scatter-add (col2im)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import (
    as_compute,
    compute_dtype,
    conv_pads,
    fail,
    first_since,
    ints,
    pad_spatial,
)
from ep_cpu_reference.registry import REGISTRY

# im2col larger than this many values is done in blocks that stay in L2 (see _blocked): 512 KiB
# of float32; 256 KiB to 1.5 MiB blocks measured within noise of it on the zoo's convolutions
_BLOCK_ELEMS = 1 << 17


# (kernel, strides, dilations, pads_begin, pads_end, out_spatial) for one input shape
_ConvPlan = tuple[list[int], list[int], list[int], list[int], list[int], list[int]]


class _ConvGeom:
    """Conv attributes parsed once; pads resolved per input shape (cached)."""

    def __init__(self, node: Any, w_shape: Sequence[int] | None) -> None:
        self.node = node
        self.group = int(node.attr("group", 1))
        ks = node.attr("kernel_shape")
        self.kernel = [int(k) for k in ks] if ks else (list(w_shape[2:]) if w_shape is not None else None)
        self.auto_pad = node.attr("auto_pad", "NOTSET")
        self.pads = node.attr("pads")
        self._cache: dict[tuple[int, ...], _ConvPlan] = {}

    def resolve(self, x_shape: Sequence[int], w_shape: Sequence[int]) -> _ConvPlan:
        key = tuple(x_shape) + (-1,) + tuple(w_shape)
        got = self._cache.get(key)
        if got is None:
            nd = len(x_shape) - 2
            kernel = self.kernel or list(w_shape[2:])
            if list(w_shape[2:]) != list(kernel):
                raise fail(self.node, f"kernel_shape {kernel} does not match weight shape {list(w_shape)}")
            strides = ints(self.node, "strides", nd, 1)
            dil = ints(self.node, "dilations", nd, 1)
            pb, pe, out = conv_pads(self.node, x_shape[2:], kernel, strides, dil, self.auto_pad, self.pads)
            got = (kernel, strides, dil, pb, pe, out)
            self._cache[key] = got
        return got


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


def conv_core(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    pb: Sequence[int],
    pe: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """N-D grouped convolution without bias in x's dtype (a plan used once)."""
    return plan_conv(x.shape, x.dtype, w, group, kernel, strides, dil, pb, pe, out)(x)


def _bias_shape(nd: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * nd


@REGISTRY.register("Conv", since=first_since("Conv"))
def build_conv(node: NodeView, ctx: KernelContext) -> Any:
    """Conv: with constant weights and bias, a plan per input shape and dtype (see plan_conv)."""
    w_const = ctx.constant(node.inputs[1])
    has_b = len(node.inputs) > 2 and bool(node.inputs[2])
    b_const = ctx.constant(node.inputs[2]) if has_b else None
    geom = _ConvGeom(node, w_const.shape if w_const is not None else None)
    group = geom.group
    cacheable = w_const is not None and (not has_b or b_const is not None)
    plans: dict[Any, Any] = {}

    def compute(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray]:
        key = (x.shape, x.dtype)
        run = plans.get(key) if cacheable else None
        if run is None:
            if x.ndim < 3:
                raise fail(node, f"input rank {x.ndim}; Conv needs (N, C, spatial...)")
            if w.ndim != x.ndim or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
                raise fail(
                    node,
                    f"input {list(x.shape)} and weight {list(w.shape)} do not fit group={group} "
                    "(weight must be (M, C/group, k...), M divisible by group)",
                )
            kernel, strides, dil, pb, pe, out = geom.resolve(x.shape, w.shape)
            cdt = compute_dtype(x.dtype)
            bias = None if b is None else b.astype(cdt).reshape(_bias_shape(len(out)))
            run = plan_conv(x.shape, cdt, w, group, kernel, strides, dil, pb, pe, out, bias)
            if cacheable:
                plans[key] = run
        y = run(x if x.dtype == np.float32 or x.dtype == np.float64 else as_compute(x))
        return (y if y.dtype == x.dtype else y.astype(x.dtype),)

    return compute


def scatter_taps(
    cols: np.ndarray, nd: int, full: Sequence[int], strides: Sequence[int], dil: Sequence[int]
) -> np.ndarray:
    """col2im: ``cols`` is (N, C, *kernel, *grid); adds each tap's grid into a zero image of
    spatial size ``full`` at offset tap*dilation with the given strides."""
    n, c = cols.shape[:2]
    kernel = cols.shape[2 : 2 + nd]
    grid = cols.shape[2 + nd :]
    if (
        all(d == 1 for d in dil)
        and tuple(strides) == tuple(kernel)
        and tuple(full) == tuple(k * g for k, g in zip(kernel, grid, strict=True))
    ):
        # stride == kernel (the 2x2/2 upsampling ConvTranspose): taps never overlap, so the
        # image is cols with each tap axis moved next to its grid axis: one transposing copy
        perm = (0, 1) + tuple(v for i in range(nd) for v in (2 + nd + i, 2 + i))
        return np.ascontiguousarray(cols.transpose(perm)).reshape((n, c, *full))
    out = np.zeros((n, c, *full), dtype=cols.dtype)
    for offs in itertools.product(*[range(k) for k in kernel]):
        dst = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (g - 1) * s + 1, s) for o, d, g, s in zip(offs, dil, grid, strides, strict=False)
        )
        out[dst] += cols[(slice(None), slice(None)) + tuple(offs)]
    return out


@REGISTRY.register("ConvTranspose", since=first_since("ConvTranspose"))
def build_conv_transpose(node: NodeView, ctx: KernelContext) -> Any:
    """ConvTranspose: one grouped matmul W^T X, then col2im, then crop by the pads."""
    group = int(node.attr("group", 1))
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads_attr = node.attr("pads")
    out_shape_attr = node.attr("output_shape")
    w_const = ctx.constant(node.inputs[1])
    prepared: dict[Any, np.ndarray] = {}

    def compute(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray]:
        nd = x.ndim - 2
        if nd < 1:
            raise fail(node, f"input rank {x.ndim}; ConvTranspose needs (N, C, spatial...)")
        odt = x.dtype
        xc = as_compute(x)
        n, c = x.shape[:2]
        if w.shape[0] != c:
            raise fail(node, f"weight shape {list(w.shape)} does not match {c} input channels")
        kernel = list(w.shape[2:])
        ks = node.attr("kernel_shape")
        if ks and list(ks) != kernel:
            raise fail(node, f"kernel_shape {ks} does not match weight shape {list(w.shape)}")
        strides = ints(node, "strides", nd, 1)
        dil = ints(node, "dilations", nd, 1)
        opad = ints(node, "output_padding", nd, 0)
        insp = list(x.shape[2:])
        full = [
            s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, insp, opad, kernel, dil, strict=False)
        ]
        if out_shape_attr or (auto_pad in ("SAME_UPPER", "SAME_LOWER") and not pads_attr):
            # onnxruntime: output_shape (any auto_pad) or SAME's in * stride cut from the full image,
            # the odd element off the start except under SAME_UPPER; past the full image, zeros at
            # the end, up to a size a larger input would make
            outsp = (
                [int(v) for v in out_shape_attr[-nd:]]
                if out_shape_attr
                else [i * s for i, s in zip(insp, strides, strict=False)]
            )
            for o, i, k, d, s in zip(outsp, insp, kernel, dil, strides, strict=False):
                if (o - (k - 1) * d - 1) // s + 1 > i:
                    raise fail(
                        node,
                        f"output_shape {outsp} needs a larger input than {insp} (kernel {kernel}, strides {strides}, "
                        f"dilations {dil}; the full output is {full}), as onnxruntime refuses it",
                    )
            total = [max(f - o, 0) for f, o in zip(full, outsp, strict=False)]
            pb = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        else:
            pads = [int(p) for p in pads_attr] if pads_attr else [0] * (2 * nd)
            pb = pads[:nd]
            outsp = [f - pads[i] - pads[i + nd] for i, f in enumerate(full)]
        mg = w.shape[1]
        m = mg * group
        cg = c // group
        ksize = int(np.prod(kernel))
        key = xc.dtype
        wt = prepared.get(key) if w_const is not None else None
        if wt is None:
            # (G, Mg*K, Cg)
            wt = np.ascontiguousarray(w.astype(xc.dtype, copy=False).reshape(group, cg, mg * ksize).transpose(0, 2, 1))
            if w_const is not None:
                prepared[key] = wt
        p = int(np.prod(insp))
        xg = xc.reshape(n, group, cg, p)
        cols = np.matmul(wt[None], xg)  # (N, G, Mg*K, P)
        cols = cols.reshape(n, m, *kernel, *insp)
        img = scatter_taps(cols, nd, full, strides, dil)
        src_start = [max(p_, 0) for p_ in pb]
        dst_start = [max(-p_, 0) for p_ in pb]
        length = [max(0, min(f - s0, o - d0)) for f, s0, d0, o in zip(full, src_start, dst_start, outsp, strict=False)]
        if dst_start == [0] * nd and length == outsp:
            y = np.ascontiguousarray(
                img[
                    (slice(None), slice(None))
                    + tuple(slice(s0, s0 + ln) for s0, ln in zip(src_start, length, strict=False))
                ]
            )
        else:  # output_shape asks for more than the full image (or pads are negative): zero-extend
            y = np.zeros((n, m, *outsp), dtype=img.dtype)
            y[
                (slice(None), slice(None))
                + tuple(slice(d0, d0 + ln) for d0, ln in zip(dst_start, length, strict=False))
            ] = img[
                (slice(None), slice(None))
                + tuple(slice(s0, s0 + ln) for s0, ln in zip(src_start, length, strict=False))
            ]
        if b is not None:
            y = y + b.astype(y.dtype, copy=False).reshape(_bias_shape(nd))
        return (y if y.dtype == odt else y.astype(odt),)

    return compute


def _zp_shift(v: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    """v - zero_point in float64; a per-output-channel zero point broadcasts along axis 0."""
    v = v.astype(np.float64)
    if zp is None:
        return v
    zp = np.asarray(zp).astype(np.float64)
    if zp.size > 1:
        zp = zp.reshape((-1,) + (1,) * (v.ndim - 1))
    return v - zp


@REGISTRY.register("ConvInteger", since=first_since("ConvInteger"))
def build_conv_integer(node: NodeView, ctx: KernelContext) -> Any:
    """ConvInteger: QLinearConv's exact integer conv (``_IntConv``: float32 BLAS where no partial
    sum can reach 2^24, else float64), returned as int32."""
    int_conv = _IntConv(
        _ConvGeom(node, None), ctx.constant(node.inputs[1]) is not None and _const_or_absent(ctx, node, 3)
    )

    def compute(x: Any, w: Any, x_zp: Any = None, w_zp: Any = None) -> tuple[np.ndarray]:
        acc, _ = int_conv(x, x_zp, w, w_zp, None)
        return (np.rint(acc).astype(np.int32),)

    return compute


def _saturate(y: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``y`` (integers in a float array, overwritten) clipped to ``dt``'s range, as ``dt``."""
    info = np.iinfo(dt)
    return np.clip(y, info.min, info.max, out=y).astype(dt)


def _const_or_absent(ctx: KernelContext, node: NodeView, i: int) -> bool:
    return len(node.inputs) <= i or not node.inputs[i] or ctx.constant(node.inputs[i]) is not None


class _IntConv:
    """The exact integer sum of QLinearConv: conv(x - x_zp, w - w_zp) + bias, as exact integers
    in a float array. float32 BLAS (2-3x faster than float64) when no partial sum can reach 2^24
    in magnitude, so every one is an exactly held integer whatever the summation order: bounded by
    max|x - x_zp| * max over channels of sum|w - w_zp| + max|bias|; float64 otherwise (exact
    below 2^53). Constant weights are shifted, summed and laid out (a plan per input shape) once."""

    def __init__(self, geom: _ConvGeom, w_constant: bool) -> None:
        self.geom, self.keep = geom, w_constant
        self.weights: tuple[np.ndarray, np.ndarray, float] | None = None
        self.plans: dict[Any, Any] = {}

    def _weights(self, w: np.ndarray, wzp: Any) -> tuple[np.ndarray, np.ndarray, float]:
        got = self.weights
        if got is None:
            wf = _zp_shift(w, wzp)
            wsum = float(np.abs(wf).reshape(wf.shape[0], -1).sum(axis=1).max()) if wf.size else 0.0
            got = (wf, wf.astype(np.float32), wsum)
            if self.keep:
                self.weights = got
        return got

    def __call__(self, x: np.ndarray, xzp: Any, w: np.ndarray, wzp: Any, b: Any) -> tuple[np.ndarray, list[int]]:
        wf64, wf32, wsum = self._weights(w, wzp)
        zp = int(np.asarray(xzp).reshape(-1)[0]) if xzp is not None else 0
        xmax = max(int(x.max()) - zp, zp - int(x.min())) if x.size else 0
        bmax = float(np.abs(b.astype(np.float64)).max()) if b is not None and b.size else 0.0
        kernel, strides, dil, pb, pe, out = self.geom.resolve(x.shape, w.shape)
        if xmax * wsum + bmax >= 1 << 24 and self.geom.group == 1 and x.shape[1] > 1:
            halves = self._halves(wf64)
            if xmax * max(h[2] for h in halves) < 1 << 24:  # each half exact in float32, summed in float64
                acc = self._half(x, zp, 0, halves[0], kernel, strides, dil, pb, pe, out).astype(np.float64)
                acc += self._half(x, zp, 1, halves[1], kernel, strides, dil, pb, pe, out)
                if b is not None:
                    acc += b.astype(np.float64).reshape(_bias_shape(len(out)))
                return acc, out
        dt = np.dtype(np.float32 if xmax * wsum + bmax < 1 << 24 else np.float64)
        key = (x.shape, dt)
        run = self.plans.get(key) if self.keep else None
        if run is None:
            wf = wf32 if dt == np.float32 else wf64
            run = plan_conv(x.shape, dt, wf, self.geom.group, kernel, strides, dil, pb, pe, out)
            if self.keep:
                self.plans[key] = run
        xf = x.astype(dt)
        if zp:
            xf -= dt.type(zp)
        acc = run(xf)
        if b is not None:
            acc += b.astype(dt).reshape(_bias_shape(len(out)))
        return acc, out

    def _halves(self, wf: np.ndarray) -> list[tuple[slice, np.ndarray, float]]:
        """The weights split in two halves of input channels: (slice, float32 weights, max sum|w|)."""
        got = self.plans.get("halves") if self.keep else None
        if got is None:
            h = wf.shape[1] // 2
            got = []
            for sl in (slice(0, h), slice(h, wf.shape[1])):
                part = wf[:, sl]
                got.append((sl, part.astype(np.float32), float(np.abs(part).reshape(part.shape[0], -1).sum(1).max())))
            if self.keep:
                self.plans["halves"] = got
        return got

    def _half(self, x: np.ndarray, zp: int, i: int, half: Any, *geom: Any) -> np.ndarray:
        sl, wf, _ = half
        xs = x[:, sl]
        key = (x.shape, "half", i)
        run = self.plans.get(key) if self.keep else None
        if run is None:
            run = plan_conv(xs.shape, np.dtype(np.float32), wf, 1, *geom)
            if self.keep:
                self.plans[key] = run
        xf = xs.astype(np.float32)
        if zp:
            xf -= np.float32(zp)
        return run(xf)


@REGISTRY.register("QLinearConv", since=first_since("QLinearConv"))
def build_qlinear_conv(node: NodeView, ctx: KernelContext) -> Any:
    """QLinearConv: an exact integer conv (float64 holds it), plus the int32 bias, requantized
    as onnxruntime does (MlasRequantizeOutput): float32(acc) * float32(x_scale * w_scale[c] /
    y_scale), rounded half to even, + y_zero_point, saturated. A float64 scale rounds some
    exact halves (49.5 in float32) the other way."""
    geom = _ConvGeom(node, None)
    int_conv = _IntConv(geom, ctx.constant(node.inputs[3]) is not None and _const_or_absent(ctx, node, 5))

    def compute(x, xs, xzp, w, ws, wzp, ys, yzp=None, b=None):  # type: ignore[no-untyped-def]
        acc, out = int_conv(x, xzp, w, wzp, b)
        f32 = np.float32
        scale = f32(np.asarray(xs, f32).reshape(-1)[0]) * np.asarray(ws, f32).reshape(-1)
        scale = scale / f32(np.asarray(ys, f32).reshape(-1)[0])
        y = acc if acc.dtype == f32 else acc.astype(f32)  # acc is this run's own array
        y *= scale.reshape((1, -1) + (1,) * len(out))
        odt = yzp.dtype if yzp is not None else x.dtype
        zp = f32(np.asarray(yzp).reshape(-1)[0]) if yzp is not None else f32(0.0)
        np.rint(y, out=y)
        y += zp
        return (_saturate(y, odt),)

    return compute


def _bilinear_nd(img: np.ndarray, pos: list[np.ndarray]) -> np.ndarray:
    """Samples img (N, G, Cg, *S) at positions pos[d] (N, G, *Q) with zeros outside; returns
    (N, G, Cg, *Q). Positions at or beyond -1 / size contribute nothing (DeformConv rule)."""
    n, g, cg = img.shape[:3]
    sizes = img.shape[3:]
    nd = len(sizes)
    qshape = pos[0].shape[2:]
    flat = img.reshape(n, g, cg, -1)
    out = np.zeros((n, g, cg) + tuple(qshape), dtype=img.dtype)
    lows = [np.floor(p) for p in pos]
    fracs = [p - lo for p, lo in zip(pos, lows, strict=False)]
    lows = [lo.astype(np.int64) for lo in lows]
    strides = [int(np.prod(sizes[d + 1 :])) for d in range(nd)]
    nn_idx = np.arange(n)[:, None, None, None]
    gg_idx = np.arange(g)[None, :, None, None]
    cc_idx = np.arange(cg)[None, None, :, None]
    for corner in itertools.product((0, 1), repeat=nd):
        weight = np.ones(pos[0].shape, dtype=img.dtype)
        lin = np.zeros(pos[0].shape, dtype=np.int64)
        valid = np.ones(pos[0].shape, dtype=bool)
        for d, cbit in enumerate(corner):
            idx = lows[d] + cbit
            weight = weight * (fracs[d] if cbit else (1 - fracs[d]))
            valid &= (idx >= 0) & (idx < sizes[d])
            lin += np.clip(idx, 0, sizes[d] - 1) * strides[d]
        weight = np.where(valid, weight, 0).astype(img.dtype)
        linf = lin.reshape(n, g, 1, -1)
        vals = flat[nn_idx, gg_idx, cc_idx, linf]  # (N, G, Cg, Q)
        out += (vals * weight.reshape(n, g, 1, -1)).reshape(out.shape)
    return out


@REGISTRY.register("DeformConv", since=first_since("DeformConv"))
def build_deform_conv(node: NodeView, ctx: KernelContext) -> Any:
    """DeformConv: bilinear sampling at offset kernel taps (vectorised over all taps and pixels),
    optional mask, then the grouped matmul of Conv."""
    group = int(node.attr("group", 1))
    og = int(node.attr("offset_group", 1))

    def compute(x, w, offset, b=None, mask=None):  # type: ignore[no-untyped-def]
        odt = x.dtype
        xc = as_compute(x)
        n, c = x.shape[:2]
        nd = x.ndim - 2
        kernel = [int(k) for k in (node.attr("kernel_shape") or w.shape[2:])]
        strides = ints(node, "strides", nd, 1)
        dil = ints(node, "dilations", nd, 1)
        pads = node.attr("pads") or [0] * (2 * nd)
        outsp = [
            (x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel[i] - 1) * dil[i] + 1)) // strides[i] + 1
            for i in range(nd)
        ]
        ksize = int(np.prod(kernel))
        off = as_compute(offset).astype(xc.dtype).reshape(n, og, ksize, nd, *outsp)
        taps = np.array(list(itertools.product(*[range(k) for k in kernel])), dtype=xc.dtype).reshape(ksize, nd)
        pos = []
        for d in range(nd):
            grid = (np.arange(outsp[d], dtype=xc.dtype) * strides[d] - pads[d]).reshape(
                (1,) * d + (-1,) + (1,) * (nd - d - 1)
            )
            base = taps[:, d].reshape((ksize,) + (1,) * nd) * dil[d] + grid  # (K, *out)
            pos.append((off[:, :, :, d] + base[None, None]).reshape(n, og, -1))
        cpg = c // og
        sampled = _bilinear_nd(xc.reshape(n, og, cpg, *x.shape[2:]), pos)  # (N, og, cpg, K*P)
        p = int(np.prod(outsp))
        sampled = sampled.reshape(n, og, cpg, ksize, p)
        if mask is not None:
            msk = as_compute(mask).astype(xc.dtype).reshape(n, og, 1, ksize, p)
            sampled = sampled * msk
        cols = sampled.reshape(n, group, (c // group) * ksize, p)
        m = w.shape[0]
        wg = as_compute(w).astype(xc.dtype).reshape(group, m // group, -1)
        y = np.matmul(wg[None], cols).reshape(n, m, *outsp)
        if b is not None:
            y = y + b.astype(xc.dtype).reshape(_bias_shape(nd))
        return (y.astype(odt),)

    return compute


@REGISTRY.register("Col2Im", since=first_since("Col2Im"), host_inputs=(1, 2))
def build_col2im(node: NodeView, ctx: KernelContext) -> Any:
    """Col2Im: the strided per-tap scatter-add shared with ConvTranspose, then crop the pads."""

    def compute(x, image_shape, block_shape):  # type: ignore[no-untyped-def]
        img = [int(v) for v in image_shape]
        blk = [int(v) for v in block_shape]
        nd = len(img)
        strides = ints(node, "strides", nd, 1)
        dil = ints(node, "dilations", nd, 1)
        pads = node.attr("pads") or [0] * (2 * nd)
        grid = [(img[i] + pads[i] + pads[i + nd] - ((blk[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(nd)]
        n = x.shape[0]
        ksize = int(np.prod(blk))
        if x.shape[1] % ksize or x.shape[2] != int(np.prod(grid)):
            raise fail(node, f"input shape {list(x.shape)} does not match block {blk} over image {img}")
        c = x.shape[1] // ksize
        cols = x.reshape(n, c, *blk, *grid)
        full = [img[i] + pads[i] + pads[i + nd] for i in range(nd)]
        out = scatter_taps(cols, nd, full, strides, dil)
        sl = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + img[i]) for i in range(nd))
        return (np.ascontiguousarray(out[sl]),)

    return compute

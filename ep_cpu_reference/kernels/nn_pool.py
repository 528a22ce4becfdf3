"""Pooling: MaxPool (with Indices), AveragePool, LpPool, their Global forms, MaxUnpool,
MaxRoiPool and RoiAlign.

Windowed pools loop over the kernel taps (a handful) and reduce whole strided slices at once;
AveragePool's divisor is separable, so it is an outer product of per-axis window counts."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import as_compute, fail, first_since, ints, pool_geometry
from ep_cpu_reference.registry import REGISTRY


def _tap_slices(
    kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int], out: Sequence[int]
) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    res = []
    for offs in itertools.product(*[range(k) for k in kernel]):
        sl = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (q - 1) * s + 1, s) for o, d, q, s in zip(offs, dil, out, strides, strict=False)
        )
        res.append((offs, sl))
    return res


class _PoolGeom:
    def __init__(self, node: Any) -> None:
        self.node = node
        self.kernel = [int(k) for k in node.attr("kernel_shape", [])]
        if not self.kernel:
            raise fail(node, "attribute kernel_shape is required")
        self.nd = len(self.kernel)
        self.strides = ints(node, "strides", self.nd, 1)
        self.dil = ints(node, "dilations", self.nd, 1)
        self.auto_pad = node.attr("auto_pad", "NOTSET")
        self.pads = node.attr("pads")
        self.ceil = bool(node.attr("ceil_mode", 0))
        self._cache: dict[tuple[int, ...], Any] = {}

    def resolve(self, x_shape: Sequence[int]) -> Any:
        key = tuple(x_shape)
        got = self._cache.get(key)
        if got is None:
            if len(x_shape) != self.nd + 2:
                raise fail(self.node, f"input rank {len(x_shape)} does not match kernel_shape {self.kernel}")
            insp = list(x_shape[2:])
            pb, pe, out = pool_geometry(
                self.node, insp, self.kernel, self.strides, self.dil, self.auto_pad, self.pads, self.ceil
            )
            # extra end padding so every (ceil-mode) window fits
            need = [
                (o - 1) * s + (k - 1) * d + 1
                for o, s, k, d in zip(out, self.strides, self.kernel, self.dil, strict=False)
            ]
            pe_all = [max(e, n - i - b) for e, n, i, b in zip(pe, need, insp, pb, strict=False)]
            taps = _tap_slices(self.kernel, self.strides, self.dil, out)
            got = (insp, pb, pe, pe_all, out, taps)
            self._cache[key] = got
        return got


def _pad(x: np.ndarray, pb: Sequence[int], pe: Sequence[int], value: Any) -> np.ndarray:
    """Constant padding as one filled buffer and one slice assignment (np.pad costs far more per call)."""
    if not any(pb) and not any(pe):
        return x
    shape = x.shape[:2] + tuple(d + b + e for d, b, e in zip(x.shape[2:], pb, pe, strict=False))
    xp = np.full(shape, value, dtype=x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(b, b + d) for b, d in zip(pb, x.shape[2:], strict=False))] = x
    return xp


def _lowest(dt: np.dtype) -> Any:
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _separable_max(xp: np.ndarray, geom: _PoolGeom, out: Sequence[int]) -> np.ndarray:
    """The window maximum one axis at a time (the max over a box is the max over each axis in
    turn): sum(k) running maxima instead of prod(k), 26 instead of 169 for the 13x13 pools of
    YOLO's SPP blocks. Exact, NaN included (np.maximum propagates it either way)."""
    cur = xp
    for d in reversed(range(geom.nd)):
        k, s, dl, q = geom.kernel[d], geom.strides[d], geom.dil[d], out[d]
        lead = (slice(None),) * (2 + d)
        y = np.array(cur[lead + (slice(0, (q - 1) * s + 1, s),)], copy=True)
        for t in range(1, k):
            np.maximum(y, cur[lead + (slice(t * dl, t * dl + (q - 1) * s + 1, s),)], out=y)
        cur = y
    return cur


@REGISTRY.register("MaxPool", since=first_since("MaxPool"))
def build_max_pool(node: NodeView, ctx: KernelContext) -> Any:
    """MaxPool: running maximum over taps; Indices track the first maximal tap per window and
    are flattened row-major (storage_order=0) or column-major (1) per (n, c) plane."""
    geom = _PoolGeom(node)
    storage_order = int(node.attr("storage_order", 0))
    want_idx = len(node.outputs) > 1 and bool(node.outputs[1])
    skipped = (None,) if len(node.outputs) > 1 and not want_idx else ()  # Indices declared but omitted

    def compute(x: np.ndarray) -> tuple[Any, ...]:
        insp, pb, pe, pe_all, out, taps = geom.resolve(x.shape)
        low = _lowest(x.dtype)
        xp = _pad(x, pb, pe_all, low)
        if not want_idx:
            return (_separable_max(xp, geom, out), *skipped)
        y = np.array(xp[taps[0][1]], copy=True)
        best = np.zeros(y.shape, dtype=np.int64)
        for t, (_, sl) in enumerate(taps[1:], start=1):
            v = xp[sl]
            better = v > y
            np.copyto(y, v, where=better)
            best[better] = t
        offs = np.array([o for o, _ in taps], dtype=np.int64)  # (T, nd)
        n, c = x.shape[:2]
        nd = geom.nd
        if storage_order == 0:
            mult = [int(np.prod(insp[d + 1 :])) for d in range(nd)]
        else:
            mult = [int(np.prod(insp[:d])) for d in range(nd)]
        plane = int(np.prod(insp))
        idx = (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * nd)
        idx = np.broadcast_to(idx, y.shape).copy()
        for d in range(nd):
            grid = (np.arange(out[d], dtype=np.int64) * geom.strides[d] - pb[d]).reshape(
                (1, 1) + (1,) * d + (-1,) + (1,) * (nd - d - 1)
            )
            coord = grid + offs[best, d] * geom.dil[d]
            idx += coord * mult[d]
        return (y, idx)

    return compute


def _axis_counts(
    insp: Sequence[int], pb: Sequence[int], pe: Sequence[int], out: Sequence[int], geom: _PoolGeom, include_pad: bool
) -> np.ndarray:
    """Per-window element counts (outer product over axes): taps landing in the input, or in the
    input plus its explicit pads when count_include_pad."""
    total = np.ones((), dtype=np.float64)
    nd = len(insp)
    for d in range(nd):
        starts = np.arange(out[d]) * geom.strides[d] - pb[d]
        pos = starts[:, None] + np.arange(geom.kernel[d])[None, :] * geom.dil[d]
        lo, hi = (-pb[d], insp[d] + pe[d]) if include_pad else (0, insp[d])
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float64)
        total = np.multiply.outer(total, cnt)
    return total


@REGISTRY.register("AveragePool", since=first_since("AveragePool"))
def build_average_pool(node: NodeView, ctx: KernelContext) -> Any:
    """AveragePool: tap sums over the zero-padded input divided by the separable window count."""
    geom = _PoolGeom(node)
    include_pad = bool(node.attr("count_include_pad", 0))
    counts: dict[tuple[int, ...], np.ndarray] = {}

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        odt = x.dtype
        xc = as_compute(x)
        insp, pb, pe, pe_all, out, taps = geom.resolve(x.shape)
        xp = _pad(xc, pb, pe_all, 0)
        acc = np.array(xp[taps[0][1]], copy=True)
        for _, sl in taps[1:]:
            acc += xp[sl]
        key = (xc.dtype.num,) + tuple(x.shape)
        cnt = counts.get(key)
        if cnt is None:
            cnt = _axis_counts(insp, pb, pe, out, geom, include_pad).astype(xc.dtype)
            cnt = np.maximum(cnt, 1)
            counts[key] = cnt
        acc /= cnt
        return (acc if acc.dtype == odt else acc.astype(odt),)

    return compute


@REGISTRY.register("LpPool", since=first_since("LpPool"))
def build_lp_pool(node: NodeView, ctx: KernelContext) -> Any:
    """LpPool: (sum over the window of |x|^p)^(1/p), pads contribute zero."""
    geom = _PoolGeom(node)
    p = float(node.attr("p", 2))

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        odt = x.dtype
        xc = np.abs(as_compute(x)) ** p
        _, pb, _, pe_all, _, taps = geom.resolve(x.shape)
        xp = _pad(xc, pb, pe_all, 0)
        acc = np.array(xp[taps[0][1]], copy=True)
        for _, sl in taps[1:]:
            acc += xp[sl]
        return ((acc ** (1.0 / p)).astype(odt),)

    return compute


def _global(fn: Any) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        def compute(x: np.ndarray) -> tuple[np.ndarray]:
            if x.ndim < 3:
                raise fail(node, f"input rank {x.ndim}; global pooling needs (N, C, spatial...)")
            if 0 in x.shape[1:]:  # onnxruntime refuses these too; an empty batch gives an empty output
                raise fail(node, f"input shape {list(x.shape)}: no channel or an empty spatial axis to pool")
            axes = tuple(range(2, x.ndim))
            if x.shape[0] == 0:
                return (np.zeros(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype),)
            return (fn(x, axes),)

        return compute

    return build


def _gap(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    xc = as_compute(x)
    n, c = x.shape[:2]
    flat = xc.reshape(n, c, -1)
    y = np.add.reduce(flat, axis=2) / xc.dtype.type(flat.shape[2])
    return y.reshape((n, c) + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)


REGISTRY.register("GlobalAveragePool", since=first_since("GlobalAveragePool"))(_global(_gap))
REGISTRY.register("GlobalMaxPool", since=first_since("GlobalMaxPool"))(
    _global(
        lambda x, axes: np.maximum.reduce(x.reshape(x.shape[0], x.shape[1], -1), axis=2).reshape(
            x.shape[:2] + (1,) * (x.ndim - 2)
        )
    )
)


@REGISTRY.register("GlobalLpPool", since=first_since("GlobalLpPool"))
def build_global_lp_pool(node: NodeView, ctx: KernelContext) -> Any:
    p = float(node.attr("p", 2))

    def fn(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        xc = as_compute(x)
        return ((np.abs(xc) ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)).astype(x.dtype)

    return _global(fn)(node, ctx)


@REGISTRY.register("MaxUnpool", since=first_since("MaxUnpool"), host_inputs=(2,))
def build_max_unpool(node: NodeView, ctx: KernelContext) -> Any:
    """MaxUnpool: scatter values to their flat indices in the (inferred or given) output."""
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    nd = len(kernel)
    strides = ints(node, "strides", nd, 1)
    pads = node.attr("pads") or [0] * (2 * nd)

    def compute(x: np.ndarray, indices: np.ndarray, output_shape: Any = None) -> tuple[np.ndarray]:
        inferred = [x.shape[0], x.shape[1]] + [
            (x.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[nd + d]) + kernel[d] for d in range(nd)
        ]
        # indices address the inferred (unpadded) output, as the ONNX tests define; a larger
        # output_shape is zero-extended at the end of each axis
        y = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        flat = indices.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= y.size):
            raise fail(node, f"an index is outside the output of shape {inferred}")
        y[flat] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return (y,)
        shape = [int(v) for v in output_shape]
        res = np.zeros(shape, dtype=x.dtype)
        sl = tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape, strict=False))
        res[sl] = y[sl]
        return (res,)

    return compute


@REGISTRY.register("MaxRoiPool", since=first_since("MaxRoiPool"))
def build_max_roi_pool(node: NodeView, ctx: KernelContext) -> Any:
    """MaxRoiPool: per region and bin, the channel-vectorised maximum (empty bins give 0)."""
    ph_n, pw_n = [int(v) for v in node.attr("pooled_shape")]
    scale = float(node.attr("spatial_scale", 1.0))

    def compute(x: np.ndarray, rois: np.ndarray) -> tuple[np.ndarray]:
        n, c, h, w = x.shape
        y = np.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype)
        for r, roi in enumerate(rois):
            b = int(roi[0])
            x1, y1, x2, y2 = (int(np.round(float(v) * scale)) for v in roi[1:5])
            rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
            bh, bw = rh / ph_n, rw / pw_n
            for ph in range(ph_n):
                hs = min(max(int(np.floor(ph * bh)) + y1, 0), h)
                he = min(max(int(np.ceil((ph + 1) * bh)) + y1, 0), h)
                for pw in range(pw_n):
                    ws = min(max(int(np.floor(pw * bw)) + x1, 0), w)
                    we = min(max(int(np.ceil((pw + 1) * bw)) + x1, 0), w)
                    if he > hs and we > ws:
                        y[r, :, ph, pw] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
        return (y,)

    return compute


@REGISTRY.register("RoiAlign", since=first_since("RoiAlign"))
def build_roi_align(node: NodeView, ctx: KernelContext) -> Any:
    """RoiAlign: bilinear samples of each region's bin grid, separable in y and x, so each
    region is one gather over (C, ph, iy, pw, ix); avg or max (of weighted corners) reduction."""
    mode = node.attr("mode", "avg").lower()
    half_pixel = node.attr("coordinate_transformation_mode", "half_pixel").lower() == "half_pixel"
    if node.opset < 16:
        half_pixel = False
    oh = int(node.attr("output_height", 1))
    ow = int(node.attr("output_width", 1))
    sr = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    if mode not in ("avg", "max"):
        raise fail(node, f"mode={mode!r}; allowed avg, max")

    def axis(start: float, bin_size: float, grid: int, pooled: int, size: int) -> Any:
        pos = start + np.arange(pooled)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
        valid = (pos >= -1.0) & (pos <= size)
        pos = np.maximum(pos, 0.0)
        low = pos.astype(np.int64)
        at_end = low >= size - 1
        low = np.where(at_end, size - 1, low)
        high = np.where(at_end, size - 1, low + 1)
        pos = np.where(at_end, low, pos)
        frac = pos - low
        return low, high, frac, valid

    def compute(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> tuple[np.ndarray]:
        odt = x.dtype
        xc = as_compute(x)
        n, c, h, w = x.shape
        y = np.zeros((rois.shape[0], c, oh, ow), dtype=xc.dtype)
        off = 0.5 if half_pixel else 0.0
        for r in range(rois.shape[0]):
            x1, y1, x2, y2 = (float(v) * scale - off for v in rois[r, :4])
            rw, rh = x2 - x1, y2 - y1
            if not half_pixel:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / oh, rw / ow
            gh = sr if sr > 0 else int(np.ceil(rh / oh))
            gw = sr if sr > 0 else int(np.ceil(rw / ow))
            cnt = max(gh * gw, 1)
            if gh <= 0 or gw <= 0:
                continue
            yl, yh, fy, vy = axis(y1, bh, gh, oh, h)
            xl, xh, fx, vx = axis(x1, bw, gw, ow, w)
            img = xc[int(batch_indices[r])]
            valid = (vy[:, :, None, None] & vx[None, None]).astype(xc.dtype)
            wy1, wy0 = fy[:, :, None, None], (1 - fy)[:, :, None, None]
            wx1, wx0 = fx[None, None], (1 - fx)[None, None]
            Y0, Y1 = yl[:, :, None, None], yh[:, :, None, None]
            X0, X1 = xl[None, None], xh[None, None]
            corners = (
                (wy0 * wx0 * valid, Y0, X0),
                (wy0 * wx1 * valid, Y0, X1),
                (wy1 * wx0 * valid, Y1, X0),
                (wy1 * wx1 * valid, Y1, X1),
            )
            if mode == "avg":
                acc = np.zeros((c, oh, gh, ow, gw), dtype=xc.dtype)
                for wt, yy, xx in corners:
                    acc += img[:, yy, xx] * wt.astype(xc.dtype)
                y[r] = acc.sum(axis=(2, 4)) / cnt
            else:
                vals = np.stack([img[:, yy, xx] * wt.astype(xc.dtype) for wt, yy, xx in corners])
                y[r] = vals.max(axis=0).max(axis=(2, 4))
        return (y.astype(odt),)

    return compute

"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv and Col2Im.

Conv is im2col over a zero-copy sliding-window view plus one (grouped) matmul, in cache-sized
blocks for large planes; 1x1 stride-1 convolutions skip im2col. Constant weights
are reshaped once at build time. Transposed convolution is one matmul followed by a per-tap
strided scatter-add (col2im)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.conv_plan import plan_conv
from ep_cpu_reference.kernels.nn_common import (
    as_compute,
    compute_dtype,
    conv_pads,
    fail,
    first_since,
    ints,
)
from ep_cpu_reference.registry import REGISTRY

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


# another EP's exact integer convolution of constant weights W' (M, C/group, *kernel) (integers in a
# float array) and the group count: a function of (x, x_zp, bias or None, (kernel, strides,
# dilations, leading pads, out)) giving the float32 nearest conv(x - x_zp, W') + bias (N, M, *out),
# or None where it cannot (then the float product serves); the factory returns None for W' it does
# not take
IntConvProduct = Callable[[np.ndarray, int], Callable[..., np.ndarray | None] | None]


@REGISTRY.register("ConvInteger", since=first_since("ConvInteger"))
def build_conv_integer(node: NodeView, ctx: KernelContext, int_conv: IntConvProduct | None = None) -> Any:
    """ConvInteger: QLinearConv's exact integer conv (``_IntConv``: float32 BLAS where no partial
    sum can reach 2^24, else float64), returned as int32; ``int_conv``: another EP's (used where
    the sums stay below 2^24, so its float32 holds them exactly)."""
    const_w = ctx.constant(node.inputs[1]) is not None and _const_or_absent(ctx, node, 3)
    exact = _IntConv(_ConvGeom(node, None), const_w, int_conv if const_w else None, rounds_to_f32=False)

    def compute(x: Any, w: Any, x_zp: Any = None, w_zp: Any = None) -> tuple[np.ndarray]:
        acc, _ = exact(x, x_zp, w, w_zp, None)
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

    def __init__(
        self,
        geom: _ConvGeom,
        w_constant: bool,
        int_conv: IntConvProduct | None = None,
        rounds_to_f32: bool = True,
    ) -> None:
        """``int_conv``: another EP's product of the constant weights; ``rounds_to_f32``: the caller
        takes float32 of the sums (QLinearConv), so that product serves at any size."""
        self.geom, self.keep = geom, w_constant
        self.weights: tuple[np.ndarray, np.ndarray, float] | None = None
        self.plans: dict[Any, Any] = {}
        self.int_conv, self.rounds_to_f32 = int_conv, rounds_to_f32
        self.compiled: Callable[..., np.ndarray | None] | None = None

    def _weights(self, w: np.ndarray, wzp: Any) -> tuple[np.ndarray, np.ndarray, float]:
        got = self.weights
        if got is None:
            wf = _zp_shift(w, wzp)
            wsum = float(np.abs(wf).reshape(wf.shape[0], -1).sum(axis=1).max()) if wf.size else 0.0
            got = (wf, wf.astype(np.float32), wsum)
            if self.keep:
                self.weights = got
                self.compiled = None if self.int_conv is None else self.int_conv(wf, self.geom.group)
        return got

    def __call__(self, x: np.ndarray, xzp: Any, w: np.ndarray, wzp: Any, b: Any) -> tuple[np.ndarray, list[int]]:
        wf64, wf32, wsum = self._weights(w, wzp)
        zp = int(np.asarray(xzp).reshape(-1)[0]) if xzp is not None else 0
        kernel, strides, dil, pb, pe, out = self.geom.resolve(x.shape, w.shape)
        compiled = self.compiled if x.ndim == 4 else None
        if compiled is not None and self.rounds_to_f32:  # (no bound to check: the caller rounds to float32)
            got = compiled(x, zp, b, (kernel, strides, dil, pb, out))
            if got is not None:
                return got, out
            compiled = None
        xmax = max(int(x.max()) - zp, zp - int(x.min())) if x.size else 0
        bmax = float(np.abs(b.astype(np.float64)).max()) if b is not None and b.size else 0.0
        if compiled is not None and xmax * wsum + bmax < 1 << 24:
            got = compiled(x, zp, b, (kernel, strides, dil, pb, out))
            if got is not None:
                return got, out
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
def build_qlinear_conv(node: NodeView, ctx: KernelContext, int_conv: IntConvProduct | None = None) -> Any:
    """QLinearConv: an exact integer conv (float64 holds it), plus the int32 bias, requantized
    as onnxruntime does (MlasRequantizeOutput): float32(acc) * float32(x_scale * w_scale[c] /
    y_scale), rounded half to even, + y_zero_point, saturated. A float64 scale rounds some
    exact halves (49.5 in float32) the other way. ``int_conv``: another EP's integer conv."""
    geom = _ConvGeom(node, None)
    const_w = ctx.constant(node.inputs[3]) is not None and _const_or_absent(ctx, node, 5)
    exact = _IntConv(geom, const_w, int_conv if const_w else None)

    def compute(x, xs, xzp, w, ws, wzp, ys, yzp=None, b=None):  # type: ignore[no-untyped-def]
        acc, out = exact(x, xzp, w, wzp, b)
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

"""Resize, Upsample and GridSample.

Resize is separable: per resized axis, each output index reads a few input indices with fixed
weights (nearest 1, linear 2, cubic 4, antialias a scale-dependent footprint). Those index and
weight tables depend only on the shapes and scales, so they are computed once per input shape
and cached; each run is one gather plus one weighted sum per axis (a plain take for nearest)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import as_compute, fail, first_since
from ep_cpu_reference.registry import REGISTRY

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


_F32 = np.float32
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_TIE_TOLERANCE = 1e-6


def _source_coords(mode: str, out_len: int, in_len: int, scale: float, roi: Sequence[float] | None) -> np.ndarray:
    """Source coordinate of each output index, as onnxruntime computes it (the target where it and
    the spec differ): in float32, in its operation order, with length_resized the integer output
    length. The ONNX reference divides align_corners and tf_crop_and_resize by scale * in_len - 1
    instead (9 * 2.5 - 1 = 21.5, not 21; a ramp 0..8 then ends at 7.81), and two node tests encode
    that (test_resize_downsample_scales_{linear,cubic}_align_corners, which onnxruntime skips).
    float32 decides nearest ties (8.5 / 1.7 is 5 in float32, 4.99999985 in float64)."""
    y = np.arange(out_len, dtype=_F32)
    s, n_in, n_out = _F32(scale), _F32(in_len), _F32(out_len)
    if mode == "asymmetric":
        return y / s
    if mode == "tf_half_pixel_for_nn":
        return (y + _HALF) / s
    if mode == "half_pixel":
        return (y + _HALF) / s - _HALF
    if mode == "pytorch_half_pixel":
        return (y + _HALF) / s - _HALF if out_len > 1 else np.zeros(out_len, _F32)
    if mode == "align_corners":
        return y * (n_in - _ONE) / (n_out - _ONE) if out_len > 1 else np.zeros(out_len, _F32)
    if mode == "half_pixel_symmetric":
        return _half_pixel_symmetric(y, s, n_in, n_out)
    if mode == "tf_crop_and_resize":
        return _crop_and_resize(y, n_in, n_out, roi)
    raise ValueError(mode)


def _half_pixel_symmetric(y: np.ndarray, s: np.floating, n_in: np.floating, n_out: np.floating) -> np.ndarray:
    """offset + (y + 0.5) / scale - 0.5: onnxruntime takes the offset in float32 and adds the rest in
    float64 (its 0.5 literals are doubles) before rounding to float32."""
    adjustment = n_out / (s * n_in)
    offset = (n_in / _F32(2)) * (_ONE - adjustment)
    return (np.float64(offset) + (y.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(_F32)


def _crop_and_resize(y: np.ndarray, n_in: np.floating, n_out: np.floating, roi: Sequence[float] | None) -> np.ndarray:
    """roi_start * (in - 1) + y * (roi_end - roi_start) * (in - 1) / (out - 1), the roi in float32
    as onnxruntime reads it; a length-1 output samples the roi's centre (computed in float64 there)."""
    start, end = (_F32(0), _F32(1)) if roi is None else (_F32(roi[0]), _F32(roi[1]))
    if n_out > 1:
        return start * (n_in - _ONE) + (y * (end - start) * (n_in - _ONE)) / (n_out - _ONE)
    return np.full(y.shape, 0.5 * np.float64(start + end) * np.float64(n_in - _ONE), dtype=_F32)


def _cubic(r: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic weights of the 4 taps around a point at fraction r (O,) -> (O, 4)."""
    return np.stack(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a,
        ],
        axis=1,
    )


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    return np.where(
        x <= 1,
        (a + 2) * x**3 - (a + 3) * x**2 + 1,
        np.where(x < 2, a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a, 0.0),
    )


class _AxisPlan:
    """Index (O, n) and weight (O, n) tables of one resized axis, plus the extrapolation mask."""

    def __init__(self, idx: np.ndarray, weights: np.ndarray | None, extrap: np.ndarray | None) -> None:
        self.idx = idx
        self.weights = weights
        self.extrap = extrap


def _nearest_index(x: np.ndarray, rule: str) -> np.ndarray:
    """Source index of each float32 coordinate by the nearest_mode rule, rounded in float64 (exact
    for float32 values). onnxruntime's CPU kernel takes a coordinate within 1e-6 of k + 0.5 as a
    tie (measured on 1.31: 9.5e-7 off rounds the preferred way, 1.07e-6 off does not), so a float32
    coordinate an ulp off an exact tie (2 / float32(4 / 7) is 3.4999998, not 3.5) rounds as the tie would;
    the spec compares exactly."""
    xd = x.astype(np.float64)
    if rule == "floor":
        return np.floor(xd)
    if rule == "ceil":
        return np.ceil(xd)
    if rule not in ("round_prefer_floor", "round_prefer_ceil"):
        raise ValueError(rule)
    tie = np.abs(xd - np.floor(xd) - 0.5) <= _TIE_TOLERANCE
    preferred = np.floor(xd) if rule == "round_prefer_floor" else np.ceil(xd)
    return np.where(tie, preferred, np.floor(xd + 0.5))


def _coefficients(ratio: np.ndarray, scale: float, mode: str, cubic_a: float, antialias: bool) -> np.ndarray:
    """Tap weights (O, n) for the fraction ``ratio`` of each coordinate past its floor (1 at integers)."""
    if mode == "linear" and not (antialias and scale < 1):
        return np.stack([1 - ratio, ratio], axis=1)
    if mode == "cubic" and not (antialias and scale < 1):
        return _cubic(ratio, cubic_a)
    s = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, 2 - start)[None, :] - ratio[:, None]) * s
        coeffs = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        coeffs = _cubic_kernel(s * (np.arange(start, 2 - start)[None, :] - ratio[:, None]), cubic_a)
    return coeffs / coeffs.sum(axis=1, keepdims=True)


def _tap_indices(x: np.ndarray, n: int) -> np.ndarray:
    """The n source indices (O, n), unclamped, that the weights of ``_coefficients`` apply to. x
    holds float32 values, so x + pad is exact and frac is 0 exactly where the ratio is 1 (a float64
    7.000000000000001 + 1 rounds to 8.0 and shifted its taps off its weights)."""
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        off = np.where(frac <= 0.5, base, base + 1)
    return np.asarray((p + off)[:, None] + np.arange(n)[None, :] - pad)


def _plan_axis(
    in_len: int,
    out_len: int,
    scale: float,
    mode: str,
    coord: str,
    nearest_mode: str,
    cubic_a: float,
    exclude_outside: bool,
    antialias: bool,
    roi: Sequence[float] | None,
) -> _AxisPlan:
    x = _source_coords(coord, out_len, in_len, scale, roi)
    extrap = None
    if coord == "tf_crop_and_resize":
        extrap = (x < 0) | (x > in_len - 1)
        if not extrap.any():
            extrap = None
    if mode == "nearest":
        if nearest_mode == "simple":  # Upsample, Resize-10: onnxruntime takes ceil when downsampling
            nearest_mode = "ceil" if scale < 1 else "floor"
        i = _nearest_index(x, nearest_mode)
        return _AxisPlan(np.clip(i, 0, in_len - 1).astype(np.intp)[:, None], None, extrap)
    xd = x.astype(np.float64)
    x0 = np.floor(xd)
    coeffs = _coefficients(np.where(xd == x0, 1.0, xd - x0), scale, mode, cubic_a, antialias)
    nbr = _tap_indices(xd, coeffs.shape[1])
    if exclude_outside:
        coeffs = np.where((nbr < 0) | (nbr >= in_len), 0.0, coeffs)
        tot = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(tot == 0, 1.0, tot)
    return _AxisPlan(np.clip(nbr, 0, in_len - 1).astype(np.intp), coeffs, extrap)


def _apply_axis(data: np.ndarray, axis: int, plan: _AxisPlan, extrapolation_value: float) -> np.ndarray:
    if plan.weights is None:
        res = np.take(data, plan.idx[:, 0], axis=axis)
    else:
        o, n = plan.idx.shape
        g = np.take(data, plan.idx.reshape(-1), axis=axis)
        g = g.reshape(data.shape[:axis] + (o, n) + data.shape[axis + 1 :])
        w = plan.weights.astype(data.dtype).reshape((1,) * axis + (o, n) + (1,) * (data.ndim - axis - 1))
        res = (g * w).sum(axis=axis + 1)
    if plan.extrap is not None:
        m = plan.extrap.reshape((1,) * axis + (-1,) + (1,) * (data.ndim - axis - 1))
        res = np.where(m, data.dtype.type(extrapolation_value), res)
    return res


class _Resizer:
    """Parsed Resize/Upsample attributes and the per-shape plan cache."""

    def __init__(self, node: Any, legacy: bool) -> None:
        self.node = node
        mode = node.attr("mode", "nearest")  # lower case, as the spec and onnxruntime have it
        if mode == "bilinear":
            mode = "linear"
        if mode not in ("nearest", "linear", "cubic"):
            raise fail(node, f"mode={mode!r}; allowed nearest, linear, cubic")
        self.mode = mode
        if legacy:  # Upsample and Resize-10: asymmetric coordinates, "simple" nearest rounding
            self.coord, self.nearest = "asymmetric", "simple"
        else:
            self.coord = node.attr("coordinate_transformation_mode", "half_pixel")
            self.nearest = node.attr("nearest_mode", "round_prefer_floor")
        if self.coord not in _COORD_MODES:
            raise fail(node, f"coordinate_transformation_mode={self.coord!r}; allowed {', '.join(_COORD_MODES)}")
        if self.nearest not in _NEAREST_MODES and not legacy:
            raise fail(node, f"nearest_mode={self.nearest!r}; allowed {', '.join(_NEAREST_MODES)}")
        self.cubic_a = float(node.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(node.attr("exclude_outside", 0))
        self.extrapolation_value = float(node.attr("extrapolation_value", 0.0))
        self.antialias = bool(node.attr("antialias", 0))
        self.axes_attr = node.attr("axes")
        self.policy = node.attr("keep_aspect_ratio_policy", "stretch")
        self._plans: dict[Any, Any] = {}

    def run(self, x: np.ndarray, roi: Any, scales: Any, sizes: Any) -> np.ndarray:
        r = x.ndim
        axes = [a + r if a < 0 else a for a in self.axes_attr] if self.axes_attr else list(range(r))
        roi_t = tuple(np.asarray(roi, dtype=np.float64).reshape(-1)) if roi is not None and np.size(roi) else None
        sc_t = (
            tuple(np.asarray(scales, dtype=np.float64).reshape(-1)) if scales is not None and np.size(scales) else None
        )
        sz_t = tuple(int(v) for v in np.asarray(sizes).reshape(-1)) if sizes is not None and np.size(sizes) else None
        key = (x.shape, roi_t, sc_t, sz_t)
        got = self._plans.get(key)
        if got is None:
            plans = self._make_plans(x.shape, axes, roi_t, sc_t, sz_t)
            got = (plans, self._repeat_factors(x.shape, plans))
            self._plans[key] = got
        plans, reps = got
        odt = x.dtype
        if reps is not None:
            # integer nearest upsampling: np.repeat per resized axis, innermost first, instead of a
            # gather per axis (a single broadcast copy with stride-0 inner axes measured 4-5x slower:
            # repeats of outer axes copy whole contiguous rows)
            y = x
            for axis in range(x.ndim - 1, -1, -1):
                if reps[axis] > 1:
                    y = np.repeat(y, reps[axis], axis=axis)
            return y
        y = (
            x.astype(
                np.float32 if self.mode == "linear" and not self.antialias else np.float64
            )  # float32 as onnxruntime
            if self.mode != "nearest" and odt.kind != "f"
            else (x if self.mode == "nearest" else as_compute(x))
        )
        for axis, plan in plans:
            y = _apply_axis(y, axis, plan, self.extrapolation_value)
        if y.dtype != odt:
            if odt.kind in "iu":  # plain linear truncates as onnxruntime's static_cast; cubic/antialias round
                info = np.iinfo(odt)
                y = np.clip(
                    np.trunc(y) if self.mode == "linear" and not self.antialias else np.rint(y), info.min, info.max
                )
            y = y.astype(odt)
        return y

    @staticmethod
    def _repeat_factors(shape: Sequence[int], plans: list[Any]) -> list[int] | None:
        """Per-axis integer factors when every resized axis is nearest index i // f (else None)."""
        if not plans:
            return None
        reps = [1] * len(shape)
        for axis, plan in plans:
            if plan.weights is not None or plan.extrap is not None:
                return None
            n_out = plan.idx.shape[0]
            f = n_out // shape[axis]
            if f < 2 or f * shape[axis] != n_out or not np.array_equal(plan.idx[:, 0], np.arange(n_out) // f):
                return None
            reps[axis] = f
        return reps

    def _make_plans(self, shape: Sequence[int], axes: list[int], roi: Any, scales: Any, sizes: Any) -> list[Any]:
        full_scales, out = self._geometry(shape, axes, scales, sizes)
        if out == list(shape):
            return []  # onnxruntime copies X when no length changes (the spec would still crop a roi)
        full_roi = _full_roi(roi, axes, len(shape))
        plans = []
        for a in range(len(shape)):
            if self._keeps_axis(full_scales[a], shape[a], out[a]):
                continue
            roi_a = None if full_roi is None else (full_roi[a], full_roi[a + len(shape)])
            plan = _plan_axis(
                shape[a],
                out[a],
                full_scales[a],
                self.mode,
                self.coord,
                self.nearest,
                self.cubic_a,
                self.exclude_outside,
                self.antialias,
                roi_a,
            )
            plans.append((a, plan))
        return plans

    def _keeps_axis(self, scale: float, in_len: int, out_len: int) -> bool:
        """Whether onnxruntime passes this axis through unchanged: at scale exactly 1 (float32) it
        maps y to y, ignoring a tf_crop_and_resize roi there, and its antialias path copies an
        axis whose length is unchanged whatever the scale."""
        return bool(_F32(scale) == 1) or (self.antialias and self.mode != "nearest" and in_len == out_len)

    def _geometry(
        self, shape: Sequence[int], axes: list[int], scales: Any, sizes: Any
    ) -> tuple[list[float], list[int]]:
        """Per-axis scale (float32, as onnxruntime holds it) and output length."""
        node = self.node
        if sizes is not None and scales is not None:
            raise fail(node, "only one of scales and sizes may be given")
        if sizes is None and scales is None:
            raise fail(node, "one of scales and sizes is required")
        given = scales if scales is not None else sizes
        if len(given) != len(axes):
            what = "scales" if scales is not None else "sizes"
            raise fail(node, f"{what} has {len(given)} entries for {len(axes)} axes")
        full_scales = [1.0] * len(shape)
        out = list(shape)
        if scales is not None:
            for a, s in zip(axes, scales, strict=True):
                if s <= 0:
                    raise fail(node, f"scale {s} must be positive")
                full_scales[a] = float(_F32(s))
                # floor(input_dimension * scale) in float64, as onnx shape inference declares it
                # (onnxruntime's float32 product can round up: 20 * 0.45 gives it 9 rows, not 8)
                out[a] = int(np.floor(shape[a] * full_scales[a]))
            return full_scales, out
        for a, n in zip(axes, sizes, strict=True):
            if shape[a] == 0 and n != 0:
                raise fail(node, f"sizes asks {n} on axis {a} of length 0")
            if shape[a] and n <= 0:  # its scale n / length would be <= 0: onnxruntime refuses it too
                raise fail(node, f"sizes asks {n} on axis {a} of length {shape[a]}; sizes must be positive")
            full_scales[a] = float(_F32(n) / _F32(shape[a])) if shape[a] else 1.0
            out[a] = n
        if self.policy != "stretch":
            self._keep_aspect_ratio(shape, axes, full_scales, out)
        return full_scales, out

    def _keep_aspect_ratio(
        self, shape: Sequence[int], axes: list[int], full_scales: list[float], out: list[int]
    ) -> None:
        """not_larger / not_smaller: one scale for all axes, lengths rounded half up."""
        if self.policy not in ("not_larger", "not_smaller"):
            raise fail(self.node, f"keep_aspect_ratio_policy={self.policy!r}; allowed stretch, not_larger, not_smaller")
        vals = [full_scales[a] for a in axes]
        s = min(vals) if self.policy == "not_larger" else max(vals)
        for a in axes:
            full_scales[a] = s
            out[a] = int(s * shape[a] + 0.5)


def _full_roi(roi: Any, axes: list[int], r: int) -> list[float] | None:
    """The roi as starts + ends over all r axes (given for ``axes`` only or for all)."""
    if roi is None:
        return None
    if len(roi) == 2 * len(axes):
        full = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full[a] = roi[i]
            full[r + a] = roi[len(axes) + i]
        return full
    if len(roi) == 2 * r:
        return list(roi)
    return None


@REGISTRY.register("Resize", since=first_since("Resize"), host_inputs=(1, 2, 3))
def build_resize(node: NodeView, ctx: KernelContext) -> Any:
    resizer = _Resizer(node, legacy=node.opset < 11)

    def compute(x: np.ndarray, *rest: Any) -> tuple[np.ndarray]:
        if node.opset < 11:
            roi, scales, sizes = None, rest[0], None
        else:
            rest = tuple(rest) + (None,) * (3 - len(rest))
            roi, scales, sizes = rest[0], rest[1], rest[2]
        return (resizer.run(x, roi, scales, sizes),)

    return compute


@REGISTRY.register("Upsample", since=first_since("Upsample"), host_inputs=(1,))
def build_upsample(node: NodeView, ctx: KernelContext) -> Any:
    """Upsample (deprecated): Resize with asymmetric coordinates and floor for nearest."""
    resizer = _Resizer(node, legacy=True)
    attr_scales = node.attr("scales")
    if node.opset < 7:
        h, w = float(node.attr("height_scale", 1.0)), float(node.attr("width_scale", 1.0))
        attr_scales = [1.0, 1.0, h, w]

    def compute(x: np.ndarray, scales: Any = None) -> tuple[np.ndarray]:
        s = scales if scales is not None else attr_scales
        if s is None:
            raise fail(node, "scales are required")
        return (resizer.run(x, None, np.asarray(s, dtype=np.float64), None),)

    return compute


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below = x < lo
    above = x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    n = np.floor(dx / rng)
    rem = dx - n * rng
    even = (n % 2) == 0
    low_res = np.where(even, lo + rem, hi - rem)
    high_res = np.where(even, hi - rem, lo + rem)
    return np.where(below, low_res, np.where(above, high_res, x))


def _denormalize(v: np.ndarray, size: int, align: bool) -> np.ndarray:
    """Grid values in [-1, 1] -> source coordinates, in the grid's float type and operation order
    as onnxruntime computes them. Not clamped or reflected: padding applies to each tap index."""
    t = v.dtype.type
    if align:
        return (v + t(1)) / t(2) * t(size - 1)
    return ((v + t(1)) * t(size) - t(1)) / t(2)


def _pad_index(i: np.ndarray, size: int, padding: str, align: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Tap indices brought in range by padding_mode, plus (zeros padding only) which were inside."""
    if padding == "zeros":
        return np.clip(i, 0, size - 1), (i >= 0) & (i < size)
    if padding == "border":
        return np.clip(i, 0, size - 1), None
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    return np.clip(np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64), 0, size - 1), None


def _gather_taps(flat: np.ndarray, dims: Sequence[int], idx: list[np.ndarray], padding: str, align: bool) -> np.ndarray:
    """Values (N, C, Q) of ``flat`` (N, C, prod(dims)) at one integer tap per dim (each (N, Q));
    a tap outside the input reads 0 under zeros padding."""
    lin = np.zeros(idx[0].shape, dtype=np.int64)
    inside: np.ndarray | None = None
    for d, i in enumerate(idx):
        j, ok = _pad_index(i, dims[d], padding, align)
        lin += j * int(np.prod(dims[d + 1 :]))
        if ok is not None:
            inside = ok if inside is None else inside & ok
    vals = np.take_along_axis(flat, lin[:, None, :], axis=2)
    return vals if inside is None else np.where(inside[:, None, :], vals, 0)


def _tap_weights(frac: np.ndarray, mode: str) -> np.ndarray:
    """Per-tap weights (taps, N, Q) of the fraction past floor: 2 linear taps or 4 cubic (a=-0.75)."""
    if mode == "linear":
        return np.stack([1 - frac, frac])
    return np.moveaxis(_cubic(frac.reshape(-1), -0.75).reshape(frac.shape + (4,)), -1, 0)


def _interpolate(
    flat: np.ndarray, dims: Sequence[int], coords: list[np.ndarray], mode: str, padding: str, align: bool
) -> np.ndarray:
    """Linear or cubic GridSample: padding applied to each of the 2**nd / 4**nd tap indices around
    floor(coordinate), never to the coordinate itself. That differs from clamping the coordinate
    for cubic near a border (a clamped coordinate moves the whole 4x4 window); onnxruntime and
    torch clamp or reflect the taps."""
    taps = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
    bases = [np.floor(cd) for cd in coords]
    wts = [_tap_weights(cd - b, mode) for cd, b in zip(coords, bases, strict=True)]
    starts = [b.astype(np.int64) for b in bases]
    n, c = flat.shape[:2]
    y = np.zeros((n, c, coords[0].shape[1]), dtype=np.float64)
    for combo in itertools.product(range(len(taps)), repeat=len(dims)):
        vals = _gather_taps(flat, dims, [starts[d] + taps[k] for d, k in enumerate(combo)], padding, align)
        w = np.ones(coords[0].shape)
        for d, k in enumerate(combo):
            w = w * wts[d][k]
        y += vals * w[:, None, :]
    return y


@REGISTRY.register("GridSample", since=first_since("GridSample"))
def build_grid_sample(node: NodeView, ctx: KernelContext) -> Any:
    """GridSample (2-D in opset 16, N-D from 20): all sample points of all channels in one gather
    per interpolation tap; zeros/border/reflection padding applied to the tap indices."""
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise fail(node, f"mode={mode!r}; allowed nearest, linear (bilinear), cubic (bicubic)")
    padding = node.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise fail(node, f"padding_mode={padding!r}; allowed zeros, border, reflection")
    align = bool(node.attr("align_corners", 0))

    def compute(x: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray]:
        n, c = x.shape[:2]
        dims = x.shape[2:]
        g = grid.reshape(n, -1, len(dims))
        g = g.astype(np.float64 if g.dtype == np.float64 else np.float32)[:, :, ::-1]  # (N, Q, nd) in dim order
        coords = [_denormalize(g[:, :, d], dims[d], align) for d in range(len(dims))]
        flat = as_compute(x).reshape(n, c, -1)
        if mode == "nearest":  # round half to even (nearbyint), then pad the index
            y = _gather_taps(flat, dims, [np.rint(cd).astype(np.int64) for cd in coords], padding, align)
        else:
            y = _interpolate(flat, dims, coords, mode, padding, align)
        return (y.reshape(n, c, *grid.shape[1:-1]).astype(x.dtype),)

    return compute

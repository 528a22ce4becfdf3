"""Resize (nearest and linear) over the spatial axes of a rank-4 (or the one of a rank-3) tensor,
channels first or, for the internal NHWC domain, channels last; every coordinate transformation
mode except tf_crop_and_resize. Scales or sizes are host inputs (constants in practice); the
batch and channel axes must keep their size. float16 interpolates in float32."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.launch import Runtime, flat, prod
from ep_cuda_numba.registry import FLOAT16_T, rank_of, register_versions, support_check

COORD_MODES = {
    "half_pixel": 0,
    "pytorch_half_pixel": 1,
    "align_corners": 2,
    "asymmetric": 3,
    "tf_half_pixel_for_nn": 4,
    "half_pixel_symmetric": 5,
}
NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


@support_check("Resize")
def _resize_ok(node: Any) -> str | None:
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} (supported: nearest, linear)"
    ct = node.attr("coordinate_transformation_mode", "half_pixel")
    if ct not in COORD_MODES:
        return f"Resize coordinate_transformation_mode {ct!r} (supported: {list(COORD_MODES)})"
    if (
        node.attr("antialias", 0)
        or node.attr("axes") is not None
        or node.attr("keep_aspect_ratio_policy", "stretch") != "stretch"
    ):
        return "Resize with antialias, axes or keep_aspect_ratio_policy"
    r = rank_of(node)
    if r is not None and r not in (3, 4):
        return f"Resize on rank-{r} input (rank 3 or 4)"
    return None


@cuda.jit(device=True)
def _src(o, scale, in_len, out_len, ct):
    if ct == 0:
        return (o + 0.5) / scale - 0.5
    if ct == 1:
        return (o + 0.5) / scale - 0.5 if out_len > 1 else 0.0
    if ct == 2:
        return o * (in_len - 1) / (out_len - 1) if out_len > 1 else 0.0
    if ct == 3:
        return o / scale
    if ct == 4:
        return (o + 0.5) / scale
    adj = in_len / (scale * in_len) if in_len > 0 else 1.0
    center = in_len / 2.0
    return center - (out_len * adj) / 2.0 + (o + 0.5) * adj - 0.5  # half_pixel_symmetric


@cuda.jit(device=True)
def _nearest(v, mode, in_len):
    if mode == 0:
        i = math.ceil(v - 0.5) if v - math.floor(v) == 0.5 else math.floor(v + 0.5)
    elif mode == 1:
        i = math.floor(v + 0.5)
    elif mode == 2:
        i = math.floor(v)
    else:
        i = math.ceil(v)
    i = int(i)
    if i < 0:
        i = 0
    if i > in_len - 1:
        i = in_len - 1
    return i


@cuda.jit
def resize_kernel(x, out, H, W, OH, OW, scale_h, scale_w, ct, linear, nmode, inner, zero):
    """Output element i of [outer, OH, OW, inner]: NCHW runs with outer=N*C, inner=1; NHWC with
    outer=N, inner=C (channels last). float16 interpolates in float32 (``zero``)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        c = i % inner
        r = i // inner
        ow = r % OW
        oh = (r // OW) % OH
        base = (r // (OW * OH)) * H * W
        fy = _src(oh, scale_h, H, OH, ct)
        fx = _src(ow, scale_w, W, OW, ct)
        if linear:
            fy = min(max(fy, 0.0), H - 1.0)
            fx = min(max(fx, 0.0), W - 1.0)
            y0 = int(math.floor(fy))
            x0 = int(math.floor(fx))
            y1 = min(y0 + 1, H - 1)
            x1 = min(x0 + 1, W - 1)
            ly = fy - y0
            lx = fx - x0
            v00 = x[(base + y0 * W + x0) * inner + c] + zero
            v01 = x[(base + y0 * W + x1) * inner + c] + zero
            v10 = x[(base + y1 * W + x0) * inner + c] + zero
            v11 = x[(base + y1 * W + x1) * inner + c] + zero
            top = v00 * (1.0 - lx) + v01 * lx
            bot = v10 * (1.0 - lx) + v11 * lx
            out[i] = top * (1.0 - ly) + bot * ly
        else:
            out[i] = x[(base + _nearest(fy, nmode, H) * W + _nearest(fx, nmode, W)) * inner + c]


def resize_builder(cl: bool) -> Any:
    """Resize over the spatial axes: the last one or two (NCHW) or the ones before the channels
    (NHWC, where the layout transformer has already permuted scales and sizes)."""

    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        linear = node.attr("mode", "nearest") == "linear"
        ct = COORD_MODES[node.attr("coordinate_transformation_mode", "half_pixel")]
        nmode = NEAREST_MODES[node.attr("nearest_mode", "round_prefer_floor")]

        def compute(x: Any, roi: Any = None, scales: Any = None, sizes: Any = None) -> tuple[Any]:
            shape = tuple(int(s) for s in x.shape)
            nd = len(shape)
            if sizes is not None and np.size(sizes):
                out_shape = tuple(int(s) for s in np.asarray(sizes).reshape(-1))
                sc = [o / i if i else 1.0 for o, i in zip(out_shape, shape, strict=False)]
            elif scales is not None and np.size(scales):
                sc = [float(s) for s in np.asarray(scales).reshape(-1)]
                out_shape = tuple(int(math.floor(i * s)) for i, s in zip(shape, sc, strict=False))
            else:
                raise InvalidArgument(f"{node.describe()}: give scales or sizes")
            spatial = list(range(1, nd - 1)) if cl else list(range(2, nd))
            fixed = [d for d in range(nd) if d not in spatial[-2:]]
            if len(out_shape) != nd or any(out_shape[d] != shape[d] for d in fixed):
                raise InvalidArgument(
                    f"{node.describe()}: only the spatial axes {spatial[-2:]} may be resized "
                    f"({list(shape)} -> {list(out_shape)})"
                )
            ax_w = spatial[-1]
            H, OH, sh = (shape[ax_w - 1], out_shape[ax_w - 1], sc[ax_w - 1]) if len(spatial) >= 2 else (1, 1, 1.0)
            W, OW, sw = shape[ax_w], out_shape[ax_w], sc[ax_w]
            inner = shape[-1] if cl else 1
            out = rt.empty(out_shape, x.dtype)
            n = prod(out_shape)
            if n:
                zero = np.float64(0) if np.dtype(x.dtype) == np.float64 else np.float32(0)
                args = (H, W, OH, OW, float(sh), float(sw), ct, linear, nmode, inner, zero)
                rt.launch1d(resize_kernel, n, flat(x), flat(out), *args)
            return (out,)

        return compute

    return build


register_versions("Resize", 11, {"T1": FLOAT16_T}, host_inputs=(1, 2, 3))(resize_builder(False))

"""Convolutions, pooling and BatchNormalization over 1-, 2- and 3-D spatial tensors, channels
first (NCHW, NCDHW) or channels last (NHWC, NDHWC: the internal-domain kernels of ``nhwc``).

Every kernel works on a 3-D spatial volume (1-D and 2-D ops run with D=H=1 or D=1) and takes a
``cl`` flag that picks the activation layout, so one kernel per op serves both layouts and every
rank. Conv with one group and a large reduction (C*KD*KH*KW) is im2col + the tiled GEMM of
``matmul`` (batched over N: the output lands in NCHW or NHWC without a transpose); grouped and
depthwise Conv, ConvTranspose and every float16 conv use a direct kernel (one output element per
thread). float16 is read, accumulated in float32 and rounded once at the store (``acc_zero``);
weights stay in ONNX's OIHW order in both layouts, as onnxruntime's layout transformer leaves them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.kernels.matmul import gemm
from ep_cuda_numba.launch import Runtime, flat, prod
from ep_cuda_numba.registry import FLOAT16_T, rank_of, register_versions, support_check

IM2COL_MIN_K = 32  # below this reduction length the direct kernel wins
CONV_T = FLOAT16_T  # float16 computes in float32 (see acc_zero)


def acc_zero(dtype: Any) -> Any:
    """The accumulator's zero: float64 for double, float32 otherwise (float16 included)."""
    return np.float64(0) if np.dtype(dtype) == np.float64 else np.float32(0)


@support_check("Conv", "ConvTranspose", "MaxPool", "AveragePool")
def _spatial_ok(node: Any) -> str | None:
    r = rank_of(node)
    if r is not None and r not in (3, 4, 5):
        return f"{node.op_type} on rank-{r} input (1-, 2- and 3-D spatial ops: rank 3, 4 or 5)"
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        return "MaxPool with the Indices output"
    if node.op_type == "MaxPool" and int(node.attr("storage_order", 0)):
        return "MaxPool with storage_order=1"
    return None


def _ints(node: Any, name: str, n: int, default: int) -> list[int]:
    v = node.attr(name)
    return [default] * n if v is None else [int(x) for x in v]


def to3d(v: list[int], one: int) -> list[int]:
    """A per-spatial-axis list padded in front to three axes (D, H, W)."""
    return [one] * (3 - len(v)) + list(v)


def split_shape(shape: tuple[int, ...], cl: bool) -> tuple[int, int, list[int]]:
    """(N, C, spatial) of an activation in NC... (``cl`` False) or N...C (``cl`` True) order."""
    if cl:
        return shape[0], shape[-1], list(shape[1:-1])
    return shape[0], shape[1], list(shape[2:])


def join_shape(n: int, c: int, spatial: list[int], cl: bool) -> tuple[int, ...]:
    return (n, *spatial, c) if cl else (n, c, *spatial)


def conv_geometry(
    node: Any, in_sp: list[int], k: list[int], strides: list[int], dil: list[int], transposed: bool = False
) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) honouring auto_pad for forward convolution and pooling."""
    n = len(in_sp)
    auto = node.attr("auto_pad", "NOTSET")
    pads = _ints(node, "pads", 2 * n, 0)
    if auto in ("NOTSET", "VALID"):
        if auto == "VALID":
            return [0] * n, [0] * n
        return pads[:n], pads[n:]
    begin, end = [], []
    for i in range(n):
        out = -(-in_sp[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - in_sp[i])
        small, big = total // 2, total - total // 2
        b, e = (small, big) if auto == "SAME_UPPER" else (big, small)
        begin.append(b)
        end.append(e)
    return begin, end


@cuda.jit(device=True)
def _unravel(i, C, OD, OH, OW, cl):
    """(n, c, od, oh, ow) of flat output index ``i`` in NCDHW or NDHWC order."""
    if cl:
        c = i % C
        r = i // C
        ow = r % OW
        r = r // OW
        oh = r % OH
        r = r // OH
        return r // OD, c, r % OD, oh, ow
    ow = i % OW
    r = i // OW
    oh = r % OH
    r = r // OH
    od = r % OD
    r = r // OD
    return r // C, r % C, od, oh, ow


@cuda.jit(device=True)
def _at(n, c, d, h, w, C, D, H, W, cl):
    """Flat index of (n, c, d, h, w) in an NCDHW or NDHWC buffer."""
    if cl:
        return (((n * D + d) * H + h) * W + w) * C + c
    return (((n * C + c) * D + d) * H + h) * W + w


@cuda.jit
def conv_direct(
    x,
    w,
    bias,
    out,
    C,
    D,
    H,
    W,
    M,
    KD,
    KH,
    KW,
    OD,
    OH,
    OW,
    sd,
    sh,
    sw,
    pd,
    ph,
    pw,
    dd,
    dh,
    dw,
    group,
    has_bias,
    cl,
    zero,
):
    cg = C // group
    mg = M // group
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        n, m, od, oh, ow = _unravel(i, M, OD, OH, OW, cl)
        g = m // mg
        acc = zero
        for c in range(cg):
            ci = g * cg + c
            for kd in range(KD):
                iz = od * sd - pd + kd * dd
                if iz >= 0 and iz < D:
                    for kh in range(KH):
                        ih = oh * sh - ph + kh * dh
                        if ih >= 0 and ih < H:
                            for kw in range(KW):
                                iw = ow * sw - pw + kw * dw
                                if iw >= 0 and iw < W:
                                    xv = x[_at(n, ci, iz, ih, iw, C, D, H, W, cl)] + zero
                                    acc += xv * w[(((m * cg + c) * KD + kd) * KH + kh) * KW + kw]
        if has_bias:
            acc += bias[m]
        out[i] = acc


@cuda.jit
def im2col(x, col, C, D, H, W, KD, KH, KW, OD, OH, OW, sd, sh, sw, pd, ph, pw, dd, dh, dw, cl, zero):
    """The batched GEMM's operand: col[n, k, l] (NCHW) or col[n, l, k] (NHWC), with
    k = ((c*KD+kd)*KH+kh)*KW+kw (the weight's order) and l = (od*OH+oh)*OW+ow."""
    L = OD * OH * OW
    CK = C * KD * KH * KW
    for i in range(cuda.grid(1), col.size, cuda.gridsize(1)):
        if cl:
            r = i % CK
            pos = (i // CK) % L
        else:
            pos = i % L
            r = (i // L) % CK
        n = i // (L * CK)
        kw = r % KW
        kh = (r // KW) % KH
        kd = (r // (KW * KH)) % KD
        c = r // (KW * KH * KD)
        ow = pos % OW
        oh = (pos // OW) % OH
        od = pos // (OW * OH)
        iz = od * sd - pd + kd * dd
        ih = oh * sh - ph + kh * dh
        iw = ow * sw - pw + kw * dw
        if iz >= 0 and iz < D and ih >= 0 and ih < H and iw >= 0 and iw < W:
            col[i] = x[_at(n, c, iz, ih, iw, C, D, H, W, cl)]
        else:
            col[i] = zero


def conv_builder(cl: bool) -> Any:
    """The Conv builder for channels-first (``cl`` False) or channels-last activations."""

    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        group = int(node.attr("group", 1))

        def compute(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            xs, ws = tuple(int(s) for s in x.shape), tuple(int(s) for s in w.shape)
            N, C, in_sp = split_shape(xs, cl)
            M, cg, k = ws[0], ws[1], list(ws[2:])
            nsp = len(in_sp)
            if cg * group != C or len(k) != nsp:
                raise InvalidArgument(
                    f"{node.describe()}: weight {list(ws)} with group={group} does not fit input {list(xs)}"
                    + (" (channels last)" if cl else "")
                )
            strides = _ints(node, "strides", nsp, 1)
            dil = _ints(node, "dilations", nsp, 1)
            pb, pe = conv_geometry(node, in_sp, k, strides, dil)
            out_sp = [(in_sp[i] + pb[i] + pe[i] - ((k[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(nsp)]
            out = rt.empty(join_shape(N, M, out_sp, cl), x.dtype)
            total = prod(out.shape)
            if total == 0:
                return (out,)
            D, H, W = to3d(in_sp, 1)
            geo = (*to3d(k, 1), *to3d(out_sp, 1), *to3d(strides, 1), *to3d(pb, 0), *to3d(dil, 1))
            CK = cg * prod(k)
            L = prod(out_sp)
            if group == 1 and CK >= IM2COL_MIN_K and np.dtype(x.dtype) != np.float16:
                col = rt.empty((N, L, CK) if cl else (N, CK, L), x.dtype)
                rt.launch1d(im2col, N * CK * L, flat(x), flat(col), C, D, H, W, *geo, cl, np.dtype(x.dtype).type(0))
                if cl:  # out[n, l, m] = col[n, l, :] . w[m, :]
                    gemm(
                        rt,
                        col,
                        w,
                        out,
                        L,
                        M,
                        CK,
                        (CK, 1),
                        (1, CK),
                        ((N,), (L * CK,), (0,), (L * M,)),
                        1.0,
                        b,
                        (0, 1),
                        1.0,
                    )
                else:  # out[n, m, l] = w[m, :] . col[n, :, l]
                    gemm(
                        rt,
                        w,
                        col,
                        out,
                        M,
                        L,
                        CK,
                        (CK, 1),
                        (L, 1),
                        ((N,), (0,), (CK * L,), (M * L,)),
                        1.0,
                        b,
                        (1, 0),
                        1.0,
                    )
            else:
                rt.launch1d(
                    conv_direct,
                    total,
                    flat(x),
                    flat(w),
                    flat(b) if b is not None else flat(w),
                    flat(out),
                    C,
                    D,
                    H,
                    W,
                    M,
                    *geo,
                    group,
                    b is not None,
                    cl,
                    acc_zero(x.dtype),
                )
            return (out,)

        return compute

    return build


@cuda.jit
def conv_transpose_direct(
    x,
    w,
    bias,
    out,
    C,
    D,
    H,
    W,
    M,
    KD,
    KH,
    KW,
    OD,
    OH,
    OW,
    sd,
    sh,
    sw,
    pd,
    ph,
    pw,
    dd,
    dh,
    dw,
    group,
    has_bias,
    cl,
    zero,
):
    cg = C // group
    mg = M // group
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        n, m, od, oh, ow = _unravel(i, M, OD, OH, OW, cl)
        g = m // mg
        mm = m % mg
        acc = zero
        for kd in range(KD):
            tz = od + pd - kd * dd
            if tz >= 0 and tz % sd == 0 and tz // sd < D:
                iz = tz // sd
                for kh in range(KH):
                    th = oh + ph - kh * dh
                    if th >= 0 and th % sh == 0 and th // sh < H:
                        ih = th // sh
                        for kw in range(KW):
                            tw = ow + pw - kw * dw
                            if tw >= 0 and tw % sw == 0 and tw // sw < W:
                                iw = tw // sw
                                for c in range(cg):
                                    ci = g * cg + c
                                    xv = x[_at(n, ci, iz, ih, iw, C, D, H, W, cl)] + zero
                                    acc += xv * w[(((ci * mg + mm) * KD + kd) * KH + kh) * KW + kw]
        if has_bias:
            acc += bias[m]
        out[i] = acc


def conv_transpose_builder(cl: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        group = int(node.attr("group", 1))

        def compute(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            xs, ws = tuple(int(s) for s in x.shape), tuple(int(s) for s in w.shape)
            N, C, in_sp = split_shape(xs, cl)
            nsp = len(in_sp)
            mg, k = ws[1], list(ws[2:])
            M = mg * group
            if ws[0] != C or len(k) != nsp or C % group:
                raise InvalidArgument(
                    f"{node.describe()}: weight {list(ws)} with group={group} does not fit input {list(xs)}"
                )
            strides = _ints(node, "strides", nsp, 1)
            dil = _ints(node, "dilations", nsp, 1)
            opad = _ints(node, "output_padding", nsp, 0)
            pads = _ints(node, "pads", 2 * nsp, 0)
            out_shape_attr = node.attr("output_shape")
            auto = node.attr("auto_pad", "NOTSET")
            pb, pe = pads[:nsp], pads[nsp:]
            if out_shape_attr is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
                target = (
                    [int(v) for v in out_shape_attr][-nsp:]
                    if out_shape_attr is not None
                    else [in_sp[i] * strides[i] for i in range(nsp)]
                )
                pb, pe = [], []
                for i in range(nsp):
                    # an output larger than the natural one is padded at the end (as ORT and
                    # onnx.reference do), so the total padding never goes below zero
                    total = max(0, strides[i] * (in_sp[i] - 1) + opad[i] + ((k[i] - 1) * dil[i] + 1) - target[i])
                    half = total // 2
                    b_, e_ = (half, total - half) if auto == "SAME_UPPER" else (total - half, half)
                    pb.append(b_)
                    pe.append(e_)
            out_sp = [
                strides[i] * (in_sp[i] - 1) + opad[i] + ((k[i] - 1) * dil[i] + 1) - pb[i] - pe[i] for i in range(nsp)
            ]
            if out_shape_attr is not None:
                out_sp = [int(v) for v in out_shape_attr][-nsp:]
            out = rt.empty(join_shape(N, M, out_sp, cl), x.dtype)
            total = prod(out.shape)
            if total:
                rt.launch1d(
                    conv_transpose_direct,
                    total,
                    flat(x),
                    flat(w),
                    flat(b) if b is not None else flat(w),
                    flat(out),
                    C,
                    *to3d(in_sp, 1),
                    M,
                    *to3d(k, 1),
                    *to3d(out_sp, 1),
                    *to3d(strides, 1),
                    *to3d(pb, 0),
                    *to3d(dil, 1),
                    group,
                    b is not None,
                    cl,
                    acc_zero(x.dtype),
                )
            return (out,)

        return compute

    return build


@cuda.jit
def pool_nd(
    x,
    out,
    C,
    D,
    H,
    W,
    KD,
    KH,
    KW,
    OD,
    OH,
    OW,
    sd,
    sh,
    sw,
    pd,
    ph,
    pw,
    pde,
    phe,
    pwe,
    dd,
    dh,
    dw,
    is_max,
    count_pad,
    cl,
    zero,
):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        n, c, od, oh, ow = _unravel(i, C, OD, OH, OW, cl)
        acc = zero
        best = -math.inf
        cnt = 0
        cnt_pad = 0
        for kd in range(KD):
            iz = od * sd - pd + kd * dd
            for kh in range(KH):
                ih = oh * sh - ph + kh * dh
                for kw in range(KW):
                    iw = ow * sw - pw + kw * dw
                    if iz >= -pd and iz < D + pde and ih >= -ph and ih < H + phe and iw >= -pw and iw < W + pwe:
                        cnt_pad += 1
                    if iz >= 0 and iz < D and ih >= 0 and ih < H and iw >= 0 and iw < W:
                        v = x[_at(n, c, iz, ih, iw, C, D, H, W, cl)] + zero
                        cnt += 1
                        acc += v
                        if v > best:
                            best = v
        if is_max:
            out[i] = best
        elif count_pad:
            out[i] = acc / cnt_pad if cnt_pad > 0 else zero
        else:
            out[i] = acc / cnt if cnt > 0 else zero


def pool_builder(is_max: bool, cl: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        kernel_shape = [int(v) for v in node.attr("kernel_shape")]
        ceil_mode = int(node.attr("ceil_mode", 0))
        count_pad = bool(node.attr("count_include_pad", 0))

        def compute(x: Any) -> tuple[Any, ...]:
            xs = tuple(int(s) for s in x.shape)
            N, C, in_sp = split_shape(xs, cl)
            nsp = len(in_sp)
            if len(kernel_shape) != nsp:
                raise InvalidArgument(f"{node.describe()}: kernel_shape {kernel_shape} does not fit input {list(xs)}")
            strides = _ints(node, "strides", nsp, 1)
            dil = _ints(node, "dilations", nsp, 1)
            pb, pe = conv_geometry(node, in_sp, kernel_shape, strides, dil)
            out_sp = []
            for i in range(nsp):
                span = in_sp[i] + pb[i] + pe[i] - ((kernel_shape[i] - 1) * dil[i] + 1)
                o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
                if ceil_mode and (o - 1) * strides[i] >= in_sp[i] + pb[i]:
                    o -= 1  # the last window would start in the end padding
                out_sp.append(o)
            out = rt.empty(join_shape(N, C, out_sp, cl), x.dtype)
            total = prod(out.shape)
            if total:
                rt.launch1d(
                    pool_nd,
                    total,
                    flat(x),
                    flat(out),
                    C,
                    *to3d(in_sp, 1),
                    *to3d(kernel_shape, 1),
                    *to3d(out_sp, 1),
                    *to3d(strides, 1),
                    *to3d(pb, 0),
                    *to3d(pe, 0),
                    *to3d(dil, 1),
                    is_max,
                    count_pad,
                    cl,
                    acc_zero(x.dtype),
                )
            return (out,)

        return compute

    return build


@cuda.jit
def batchnorm_kernel(x, out, scale, bias, mean, var, eps, C, inner, cl, zero):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        c = i % C if cl else (i // inner) % C
        v = (x[i] + zero - mean[c]) / math.sqrt(var[c] + zero + eps)
        out[i] = v * scale[c] + bias[c]


@support_check("BatchNormalization")
def _bn_ok(node: Any) -> str | None:
    if int(node.attr("training_mode", 0)) or any(node.outputs[1:]):
        return "BatchNormalization in training mode (running mean/var outputs)"
    return None


def batchnorm_builder(cl: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        eps = float(node.attr("epsilon", 1e-5))

        def compute(x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> tuple[Any]:
            shape = tuple(int(s) for s in x.shape)
            out = rt.empty(shape, x.dtype)
            n = prod(shape)
            if n:
                C = shape[-1] if cl else shape[1]
                inner = 1 if cl else prod(shape[2:])
                args = (flat(x), flat(out), flat(scale), flat(bias), flat(mean), flat(var), eps, C, inner)
                rt.launch1d(batchnorm_kernel, n, *args, cl, acc_zero(x.dtype))
            return (out,)

        return compute

    return build


register_versions("Conv", 1, {"T": CONV_T})(conv_builder(False))
register_versions("ConvTranspose", 1, {"T": CONV_T})(conv_transpose_builder(False))
register_versions("MaxPool", 8, {"T": CONV_T})(pool_builder(True, False))
register_versions("AveragePool", 7, {"T": CONV_T})(pool_builder(False, False))
register_versions("BatchNormalization", 9, {"T": CONV_T, "T1": CONV_T, "T2": CONV_T})(batchnorm_builder(False))

"""Convolutions, pooling and BatchNormalization on NCHW tensors (1-D ops run as 2-D with H=1).

Conv with one group and a large reduction (C*KH*KW) is im2col + the tiled GEMM of ``matmul``
(batched over N, so the output lands in NCHW without a transpose); grouped and depthwise Conv use
a direct kernel (one output element per thread), as does ConvTranspose."""

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
from ep_cuda_numba.registry import FLOAT_T, rank_of, register_versions, support_check

IM2COL_MIN_K = 32  # below this reduction length the direct kernel wins


@support_check("Conv", "ConvTranspose", "MaxPool", "AveragePool")
def _spatial_ok(node: Any) -> str | None:
    r = rank_of(node)
    if r is not None and r not in (3, 4):
        return f"{node.op_type} on rank-{r} input (only 1-D and 2-D spatial ops, rank 3 or 4)"
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        return "MaxPool with the Indices output"
    if node.op_type == "MaxPool" and int(node.attr("storage_order", 0)):
        return "MaxPool with storage_order=1"
    return None


def _as4d(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])


def _ints(node: Any, name: str, n: int, default: int) -> list[int]:
    v = node.attr(name)
    return [default] * n if v is None else [int(x) for x in v]


def _to2d(v: list[int], one: int) -> list[int]:
    return v if len(v) == 2 else [one] + v


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


@cuda.jit
def conv_direct(x, w, bias, out, C, H, W, M, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, group, has_bias, zero):
    cg = C // group
    mg = M // group
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        ow = i % OW
        oh = (i // OW) % OH
        m = (i // (OW * OH)) % M
        n = i // (OW * OH * M)
        g = m // mg
        acc = zero
        for c in range(cg):
            ci = g * cg + c
            for kh in range(KH):
                ih = oh * sh - ph + kh * dh
                if ih >= 0 and ih < H:
                    for kw in range(KW):
                        iw = ow * sw - pw + kw * dw
                        if iw >= 0 and iw < W:
                            acc += x[((n * C + ci) * H + ih) * W + iw] * w[((m * cg + c) * KH + kh) * KW + kw]
        if has_bias:
            acc += bias[m]
        out[i] = acc


@cuda.jit
def im2col(x, col, C, H, W, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, zero):
    """col[n, (c*KH+kh)*KW+kw, oh*OW+ow] for all n (the batched GEMM's B)."""
    L = OH * OW
    CK = C * KH * KW
    for i in range(cuda.grid(1), col.size, cuda.gridsize(1)):
        pos = i % L
        r = (i // L) % CK
        n = i // (L * CK)
        kw = r % KW
        kh = (r // KW) % KH
        c = r // (KW * KH)
        ih = (pos // OW) * sh - ph + kh * dh
        iw = (pos % OW) * sw - pw + kw * dw
        if ih >= 0 and ih < H and iw >= 0 and iw < W:
            col[i] = x[((n * C + c) * H + ih) * W + iw]
        else:
            col[i] = zero


@register_versions("Conv", 1, {"T": FLOAT_T})
def build_conv(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    group = int(node.attr("group", 1))

    def compute(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        xs, ws = tuple(int(s) for s in x.shape), tuple(int(s) for s in w.shape)
        nsp = len(xs) - 2
        N, C, H, W = _as4d(xs)
        M, cg, KH, KW = _as4d(ws)
        if cg * group != C:
            raise InvalidArgument(
                f"{node.describe()}: weight {list(ws)} with group={group} does not fit input {list(xs)}"
            )
        k = [KH, KW][-nsp:] if nsp == 2 else [KW]
        strides = _ints(node, "strides", nsp, 1)
        dil = _ints(node, "dilations", nsp, 1)
        pb, pe = conv_geometry(node, list(xs[2:]), k, strides, dil)
        sh, sw = _to2d(strides, 1)
        dh, dw = _to2d(dil, 1)
        ph, pw = _to2d(pb, 0)
        phe, pwe = _to2d(pe, 0)
        OH = (H + ph + phe - ((KH - 1) * dh + 1)) // sh + 1
        OW = (W + pw + pwe - ((KW - 1) * dw + 1)) // sw + 1
        out_shape = (N, M, OH, OW) if nsp == 2 else (N, M, OW)
        out = rt.empty(out_shape, x.dtype)
        total = prod(out_shape)
        if total == 0:
            return (out,)
        CK = cg * KH * KW
        if group == 1 and CK >= IM2COL_MIN_K:
            L = OH * OW
            col = rt.empty((N, CK, L), x.dtype)
            rt.launch1d(
                im2col,
                N * CK * L,
                flat(x),
                flat(col),
                C,
                H,
                W,
                KH,
                KW,
                OH,
                OW,
                sh,
                sw,
                ph,
                pw,
                dh,
                dw,
                np.dtype(x.dtype).type(0),
            )
            bias_st = (1, 0)
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
                bias=b,
                bias_strides=bias_st,
                beta=1.0,
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
                H,
                W,
                M,
                KH,
                KW,
                OH,
                OW,
                sh,
                sw,
                ph,
                pw,
                dh,
                dw,
                group,
                b is not None,
                np.dtype(x.dtype).type(0),
            )
        return (out,)

    return compute


@cuda.jit
def conv_transpose_direct(x, w, bias, out, C, H, W, M, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, group, has_bias, zero):
    cg = C // group
    mg = M // group
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        ow = i % OW
        oh = (i // OW) % OH
        m = (i // (OW * OH)) % M
        n = i // (OW * OH * M)
        g = m // mg
        mm = m % mg
        acc = zero
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
                            acc += x[((n * C + ci) * H + ih) * W + iw] * w[((ci * mg + mm) * KH + kh) * KW + kw]
        if has_bias:
            acc += bias[m]
        out[i] = acc


@register_versions("ConvTranspose", 1, {"T": FLOAT_T})
def build_conv_transpose(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    group = int(node.attr("group", 1))

    def compute(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        xs, ws = tuple(int(s) for s in x.shape), tuple(int(s) for s in w.shape)
        nsp = len(xs) - 2
        N, C, H, W = _as4d(xs)
        _, mg, KH, KW = _as4d(ws)
        M = mg * group
        k = [KH, KW] if nsp == 2 else [KW]
        strides = _ints(node, "strides", nsp, 1)
        dil = _ints(node, "dilations", nsp, 1)
        opad = _ints(node, "output_padding", nsp, 0)
        pads = _ints(node, "pads", 2 * nsp, 0)
        in_sp = list(xs[2:])
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
        out_sp = [strides[i] * (in_sp[i] - 1) + opad[i] + ((k[i] - 1) * dil[i] + 1) - pb[i] - pe[i] for i in range(nsp)]
        if out_shape_attr is not None:
            out_sp = [int(v) for v in out_shape_attr][-nsp:]
        sh, sw = _to2d(strides, 1)
        dh, dw = _to2d(dil, 1)
        ph, pw = _to2d(pb, 0)
        OH, OW = _to2d(out_sp, 1)
        out = rt.empty((N, M, *out_sp), x.dtype)
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
                H,
                W,
                M,
                KH,
                KW,
                OH,
                OW,
                sh,
                sw,
                ph,
                pw,
                dh,
                dw,
                group,
                b is not None,
                np.dtype(x.dtype).type(0),
            )
        return (out,)

    return compute


@cuda.jit
def pool2d(x, out, H, W, KH, KW, OH, OW, sh, sw, ph, pw, phe, pwe, dh, dw, is_max, count_pad, zero):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        ow = i % OW
        oh = (i // OW) % OH
        nc = i // (OW * OH)
        base = nc * H * W
        acc = zero
        best = -math.inf
        cnt = 0
        cnt_pad = 0
        for kh in range(KH):
            ih = oh * sh - ph + kh * dh
            for kw in range(KW):
                iw = ow * sw - pw + kw * dw
                if ih >= -ph and ih < H + phe and iw >= -pw and iw < W + pwe:
                    cnt_pad += 1
                if ih >= 0 and ih < H and iw >= 0 and iw < W:
                    v = x[base + ih * W + iw]
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


def _pool_builder(is_max: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        kernel_shape = [int(v) for v in node.attr("kernel_shape")]
        ceil_mode = int(node.attr("ceil_mode", 0))
        count_pad = bool(node.attr("count_include_pad", 0))

        def compute(x: Any) -> tuple[Any, ...]:
            xs = tuple(int(s) for s in x.shape)
            nsp = len(xs) - 2
            N, C, H, W = _as4d(xs)
            strides = _ints(node, "strides", nsp, 1)
            dil = _ints(node, "dilations", nsp, 1)
            pb, pe = conv_geometry(node, list(xs[2:]), kernel_shape, strides, dil)
            out_sp = []
            for i in range(nsp):
                span = xs[2 + i] + pb[i] + pe[i] - ((kernel_shape[i] - 1) * dil[i] + 1)
                o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
                if ceil_mode and (o - 1) * strides[i] >= xs[2 + i] + pb[i]:
                    o -= 1  # the last window would start in the end padding
                out_sp.append(o)
            KH, KW = _to2d(kernel_shape, 1)
            sh, sw = _to2d(strides, 1)
            dh, dw = _to2d(dil, 1)
            ph, pw = _to2d(pb, 0)
            phe, pwe = _to2d(pe, 0)
            OH, OW = _to2d(out_sp, 1)
            out = rt.empty((N, C, *out_sp), x.dtype)
            total = prod(out.shape)
            if total:
                rt.launch1d(
                    pool2d,
                    total,
                    flat(x),
                    flat(out),
                    H,
                    W,
                    KH,
                    KW,
                    OH,
                    OW,
                    sh,
                    sw,
                    ph,
                    pw,
                    phe,
                    pwe,
                    dh,
                    dw,
                    is_max,
                    count_pad,
                    np.dtype(x.dtype).type(0),
                )
            return (out,)

        return compute

    return build


register_versions("MaxPool", 8, {"T": FLOAT_T})(_pool_builder(True))
register_versions("AveragePool", 7, {"T": FLOAT_T})(_pool_builder(False))


@cuda.jit
def batchnorm_kernel(x, out, scale, bias, mean, var, eps, C, inner):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        c = (i // inner) % C
        out[i] = (x[i] - mean[c]) / math.sqrt(var[c] + eps) * scale[c] + bias[c]


@support_check("BatchNormalization")
def _bn_ok(node: Any) -> str | None:
    if int(node.attr("training_mode", 0)) or any(node.outputs[1:]):
        return "BatchNormalization in training mode (running mean/var outputs)"
    return None


@register_versions("BatchNormalization", 9, {"T": FLOAT_T, "T1": FLOAT_T, "T2": FLOAT_T})
def build_batchnorm(node: NodeView, ctx: KernelContext) -> Any:
    rt = Runtime.of(ctx)
    eps = float(node.attr("epsilon", 1e-5))

    def compute(x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> tuple[Any]:
        shape = tuple(int(s) for s in x.shape)
        out = rt.empty(shape, x.dtype)
        n = prod(shape)
        if n:
            rt.launch1d(
                batchnorm_kernel,
                n,
                flat(x),
                flat(out),
                flat(scale),
                flat(bias),
                flat(mean),
                flat(var),
                eps,
                shape[1],
                prod(shape[2:]),
            )
        return (out,)

    return compute

"""onnxruntime's quantization contrib ops (com.microsoft): dynamic int8 matmuls and LSTM, the
QLinear* family, QGemm, QAttention, MatMulNBits and the contrib Quantize/DequantizeLinear.

Each kernel follows onnxruntime's CPU arithmetic step by step so results are bit-identical
where onnxruntime is exact: integer products accumulate exactly (float64 holds every int8 x
int8 sum of any realistic K), requantization multiplies or divides in float32 in onnxruntime's
order and rounds half to even (MLAS's conversions), and the element-wise QLinear ops go
through the same 256-entry lookup tables onnxruntime builds. Where onnxruntime itself computes
in float with its own accumulation order (attention, LSTM gates, MatMulNBits) results agree
to float32 rounding, which the tests bound."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels import _rnn_fast as fast
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels._quantize_ms_schemas import register_schemas
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.kernels.nn_conv import build_qlinear_conv
from ep_cpu_reference.kernels.nn_matmul import IntB, int_matmul
from ep_cpu_reference.kernels.nn_pool import build_average_pool
from ep_cpu_reference.kernels.nn_rnn import _reverse_index, _RnnSpec, _unreverse
from ep_cpu_reference.kernels.quantize import _dequantize_builder, _quantize_builder, dynamic_params
from ep_cpu_reference.kernels.special import mlas_logistic, mlas_tanh
from ep_cpu_reference.registry import REGISTRY

register_schemas()

F32 = np.float32


def _f(v: Any) -> np.float32:
    """A one-element float tensor as a float32 scalar (onnxruntime reads element 0)."""
    return F32(np.asarray(v).reshape(-1)[0])


def _zp(v: Any) -> int:
    return 0 if v is None else int(np.asarray(v).reshape(-1)[0])


def _range(dt: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def quantize_div(v: np.ndarray, scale: Any, zp: int, dt: np.dtype) -> np.ndarray:
    """MlasQuantizeLinear: round-half-even(v / scale) + zp, saturated (float32 division). A NaN
    quotient (0 / 0: a state whose range underflowed to a zero scale) saturates to the low end, as
    MLAS's max(value, low) then min(value, high) give it (x86 max/min return the bound)."""
    lo, hi = _range(dt)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(np.asarray(v, F32) / F32(scale))
    return (np.fmin(np.fmax(q, lo - zp), hi - zp) + zp).astype(dt)


def requantize_mul(acc: np.ndarray, scale: Any, zp: int, dt: np.dtype) -> np.ndarray:
    """MlasRequantizeOutput: float32(acc) * scale, saturated, rounded half to even, + zp."""
    lo, hi = _range(dt)
    y = acc.astype(F32) * np.asarray(scale, F32)
    return (np.rint(np.clip(y, lo - zp, hi - zp)) + zp).astype(dt)


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    scale, zp = dynamic_params(x)
    return quantize_div(x, scale, zp, np.dtype(np.uint8)), scale, zp


def _fma(a: np.ndarray, b: Any, c: Any) -> np.ndarray:
    """float32 fused multiply-add (one rounding), as MLAS's FMA kernels compute a*b + c."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


def _scale_bias(acc: np.ndarray, scale: Any, bias: Any) -> np.ndarray:
    """MLAS's scale-bias output processor: float32(acc) * scale (+ bias)."""
    y = acc.astype(F32) * np.asarray(scale, F32)
    return y if bias is None else y + np.asarray(bias, F32)


# ----------------------------------------------------------------------- dynamic matmuls
def _per_column(node: Any, scale: Any, n: int) -> np.ndarray:
    s = np.asarray(scale, F32)
    if s.size != 1 and s.shape[-1] != n:
        raise fail(node, f"scale of shape {list(s.shape)} is neither per-tensor nor per-column of {n}")
    return s.reshape(()) if s.size == 1 else s


@REGISTRY.register("DynamicQuantizeMatMul", domain=MS)
def build_dynamic_quantize_matmul(node: NodeView, ctx: KernelContext) -> Any:
    """A quantized to uint8 over the whole tensor, an exact integer product, scaled back."""

    def compute(a, b, b_scale, b_zp=None, bias=None):  # type: ignore[no-untyped-def]
        aq, a_scale, a_zp = dynamic_quantize(a)
        acc = int_matmul(aq, a_zp, b, b_zp)
        return (_scale_bias(acc, a_scale * _per_column(node, b_scale, b.shape[-1]), bias),)

    return compute


@REGISTRY.register("MatMulIntegerToFloat", domain=MS)
def build_matmul_integer_to_float(node: NodeView, ctx: KernelContext) -> Any:
    def compute(a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):  # type: ignore[no-untyped-def]
        if np.asarray(a_scale).size != 1 or (a_zp is not None and np.asarray(a_zp).size != 1):
            raise fail(node, "a_scale and a_zero_point must be per-tensor (onnxruntime's CPU kernel too)")
        acc = int_matmul(a, a_zp, b, b_zp)
        scale = _f(a_scale) * _per_column(node, b_scale, b.shape[-1])
        return (_scale_bias(acc, scale, bias).astype(np.asarray(a_scale).dtype, copy=False),)

    return compute


@REGISTRY.register("QGemm", domain=MS)
def build_qgemm(node: NodeView, ctx: KernelContext) -> Any:
    """alpha * A' @ B' in int32 plus int32 C, then float output or requantized to y's type."""
    alpha = F32(node.attr("alpha", 1.0))
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def compute(a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None):  # type: ignore[no-untyped-def]
        aa = a.T if ta else a
        bb = b.T if tb else b
        bzp = np.asarray(b_zp)
        bzp = bzp.reshape(()) if bzp.size == 1 else bzp.reshape(-1)
        acc = int_matmul(aa, _zp(a_zp), bb, bzp)
        if c is not None:
            acc = acc + c.astype(np.float64)
        scale = alpha * _f(a_scale) * _per_column(node, b_scale, bb.shape[-1])
        if y_scale is None:
            return (acc.astype(F32) * scale,)
        dt = np.dtype(y_zp.dtype) if y_zp is not None else np.dtype(a.dtype)
        return (requantize_mul(acc, scale / _f(y_scale), _zp(y_zp), dt),)

    return compute


# ----------------------------------------------------------------------- element-wise QLinear
def _scalar_in_span(x: np.ndarray, other: np.ndarray) -> bool:
    """Whether onnxruntime's broadcaster hands MLAS ``x`` as one value per span: ``x`` is 1 on
    the innermost axis where the broadcast output is not."""
    rank = max(x.ndim, other.ndim)
    xs = (1,) * (rank - x.ndim) + x.shape
    os_ = (1,) * (rank - other.ndim) + other.shape
    for xd, od in zip(reversed(xs), reversed(os_), strict=True):
        if max(xd, od) > 1:
            return xd == 1
    return x.size == 1 and other.size != 1


@REGISTRY.register("QLinearAdd", domain=MS)
def build_qlinear_add(node: NodeView, ctx: KernelContext) -> Any:
    """MlasQLinearAdd: fixed = zc - (sa/sc*za + sb/sc*zb); c = fma(a, sa/sc, fma(b, sb/sc,
    fixed)) in float32, rounded half to even and saturated; an input that is one value per
    broadcast span is folded into the fixed part first (a product and a sum, not an fma)."""

    def compute(a, a_s, a_zp, b, b_s, b_zp, c_s, c_zp=None):  # type: ignore[no-untyped-def]
        dt = np.dtype(a.dtype)
        ra, rb = _f(a_s) / _f(c_s), _f(b_s) / _f(c_s)
        fixed = F32(_zp(c_zp)) - (ra * F32(_zp(a_zp)) + rb * F32(_zp(b_zp)))
        fa, fb = a.astype(F32), b.astype(F32)
        if _scalar_in_span(a, b):
            y = _fma(fb, rb, fixed + fa * ra)
        elif _scalar_in_span(b, a):
            y = _fma(fa, ra, fixed + fb * rb)
        else:
            y = _fma(fa, ra, _fma(fb, rb, fixed))
        lo, hi = _range(dt)
        return (np.clip(np.rint(y), lo, hi).astype(dt),)

    return compute


@REGISTRY.register("QLinearMul", domain=MS)
def build_qlinear_mul(node: NodeView, ctx: KernelContext) -> Any:
    """MlasQLinearMul: (a-za)*(b-zb) * (sa*sb/sc) in float32, rounded, + zc."""

    def compute(a, a_s, a_zp, b, b_s, b_zp, c_s, c_zp=None):  # type: ignore[no-untyped-def]
        dt = np.dtype(a.dtype)
        prod = (a.astype(np.int32) - _zp(a_zp)) * (b.astype(np.int32) - _zp(b_zp))
        mult = _f(a_s) * _f(b_s) / _f(c_s)
        return (quantize_div(prod.astype(F32) * mult, 1.0, _zp(c_zp), dt),)

    return compute


def _lookup_builder(transform: Any) -> Any:
    """QLinear ops that onnxruntime computes through a 256-entry table of
    quantize(transform(dequantize(v))) for every 8-bit value v."""

    def build(node: NodeView, ctx: KernelContext) -> Any:
        def compute(x, x_s, x_zp=None, y_s=None, y_zp=None):  # type: ignore[no-untyped-def]
            dt = np.dtype(x.dtype)
            values = np.arange(256, dtype=np.uint8).view(dt).astype(np.int32)
            deq = _f(x_s) * (values - _zp(x_zp)).astype(F32)
            table = quantize_div(transform(node, deq), _f(y_s), _zp(y_zp), dt)
            return (table[x.view(np.uint8)],)

        return compute

    return build


def _leaky(node: Any, v: np.ndarray) -> np.ndarray:
    alpha = F32(node.attr("alpha", 0.01))
    return np.where(v >= 0, v, v * alpha)


REGISTRY.register("QLinearSigmoid", domain=MS)(_lookup_builder(lambda node, v: mlas_logistic(v)))
REGISTRY.register("QLinearLeakyRelu", domain=MS)(_lookup_builder(_leaky))


def _requant_table(dt: np.dtype, x_s: Any, x_zp: Any, y_s: Any, y_zp: Any) -> np.ndarray:
    values = np.arange(256, dtype=np.uint8).view(dt).astype(np.int32)
    return quantize_div(_f(x_s) * (values - _zp(x_zp)).astype(F32), _f(y_s), _zp(y_zp), dt)


def _requant(x: np.ndarray, x_s: Any, x_zp: Any, y_s: Any, y_zp: Any) -> np.ndarray:
    """x re-expressed at (y_s, y_zp): a copy when the parameters agree, else the table."""
    if _f(x_s) == _f(y_s) and _zp(x_zp) == _zp(y_zp):
        return x
    return _requant_table(np.dtype(x.dtype), x_s, x_zp, y_s, y_zp)[x.view(np.uint8)]


@REGISTRY.register("QLinearConcat", domain=MS)
def build_qlinear_concat(node: NodeView, ctx: KernelContext) -> Any:
    axis = int(node.attr("axis"))

    def compute(y_s, y_zp, *inputs):  # type: ignore[no-untyped-def]
        if len(inputs) % 3:
            raise fail(node, f"inputs come in (tensor, scale, zero point) triples, got {len(inputs)} values")
        parts = [_requant(*inputs[i : i + 3], y_s, y_zp) for i in range(0, len(inputs), 3)]
        return (np.concatenate(parts, axis=axis),)

    return compute


@REGISTRY.register("QLinearWhere", domain=MS)
def build_qlinear_where(node: NodeView, ctx: KernelContext) -> Any:
    def compute(cond, x, x_s, x_zp, y, y_s, y_zp, z_s, z_zp):  # type: ignore[no-untyped-def]
        return (np.where(cond, _requant(x, x_s, x_zp, z_s, z_zp), _requant(y, y_s, y_zp, z_s, z_zp)),)

    return compute


@REGISTRY.register("QLinearSoftmax", domain=MS)
def build_qlinear_softmax(node: NodeView, ctx: KernelContext) -> Any:
    """onnxruntime's table of exp((v - 255 + shift) * x_scale) in float, shifted so each row's
    maximum lands on 255; sums run in float32 in element order; opset < 13 flattens from axis."""
    opset = node.attr("opset")
    if opset is None:
        raise fail(node, "attribute opset is required")
    old = int(opset) < 13
    axis_attr = node.attr("axis")
    axis0 = int(axis_attr) if axis_attr is not None else (1 if old else -1)

    def compute(x, x_s, x_zp=None, y_s=None, y_zp=None):  # type: ignore[no-untyped-def]
        if x.size == 0:
            return (np.empty_like(x),)
        axis = axis0 + x.ndim if axis0 < 0 else axis0
        signed = x.dtype == np.int8
        if old:
            shape = x.shape
            rows = x.reshape(int(np.prod(shape[:axis])), -1)
        else:
            moved = np.moveaxis(x, axis, -1)
            rows = moved.reshape(-1, moved.shape[-1])
        d = rows.shape[1]
        x_scale = float(_f(x_s))
        shift = max(0.0, math.log(float(np.finfo(F32).max) / d) - 5.0) / x_scale
        i = np.arange(256, dtype=np.float64)
        table = np.empty(256, F32)
        idx = ((i - 128) if signed else i).astype(np.int64).astype(np.uint8)
        with np.errstate(over="ignore"):
            table[idx] = np.exp((i - 255 + shift) * x_scale).astype(F32)
        top = rows.max(axis=1, keepdims=True)
        # the table index of x - max + 255 as one byte (x <= max: no wrap for uint8; int8's
        # x - max + 127 in two's complement is the same byte)
        if signed:
            vx = rows.view(np.uint8) - top.view(np.uint8) + np.uint8(127)
        else:
            vx = rows + (np.uint8(255) - top)
        vals = np.take(table, vx)
        # each row summed in element order (onnxruntime's): the reduced axis outermost of a
        # C-contiguous copy adds column after column, vectorised across rows
        vsum = np.ascontiguousarray(vals.T).sum(axis=0)[:, None] if d > 1 else vals.copy()
        inv = F32(np.floor(F32(1.0) / _f(y_s)))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            np.multiply(vals, inv, out=vals)
            np.divide(vals, vsum, out=vals)
            np.rint(vals, out=vals)
        zp, (lo, hi) = _zp(y_zp), ((-128, 127) if signed else (0, 255))
        # inf or NaN (an overflowed row), as onnxruntime's two paths give it: uint8 the zero point;
        # int8 INT32_MIN from the int32 conversion plus the zero point (wrapping to the top when
        # negative), clamped to the type
        finite = None if np.isfinite(vals.max()) else np.isfinite(vals)
        vals += F32(zp)  # small integers: exact in float32, no int64 pass
        out = np.minimum(vals, F32(hi), out=vals).astype(x.dtype)  # >= zp: no lower bound
        if finite is not None:
            out[~finite] = (lo if zp >= 0 else hi) if signed else zp
        if old:
            return (out.reshape(x.shape),)
        return (np.moveaxis(out.reshape(moved.shape), -1, axis),)

    return compute


# ----------------------------------------------------------------------- pools and reductions
def _nhwc_in(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, -1, 1)


def _nhwc_out(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, 1, -1)


@REGISTRY.register("QLinearGlobalAveragePool", domain=MS)
def build_qlinear_global_average_pool(node: NodeView, ctx: KernelContext) -> Any:
    """MlasQLinearGlobalAveragePool: exact int32 sums minus zp*size, requantized by
    x_scale / (y_scale * size)."""
    last = bool(node.attr("channels_last", 0))

    def compute(x, x_s, x_zp, y_s, y_zp):  # type: ignore[no-untyped-def]
        xc = _nhwc_in(x) if last else x
        size = int(np.prod(xc.shape[2:]))
        acc = xc.reshape(xc.shape[0], xc.shape[1], -1).astype(np.int64).sum(axis=2) - _zp(x_zp) * size
        scale = _f(x_s) / (_f(y_s) * F32(size))
        y = requantize_mul(acc, scale, _zp(y_zp), np.dtype(x.dtype))
        y = y.reshape(xc.shape[:2] + (1,) * (xc.ndim - 2))
        return (_nhwc_out(y) if last else y,)

    return compute


@REGISTRY.register("QLinearAveragePool", domain=MS)
def build_qlinear_average_pool(node: NodeView, ctx: KernelContext) -> Any:
    """Dequantized in float32, averaged (window sums in kernel order, divided by the count),
    and quantized as round(y / y_scale + y_zp) (onnxruntime's qlinear_pool.cc)."""
    last = bool(node.attr("channels_last", 0))
    pool = build_average_pool(node, ctx)

    def compute(x, x_s, x_zp=None, y_s=None, y_zp=None):  # type: ignore[no-untyped-def]
        dt = np.dtype(x.dtype)
        xc = _nhwc_in(x) if last else x
        deq = _f(x_s) * (xc.astype(np.int32) - _zp(x_zp)).astype(F32)
        (avg,) = pool(np.ascontiguousarray(deq))
        lo, hi = _range(dt)
        y = np.clip(np.rint(avg / _f(y_s) + F32(_zp(y_zp))), lo, hi).astype(dt)
        return (_nhwc_out(y) if last else y,)

    return compute


@REGISTRY.register("QLinearReduceMean", domain=MS)
def build_qlinear_reduce_mean(node: NodeView, ctx: KernelContext) -> Any:
    """Mean of the zero-point-shifted integers (exact sums), rescaled by
    data_scale / reduced_scale in float32 and rounded half to even."""
    axes = tuple(int(a) for a in node.attr("axes"))
    keep = bool(node.attr("keepdims"))

    def compute(x, x_s, x_zp, y_s, y_zp=None):  # type: ignore[no-untyped-def]
        ax = tuple(sorted(a + x.ndim if a < 0 else a for a in axes))
        count = int(np.prod([x.shape[a] for a in ax]))
        acc = (x.astype(np.int64) - _zp(x_zp)).sum(axis=ax, keepdims=keep)
        mean = acc.astype(F32) / F32(count)
        return (quantize_div(mean * (_f(x_s) / _f(y_s)), 1.0, _zp(y_zp), np.dtype(x.dtype)),)

    return compute


# ----------------------------------------------------------------------- conv and Q/DQ aliases
@REGISTRY.register("QLinearConv", domain=MS)
def build_qlinear_conv_ms(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx QLinearConv's arithmetic with onnxruntime's channels_last layout option."""
    inner = build_qlinear_conv(node, ctx)
    if not node.attr("channels_last", 0):
        return inner

    def compute(x, *rest):  # type: ignore[no-untyped-def]
        (y,) = inner(np.ascontiguousarray(_nhwc_in(x)), *rest)
        return (np.ascontiguousarray(_nhwc_out(y)),)

    return compute


REGISTRY.register("QuantizeLinear", domain=MS)(_quantize_builder)
REGISTRY.register("DequantizeLinear", domain=MS)(_dequantize_builder)


# ----------------------------------------------------------------------- MatMulNBits
def _unpack(blob: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Low bits first within each byte, ``count`` values along the last axis."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    vals = (blob[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return vals.reshape(blob.shape[:-1] + (-1,))[..., :count]


@REGISTRY.register("MatMulNBits", domain=MS)
def build_matmul_nbits(node: NodeView, ctx: KernelContext) -> Any:
    """Y = A @ dequantize(B)^T (+ bias): B holds N rows of K ``bits``-bit values in blocks of
    ``block_size`` with a scale (and zero point, default 2^(bits-1)) per block. accuracy_level 4
    quantizes A per block to int8 as onnxruntime's CompInt8 path does; lower levels compute in
    float (onnxruntime's CPU kernel has only those two paths)."""
    n, k = int(node.attr("N")), int(node.attr("K"))
    bits, blk = int(node.attr("bits", 4)), int(node.attr("block_size"))
    level = int(node.attr("accuracy_level", 0))
    if bits not in (2, 4, 8):
        raise fail(node, f"bits={bits}: onnxruntime's CPU kernel supports 2, 4 and 8")
    if node.attr("weight_prepacked", 0):
        raise fail(node, "weight_prepacked=1 weights are packed for onnxruntime's kernels; export unpacked weights")
    n_blocks = (k + blk - 1) // blk
    cache: dict[str, np.ndarray] = {}

    def weights(b: np.ndarray, scales: np.ndarray, zps: Any, g_idx: Any) -> np.ndarray:
        q = _unpack(b.reshape(n, -1), bits, n_blocks * blk).astype(F32)[:, :k]  # (N, K)
        s = np.asarray(scales, F32).reshape(n, n_blocks)
        if zps is None:
            z = np.full((n, n_blocks), F32(1 << (bits - 1)))
        elif zps.dtype == np.uint8:
            z = _unpack(zps.reshape(n, -1), bits, n_blocks).astype(F32)
        else:
            z = np.asarray(zps, F32).reshape(n, n_blocks)
        idx = np.arange(k) // blk if g_idx is None else np.asarray(g_idx, np.int64).reshape(-1)
        return (q - z[:, idx]) * s[:, idx]

    def compute(a, b, scales, zps=None, g_idx=None, bias=None):  # type: ignore[no-untyped-def]
        if bits == 8 and zps is not None and zps.dtype != np.uint8:
            raise fail(node, "8-bit weights take uint8 zero points only (onnxruntime refuses float ones too)")
        w = cache.get("w")
        if w is None:
            w = weights(b, scales, zps, g_idx)
            if all(ctx.constant(nm) is not None for nm in node.inputs[1:5] if nm):
                cache["w"] = w
        odt = a.dtype
        af = a.astype(F32)
        # onnxruntime's CompInt8 kernels: 4/8-bit, 2-bit from blocks of 32; integer zero points
        if level == 4 and g_idx is None and (zps is None or zps.dtype == np.uint8) and (bits > 2 or blk >= 32):
            y = _int8_blocks(af, w, blk)
        else:
            y = np.matmul(af, w.T)
        if bias is not None:
            y = y + bias.astype(F32)
        return (y.astype(odt, copy=False),)

    return compute


def _int8_blocks(a: np.ndarray, w: np.ndarray, blk: int) -> np.ndarray:
    """onnxruntime's CompInt8 path: A quantized symmetrically to int8 per block of K
    (scale = max|a| / 127), each block's product scaled back by that scale."""
    k = a.shape[-1]
    pad = (-k) % blk
    ap = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)])
    ab = ap.reshape(ap.shape[:-1] + (-1, blk))
    amax = np.abs(ab).max(axis=-1, keepdims=True)
    scale = amax / F32(127)
    inv = np.where(scale != 0, F32(1) / np.where(scale != 0, scale, F32(1)), F32(0))
    qa = np.rint(ab * inv) * scale
    return np.matmul(qa.reshape(ap.shape)[..., :k], w.T)


# ----------------------------------------------------------------------- DynamicQuantizeLSTM
@REGISTRY.register("DynamicQuantizeLSTM", domain=MS)
def build_dynamic_quantize_lstm(
    node: NodeView,
    ctx: KernelContext,
    recurrent_product: Any = None,
    lstm_cell: Any = None,
    int_product: Any = None,
    time_loop: Any = None,
) -> Any:
    """LSTM with int8/uint8 W (D, I, 4H) and R (D, H, 4H), per-tensor or per-column scales.
    As onnxruntime: X (all steps) is quantized once to uint8 per direction and the state
    before every step; products are exact, scaled by a_scale * w_scale in float32, gates
    accumulate X·W + H·R + (Wb + Rb) in IOFC order. This is onnxruntime at one thread: with more,
    it quantizes the state per thread's batch chunk, so its own results vary with thread count.
    ``recurrent_product(rq)``: another EP's compiled product for one direction's integer R (4, H, H)
    (exact integers in a float dtype), ``product(q, g)`` writing ``q @ rq[j]`` to ``g[j]`` as the
    float32 BLAS's exact product rounds to (``_rnn_fast.dq_lstm_loop``'s ``product``), or None for
    BLAS's. ``int_product``: as MatMulInteger's (``nn_matmul.IntProduct``), for the input projection.
    ``time_loop(rq)``: another EP's whole ``_rnn_fast.dq_lstm_loop`` for R' (D, 4, H, H), a function
    of (xw, rs, bias, h, c) giving (ys, c) as it does, bit for bit, or None where it does not serve
    those inputs (then the loop above runs); or None.
    ``lstm_cell(g, c, h)``: another EP's compiled ``_rnn_fast.mlas_lstm_cell`` (bit for bit), or None."""
    spec = _RnnSpec(node, 4, ["Sigmoid", "Tanh", "Tanh"])
    if int(node.attr("layout", 0)) != 0:
        raise fail(node, "layout=1 is not part of DynamicQuantizeLSTM")
    input_forget = bool(node.attr("input_forget", 0))
    n_out = len(node.outputs)

    def scales(scale: Any, zp: Any, d: int) -> tuple[np.ndarray, Any]:
        s = np.asarray(scale, F32)
        z = np.asarray(zp)
        return s[d] if s.ndim == 2 else s.reshape(-1)[d], (z[d] if z.ndim == 2 else z.reshape(-1)[d])

    names = [a.lower() for a in (node.attr("activations") or ["Sigmoid", "Tanh", "Tanh"] * spec.num_dir)]
    fast_ok = (
        spec.clip is None
        and not input_forget
        and names == ["sigmoid", "tanh", "tanh"] * spec.num_dir
        and not node.attr("activation_alpha")
        and not node.attr("activation_beta")
    )
    cell = lstm_cell or fast.mlas_lstm_cell
    const = all(ctx.constant(n) is not None for i, n in enumerate(node.inputs) if n and i in (1, 2, 3, 8, 9, 10, 11))
    prepared: list[Any] = []

    def prepare(w, r, b, w_s, w_zp, r_s, r_zp):  # type: ignore[no-untyped-def]
        """Weights minus zero points, i/o/f columns negated (see _rnn_fast): W per direction laid
        out for one exact product of all gates (``nn_matmul.IntB``) with its scales as (D, 4H); R
        per gate (D, 4, H, H) in an exact BLAS dtype with its scales as (4, D, 1, H); the bias
        Wb + Rb as (4, D, 1, H)."""
        n_dir, hs = w.shape[0], w.shape[2] // 4
        sign = fast.gate_signs(4, 3, hs, np.float64)

        def signed(q: np.ndarray, zp: Any) -> np.ndarray:
            """(D, K, 4H) float64: q - zp (per column or per direction), times the gate signs."""
            z = np.zeros(1) if zp is None else np.asarray(zp, np.float64)
            z = z.reshape(n_dir, 1, -1) if z.ndim == 2 else z.reshape(-1)[:n_dir].reshape(-1, 1, 1)
            return (q.astype(np.float64) - z) * sign

        def per_gate(v: np.ndarray) -> np.ndarray:
            v = v.reshape(n_dir, v.shape[1], 4, hs).transpose(0, 2, 1, 3)
            return np.ascontiguousarray(v, fast.exact_dtype(v))

        def scale(sv: Any) -> np.ndarray:
            sv = np.asarray(sv, F32)
            if sv.ndim == 2:
                return np.ascontiguousarray(sv.reshape(n_dir, 4, hs).transpose(1, 0, 2)[:, :, None, :])
            return np.ascontiguousarray(np.broadcast_to(sv.reshape(-1)[:n_dir, None, None], (4, n_dir, 1, hs)))

        def column_scale(sv: Any) -> np.ndarray:
            sv = np.asarray(sv, F32)
            per = sv.reshape(n_dir, 4 * hs) if sv.ndim == 2 else sv.reshape(-1)[:n_dir, None]
            return np.ascontiguousarray(np.broadcast_to(per, (n_dir, 4 * hs)))

        bias = None
        if b is not None:
            bb = (b[:, : 4 * hs].astype(F32) + b[:, 4 * hs :].astype(F32)) * sign.astype(F32)
            bias = np.ascontiguousarray(bb.reshape(n_dir, 4, hs).transpose(1, 0, 2)[:, :, None, :])
        rq = per_gate(signed(r, r_zp))
        products = [None if recurrent_product is None else recurrent_product(rq[d]) for d in range(n_dir)]
        wv = signed(w, w_zp)
        wq = [IntB(wv[d], int_product) for d in range(n_dir)]
        loop = None if time_loop is None else time_loop(rq)
        return wq, column_scale(w_s), rq, scale(r_s), bias, products, loop

    def run_fast(x, h0, c0, prep):  # type: ignore[no-untyped-def]
        wq, ws, rq, rs, bias, products, loop = prep
        seq, batch, _ = x.shape
        hs = rq.shape[-1]
        rev = fast.reversed_dirs(spec.direction)
        xq, xs, xz = dynamic_quantize(x.reshape(seq * batch, -1))  # the same for both directions
        xf = (xq.astype(np.int16) - np.int16(xz)).astype(F32)
        xw = np.empty((seq, 4, len(rev), batch, hs), F32)  # both directions advance in the same step
        for d, back in enumerate(rev):
            p = wq[d].times(xf).astype(F32, copy=False)
            p *= xs * ws[d]
            p = p.reshape(seq, batch, 4, hs).transpose(0, 2, 1, 3)
            xw[:, :, d] = p[::-1] if back else p
        h = np.zeros((len(rev), batch, hs), F32) if h0 is None else np.array(h0, F32)
        c = np.zeros((len(rev), batch, hs), F32) if c0 is None else np.array(c0, F32)
        got = None if loop is None else loop(xw, rs, bias, h, c)
        ys, y_c = got if got is not None else fast.dq_lstm_loop(xw, rq, rs, bias, h, c, products, cell)
        y = np.empty((seq, len(rev), batch, hs), F32)
        for d, back in enumerate(rev):
            y[:, d] = ys[::-1, d] if back else ys[:, d]
        return y, ys[-1].copy(), y_c

    def compute(x, w, r, b=None, lens=None, h0=None, c0=None, p=None, w_s=None, w_zp=None, r_s=None, r_zp=None):  # type: ignore[no-untyped-def]
        seq, batch, _ = x.shape
        hs = int(spec.hidden)
        if w.shape != (spec.num_dir, x.shape[2], 4 * hs) or r.shape != (spec.num_dir, hs, 4 * hs):
            raise fail(node, f"W {list(w.shape)} / R {list(r.shape)} must be (D, I, 4H) / (D, H, 4H) with H={hs}")
        for what, v in (("W_scale", w_s), ("W_zero_point", w_zp), ("R_scale", r_s), ("R_zero_point", r_zp)):
            if v is not None and np.shape(v) not in ((spec.num_dir,), (spec.num_dir, 4 * hs)):  # as onnxruntime
                raise fail(
                    node, f"{what} {list(np.shape(v))} must be (D,) per tensor or (D, 4H) per channel, D={spec.num_dir}"
                )
        shape = (spec.num_dir, batch, hs)
        full = lens is None or bool(np.all(np.asarray(lens) == seq))
        states_ok = all(s is None or s.shape == shape for s in (h0, c0))
        if fast_ok and p is None and full and states_ok and seq > 0 and batch > 0:
            prep = prepared[0] if prepared else prepare(w, r, b, w_s, w_zp, r_s, r_zp)
            if const and not prepared:
                prepared.append(prep)
            return run_fast(x.astype(F32, copy=False), h0, c0, prep)[:n_out]
        lens_arr = None if lens is None else np.asarray(lens, np.int64).reshape(-1)
        mask = None if lens_arr is None else (np.arange(seq)[:, None] < lens_arr[None, :])
        # as onnxruntime's LSTM: X is quantized over its first max(lens) steps (every row; a reverse
        # direction's steps past a row's length stay in place), and each step's state over the
        # previous step's outputs, a finished row's zeroed; default activations are MLAS's
        steps = seq if lens_arr is None else max(0, min(seq, int(lens_arr.max(initial=0))))
        y = np.zeros((seq, spec.num_dir, batch, hs), F32)
        y_h = np.zeros((spec.num_dir, batch, hs), F32)
        y_c = np.zeros((spec.num_dir, batch, hs), F32)
        for d in range(spec.num_dir):
            f_act, g_act, h_act = spec.dir_acts(d)
            if names[3 * d : 3 * d + 3] == ["sigmoid", "tanh", "tanh"]:
                f_act, g_act, h_act = mlas_logistic, mlas_tanh, mlas_tanh
            reverse = spec.direction == "reverse" or d == 1
            ridx = _reverse_index(seq, batch, lens_arr) if reverse else None
            xd = x[ridx, np.arange(batch)[None, :]] if reverse else x
            ws, wz = scales(w_s, w_zp, d)
            rs, rz = scales(r_s, r_zp, d)
            xs, xz = dynamic_params(xd[:steps].reshape(steps * batch, -1)) if steps else (F32(1), 0)
            xq = quantize_div(xd.reshape(seq * batch, -1), xs, xz, np.dtype(np.uint8))
            xw = (int_matmul(xq, xz, w[d], wz).astype(F32) * (xs * ws)).reshape(seq, batch, 4 * hs)
            bias = None if b is None else b[d, : 4 * hs].astype(F32) + b[d, 4 * hs :].astype(F32)
            h = np.zeros((batch, hs), F32) if h0 is None else h0[d].astype(F32)
            c = np.zeros((batch, hs), F32) if c0 is None else c0[d].astype(F32)
            yd = np.zeros((seq, batch, hs), F32)
            for t in range(seq):
                hq, hsc, hz = dynamic_quantize(h if mask is None or t == 0 else np.where(mask[t - 1][:, None], h, 0))
                gates = int_matmul(hq, hz, r[d], rz).astype(F32) * (hsc * rs) + xw[t]
                if bias is not None:
                    gates = gates + bias
                gi, go, gf, gc = (gates[:, j * hs : (j + 1) * hs] for j in range(4))
                if p is not None:
                    gi = gi + p[d, :hs] * c
                    gf = gf + p[d, 2 * hs :] * c
                i = f_act(spec.clipped(gi))
                f = 1 - i if input_forget else f_act(spec.clipped(gf))
                c_new = f * c + i * g_act(spec.clipped(gc))
                if p is not None:
                    go = go + p[d, hs : 2 * hs] * c_new
                h_new = f_act(spec.clipped(go)) * h_act(c_new)
                if mask is not None:
                    m = mask[t][:, None]
                    h, c = np.where(m, h_new, h), np.where(m, c_new, c)
                    yd[t] = np.where(m, h_new, 0)
                else:
                    h, c = h_new, c_new
                    yd[t] = h_new
            if reverse:
                yd = _unreverse(yd, ridx, mask)
            y[:, d], y_h[d], y_c[d] = yd, h, c
        outs = (y, y_h, y_c)
        return outs[:n_out]

    return compute


# ----------------------------------------------------------------------- QAttention
@REGISTRY.register("QAttention", domain=MS)
def build_qattention(node: NodeView, ctx: KernelContext) -> Any:
    """Quantized input x quantized weights -> Q, K, V in float (exact integer product scaled by
    input_scale * weight_scale, plus bias), then onnxruntime's Attention: scaled dot products,
    masks as additive mask_filter_value, optional causal (unidirectional) mask and past state."""
    heads = int(node.attr("num_heads"))
    causal = bool(node.attr("unidirectional", 0))
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    filt = F32(node.attr("mask_filter_value", -10000.0))
    for name in ("do_rotary", "past_present_share_buffer"):
        if node.attr(name, 0):
            raise NotImplementedByAnyEp(f"{node.describe()}: {name}=1 is not implemented by the reference EP")
    n_out = len(node.outputs)

    def compute(x, w, bias, x_s, w_s, mask=None, x_zp=None, w_zp=None, past=None):  # type: ignore[no-untyped-def]
        bsz, seq, _ = x.shape
        hid = w.shape[1] // 3
        hd = hid // heads
        wz = np.asarray(w_zp) if w_zp is not None else None
        if wz is not None:
            wz = wz.reshape(()) if wz.size == 1 else wz.reshape(-1)
        acc = int_matmul(x, _zp(x_zp), w, wz)
        qkv = _scale_bias(acc, _f(x_s) * _per_column(node, w_s, w.shape[1]), bias.astype(F32))
        q, k, v = (
            qkv[..., i * hid : (i + 1) * hid].reshape(bsz, seq, heads, hd).transpose(0, 2, 1, 3) for i in range(3)
        )
        past_len = 0
        if past is not None:
            past_len = past.shape[3]
            k = np.concatenate([past[0].astype(F32), k], axis=2)
            v = np.concatenate([past[1].astype(F32), v], axis=2)
        total = k.shape[2]
        sc = F32(scale_attr) if scale_attr else F32(1.0 / math.sqrt(hd))
        logits = np.matmul(q * sc, np.swapaxes(k, 2, 3))
        if mask is not None:
            logits = logits + np.where(_mask_keep(node, np.asarray(mask), bsz, total), F32(0), filt)
        if causal:  # future keys leave the softmax altogether (not a bias: a row can be all masked)
            future = np.arange(total)[None, :] > np.arange(seq)[:, None] + past_len
            logits = np.where(future, F32(-np.inf), logits)
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        out = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(bsz, seq, hid)
        odt = np.asarray(x_s).dtype
        outs = (out.astype(odt), np.stack([k, v]).astype(odt))
        return outs[:n_out]

    return compute


def _mask_keep(node: Any, mask: np.ndarray, bsz: int, total: int) -> np.ndarray:
    """mask_index as onnxruntime reads it: key lengths (B,), end and start positions (2B,), or a
    0/1 key mask (B, total); True where a key is attended."""
    j = np.arange(total)[None, :]
    if mask.ndim == 1 and mask.shape[0] in (bsz, 2 * bsz):
        keep = j < mask[:bsz, None]
        if mask.shape[0] == 2 * bsz:
            keep &= j >= mask[bsz:, None]
    elif mask.ndim == 2 and mask.shape == (bsz, total):
        keep = mask != 0
    else:
        raise NotImplementedByAnyEp(
            f"{node.describe()}: mask_index of shape {list(mask.shape)} is not implemented by the reference EP "
            f"(supported: ({bsz},), ({2 * bsz},), ({bsz}, {total}))"
        )
    return keep.reshape(bsz, 1, 1, total)

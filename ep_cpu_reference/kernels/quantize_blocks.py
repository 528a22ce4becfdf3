"""onnxruntime's blocked-weight contrib ops (com.microsoft): GatherBlockQuantized (2/4/8-bit,
int4/uint4, float8 and float4 embedding tables), MatMulBnb4 (bitsandbytes NF4/FP4 blocks),
MatMulFpQ4 (MLAS's packed int4 blobs), MatMulInteger16 and QEmbedLayerNormalization.

Each follows onnxruntime 1.31's CPU kernel (contrib_ops/cpu/quantization/* and matmul_fpq4.cc):
weights are dequantized exactly as it does (float32 ``(q - zero_point) * scale``, its nibble orders
and lookup tables), then multiplied in float32; integer products are exact. Forms onnxruntime's CPU
kernels refuse are refused the same way, naming the way out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_moe_schemas import register_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.contrib_attention import build_embed_layer_norm
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.kernels.quantize_ms import _unpack
from ep_cpu_reference.registry import REGISTRY

register_schemas()

F32 = np.float32
Array = np.ndarray


def _const_cache(node: NodeView, ctx: KernelContext, names: Sequence[str]) -> bool:
    """Whether every named input is a constant initializer (then a dequantized weight is kept)."""
    return all(ctx.constant(nm) is not None for nm in names if nm)


# ----------------------------------------------------------------------- GatherBlockQuantized
def _is_fp(dt: np.dtype) -> bool:
    """float8/float4 tables (ml_dtypes): symmetric, no zero point, one element per value."""
    return dt.name.startswith(("float8", "float4"))


def _is_int4(dt: np.dtype) -> bool:
    return dt.name in ("int4", "uint4")


@REGISTRY.register("GatherBlockQuantized", domain=MS)
def build_gather_block_quantized(node: NodeView, ctx: KernelContext) -> Any:
    """Gather(dequantize(data), indices, gather_axis): data holds blocks of ``block_size`` values
    along ``quantize_axis`` with one scale (and zero point) each. uint8 data packs 8/bits values per
    byte, low bits first, along its last axis (and needs gather_axis 0 and quantize_axis last, as in
    onnxruntime), with default zero point 2^(bits-1); int4/uint4 data has default zero point 0;
    float8/float4 data is symmetric, takes block_size 0 as one block over the whole axis, and scales
    broadcast over size-1 axes. Out-of-range indices give zero rows, as onnxruntime does."""
    g_attr, qa_attr = int(node.attr("gather_axis", 0)), int(node.attr("quantize_axis", 1))
    blk_attr, bits = int(node.attr("block_size", 128)), int(node.attr("bits", 4))

    def check_attrs(dt: np.dtype) -> None:
        fp = _is_fp(dt)
        if not ((fp and blk_attr == 0) or (blk_attr >= 16 and blk_attr & (blk_attr - 1) == 0)):
            raise fail(node, f"block_size={blk_attr} must be a power of 2 and at least 16 (or 0 for float8/float4)")
        if dt == np.uint8 and bits not in (2, 4, 8):
            raise fail(node, f"bits={bits}: uint8 data takes 2, 4 or 8")
        if _is_int4(dt) and bits != 4:
            raise fail(node, f"bits={bits}: int4/uint4 data takes 4")

    def compute(data: Array, indices: Array, scales: Array, zps: Array | None = None) -> tuple[Array]:
        check_attrs(data.dtype)
        if scales.dtype not in (np.float32, np.float16):
            raise NotImplementedByAnyEp(
                f"{node.describe()}: scales of type {scales.dtype} (onnxruntime's CPU kernel serves float and float16)"
            )
        rank = data.ndim
        g, qa = g_attr % rank if -rank <= g_attr < rank else -1, qa_attr % rank if -rank <= qa_attr < rank else -1
        if g < 0 or qa < 0:
            raise fail(node, f"gather_axis {g_attr} / quantize_axis {qa_attr} out of range for rank {rank}")
        fp = _is_fp(data.dtype)
        comps = 8 // bits if data.dtype == np.uint8 else 1
        if fp and zps is not None:
            raise fail(node, "zero_points must not be given for float8/float4 data")
        if data.dtype == np.uint8 and (g != 0 or qa != rank - 1):
            raise fail(node, "uint8 data needs gather_axis 0 and quantize_axis the last axis")
        shape = list(data.shape)
        shape[-1] *= comps
        q = _unpack(data, bits, shape[-1]) if comps > 1 else data
        qdim = shape[qa]
        blk = max(qdim, 1) if fp and blk_attr == 0 else blk_attr
        n_blocks = -(-qdim // blk)
        if scales.ndim != rank:
            raise fail(node, f"scales rank {scales.ndim} differs from data rank {rank}")
        for i in range(rank):
            want = n_blocks if i == qa else shape[i]
            if scales.shape[i] != want and not (fp and i != qa and scales.shape[i] == 1):
                raise fail(node, f"scales of shape {list(scales.shape)} do not match data {shape} in blocks of {blk}")
        z: Array | None = None
        if zps is not None:
            zshape = list(scales.shape)
            zshape[qa] = -(-zshape[qa] // comps)
            if list(zps.shape) != zshape:
                raise fail(node, f"zero_points of shape {list(zps.shape)} must be {zshape}")
            z = _unpack(zps, bits, n_blocks) if comps > 1 else zps
        elif data.dtype == np.uint8:
            z = np.array(1 << (bits - 1), F32)
        idx = indices.reshape(-1).astype(np.int64)
        dim = shape[g]
        valid = (idx >= -dim) & (idx < dim)
        take = np.where(valid, np.where(idx < 0, idx + dim, idx), 0)

        def pick(p: Array) -> Array:
            if p.ndim == 0:
                return p
            if g == qa:
                return np.take(p, take // blk, axis=g)
            return p if p.shape[g] == 1 else np.take(p, take, axis=g)

        def spread(p: Array) -> Array:  # one value per element along quantize_axis
            if p.ndim == 0 or g == qa:
                return p
            return np.repeat(p, blk, axis=qa)[(slice(None),) * qa + (slice(0, qdim),)]

        qv = np.take(q, take, axis=g).astype(F32)
        if z is not None:
            qv = qv - spread(pick(z)).astype(F32)
        y = qv * spread(pick(scales)).astype(F32)
        mask_shape = [1] * rank
        mask_shape[g] = idx.size
        y = np.where(valid.reshape(mask_shape), y, F32(0))
        out_shape = tuple(shape[:g]) + indices.shape + tuple(shape[g + 1 :])
        return (y.astype(scales.dtype).reshape(out_shape),)

    return compute


# ----------------------------------------------------------------------- MatMulBnb4
_FP4 = np.array(
    [0.0, 5.208333333e-03, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667, 0.25]
    + [-0.0, -5.208333333e-03, -0.66666667, -1.0, -0.33333333, -0.5, -0.16666667, -0.25],
    F32,
)
_NF4 = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635]
    + [-0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725]
    + [0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941]
    + [0.7229568362236023, 1.0],
    F32,
)


@REGISTRY.register("MatMulBnb4", domain=MS)
def build_matmul_bnb4(node: NodeView, ctx: KernelContext) -> Any:
    """Y = A @ W^T with W (N, K) stored as bitsandbytes 4-bit codes: the N*K values flattened, two per
    byte (high nibble first), in blocks of ``block_size`` sharing one absmax; a code maps through the
    FP4 (quant_type 0) or NF4 (1) table times its block's absmax. training_mode only marks graphs
    built for training; the forward result is the same."""
    n, k = int(node.attr("N")), int(node.attr("K"))
    blk, qt = int(node.attr("block_size")), int(node.attr("quant_type"))
    if qt not in (0, 1):
        raise fail(node, f"quant_type={qt}: 0 (FP4) or 1 (NF4)")
    if blk not in (16, 32, 64, 128, 256):
        raise NotImplementedByAnyEp(f"{node.describe()}: block_size={blk}; onnxruntime serves 16, 32, 64, 128, 256")
    if not node.attr("transB", 1):
        raise NotImplementedByAnyEp(
            f"{node.describe()}: transB=0 (onnxruntime's CPU kernel reads B as (N, K) regardless); export transB=1"
        )
    table = _FP4 if qt == 0 else _NF4
    constant = _const_cache(node, ctx, node.inputs[1:3])
    cache: dict[str, Array] = {}

    def weights(b: Array, absmax: Array) -> Array:
        count = n * k
        if b.size != (count + 1) // 2 or absmax.size != -(-count // blk):
            raise fail(
                node, f"B ({b.size} bytes) and absmax ({absmax.size}) do not hold N*K={count} in blocks of {blk}"
            )
        codes = np.stack([b.reshape(-1) >> 4, b.reshape(-1) & 0xF], axis=-1).reshape(-1)[:count]
        scale = np.repeat(absmax.reshape(-1), blk)[:count]
        if absmax.dtype == np.float16:  # MLFloat16 codes times an MLFloat16 absmax, rounded to half
            return (table[codes].astype(np.float16).astype(F32) * scale.astype(F32)).astype(np.float16).reshape(n, k)
        return (table[codes].astype(absmax.dtype) * scale).reshape(n, k)

    def compute(a: Array, b: Array, absmax: Array) -> tuple[Array]:
        if a.shape[-1] != k:
            raise fail(node, f"A's last dimension {a.shape[-1]} differs from K={k}")
        w = cache.get("w")
        if w is None:
            w = weights(b, absmax)
            if constant:
                cache["w"] = w
        y = np.matmul(a.astype(F32), w.astype(F32).T)
        return (y.astype(a.dtype, copy=False),)

    return compute


# ----------------------------------------------------------------------- MatMulFpQ4
_FPQ4_BLOB = {0: 20, 1: 21}  # MLAS_Q4TYPE_BLK0 (scale + 16 bytes), BLK1 (scale + zero point + 16 bytes)


@REGISTRY.register("MatMulFpQ4", domain=MS)
def build_matmul_fpq4(node: NodeView, ctx: KernelContext) -> Any:
    """Y = A @ B with B (K, N) given as MLAS's packed int4 blob: per column n, per block of 32 rows,
    a float32 scale (blk_quant_type 1: then a uint8 zero point, else zero point 8), then 16 bytes whose
    low nibbles are rows 0-15 and high nibbles rows 16-31 of the block."""
    qt = int(node.attr("blk_quant_type", 1))
    if qt not in (0, 1):
        raise fail(node, f"blk_quant_type={qt}: 0 (symmetric) or 1 (with zero points)")
    blob_size = _FPQ4_BLOB[qt]
    constant = _const_cache(node, ctx, node.inputs[1:3])
    cache: dict[str, Array] = {}

    def weights(b: Array, k: int, n: int) -> Array:
        kb = -(-k // 32)
        if b.ndim != 1 or b.size != n * kb * blob_size:
            raise fail(
                node, f"B must be a 1-D blob of {n * kb * blob_size} bytes for K={k}, N={n}, got {list(b.shape)}"
            )
        blobs = b.reshape(n, kb, blob_size)
        scale = np.ascontiguousarray(blobs[:, :, :4]).view(F32)  # (n, kb, 1)
        zp = blobs[:, :, 4:5].astype(F32) if qt == 1 else F32(8)
        data = blobs[:, :, blob_size - 16 :]
        codes = np.concatenate([data & 0xF, data >> 4], axis=-1).astype(F32)  # (n, kb, 32)
        return ((codes - zp) * scale).reshape(n, kb * 32)[:, :k].T  # (K, N)

    def compute(a: Array, b: Array, b_shape: Array) -> tuple[Array]:
        dims = [int(d) for d in np.asarray(b_shape).reshape(-1)]
        if len(dims) != 2:
            raise fail(node, f"B_shape must hold 2 dimensions, got {dims}")
        k, n = dims
        if a.shape[-1] != k:
            raise fail(node, f"A's last dimension {a.shape[-1]} differs from K={k}")
        w = cache.get("w")
        if w is None:
            w = weights(b, k, n)
            if constant:
                cache["w"] = w
        return (np.matmul(a, w),)

    return compute


# ----------------------------------------------------------------------- MatMulInteger16
@REGISTRY.register("MatMulInteger16", domain=MS)
def build_matmul_integer16(node: NodeView, ctx: KernelContext) -> Any:
    """int16 x int16 -> int32 MatMul, exact (int64 products wrapped to int32 as Eigen's int32 sums
    wrap). onnxruntime registers only the int16/int16 form; uint16 inputs are refused as there."""

    def compute(a: Array, b: Array) -> tuple[Array]:
        if a.dtype != np.int16 or b.dtype != np.int16:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: {a.dtype} x {b.dtype}; onnxruntime (and this EP) serve int16 x int16 only"
            )
        return (np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32),)

    return compute


# ----------------------------------------------------------------------- QEmbedLayerNormalization
@REGISTRY.register("QEmbedLayerNormalization", domain=MS)
def build_qembed_layer_norm(node: NodeView, ctx: KernelContext) -> Any:
    """EmbedLayerNormalization over tables (and gamma/beta) quantized per tensor to int8/uint8:
    each dequantized as float32 ``(q - zero_point) * scale`` (once, when constant), then the float
    kernel of contrib_attention does the gathers, sums and normalisation (one source of truth)."""
    embed = build_embed_layer_norm(node, ctx)
    # inputs 2..6 are the tables, 8..12 their scales, 13..17 their zero points
    pairs = [(2, 8, 13), (3, 9, 14), (4, 10, 15), (5, 11, 16), (6, 12, 17)]
    names = list(node.inputs) + [""] * (18 - len(node.inputs))
    constant = [_const_cache(node, ctx, [names[i] for i in p]) for p in pairs]
    cache: dict[int, Array] = {}

    def deq(slot: int, q: Array | None, s: Array | None, z: Array | None) -> Array | None:
        if q is None:
            return None
        if slot in cache:
            return cache[slot]
        if s is None or z is None or s.size != 1 or z.size != 1:
            raise fail(node, f"input {pairs[slot][0]} needs a per-tensor scale and zero point (one element each)")
        if z.dtype != q.dtype:
            raise fail(node, f"zero point type {z.dtype} differs from its table's {q.dtype}")
        v = (q.astype(F32) - F32(z.reshape(-1)[0])) * F32(s.reshape(-1)[0])
        if constant[slot]:
            cache[slot] = v
        return v

    def compute(*ins: Array | None) -> tuple[Array, ...]:
        x = list(ins) + [None] * (18 - len(ins))
        t = [deq(i, x[q], x[s], x[z]) for i, (q, s, z) in enumerate(pairs)]
        if t[0] is None or t[1] is None or t[3] is None or t[4] is None:
            raise fail(node, "word/position embeddings, gamma and beta are required")
        return tuple(embed(x[0], x[1], t[0], t[1], t[2], t[3], t[4], x[7]))

    return compute

"""Miscellaneous com.microsoft contrib ops of onnxruntime's CPU EP: tensor utilities (ExpandDims,
GatherND, Pad, Range, Trilu, Unique, UnfoldTensor, Inverse, CDist), image ops (CropAndResize,
GridSample, MaxpoolWithMask, NhwcMaxPool, ConvTransposeWithDynamicPads), text and decoding helpers
(Tokenizer, MurmurHash3, NGramRepeatBlock, BifurcationDetector, WordConvEmbedding,
DynamicTimeWarping), newer LLM blocks (ScaledSiLU, GatedAdd, GatedRMSNorm, BranchwiseRMSNorm),
TransposeMatMul and SampleOp.

Where an ai.onnx op has the same semantics its kernel builder serves here too (one source of
truth); only the com.microsoft differences are added. Semantics follow onnxruntime's CPU contrib
kernels (onnxruntime/contrib_ops/cpu); schemas are onnxruntime's (_contrib_misc_schemas)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_misc_schemas import register_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.contrib_ms import build_fused_matmul
from ep_cpu_reference.kernels.nn_common import as_compute, fail, pool_geometry
from ep_cpu_reference.kernels.nn_conv import build_conv_transpose
from ep_cpu_reference.kernels.nn_pool import build_max_pool
from ep_cpu_reference.kernels.nn_resize import build_grid_sample
from ep_cpu_reference.kernels.tensor_ops import build_gather_nd, build_pad, build_range, build_trilu, build_unique
from ep_cpu_reference.registry import REGISTRY

register_schemas()


class _Overrides:
    """A node seen with some attributes (or outputs) replaced, to reuse an ai.onnx builder for a
    contrib op whose differences are only in attributes."""

    def __init__(self, node: NodeView, attrs: dict[str, Any], outputs: tuple[str, ...] | None = None) -> None:
        self._node, self._attrs = node, attrs
        self.outputs = node.outputs if outputs is None else outputs

    def attr(self, name: str, default: Any = None) -> Any:
        return self._attrs[name] if name in self._attrs else self._node.attr(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


# ------------------------------------------------------------------ ai.onnx kernels served as is
REGISTRY.register("GatherND", domain=MS)(build_gather_nd)  # the older op: batch_dims 0, int32/int64 indices
REGISTRY.register("Trilu", domain=MS, host_inputs=(1,))(build_trilu)
REGISTRY.register("GridSample", domain=MS)(build_grid_sample)  # opset 16's 4-D GridSample
REGISTRY.register("TransposeMatMul", domain=MS)(build_fused_matmul)  # FusedMatMul with no batch transposes


@REGISTRY.register("SampleOp", domain=MS)
def build_sample_op(node: NodeView, ctx: KernelContext) -> Any:
    """onnxruntime's sample contrib op: Y is a copy of X."""
    return lambda x: (x.copy(),)


@REGISTRY.register("Range", domain=MS, host_inputs=(0, 1, 2))
def build_ms_range(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx Range with delta optional (default 1)."""
    inner = build_range(node, ctx)

    def compute(start: Any, limit: Any, delta: Any = None) -> tuple[Any]:
        if delta is None:
            delta = np.ones((), dtype=np.asarray(start).dtype)
        return tuple(inner(start, limit, delta))  # type: ignore[return-value]

    return compute


@REGISTRY.register("Pad", domain=MS, host_inputs=(1, 2))
def build_ms_pad(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx Pad-11, with pads as a 1-D or (1, 2 * rank) tensor."""
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        raise fail(node, f"mode={mode!r}; com.microsoft Pad allows constant, reflect, edge")
    inner = build_pad(node, ctx)

    def compute(x: Any, pads: Any, value: Any = None) -> tuple[Any]:
        p = np.asarray(pads)
        if not (p.ndim == 1 or (p.ndim == 2 and p.shape[0] == 1)) or p.size != 2 * x.ndim:
            raise fail(node, f"pads of shape {list(p.shape)}; it must hold 2 * rank = {2 * x.ndim} values")
        return tuple(inner(x, p.reshape(-1), value))  # type: ignore[return-value]

    return compute


@REGISTRY.register("Unique", domain=MS)
def build_ms_unique(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx Unique unsorted (first-occurrence order) over a 1-D input: y, idx (the inverse
    map) and counts."""
    inner = build_unique(_Overrides(node, {"sorted": 0, "axis": None}, ("y", "first", "idx", "counts")), ctx)  # type: ignore[arg-type]

    def compute(x: np.ndarray) -> tuple[Any, ...]:
        if x.ndim != 1:
            raise fail(node, f"input rank {x.ndim}; com.microsoft Unique takes a 1-D tensor")
        y, _, idx, counts = inner(x)
        return y, idx, counts

    return compute


@REGISTRY.register("NhwcMaxPool", domain=MS)
def build_nhwc_max_pool(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx MaxPool on a channels-last (N, spatial..., C) int8/uint8 tensor."""
    inner = build_max_pool(_Overrides(node, {"storage_order": 0}, node.outputs[:1]), ctx)  # type: ignore[arg-type]

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        perm = (0, x.ndim - 1, *range(1, x.ndim - 1))
        y = inner(np.ascontiguousarray(x.transpose(perm)))[0]
        return (np.ascontiguousarray(np.moveaxis(y, 1, -1)),)

    return compute


@REGISTRY.register("ConvTransposeWithDynamicPads", domain=MS, host_inputs=(2,))
def build_conv_transpose_dynamic_pads(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx ConvTranspose with the pads given as an input at run time."""
    kernels: dict[tuple[int, ...], Any] = {}

    def compute(x: np.ndarray, w: np.ndarray, pads: Any = None, b: Any = None) -> tuple[np.ndarray]:
        if pads is None:  # onnxruntime's kernel requires it though the schema marks it optional
            raise fail(node, "the Pads input is required (onnxruntime refuses the node without it)")
        key = tuple(int(p) for p in np.asarray(pads).reshape(-1))
        kernel = kernels.get(key)
        if kernel is None:
            if len(kernels) > 64:  # pads that change every run: keep the memo small
                kernels.clear()
            view = _Overrides(node, {"pads": list(key)})
            kernel = kernels[key] = build_conv_transpose(view, ctx)  # type: ignore[arg-type]
        return tuple(kernel(x, w, b))  # type: ignore[return-value]

    return compute


@REGISTRY.register("ExpandDims", domain=MS, host_inputs=(1,))
def build_expand_dims(node: NodeView, ctx: KernelContext) -> Any:
    """Insert a 1 at ``axis`` (in [-rank - 1, rank], negative counting from the back)."""

    def compute(x: np.ndarray, axis: Any) -> tuple[np.ndarray]:
        a = int(np.asarray(axis).reshape(-1)[0])
        if not -x.ndim - 1 <= a <= x.ndim:
            raise fail(node, f"axis {a} is outside [{-x.ndim - 1}, {x.ndim}] for an input of rank {x.ndim}")
        return (np.expand_dims(x, a + x.ndim + 1 if a < 0 else a),)

    return compute


@REGISTRY.register("Inverse", domain=MS)
def build_inverse(node: NodeView, ctx: KernelContext) -> Any:
    """The inverse of each (..., n, n) matrix; float16 inverts in float32."""

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise fail(node, f"input shape {list(x.shape)}; Inverse takes square (..., n, n) matrices")
        return (np.linalg.inv(as_compute(x)).astype(x.dtype, copy=False),)

    return compute


@REGISTRY.register("CDist", domain=MS)
def build_cdist(node: NodeView, ctx: KernelContext) -> Any:
    """Pairwise distances between the rows of A (N, K) and B (M, K): sqeuclidean or euclidean."""
    metric = node.attr("metric", "sqeuclidean")
    metric = metric.decode() if isinstance(metric, bytes) else metric
    if metric not in ("sqeuclidean", "euclidean"):
        raise fail(node, f"metric={metric!r}; allowed sqeuclidean, euclidean")

    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise fail(node, f"A {list(a.shape)} and B {list(b.shape)} must be (N, K) and (M, K)")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        d = (a64 * a64).sum(1)[:, None] + (b64 * b64).sum(1)[None, :] - 2.0 * (a64 @ b64.T)
        d = np.maximum(d, 0.0)
        return ((np.sqrt(d) if metric == "euclidean" else d).astype(a.dtype),)

    return compute


@REGISTRY.register("UnfoldTensor", domain=MS)
def build_unfold_tensor(node: NodeView, ctx: KernelContext) -> Any:
    """torch.Tensor.unfold: windows of ``size`` every ``step`` along ``dim``, the window last."""
    dim, size, step = int(node.attr("dim", -1)), node.attr("size"), int(node.attr("step", 1))
    if size is None or int(size) <= 0 or step <= 0:
        raise fail(node, f"size={size} and step={step} must be positive (size is required)")

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        d = dim + x.ndim if dim < 0 else dim
        if not 0 <= d < x.ndim or x.shape[d] < int(size):
            raise fail(node, f"dim {dim} with size {size} does not fit an input of shape {list(x.shape)}")
        win = sliding_window_view(x, int(size), axis=d)
        index = (slice(None),) * d + (slice(None, None, step),)
        return (np.ascontiguousarray(win[index]),)

    return compute


# ---------------------------------------------------------------------------------- image ops
@REGISTRY.register("CropAndResize", domain=MS, host_inputs=(3,))
def build_crop_and_resize(node: NodeView, ctx: KernelContext) -> Any:
    """TensorFlow's crop_and_resize: each ROI (y1, x1, y2, x2, normalised) of its batch image,
    sampled on a crop_size grid (bilinear or nearest); samples outside the image take
    extrapolation_value. Coordinates in float32 as onnxruntime computes them."""
    mode = node.attr("mode", "bilinear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("bilinear", "nearest"):
        raise fail(node, f"mode={mode!r}; allowed bilinear, nearest")
    extrapolation = np.float32(node.attr("extrapolation_value", 0.0))

    def coords(start: np.ndarray, end: np.ndarray, size: int, pooled: int) -> np.ndarray:
        """(R, pooled) sample positions along one axis."""
        f = np.float32
        if pooled == 1:
            return (0.5 * (start.astype(np.float64) + end) * (size - 1)).astype(f)[:, None]
        scale = (end - start) * f(size - 1) / f(pooled - 1)
        pos = start[:, None] * f(size - 1) + np.arange(pooled, dtype=f)[None, :] * scale[:, None]
        pos[:, 0] = start * f(size - 1)
        pos[:, -1] = end * f(size - 1)
        return pos

    def compute(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, crop_size: Any) -> tuple[np.ndarray]:
        cs = np.asarray(crop_size)
        if cs.ndim != 1 or cs.size != 2:
            raise fail(node, f"crop_size {cs.tolist()}; it must be (crop_height, crop_width)")
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape[0] != rois.shape[0]:
            raise fail(node, f"X {list(x.shape)}, rois {list(rois.shape)}, batch_indices {list(batch_indices.shape)}")
        ph, pw = int(cs[0]), int(cs[1])
        _, c, h, w = x.shape
        r = rois.astype(np.float32)
        iy = coords(r[:, 0], r[:, 2], h, ph)  # (R, ph)
        ix = coords(r[:, 1], r[:, 3], w, pw)  # (R, pw)
        valid = ((iy >= 0) & (iy <= h - 1))[:, :, None] & ((ix >= 0) & (ix <= w - 1))[:, None, :]
        bi = batch_indices.astype(np.int64)
        if bi.size and (bi.min() < 0 or bi.max() >= x.shape[0]):
            raise fail(node, f"batch_indices {bi.tolist()} out of range for batch {x.shape[0]}")
        img = x.astype(np.float32)[bi]  # (R, C, H, W)
        rows = np.arange(r.shape[0])[:, None, None]
        if mode == "nearest":
            # roundf: halves away from zero (valid positions are >= 0)
            yy = np.clip(np.floor(iy + np.float32(0.5)), 0, h - 1).astype(np.int64)[:, :, None]
            xx = np.clip(np.floor(ix + np.float32(0.5)), 0, w - 1).astype(np.int64)[:, None, :]
            out = img.transpose(0, 2, 3, 1)[rows, yy, xx]  # (R, ph, pw, C)
        else:
            iyc, ixc = np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)
            y0, x0 = np.floor(iyc).astype(np.int64), np.floor(ixc).astype(np.int64)
            y1, x1 = np.ceil(iyc).astype(np.int64), np.ceil(ixc).astype(np.int64)
            ly, lx = (iyc - y0).astype(np.float32), (ixc - x0).astype(np.float32)
            hw = img.transpose(0, 2, 3, 1)
            y0, y1, ly = y0[:, :, None], y1[:, :, None], ly[:, :, None, None]
            x0, x1, lx = x0[:, None, :], x1[:, None, :], lx[:, None, :, None]
            top = hw[rows, y0, x0] + (hw[rows, y0, x1] - hw[rows, y0, x0]) * lx
            bottom = hw[rows, y1, x0] + (hw[rows, y1, x1] - hw[rows, y1, x0]) * lx
            out = top + (bottom - top) * ly
        out = np.where(valid[..., None], out, extrapolation)
        return (np.ascontiguousarray(out.transpose(0, 3, 1, 2)).astype(x.dtype, copy=False),)

    return compute


@REGISTRY.register("MaxpoolWithMask", domain=MS)
def build_maxpool_with_mask(node: NodeView, ctx: KernelContext) -> Any:
    """onnxruntime's specialised masked max pool: each window is scanned row by row, and a row's
    scan stops at the first tap whose mask is 0 (the flat first element is exempt in 2-D/3-D, as
    in onnxruntime); pads are skipped; the mask plane of channel c starts at element
    (c * H * W) mod (mask N * mask C), onnxruntime's indexing. An all-masked window gives the
    lowest float."""
    kernel = [int(k) for k in node.attr("kernel_shape") or []]
    if not 1 <= len(kernel) <= 3:
        raise fail(node, f"kernel_shape {kernel}; MaxpoolWithMask pools 1-D, 2-D or 3-D")
    nd = len(kernel)

    def compute(x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim != nd + 2 or m.ndim != x.ndim or list(m.shape[2:]) != list(x.shape[2:]):
            raise fail(node, f"X {list(x.shape)} and M {list(m.shape)} must be (N, C, spatial) of {nd} dims")
        insp = list(x.shape[2:])
        strides = [int(s) for s in node.attr("strides") or [1] * nd]
        auto_pad = node.attr("auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        pb, _, out = pool_geometry(node, insp, kernel, strides, [1] * nd, auto_pad, node.attr("pads"), False)
        plane = int(np.prod(insp))
        nc = x.shape[0] * x.shape[1]
        base = (np.arange(nc, dtype=np.int64) * plane) % (m.shape[0] * m.shape[1])
        mflat = m.reshape(-1)
        # per axis: window starts (clipped at 0), ends (clipped at the size), per output position
        starts = [np.arange(o) * s - p for o, s, p in zip(out, strides, pb, strict=True)]
        ends = [np.minimum(st + k, n) for st, k, n in zip(starts, kernel, insp, strict=True)]
        starts = [np.maximum(st, 0) for st in starts]
        xf = x.reshape(nc, plane).astype(np.float32)
        lowest = np.float32(np.finfo(np.float32).min)
        y = np.full((nc, *out), lowest, dtype=np.float32)
        grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
        mults = [int(np.prod(insp[d + 1 :])) for d in range(nd)]
        alive = None
        for taps in np.ndindex(*kernel):
            pos = [starts[d][grids[d]] + taps[d] for d in range(nd)]
            inside = np.ones(out, dtype=bool)
            for d in range(nd):
                inside &= pos[d] < ends[d][grids[d]]
            flat = sum(np.minimum(p, n - 1) * mu for p, n, mu in zip(pos, insp, mults, strict=True))
            mask_ok = mflat[(base[:, None] + flat.reshape(1, -1)) % mflat.size].reshape(nc, *out) != 0
            if nd > 1:
                mask_ok |= (flat == 0)[None]
            if taps[-1] == 0:  # a new row of the scan: the break of the previous row ends
                alive = np.ones((nc, *out), dtype=bool)
            assert alive is not None
            alive &= mask_ok | ~inside[None]
            take = alive & inside[None]
            v = xf[:, flat.reshape(-1)].reshape(nc, *out)
            np.maximum(y, np.where(take, v, lowest), out=y)
        return (y.reshape(*x.shape[:2], *out).astype(x.dtype, copy=False),)

    return compute


# ------------------------------------------------------------------------ text and decoding
def _murmur3_32(blocks: np.ndarray, seed: int) -> np.ndarray:
    """MurmurHash3_x86_32 of each row of a (n, length) uint8 array, vectorised over the rows."""
    n, length = blocks.shape
    c1, c2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
    h = np.full(n, seed & 0xFFFFFFFF, dtype=np.uint32)

    def rotl(v: np.ndarray, r: int) -> np.ndarray:
        return (v << np.uint32(r)) | (v >> np.uint32(32 - r))

    nblocks = length // 4
    if nblocks:
        words = np.ascontiguousarray(blocks[:, : nblocks * 4]).view("<u4")
        for i in range(nblocks):
            k = rotl(words[:, i] * c1, 15) * c2
            h = rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    tail = blocks[:, nblocks * 4 :].astype(np.uint32)
    if tail.shape[1]:
        k = np.zeros(n, dtype=np.uint32)
        for j in range(tail.shape[1] - 1, -1, -1):
            k ^= tail[:, j] << np.uint32(8 * j)
        h ^= rotl(k * c1, 15) * c2
    h ^= np.uint32(length & 0xFFFFFFFF)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


@REGISTRY.register("MurmurHash3", domain=MS)
def build_murmur_hash3(node: NodeView, ctx: KernelContext) -> Any:
    """MurmurHash3_x86_32 of each key's bytes (a string's UTF-8 bytes, a number's little-endian
    bytes), as uint32 (positive=1) or the same bits as int32."""
    seed = int(node.attr("seed", 0))
    positive = bool(node.attr("positive", 1))
    info = node.output_info(0)
    declared = info.np_dtype if info is not None else None
    out_dtype = np.dtype(declared) if declared is not None else np.dtype(np.uint32 if positive else np.int32)

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        flat = x.reshape(-1)
        if x.dtype == object or x.dtype.kind == "U":
            data = [str(s).encode("utf-8") for s in flat]
            lengths = np.fromiter((len(d) for d in data), dtype=np.int64, count=len(data))
            h = np.empty(len(data), dtype=np.uint32)
            for length in np.unique(lengths):  # one vectorised pass per distinct byte length
                rows = np.flatnonzero(lengths == length)
                joined = b"".join(data[i] for i in rows)
                h[rows] = _murmur3_32(np.frombuffer(joined, dtype=np.uint8).reshape(len(rows), int(length)), seed)
        else:
            le = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("<"))
            h = _murmur3_32(le.view(np.uint8).reshape(flat.size, flat.dtype.itemsize), seed)
        return (
            (h.view(np.int32).astype(out_dtype) if out_dtype == np.int32 else h.astype(out_dtype)).reshape(x.shape),
        )

    return compute


@REGISTRY.register("NGramRepeatBlock", domain=MS)
def build_ngram_repeat_block(node: NodeView, ctx: KernelContext) -> Any:
    """Ban (score -inf) every token that would repeat an n-gram already in input_ids: for each
    earlier n-gram whose first n-1 tokens equal the last n-1 tokens, its last token."""
    n = node.attr("ngram_size")
    if n is None or int(n) <= 0:
        raise fail(node, f"ngram_size={n}; a positive ngram_size is required")
    n = int(n)

    def compute(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray]:
        if ids.ndim != 2 or scores.ndim != 2 or scores.shape[0] != ids.shape[0]:
            raise fail(node, f"input_ids {list(ids.shape)} and scores {list(scores.shape)} must be (B, L), (B, V)")
        out = scores.copy()
        length = ids.shape[1]
        if length + 1 < n or length < n:
            return (out,)
        win = sliding_window_view(ids, n, axis=1)  # (B, L - n + 1, n)
        tail = ids[:, length - n + 1 :]  # the last n - 1 tokens
        banned = np.all(win[:, :, : n - 1] == tail[:, None, :], axis=2)
        b, i = np.nonzero(banned)
        tokens = win[b, i, n - 1]
        if tokens.size and (tokens.min() < 0 or tokens.max() >= scores.shape[1]):
            raise fail(node, f"token ids {tokens.tolist()} out of range for a vocabulary of {scores.shape[1]}")
        out[b, tokens] = -np.inf
        return (out,)

    return compute


def _find(src: np.ndarray, gram: np.ndarray, start: int = 0) -> int:
    """Index of the first occurrence of ``gram`` in ``src[start:]`` (absolute), or -1."""
    k = gram.size
    if src.size - start < k:
        return -1
    hits = np.flatnonzero(np.all(sliding_window_view(src[start:], k) == gram, axis=1))
    return int(hits[0]) + start if hits.size else -1


@REGISTRY.register("BifurcationDetector", domain=MS)
def build_bifurcation_detector(node: NodeView, ctx: KernelContext) -> Any:
    """Speculative decoding's bookkeeping: append the predicted tokens up to and including the
    first one that leaves the source (from prev_suffix_match_idx), then find where the last
    n-gram of the result occurs exactly once in the source (longest n in [min, max] that does)."""
    lo, hi = int(node.attr("min_ngram_size", 1)), int(node.attr("max_ngram_size", 3))
    if not 0 < lo <= hi:
        raise fail(node, f"min_ngram_size={lo}, max_ngram_size={hi}; need 0 < min <= max")

    def compute(src: np.ndarray, cur: np.ndarray, prev: np.ndarray, pred: Any = None) -> tuple[np.ndarray, ...]:
        src, cur = src.reshape(-1), cur.reshape(-1)
        if pred is None:
            tokens = cur.copy()
        else:
            p = int(np.asarray(prev).reshape(-1)[0])
            pred = pred.reshape(-1)
            if not 0 <= p <= src.size or pred.size != src.size + 1 - p:
                raise fail(
                    node,
                    f"prev_suffix_match_idx {p} and pred_tokens of {pred.size} do not fit src_tokens of {src.size}",
                )
            diff = np.flatnonzero(pred[: src.size - p] != src[p:])
            cut = int(diff[0]) if diff.size else src.size - p
            tokens = np.concatenate([cur, pred[: cut + 1]])
        suffix = -1
        for i in range(lo, hi + 1):
            if i > tokens.size:
                break
            gram = tokens[tokens.size - i :]
            at = _find(src, gram)
            if at < 0:
                break
            suffix = at + i
            if suffix >= src.size:
                break
            if _find(src, gram, suffix - i + 1) >= 0:
                suffix = -1
        return tokens.astype(np.int64), np.full(np.shape(prev), suffix, dtype=np.int64)

    return compute


@REGISTRY.register("DynamicTimeWarping", domain=MS)
def build_dynamic_time_warping(node: NodeView, ctx: KernelContext) -> Any:
    """The DTW path through a (rows, cols) cost matrix, as (2, path length) int32 indices.
    The cumulative cost runs over anti-diagonals (each one a vector step); ties prefer the
    horizontal move, then the vertical, as onnxruntime's comparisons do."""

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        if not (x.ndim == 2 or (x.ndim == 3 and x.shape[0] == 1)):
            raise fail(node, f"input shape {list(x.shape)}; DynamicTimeWarping takes (rows, cols) or (1, rows, cols)")
        rows, cols = int(x.shape[-2]), int(x.shape[-1])
        m = x.reshape(rows, cols).astype(np.float32)
        cost = np.full((rows + 1, cols + 1), np.inf, dtype=np.float32)
        cost[0, 0] = 0
        trace = np.full((rows + 1, cols + 1), -1, dtype=np.int8)
        for d in range(2, rows + cols + 1):
            i = np.arange(max(1, d - cols), min(rows, d - 1) + 1)
            j = d - i
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            diag = (c0 < c1) & (c0 < c2)
            up = ~diag & (c1 < c0) & (c1 < c2)
            cost[i, j] = np.where(diag, c0, np.where(up, c1, c2)) + m[i - 1, j - 1]
            trace[i, j] = np.where(diag, 0, np.where(up, 1, 2))
        path = []
        r, c = rows, cols
        while r > 0 and c > 0:  # the back-trace is sequential by nature: one step per path cell
            path.append((r - 1, c - 1))
            t = trace[r, c]
            r, c = (r - 1, c - 1) if t == 0 else (r - 1, c) if t == 1 else (r, c - 1)
        return (np.asarray(path[::-1], dtype=np.int32).reshape(-1, 2).T.copy(),)

    return compute


@REGISTRY.register("WordConvEmbedding", domain=MS)
def build_word_conv_embedding(node: NodeView, ctx: KernelContext) -> Any:
    """Word embeddings from characters: embed each word's characters (C), a 1-D convolution
    over them (W, B) with tanh, max over the positions. A word's length counts its positive
    character ids (0 when its first id is not positive); a word shorter than the filter is
    looked up filter-width characters far; an empty word gives a zero row (onnxruntime leaves
    that row unwritten)."""
    checks = {k: node.attr(k) for k in ("embedding_size", "conv_window_size", "char_embedding_size")}

    def compute(seq: np.ndarray, w: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray]:
        if seq.ndim != 2 or w.ndim != 4 or c.ndim != 2 or w.shape[3] != c.shape[1]:
            raise fail(node, f"Sequence {list(seq.shape)}, W {list(w.shape)}, C {list(c.shape)} do not fit")
        for key, got in (
            ("embedding_size", w.shape[0]),
            ("conv_window_size", w.shape[2]),
            ("char_embedding_size", c.shape[1]),
        ):
            if checks[key] not in (None, -1) and int(checks[key]) != got:
                raise fail(node, f"{key}={checks[key]} does not match the weights ({got})")
        s, wl = seq.shape
        m, fw, e = w.shape[0], w.shape[2], c.shape[1]
        if wl < fw:
            raise fail(node, f"word length {wl} is shorter than the filter width {fw}")
        lengths = np.where(seq[:, 0] > 0, (seq > 0).sum(1), 0)
        lookup = np.where(lengths > 0, np.maximum(lengths, fw), 0)
        pos = np.arange(wl)
        emb = np.where((pos[None, :] < lookup[:, None])[..., None], c.astype(np.float32)[seq], 0.0).astype(np.float32)
        windows = sliding_window_view(emb, fw, axis=1)  # (S, wl - fw + 1, E, fw)
        cols = windows.transpose(0, 1, 3, 2).reshape(s, wl - fw + 1, fw * e)
        conv = np.tanh(cols @ w.reshape(m, fw * e).astype(np.float32).T + b.astype(np.float32))
        width = np.maximum(lookup, fw) - fw + 1
        keep = np.arange(wl - fw + 1)[None, :] < width[:, None]
        pooled = np.where(keep[..., None], conv, np.float32(-1e12)).max(axis=1)
        return (np.where((lengths > 0)[:, None], pooled, 0.0).astype(np.float32),)

    return compute


_LAZY_OR_ALTERNATION = re.compile(r"\||[*+?}]\?")


def _matcher(node: NodeView, expression: str) -> Any:
    """search(s, pos) -> (start, end) of the leftmost-longest match from ``pos`` (RE2 with
    longest_match, as onnxruntime compiles it), or None. Python's re finds the same leftmost
    start; its match there is already the longest unless the expression has an alternation or a
    lazy quantifier, and only then are longer ends at that start tried."""
    try:
        pattern = re.compile(expression)
    except re.error as exc:
        raise fail(node, f"cannot compile {expression!r}: {exc}") from exc
    posix = _LAZY_OR_ALTERNATION.search(expression) is not None

    def search(s: str, pos: int) -> tuple[int, int] | None:
        m = pattern.search(s, pos)
        if m is None:
            return None
        if posix:
            for end in range(len(s), m.end(), -1):
                if pattern.fullmatch(s, m.start(), end):
                    return m.start(), end
        return m.start(), m.end()

    return search


def _tokenizer_rows(node: NodeView) -> Any:
    """A function from one string to its tokens, per the node's separators / tokenexp."""
    mincharnum = int(node.attr("mincharnum"))
    seps = node.attr("separators")
    tokenexp = node.attr("tokenexp")
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    if seps is not None:
        seps = [text(s) for s in seps]
        if not seps:
            raise fail(node, "separators must not be empty")
        if seps == [""]:
            return None
        searches = [_matcher(node, s) for s in seps]

        def by_separators(s: str) -> list[str]:
            row = [s]
            for search in searches:
                tokens = []
                for piece in row:
                    start = 0
                    while (span := search(piece, start)) is not None:
                        if span[0] - start >= mincharnum:
                            tokens.append(piece[start : span[0]])
                        start = span[1] if span[1] > span[0] else span[0] + 1  # empty match: step one char
                        if start > len(piece):
                            break
                    if start <= len(piece) and len(piece) - start >= mincharnum:
                        tokens.append(piece[start:])
                if not tokens:
                    return []
                row = tokens
            return row

        return by_separators
    if tokenexp is None or not text(tokenexp):
        raise fail(node, "either separators or a non-empty tokenexp is required")
    if text(tokenexp) == ".":
        return None
    search = _matcher(node, text(tokenexp))

    def by_expression(s: str) -> list[str]:
        if len(s) < mincharnum:
            return []
        out, start = [], 0
        while start <= len(s) and (span := search(s, start)) is not None:
            if span[1] - span[0] >= mincharnum:
                out.append(s[span[0] : span[1]])
                start = span[1] if span[1] > span[0] else span[0] + 1
            else:
                start = span[0] + 1
        return out

    return by_expression


@REGISTRY.register("Tokenizer", domain=MS)
def build_tokenizer(node: NodeView, ctx: KernelContext) -> Any:
    """Split each string of a (C) or (N, C) tensor into tokens: by characters (separators [""]
    or tokenexp "."), by separator regexes (applied one after another; pieces shorter than
    mincharnum dropped), or as the matches of tokenexp; rows padded with pad_value to the longest,
    and with mark=1 framed by the start (0x02) and end (0x03) markers (padding after the end
    marker). Python's re stands in for RE2, made leftmost-longest as onnxruntime asks RE2 to be
    (``_matcher``)."""
    for required in ("mark", "pad_value", "mincharnum"):
        if node.attr(required) is None:
            raise fail(node, f"attribute {required!r} is required")
    mark = bool(node.attr("mark"))
    pad = node.attr("pad_value")
    pad = pad.decode() if isinstance(pad, bytes) else str(pad)
    split = _tokenizer_rows(node)
    if split is None and int(node.attr("mincharnum")) >= 2:
        raise fail(node, "mincharnum is too big for character tokenization (it must be below 2)")

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim not in (1, 2):
            raise fail(node, f"input rank {x.ndim}; Tokenizer takes (C) or (N, C) strings")
        if x.size == 0:
            return (np.empty((*x.shape[:-1], 0) if x.ndim == 2 else (0,), dtype=object),)
        strings = [s.decode() if isinstance(s, bytes) else str(s) for s in x.reshape(-1)]
        rows = [list(s) if split is None else split(s) for s in strings]
        width = max(len(r) for r in rows)
        if width == 0:
            return (np.empty((*x.shape, 0), dtype=object),)
        full = width + 2 * mark
        out = np.full((len(rows), full), pad, dtype=object)
        for i, r in enumerate(rows):  # strings are Python objects: one assignment per row
            if mark:
                out[i, 0], out[i, len(r) + 1] = "\x02", "\x03"
            out[i, mark : mark + len(r)] = r
        return (out.reshape(*x.shape, full),)

    return compute


# ----------------------------------------------------------------------------- LLM blocks
def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * z) + 1.0)


def _round_to(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``v`` rounded to ``dtype`` and back to float32: onnxruntime stores intermediates in T."""
    return v if dtype == np.float32 else v.astype(dtype).astype(np.float32)


@REGISTRY.register("ScaledSiLU", domain=MS)
def build_scaled_silu(node: NodeView, ctx: KernelContext) -> Any:
    """z * sigmoid(z) with z = x * scale (the scalar input, else alpha); z and the sigmoid are
    rounded to T on the way, as onnxruntime does."""
    alpha = float(node.attr("alpha", 1.0))

    def compute(x: np.ndarray, scale: Any = None) -> tuple[np.ndarray]:
        if scale is not None and np.ndim(scale) != 0:
            raise fail(node, f"scale of shape {list(np.shape(scale))} must be a scalar")
        s = np.float32(alpha if scale is None else np.asarray(scale, dtype=np.float32))
        z = _round_to(x.astype(np.float32) * s, x.dtype)
        return ((z * _round_to(_sigmoid(z), x.dtype)).astype(x.dtype),)

    return compute


@REGISTRY.register("GatedAdd", domain=MS)
def build_gated_add(node: NodeView, ctx: KernelContext) -> Any:
    """x + y * gate, gate (..., 1) per row; the product is rounded to T before the add."""

    def compute(x: np.ndarray, y: np.ndarray, gate: np.ndarray) -> tuple[np.ndarray]:
        if y.shape != x.shape or gate.shape != x.shape[:-1] + (1,):
            raise fail(
                node, f"X {list(x.shape)}, Y {list(y.shape)}, gate {list(gate.shape)}: Y must match X, gate (..., 1)"
            )
        product = _round_to(y.astype(np.float32) * gate.astype(np.float32), x.dtype)
        return ((x.astype(np.float32) + product).astype(x.dtype),)

    return compute


def _rms(v: np.ndarray, eps: float) -> np.ndarray:
    """1 / sqrt(mean(v^2) + eps) over the last axis, kept."""
    return np.float32(1.0) / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + np.float32(eps))


@REGISTRY.register("GatedRMSNorm", domain=MS)
def build_gated_rms_norm(node: NodeView, ctx: KernelContext) -> Any:
    """RMS norm over groups of len(scale) along the last axis, times scale, times silu(gate)
    (or sigmoid(gate) with activation="sigmoid")."""
    eps = float(node.attr("epsilon", 1e-5))
    act = node.attr("activation", "silu")
    act = act.decode() if isinstance(act, bytes) else act
    if act not in ("silu", "sigmoid"):
        raise fail(node, f"activation={act!r}; allowed silu, sigmoid")

    def compute(x: np.ndarray, scale: np.ndarray, gate: np.ndarray) -> tuple[np.ndarray]:
        k = scale.size
        if gate.shape != x.shape or k == 0 or x.ndim == 0 or x.shape[-1] % k:
            raise fail(node, f"X {list(x.shape)}, scale {list(scale.shape)}, gate {list(gate.shape)} do not fit")
        xf = x.astype(np.float32).reshape(-1, k)
        z = gate.astype(np.float32).reshape(-1, k)
        a = _sigmoid(z) if act == "sigmoid" else z * _sigmoid(z)
        y = xf * _rms(xf, eps) * scale.astype(np.float32).reshape(1, k) * a
        return (y.reshape(x.shape).astype(x.dtype),)

    return compute


@REGISTRY.register("BranchwiseRMSNorm", domain=MS)
def build_branchwise_rms_norm(node: NodeView, ctx: KernelContext) -> Any:
    """RMS norm of each branch's hidden vector: X is (..., C, H) (num_branches 0) or
    (..., C * H) (num_branches C); scale, optional, is (H) shared or (C, H) / (C * H) per branch."""
    eps = float(node.attr("epsilon", 1e-5))
    branches_attr = int(node.attr("num_branches", 0))
    if branches_attr < 0:
        raise fail(node, f"num_branches={branches_attr} must be positive (or 0 for (..., C, H) input)")

    def compute(x: np.ndarray, scale: Any = None) -> tuple[np.ndarray]:
        if branches_attr:
            if x.ndim < 1 or x.shape[-1] % branches_attr:
                raise fail(node, f"X {list(x.shape)}: its last dim must divide into {branches_attr} branches")
            c, h = branches_attr, x.shape[-1] // branches_attr
        else:
            if x.ndim < 2:
                raise fail(node, f"X {list(x.shape)}: (..., C, H) needs rank 2 or more")
            c, h = x.shape[-2], x.shape[-1]
        xf = x.astype(np.float32).reshape(-1, c, h)
        y = xf * _rms(xf, eps)
        if scale is not None:
            s = np.asarray(scale).astype(np.float32)
            if s.size == h:
                y = y * s.reshape(1, 1, h)
            elif s.size == c * h and s.ndim in (1, 2) and (s.ndim == 1 or s.shape == (c, h)):
                y = y * s.reshape(1, c, h)
            else:
                raise fail(node, f"scale {list(s.shape)}: it must be (H), (C * H) or (C, H) with C={c}, H={h}")
        return (y.reshape(x.shape).astype(x.dtype),)

    return compute

"""MatMul, MatMulInteger, QLinearMatMul, Gemm and Einsum, plus DepthToSpace/SpaceToDepth.

Half floats multiply in float32 (what onnxruntime's CPU EP does via casts); integer products
of 8-bit operands are exact in float64, which BLAS runs far faster than integer matmul.
Gemm transposes and casts a constant B once at build time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.nn_common import as_compute, fail, few_rows, first_since, is_float
from ep_cpu_reference.registry import REGISTRY


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float16 and bfloat16 multiply in float32 and round once, as onnxruntime's CPU EP does through
    casts (NumPy's own float16 matmul has no BLAS: 340x onnxruntime on a [128, 768] x [768, 768]).
    A matrix B under one or two rows of A goes row by row (``few_rows``)."""
    if a.dtype == b.dtype and a.dtype.itemsize == 2 and is_float(a.dtype):
        return matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    if a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == 1 == b.shape[-2] and a.dtype == b.dtype and a.dtype.kind == "f":
        # an outer product (K = 1): one multiply, 4.7x BLAS's time at [2048, 1] x [1, 2048]; the
        # same products, and + 0.0 gives BLAS's +0 (its accumulator starts at 0) for a -0 product
        y = np.multiply(a, b)
        y += a.dtype.type(0.0)
        return y
    if b.ndim == 2 and a.ndim >= 2 and a.shape[-1] == b.shape[0] and a.size:
        y = few_rows(a.reshape(-1, a.shape[-1]), b)
        if y is not None:
            return y.reshape(a.shape[:-1] + (b.shape[1],))
    y = np.matmul(a, b)
    return y if y.dtype == a.dtype else y.astype(a.dtype)


@REGISTRY.register("MatMul", since=first_since("MatMul"))
def build_matmul(node: NodeView, ctx: KernelContext) -> Any:
    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        try:
            return (matmul(a, b),)
        except ValueError as exc:
            raise fail(node, f"shapes {list(a.shape)} and {list(b.shape)} do not multiply: {exc}") from None

    return compute


def shifted(v: Any, zp: Any, axis_from_end: int) -> np.ndarray:
    """``v - zp`` as exact integers in a float array: float32 for 8-bit ``v`` (|v - zp| <= 255,
    and converting uint8 to float32 costs a hundredth of a float64 conversion and subtraction
    at [400, 384]), float64 for anything wider. A zero point with more than one value is per row
    of A (``axis_from_end`` 2: (M,) -> (M, 1)) or per column of B (1: (N,) along the last axis);
    one of more dims broadcasts as it is shaped."""
    v = np.asarray(v)
    dt = np.float32 if v.dtype.kind in "iu" and v.dtype.itemsize == 1 else np.float64
    f = v.astype(dt)
    if zp is None:
        return f
    z = np.asarray(zp).astype(dt)
    if z.size == 1:
        z = z.reshape(())
    elif z.ndim == 1 and axis_from_end == 2:
        z = z.reshape(-1, 1)
    # else 1-D per column of B as is, and a zero point of 2+ dims ([batch, 1, N] per batch and
    # column, as onnxruntime takes it) broadcasts as given
    if np.broadcast_shapes(f.shape, z.shape) != f.shape:
        return f - z
    f -= z
    return f


_EXACT32 = float(2**24)


def int_matmul(a: Any, a_zp: Any, b: Any, b_zp: Any) -> np.ndarray:
    """(a - a_zp) @ (b - b_zp) for integer operands neither of which is laid out in advance,
    exact: float32 BLAS (twice float64's speed) when no partial sum can reach 2^24 in magnitude,
    so every one is an exactly held integer whatever BLAS's summation order; float64 otherwise
    (exact below 2^53). 8-bit operands with K <= 258 always qualify (255 * 255 * K < 2^24); at
    larger K the bound is max|a'| times the largest column sum of |b'|."""
    af, bf = shifted(a, a_zp, 2), shifted(b, b_zp, 1)
    if af.dtype == bf.dtype == np.float32 and af.size and bf.size:
        k = af.shape[-1]
        if k * 255.0 * 255.0 < _EXACT32:
            return np.matmul(af, bf)
        column = np.abs(bf).sum(axis=-2) if bf.ndim >= 2 else np.abs(bf).sum()  # a 1-D B is one column
        if float(np.abs(af).max()) * float(column.max()) < _EXACT32:
            return np.matmul(af, bf)
    return np.matmul(af.astype(np.float64, copy=False), bf.astype(np.float64, copy=False))


# another EP's exact product of a constant B' (K, N) (integers in a float array): a function of A'
# (..., K) (integers in a float array) giving int32 (..., N), or None where it cannot (then the
# float product serves); the factory itself returns None for a B' it does not take
IntProduct = Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray | None] | None]


# another EP's exact product of two 8-bit operands given at run time: (a, a_zp, b, b_zp) -> int32
# (a - a_zp) @ (b - b_zp), or None where it does not serve them (then ``int_matmul``)
RunTimeProduct = Callable[[np.ndarray, Any, np.ndarray, Any], np.ndarray | None]


@REGISTRY.register("MatMulInteger", since=first_since("MatMulInteger"))
def build_matmul_integer(
    node: NodeView,
    ctx: KernelContext,
    int_product: IntProduct | None = None,
    run_time_product: RunTimeProduct | None = None,
) -> Any:
    """Exact integer products through float BLAS. A constant B (and zero point) is laid out once:
    as float32 when every partial sum of an 8-bit A (|a - a_zp| <= 255) times its columns stays
    below 2^24 (float32 BLAS is then exact, and twice as fast as float64); otherwise cut along K
    into float32 slices that each stay below it, whose exact products add up in float64 (a
    1024 x 8210 uint8 classifier: about half float64's time); float64 when one row of B alone
    reaches it. ``int_product``: another EP's exact integer product of a constant B (``IntB``);
    ``run_time_product``: another EP's of a B computed at run time (``RunTimeProduct``)."""
    ins = list(node.inputs) + [""] * (4 - len(node.inputs))
    b_fixed: IntB | None = None
    if ctx.constant(ins[1]) is not None and (not ins[3] or ctx.constant(ins[3]) is not None):
        bf = shifted(np.asarray(ctx.constant(ins[1])), ctx.constant(ins[3]) if ins[3] else None, 1)
        b_fixed = IntB(bf, int_product)

    def compute(a: Any, b: Any, a_zp: Any = None, b_zp: Any = None) -> tuple[np.ndarray]:
        if b_fixed is None:
            acc = _run_time(run_time_product, a, a_zp, b, b_zp)
        else:
            acc = b_fixed.times(shifted(a, a_zp, 2))
        return (acc if acc.dtype == np.int32 else np.rint(acc).astype(np.int32),)

    return compute


def _run_time(product: RunTimeProduct | None, a: Any, a_zp: Any, b: Any, b_zp: Any) -> np.ndarray:
    got = None if product is None else product(a, a_zp, b, b_zp)
    return int_matmul(a, a_zp, b, b_zp) if got is None else got


class IntB:
    """A constant B' laid out once for exact products by 8-bit A': ``exact_slices`` for float
    BLAS, or another EP's compiled product (``IntProduct``) where one is given and takes it; then
    the float layout (4-8 bytes a weight) is made only if an A' the compiled one declines ever
    comes, from an int16 copy (B' is within [-255, 255] there). ``times`` gives the same integers
    either way (int32 from the compiled one, floats from BLAS)."""

    __slots__ = ("slices", "compiled", "compact")

    def __init__(self, bf: np.ndarray, int_product: IntProduct | None = None) -> None:
        self.compiled = None if int_product is None else int_product(bf)
        self.compact = None if self.compiled is None else bf.astype(np.int16)
        self.slices = exact_slices(bf) if self.compiled is None else None

    def times(self, a: np.ndarray) -> np.ndarray:
        if self.compiled is not None:
            got = self.compiled(a)
            if got is not None:
                return got
        if self.slices is None:  # (compact is set whenever slices are not)
            self.slices = exact_slices(cast(np.ndarray, self.compact))
        return exact_matmul(a, self.slices)


def exact_slices(bf: np.ndarray) -> list[tuple[slice, np.ndarray]]:
    """B (..., K, N), integers in a float array, as float32 slices along K whose products by an
    8-bit A are exact (every column's sum of |b| over the slice times 255 below 2^24), or one
    float64 slice when a single row of B already reaches that (or more than 8 slices would)."""
    limit = 2.0**24 / 255.0
    mag = np.abs(bf).astype(np.float64)  # running sums below stay exact at any K
    col = mag.reshape(-1, bf.shape[-2], bf.shape[-1]).max(axis=0) if bf.ndim > 2 else mag
    if bf.ndim < 2 or not bf.size or float(col.max(initial=0.0)) >= limit:
        return [(slice(None), bf.astype(np.float64))]
    if float(col.sum(axis=0).max()) < limit:  # the whole of K in one float32 slice (most weights): no running sums
        return [(slice(None), np.ascontiguousarray(bf, dtype=np.float32))]
    run = np.cumsum(col, axis=0)  # (K, N): the running column sums
    cuts, start, base = [], 0, np.zeros(bf.shape[-1])
    for k in range(bf.shape[-2]):
        if float((run[k] - base).max()) >= limit:
            cuts.append(slice(start, k))
            start, base = k, run[k - 1]
    cuts.append(slice(start, bf.shape[-2]))
    if len(cuts) > 8:  # too many slices to pay: float64 in one go
        return [(slice(None), bf.astype(np.float64))]
    return [(sl, np.ascontiguousarray(bf[..., sl, :], dtype=np.float32)) for sl in cuts]


def exact_matmul(a: np.ndarray, slices: list[tuple[slice, np.ndarray]]) -> np.ndarray:
    """``a @ B`` for an 8-bit-range integer ``a`` (in any float dtype) and B laid out by
    ``exact_slices``: every product exact, so the integers are those of int64 arithmetic (float32
    from a single float32 slice, float64 otherwise; one float32 BLAS pass over K either way when
    B is sliced, about half float64's time)."""
    first, part = slices[0]
    if len(slices) == 1:
        return np.matmul(a.astype(part.dtype, copy=False), part)
    a32 = a.astype(np.float32, copy=False)
    acc = np.matmul(a32[..., first], part).astype(np.float64)
    for sl, part in slices[1:]:
        acc += np.matmul(a32[..., sl], part)
    return acc


@REGISTRY.register("QLinearMatMul", since=first_since("QLinearMatMul"))
def build_qlinear_matmul(
    node: NodeView,
    ctx: KernelContext,
    int_product: IntProduct | None = None,
    run_time_product: RunTimeProduct | None = None,
) -> Any:
    """QLinearMatMul: exact integer product, requantized as onnxruntime does
    (MlasRequantizeOutput): float32(acc) * float32(a_scale * b_scale[n] / y_scale), rounded
    half to even, + y_zero_point, saturated. A float64 scale rounds some exact float32 halves
    the other way. A constant B (and zero point) is laid out once for ``exact_matmul``, as
    MatMulInteger's is: float32 BLAS where its sums stay exact, not a float64 product per run
    (or ``int_product``'s, and ``run_time_product``'s for a computed B, as MatMulInteger's)."""
    f32 = np.float32
    b_fixed: IntB | None = None
    if ctx.constant(node.inputs[3]) is not None and ctx.constant(node.inputs[5]) is not None:
        bq = shifted(np.asarray(ctx.constant(node.inputs[3])), ctx.constant(node.inputs[5]), 1)
        b_fixed = IntB(bq, int_product)

    def compute(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):  # type: ignore[no-untyped-def]
        if b_fixed is None:
            acc = _run_time(run_time_product, a, a_zp, b, b_zp)
        else:
            acc = b_fixed.times(shifted(a, a_zp, 2))
        a_scale = np.asarray(a_s, dtype=f32)
        b_scale = np.asarray(b_s, dtype=f32)
        a_scale = a_scale.reshape(-1, 1) if a_scale.size > 1 else a_scale.reshape(())
        b_scale = b_scale.reshape(-1) if b_scale.size > 1 else b_scale.reshape(())
        scale = a_scale * b_scale / f32(np.asarray(y_s, dtype=f32).reshape(-1)[0])
        y = acc.astype(f32) * scale
        zp = np.asarray(y_zp)
        info = np.iinfo(zp.dtype)
        y = np.clip(np.rint(y) + f32(zp.reshape(-1)[0]), info.min, info.max)
        return (y.astype(zp.dtype),)

    return compute


@REGISTRY.register("Gemm", since=first_since("Gemm"))
def build_gemm(node: NodeView, ctx: KernelContext) -> Any:
    """Gemm: alpha * A' @ B' + beta * C."""
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    ta = bool(node.attr("transA", 0))
    tb = bool(node.attr("transB", 0))
    b_const = ctx.constant(node.inputs[1])
    c_const = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    b_cache: dict[Any, np.ndarray] = {}
    c_cache: dict[Any, np.ndarray] = {}

    def scaled(v: np.ndarray, factor: float, dt: np.dtype) -> np.ndarray:
        v = v.astype(dt, copy=False)
        if factor == 1.0:
            return v
        return v * (dt.type(factor) if dt.kind == "f" else int(factor))

    def compute(a: np.ndarray, b: np.ndarray, c: Any = None) -> tuple[np.ndarray]:
        odt = a.dtype
        ac = as_compute(a) if is_float(a.dtype) else a
        dt = ac.dtype
        # constant B (transposed, alpha folded in) and constant C (beta folded in) are kept
        bb = b_cache.get(dt) if b_const is not None else None
        if bb is None:
            bb = np.ascontiguousarray(scaled(b.T if tb else b, alpha, dt))
            if b_const is not None:
                b_cache[dt] = bb
        cc = None
        if c is not None:
            cc = c_cache.get(dt) if c_const is not None else None
            if cc is None:
                cc = scaled(c, beta, dt)
                if c_const is not None:
                    c_cache[dt] = cc
        aa = ac.T if ta else ac
        if aa.ndim != 2 or bb.ndim != 2 or aa.shape[1] != bb.shape[0]:
            raise fail(
                node, f"A {list(a.shape)} (transA={int(ta)}) and B {list(b.shape)} (transB={int(tb)}) do not multiply"
            )
        y = few_rows(aa, bb)
        if y is None:
            y = aa @ bb
        if cc is not None:
            y += cc
        return (y if y.dtype == odt else y.astype(odt),)

    return compute


@REGISTRY.register("Einsum", since=first_since("Einsum"))
def build_einsum(node: NodeView, ctx: KernelContext) -> Any:
    """Einsum: NumPy's einsum with a contraction path chosen once per input shapes."""
    eq = node.attr("equation", "").replace(" ", "")
    paths: dict[Any, Any] = {}

    def compute(*xs: np.ndarray) -> tuple[np.ndarray]:
        key = tuple(x.shape for x in xs)
        path = paths.get(key)
        if path is None:
            try:
                path = np.einsum_path(eq, *xs, optimize="greedy")[0]
            except ValueError as exc:
                raise fail(node, f"equation {eq!r} does not fit inputs {[list(x.shape) for x in xs]}: {exc}") from None
            paths[key] = path
        dt = xs[0].dtype
        ins = [as_compute(x) for x in xs] if is_float(dt) else list(xs)
        y = np.einsum(eq, *ins, optimize=path)
        return (np.asarray(y).astype(dt, copy=False),)

    return compute


@REGISTRY.register("DepthToSpace", since=first_since("DepthToSpace"))
def build_depth_to_space(node: NodeView, ctx: KernelContext) -> Any:
    bs = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        n, c, h, w = x.shape
        if c % (bs * bs):
            raise fail(node, f"{c} channels are not divisible by blocksize^2={bs * bs}")
        if mode == "DCR":
            t = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        elif mode == "CRD":
            t = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            raise fail(node, f"mode={mode!r}; allowed DCR, CRD")
        return (t.reshape(n, c // (bs * bs), h * bs, w * bs),)

    return compute


@REGISTRY.register("SpaceToDepth", since=first_since("SpaceToDepth"))
def build_space_to_depth(node: NodeView, ctx: KernelContext) -> Any:
    bs = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"mode={mode!r}; allowed DCR, CRD")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        n, c, h, w = x.shape
        if h % bs or w % bs:
            raise fail(node, f"spatial size {h}x{w} is not divisible by blocksize={bs}")
        t = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(perm)
        return (t.reshape(n, c * bs * bs, h // bs, w // bs),)

    return compute


def _attention_bias(
    q_len: int,
    kv_len: int,
    dt: np.dtype,
    mask: Any,
    is_causal: bool,
    past_len: int | None,
    nonpad: Any,
    left: int,
    right: int,
    batch: int,
) -> np.ndarray:
    """The additive (…, q, kv) bias: attn_mask (bool or float, padded to kv with -inf/False),
    causal and sliding-window limits aligned bottom-right, and the per-batch padding mask."""
    neg = dt.type(-np.inf)
    bias: np.ndarray = np.zeros((q_len, kv_len), dtype=dt)
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            mask = np.pad(
                mask,
                [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                constant_values=False if mask.dtype == np.bool_ else -np.inf,
            )
        if mask.dtype == np.bool_:
            mask = np.where(mask, dt.type(0), neg)
        bias = bias + mask.astype(dt)
    if past_len is None and nonpad is not None:
        offset: Any = np.asarray(nonpad).reshape(-1, 1, 1) - q_len  # per batch
    else:
        offset = past_len or 0
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    limits = []
    if is_causal:
        limits.append(j <= i + offset)
    if left >= 0 or right >= 0:
        diff = (i + offset) - j
        allowed = np.ones(np.shape(diff), dtype=bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        limits.append(allowed)
    for allowed in limits:
        add = np.where(allowed, dt.type(0), neg)
        if add.ndim == 3:  # per-batch offsets
            add = add.reshape(add.shape[0], 1, q_len, kv_len)
        bias = bias + add
    if nonpad is not None:
        keep = np.arange(kv_len) < np.asarray(nonpad).reshape(-1, 1)
        bias = bias + np.where(keep, dt.type(0), neg).reshape(batch, 1, 1, kv_len)
    return bias


@REGISTRY.register("Attention", since=first_since("Attention"))
def build_attention(node: NodeView, ctx: KernelContext) -> Any:
    """Attention (opset 23+): 3-D inputs split into heads, KV cache concatenation, grouped-query
    head repetition, masks (bool/float, causal, padding, sliding window), softcap, the four
    qk_matmul_output modes; fully masked rows give zeros."""
    is_causal = bool(node.attr("is_causal", 0))
    q_heads_attr = node.attr("q_num_heads")
    kv_heads_attr = node.attr("kv_num_heads")
    scale_attr = node.attr("scale")
    softcap = node.attr("softcap")
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):  # onnxruntime refuses other values at session creation too
        raise fail(node, f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}")
    precision = node.attr("softmax_precision")
    left = int(node.attr("left_window_size", -1))
    right = int(node.attr("right_window_size", -1))
    n_out = len(node.outputs)  # the EP contract: one value per declared output

    def compute(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):  # type: ignore[no-untyped-def]
        if (past_key is None) != (past_value is None):
            raise fail(node, "past_key and past_value must be given together")
        if q.ndim != k.ndim or q.ndim != v.ndim or q.ndim not in (3, 4):
            raise fail(node, f"Q, K, V must all be 3-D or 4-D, got {q.ndim}, {k.ndim}, {v.ndim}")
        three_d = q.ndim == 3
        b = q.shape[0]
        if three_d:
            if q_heads_attr is None or kv_heads_attr is None:
                raise fail(node, "3-D inputs need the q_num_heads and kv_num_heads attributes")
            q = q.reshape(b, q.shape[1], q_heads_attr, -1).transpose(0, 2, 1, 3)
            k = k.reshape(b, k.shape[1], kv_heads_attr, -1).transpose(0, 2, 1, 3)
            v = v.reshape(b, v.shape[1], kv_heads_attr, -1).transpose(0, 2, 1, 3)
        dt = q.dtype
        sc = (1 / np.sqrt(q.shape[3])) if scale_attr is None else scale_attr
        sc = dt.type(np.sqrt(sc))
        present_k = k if past_key is None else np.concatenate((past_key, k), axis=2)
        present_v = v if past_value is None else np.concatenate((past_value, v), axis=2)
        q_len, kv_len = q.shape[2], present_k.shape[2]
        bias = _attention_bias(
            q_len,
            kv_len,
            dt,
            attn_mask,
            is_causal,
            None if past_key is None else past_key.shape[2],
            nonpad_kv_seqlen,
            left,
            right,
            b,
        )
        kk, vv = present_k, present_v
        hq, hk = q.shape[1], kk.shape[1]
        if hq != hk:
            if hq % hk:
                raise fail(node, f"{hq} query heads are not a multiple of {hk} key/value heads")
            kk = np.repeat(kk, hq // hk, axis=1)
            vv = np.repeat(vv, hq // hk, axis=1)
        qk = matmul(q * sc, np.swapaxes(kk, 2, 3) * sc)
        if softcap:
            qk = (np.tanh(qk / softcap) * softcap).astype(dt)
        with_bias = qk + bias
        qk_out = with_bias.copy() if mode == 2 else qk
        logits = with_bias
        if precision is not None:
            from onnx import helper

            logits = logits.astype(helper.tensor_dtype_to_np_dtype(precision))
        mx = logits.max(axis=-1, keepdims=True)
        safe = np.where(np.isneginf(mx), logits.dtype.type(0), mx)
        e = np.exp(logits - safe)
        s = e.sum(axis=-1, keepdims=True)
        probs = e / np.where(s == 0, logits.dtype.type(1), s)
        masked_rows = np.isneginf(np.max(bias, axis=-1, keepdims=True))
        probs = np.where(masked_rows, probs.dtype.type(0), probs)
        if mode == 3:
            qk_out = probs
        y = matmul(probs.astype(dt), vv)
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(b, q_len, -1)
        return (y, present_k, present_v, np.asarray(qk_out).astype(dt))[:n_out]

    return compute

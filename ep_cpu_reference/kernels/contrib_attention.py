"""com.microsoft attention ops that exported transformer models use: Attention (packed QKV
weights), MultiHeadAttention, GroupQueryAttention, EmbedLayerNormalization, RotaryEmbedding and
BiasSoftmax, following onnxruntime 1.31's CPU contrib kernels (contrib_ops/cpu/bert/*).

Scores are computed in float32 (float64 stays), softmax is max-subtracted as onnxruntime's MLAS
softmax is. Where onnxruntime's CPU kernels refuse a form (a 4-D Megatron mask, Attention's
do_rotary) the node is refused the same way, naming the way out; forms onnxruntime serves only on
GPU but whose meaning is plain data movement (packed KV/QKV in MultiHeadAttention, BiasSoftmax) are
served."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._ms_schema import MS, attr, inp, register
from ep_cpu_reference.kernels.nn_common import compute_dtype, fail
from ep_cpu_reference.registry import REGISTRY

Array = np.ndarray
FLOAT_T = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
M32 = ("M", ["tensor(int32)"], "mask / lengths")


def _opt_attr(name: str, kind: str) -> Any:
    """An optional attribute without a default (onnxruntime's schemas have many)."""
    from onnx import defs

    return defs.OpSchema.Attribute(name, getattr(defs.OpSchema.AttrType, kind), "", required=False)


def _req(name: str) -> Any:
    from onnx import defs

    return defs.OpSchema.Attribute(name, defs.OpSchema.AttrType.INT, "", required=True)


def _register_schemas() -> None:
    """onnxruntime 1.31's schemas: input/output names, options, attribute names and defaults."""
    t = ("T", FLOAT_T, "float tensors")
    register(
        "Attention",
        [inp("input"), inp("weights"), inp("bias", True), inp("mask_index", True, "M"), inp("past", True)]
        + [inp("attention_bias", True), inp("past_sequence_length", True, "M")],
        [inp("output"), inp("present", True)],
        [_req("num_heads"), attr("unidirectional", 0), _opt_attr("qkv_hidden_sizes", "INTS")]
        + [_opt_attr(n, "INT") for n in ("past_present_share_buffer", "do_rotary", "rotary_embedding_dim")]
        + [_opt_attr("mask_filter_value", "FLOAT"), _opt_attr("scale", "FLOAT")],
        "multi-head self attention with packed QKV weights",
        [t, M32],
    )
    register(
        "MultiHeadAttention",
        [inp("query"), inp("key", True), inp("value", True), inp("bias", True), inp("key_padding_mask", True, "M")]
        + [inp("attention_bias", True), inp("past_key", True), inp("past_value", True)]
        + [inp("past_sequence_length", True, "M"), inp("cache_indirection", True, "M")],
        [inp("output"), inp("present_key", True), inp("present_value", True), inp("qk", True, "QK")],
        [_req("num_heads"), attr("unidirectional", 0), _opt_attr("mask_filter_value", "FLOAT")]
        + [_opt_attr("scale", "FLOAT")],
        "multi-head attention with separate Q, K, V",
        [t, ("QK", FLOAT_T, "qk output"), M32],
    )
    register(
        "GroupQueryAttention",
        [inp("query"), inp("key", True), inp("value", True), inp("past_key", True, "T_CACHE")]
        + [
            inp("past_value", True, "T_CACHE"),
            inp("seqlens_k", type_str="M"),
            inp("total_sequence_length", type_str="M"),
        ]
        + [inp("cos_cache", True), inp("sin_cache", True), inp("position_ids", True, "tensor(int64)")]
        + [inp("attention_bias", True), inp("head_sink", True), inp("k_scale", True, "T_KV_SCALE")]
        + [inp("v_scale", True, "T_KV_SCALE"), inp("q_norm_weight", True), inp("k_norm_weight", True)],
        [inp("output"), inp("present_key", True, "T_CACHE"), inp("present_value", True, "T_CACHE")]
        + [inp("output_qk", True)],
        [_req("num_heads"), _req("kv_num_heads"), _opt_attr("scale", "FLOAT"), _opt_attr("softcap", "FLOAT")]
        + [attr("local_window_size", -1), _opt_attr("do_rotary", "INT"), _opt_attr("rotary_interleaved", "INT")]
        + [attr("smooth_softmax", -1), attr("qk_output", 0), attr("causal", 1), attr("sliding_window_cache", 0)]
        + [attr("qk_norm_epsilon", 1e-6), attr("k_quant_type", "NONE"), attr("v_quant_type", "NONE")]
        + [_opt_attr("kv_cache_bit_width", "INT")],
        "grouped-query attention with a KV cache",
        [
            ("T", ["tensor(float16)", "tensor(bfloat16)", "tensor(float)"], "float tensors"),
            ("T_CACHE", FLOAT_T + ["tensor(uint8)", "tensor(int8)", "tensor(float8e4m3fn)"], "KV cache"),
            ("T_KV_SCALE", ["tensor(float)"], "KV cache scales"),
            M32,
        ],
    )
    register(
        "EmbedLayerNormalization",
        [inp("input_ids", type_str="T1"), inp("segment_ids", True, "T1"), inp("word_embedding")]
        + [inp("position_embedding"), inp("segment_embedding", True), inp("gamma"), inp("beta")]
        + [inp("mask", True, "T1"), inp("position_ids", True, "T1")],
        [inp("output"), inp("mask_index", True, "T1"), inp("embedding_sum", True)],
        [attr("epsilon", 1e-12), _opt_attr("mask_index_type", "INT")],
        "LayerNormalization(word + position + segment embeddings)",
        [("T1", ["tensor(int32)"], "ids"), ("T", ["tensor(float)", "tensor(float16)"], "float tensors")],
    )
    register(
        "RotaryEmbedding",
        [inp("input"), inp("position_ids", type_str="M"), inp("cos_cache"), inp("sin_cache")],
        [inp("output")],
        [_opt_attr("scale", "FLOAT"), _opt_attr("rotary_embedding_dim", "INT"), _opt_attr("num_heads", "INT")]
        + [_opt_attr("interleaved", "INT"), _opt_attr("is_packed_batching", "INT")],
        "rotary position embedding",
        [t, ("M", ["tensor(int64)"], "position ids")],
    )
    register(
        "BiasSoftmax",
        [inp("data"), inp("bias")],
        [inp("output")],
        [attr("axis", 1), _req("is_inner_broadcast")],
        "Softmax(data + bias) with bias broadcast",
        [("T", ["tensor(float16)", "tensor(float)", "tensor(double)"], "float tensors")],
    )


_register_schemas()


# ------------------------------------------------------------------------------------ shared math
def _ct(x: Array) -> Array:
    """float16/bfloat16 compute in float32 as onnxruntime's CPU kernels do; float32/64 stay."""
    ct = compute_dtype(x.dtype)
    return x if x.dtype == ct else x.astype(ct)


def _softmax(x: Array) -> Array:
    """Max-subtracted softmax over the last axis; rows that are all -inf give zeros."""
    mx = x.max(axis=-1, keepdims=True)
    e = np.exp(x - np.where(np.isneginf(mx), 0, mx))
    s = e.sum(axis=-1, keepdims=True)
    return e / np.where(s == 0, 1, s)


def _heads(node: NodeView, x: Array, n: int) -> Array:
    """[B, S, N*H] -> [B, N, S, H]."""
    if x.ndim != 3 or x.shape[2] % n:
        raise fail(node, f"an input of shape {list(x.shape)} does not split into {n} heads ([B, S, N*H] expected)")
    b, s, d = x.shape
    return x.reshape(b, s, n, d // n).transpose(0, 2, 1, 3)


def _merge(x: Array) -> Array:
    """[B, N, S, H] -> [B, S, N*H]."""
    b, n, s, h = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def _mask_bias(
    node: NodeView,
    mask: Array | None,
    batch: int,
    q_len: int,
    past: int,
    total: int,
    causal: bool,
    filter_value: float,
    dt: np.dtype,
    mha: bool,
) -> Array | None:
    """onnxruntime's PrepareMask: the additive [B, 1, S, T] mask, or None without mask nor causality.
    0/1 masks and key lengths give ``mask_filter_value``; causality gives the lowest float. 1-D
    forms: key lengths [B], or Attention's [2B] (ends, then starts) or MultiHeadAttention's [3B+2]
    (of which the CPU kernel reads the key lengths only)."""
    if mask is None and not causal:
        return None
    out = np.zeros((batch, q_len, total), dtype=dt)
    if mask is not None:
        fv = dt.type(filter_value)
        dims = mask.shape
        if mask.ndim == 4:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: a 4-D mask is not supported by onnxruntime's CPU kernel either; "
                "give a 1-D, 2-D or 3-D mask"
            )
        if mask.ndim == 3:
            if dims != (batch, q_len, total):
                raise fail(node, f"a 3-D mask must be [{batch}, {q_len}, {total}], got {list(dims)}")
            out[:] = np.where(mask > 0, dt.type(0), fv)
        elif mask.ndim == 2:
            if dims != (batch, total):
                raise fail(node, f"a 2-D mask must be [{batch}, {total}], got {list(dims)}")
            out[:] = np.where(mask > 0, dt.type(0), fv)[:, None, :]
        elif mask.ndim == 1:
            forms = (batch, 3 * batch + 2) if mha else (batch, 2 * batch)
            if dims[0] not in forms:
                raise fail(node, f"a 1-D mask must have {' or '.join(map(str, forms))} entries, got {dims[0]}")
            j = np.arange(total)
            masked = j >= mask[:batch, None]
            if dims[0] == 2 * batch:
                masked |= j < np.minimum(mask[batch:, None], total)
            out[:] = np.where(masked, fv, dt.type(0))[:, None, :]
        else:
            raise fail(node, f"the mask must be 1-D, 2-D or 3-D, got shape {list(dims)}")
    if causal:
        future = np.arange(total)[None, :] > past + np.arange(q_len)[:, None]
        out[:, future] = np.finfo(dt).min
    return out[:, None]


def _check_bias(node: NodeView, bias: Array, batch: int, heads: int, q_len: int, total: int) -> None:
    """attention_bias must be [B or 1, N or 1, S, T] (onnxruntime checks the same)."""
    s = bias.shape
    if bias.ndim != 4 or s[0] not in (1, batch) or s[1] not in (1, heads) or s[2:] != (q_len, total):
        raise fail(node, f"attention_bias must be [{batch} or 1, {heads} or 1, {q_len}, {total}], got {list(s)}")


def _check_past_len(node: NodeView, past_len: Array | None, p: int) -> None:
    """past_sequence_length only matters to the GPU's shared past/present buffer; here the past
    holds exactly its valid entries, so a differing length is refused rather than ignored."""
    if past_len is not None and int(np.asarray(past_len).reshape(-1)[0]) != p:
        raise NotImplementedByAnyEp(
            f"{node.describe()}: past_sequence_length {int(np.asarray(past_len).reshape(-1)[0])} differs from the "
            f"past's {p} entries (a shared past/present buffer, GPU-only); give a past of exactly the valid length"
        )


def _attend(q: Array, k: Array, v: Array, scale: float, add: list[Array | None]) -> tuple[Array, Array]:
    """softmax(scale * q @ k^T + masks) @ v over [B, N, S, H]; returns (context, scores)."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    for a in add:
        if a is not None:
            scores = scores + a
    return np.matmul(_softmax(scores), v), scores


def _scale(attr_value: Any, head_size: int) -> float:
    """onnxruntime: scale 0 or absent means 1/sqrt(head_size), computed in float32."""
    if attr_value is None or float(attr_value) == 0.0:
        return float(np.float32(1.0) / np.sqrt(np.float32(head_size)))
    return float(attr_value)


# ------------------------------------------------------------------------------------ Attention
@REGISTRY.register("Attention", domain=MS)
def build_attention(node: NodeView, ctx: KernelContext) -> Any:
    """input [B, S, D] @ weights [D, Dq+Dk+Dv] (+ bias) split into Q, K, V; past [2, B, N, P, H]
    prepended to K, V; present [2, B, N, P+S, H]."""
    heads = int(node.attr("num_heads"))
    causal = bool(node.attr("unidirectional", 0))
    filter_value = float(node.attr("mask_filter_value", -10000.0))
    scale_attr = node.attr("scale")
    sizes_attr = node.attr("qkv_hidden_sizes")
    if node.attr("do_rotary", 0):
        raise NotImplementedByAnyEp(
            f"{node.describe()}: do_rotary is not supported by onnxruntime's CPU Attention kernel either; "
            "fuse the model with MultiHeadAttention + RotaryEmbedding"
        )
    if node.attr("past_present_share_buffer", 0):
        raise NotImplementedByAnyEp(
            f"{node.describe()}: past_present_share_buffer is a GPU-only mode; export without it"
        )
    n_out = len(node.outputs)

    def compute(
        x: Array,
        weights: Array,
        bias: Array | None = None,
        mask: Array | None = None,
        past: Array | None = None,
        attention_bias: Array | None = None,
        past_len: Array | None = None,
    ) -> tuple[Array, ...]:
        odt = x.dtype
        if x.ndim != 3 or weights.ndim != 2 or weights.shape[0] != x.shape[2]:
            raise fail(node, f"input must be [B, S, D] and weights [D, 3*hidden], got {x.shape}, {weights.shape}")
        sizes = list(sizes_attr) if sizes_attr else [weights.shape[1] // 3] * 3
        if len(sizes) != 3 or sum(sizes) != weights.shape[1] or sizes[0] != sizes[1] or any(s % heads for s in sizes):
            raise fail(
                node,
                f"qkv_hidden_sizes {sizes} must be 3 sizes divisible by num_heads={heads}, "
                f"Q and K equal, summing to weights' {weights.shape[1]} columns",
            )
        qkv = np.matmul(_ct(x), _ct(weights))
        if bias is not None:
            qkv = qkv + _ct(bias)
        dq, dk = sizes[0], sizes[1]
        q, k, v = (_heads(node, p, heads) for p in (qkv[..., :dq], qkv[..., dq : dq + dk], qkv[..., dq + dk :]))
        batch, s = x.shape[0], x.shape[1]
        p = 0
        if past is not None:
            if past.ndim != 5 or past.shape[0] != 2 or past.shape[1] != batch or past.shape[2] != heads:
                raise fail(node, f"past must be [2, {batch}, {heads}, past_len, head_size], got {list(past.shape)}")
            p = past.shape[3]
            k = np.concatenate((_ct(past[0]), k), axis=2)
            v = np.concatenate((_ct(past[1]), v), axis=2)
        _check_past_len(node, past_len, p)
        total = p + s
        add = _mask_bias(node, mask, batch, s, p, total, causal, filter_value, qkv.dtype, False)
        ab = None
        if attention_bias is not None:
            _check_bias(node, attention_bias, batch, heads, s, total)
            ab = _ct(attention_bias)
        ctx_, _ = _attend(q, k, v, _scale(scale_attr, dq // heads), [add, ab])
        outs = [_merge(ctx_).astype(odt, copy=False)]
        if n_out > 1:
            if k.shape[-1] != v.shape[-1]:
                raise fail(node, "the present output needs equal K and V head sizes (qkv_hidden_sizes)")
            outs.append(np.stack((k, v)).astype(odt, copy=False))
        return tuple(outs)

    return compute


# ------------------------------------------------------------------------------------ MultiHeadAttention
@REGISTRY.register("MultiHeadAttention", domain=MS)
def build_multihead_attention(node: NodeView, ctx: KernelContext) -> Any:
    """query [B, S, D]; key/value [B, L, D] (bias added) or [B, N, L, H] (used as is), or packed KV
    [B, L, N, 2, H], or packed QKV query [B, S, N, 3, H]; past_key/value [B, N, P, H]."""
    heads = int(node.attr("num_heads"))
    causal = bool(node.attr("unidirectional", 0))
    filter_value = float(node.attr("mask_filter_value", -10000.0))
    scale_attr = node.attr("scale")
    n_out = len(node.outputs)

    def compute(
        q: Array,
        key: Array | None = None,
        value: Array | None = None,
        bias: Array | None = None,
        mask: Array | None = None,
        attention_bias: Array | None = None,
        past_key: Array | None = None,
        past_value: Array | None = None,
        past_len: Array | None = None,
        cache_indirection: Array | None = None,
    ) -> tuple[Array, ...]:
        odt = q.dtype
        if cache_indirection is not None:
            raise NotImplementedByAnyEp(f"{node.describe()}: cache_indirection (beam search) is GPU-only; drop it")
        if (past_key is None) != (past_value is None):
            raise fail(node, "past_key and past_value must be given together")
        qc = _ct(q)
        bc = None if bias is None else _ct(bias)
        if q.ndim == 5:  # packed QKV [B, S, N, 3, H]
            if key is not None or value is not None:
                raise fail(node, "a packed [B, S, N, 3, H] query takes no key nor value")
            qq, kk, vv = (qc[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
            if bc is not None:
                bq, bk, bv = (x.reshape(1, heads, 1, -1) for x in np.split(bc, 3))
                qq, kk, vv = qq + bq, kk + bk, vv + bv
        elif q.ndim == 3:
            if key is None:
                raise fail(node, "a 3-D query needs a key (or give a packed [B, S, N, 3, H] query)")
            dq = q.shape[2]
            qq = _heads(node, qc + bc[:dq] if bc is not None else qc, heads)
            kc = _ct(key)
            if key.ndim == 5:  # packed KV [B, L, N, 2, H]
                if value is not None:
                    raise fail(node, "a packed [B, L, N, 2, H] key takes no value")
                kk, vv = kc[:, :, :, 0].transpose(0, 2, 1, 3), kc[:, :, :, 1].transpose(0, 2, 1, 3)
                if bc is not None:
                    bk, bv = np.split(bc[dq:], 2)
                    kk, vv = kk + bk.reshape(1, heads, 1, -1), vv + bv.reshape(1, heads, 1, -1)
            elif key.ndim == 4:  # [B, N, L, H]: cross attention with projected (cached) K, V
                if value is None or value.ndim != 4:
                    raise fail(node, "a 4-D key needs a 4-D value [B, N, L, H]")
                kk, vv = kc, _ct(value)
            elif key.ndim == 3:
                if value is None or value.ndim != 3:
                    raise fail(node, "a 3-D key needs a 3-D value [B, L, Dv]")
                dk = key.shape[2]
                vc = _ct(value)
                if bc is not None:
                    kc, vc = kc + bc[dq : dq + dk], vc + bc[dq + dk :]
                kk, vv = _heads(node, kc, heads), _heads(node, vc, heads)
            else:
                raise fail(node, f"key must be 3-D, 4-D or 5-D, got shape {list(key.shape)}")
        else:
            raise fail(node, f"query must be [B, S, D] or packed [B, S, N, 3, H], got shape {list(q.shape)}")
        if past_key is not None and past_value is not None:
            kk = np.concatenate((_ct(past_key), kk), axis=2)
            vv = np.concatenate((_ct(past_value), vv), axis=2)
        batch, s, total = qq.shape[0], qq.shape[2], kk.shape[2]
        p = 0 if past_key is None else past_key.shape[2]
        _check_past_len(node, past_len, p)
        add = _mask_bias(node, mask, batch, s, p, total, causal, filter_value, qq.dtype, True)
        ab = None
        if attention_bias is not None:
            _check_bias(node, attention_bias, batch, heads, s, total)
            ab = _ct(attention_bias)
        ctx_, scores = _attend(qq, kk, vv, _scale(scale_attr, qq.shape[3]), [add, ab])
        outs = [
            _merge(ctx_).astype(odt, copy=False),
            kk.astype(odt, copy=False),
            vv.astype(odt, copy=False),
            scores.astype(odt, copy=False),
        ]
        return tuple(outs[:n_out])

    return compute


# ------------------------------------------------------------------------------------ rotary helpers
def _rotate(x: Array, cos: Array, sin: Array, interleaved: bool) -> Array:
    """Rotate the first 2*cos.shape[-1] features of x [..., H] by (cos, sin) [..., R/2]."""
    half = cos.shape[-1]
    rot = 2 * half
    xr = x[..., :rot]
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else (xr[..., :half], xr[..., half:])
    real, imag = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    out = np.stack((real, imag), axis=-1).reshape(xr.shape) if interleaved else np.concatenate((real, imag), -1)
    return np.concatenate((out, x[..., rot:]), axis=-1) if rot < x.shape[-1] else out


# ------------------------------------------------------------------------------------ RotaryEmbedding
@REGISTRY.register("RotaryEmbedding", domain=MS)
def build_rotary(node: NodeView, ctx: KernelContext) -> Any:
    """input [B, S, N*H] or [B, N, S, H]; position_ids [1] (start, then consecutive) or [B, S];
    caches [max_pos, R/2]."""
    interleaved = bool(node.attr("interleaved", 0))
    rot_attr = int(node.attr("rotary_embedding_dim", 0) or 0)
    heads_attr = int(node.attr("num_heads", 0) or 0)
    if node.attr("is_packed_batching", 0):
        raise NotImplementedByAnyEp(f"{node.describe()}: is_packed_batching is GPU-only in onnxruntime; drop it")
    if rot_attr > 0 and not heads_attr:
        raise fail(node, "rotary_embedding_dim needs the num_heads attribute")

    def compute(x: Array, pos: Array, cos: Array, sin: Array) -> tuple[Array]:
        rot = rot_attr or 2 * cos.shape[1]
        if 2 * cos.shape[1] != rot or sin.shape != cos.shape:
            raise fail(node, f"cos/sin caches must be [max_pos, {rot // 2}], got {list(cos.shape)}, {list(sin.shape)}")
        if x.ndim == 4:
            v, s = x, x.shape[2]
        elif x.ndim == 3:
            head = x.shape[2] // heads_attr if heads_attr else rot
            if x.shape[2] % head:
                raise fail(node, f"hidden size {x.shape[2]} is not a multiple of head size {head}")
            v, s = _heads(node, x, x.shape[2] // head), x.shape[1]
        else:
            raise fail(node, f"input must be 3-D or 4-D, got shape {list(x.shape)}")
        if rot > v.shape[3]:
            raise fail(node, f"rotary dim {rot} exceeds head size {v.shape[3]}")
        positions = _positions(node, pos, v.shape[0], s, cos.shape[0])
        c, sn = _ct(cos)[positions][:, None], _ct(sin)[positions][:, None]  # [B, 1, S, R/2]
        out = _rotate(_ct(v), c, sn, interleaved).astype(x.dtype, copy=False)
        return (out if x.ndim == 4 else _merge(out),)

    return compute


def _positions(node: NodeView, pos: Array, batch: int, s: int, max_pos: int) -> Array:
    """position_ids as [B, S]: [1] is a start position, [B, S] is used as is."""
    pos = np.asarray(pos, dtype=np.int64)
    if pos.size == 1:
        out = np.broadcast_to(pos.reshape(()) + np.arange(s), (batch, s))
    elif pos.shape == (batch, s):
        out = pos
    else:
        raise fail(node, f"position_ids must be [1] or [{batch}, {s}], got {list(pos.shape)}")
    if out.size and (out.min() < 0 or out.max() >= max_pos):
        raise fail(node, f"position_ids must lie in [0, {max_pos}) (the caches' length), got {out.min()}..{out.max()}")
    return out


# ------------------------------------------------------------------------------------ GroupQueryAttention
def split_qkv(
    node: NodeView, q: Array, key: Array | None, value: Array | None, heads: int, kv_heads: int
) -> tuple[Array, Array, Array, int]:
    """Query, key and value as [B, heads, S, head] (key/value with ``kv_heads``) and the head size,
    from packed QKV (no key: [B, S, (heads + 2 * kv_heads) * head]) or separate [B, S, hidden] inputs;
    GroupQueryAttention's and SparseAttention's layouts."""
    qc = _ct(q)
    if key is None:
        if value is not None:
            raise fail(node, "packed QKV (no key) takes no value")
        head = q.shape[2] // (heads + 2 * kv_heads)
        if q.ndim != 3 or head * (heads + 2 * kv_heads) != q.shape[2]:
            raise fail(node, f"packed QKV {list(q.shape)} must be [B, S, (num_heads + 2*kv_num_heads) * head_size]")
        qq = _heads(node, qc[..., : heads * head], heads)
        kk = _heads(node, qc[..., heads * head : (heads + kv_heads) * head], kv_heads)
        return qq, kk, _heads(node, qc[..., (heads + kv_heads) * head :], kv_heads), head
    if value is None:
        raise fail(node, "key needs value")
    head = q.shape[2] // heads
    if key.shape[-1] != kv_heads * head or value.shape[-1] != kv_heads * head:
        raise fail(node, f"key/value must be [B, S, kv_num_heads * {head}], got {list(key.shape)}, {list(value.shape)}")
    return _heads(node, qc, heads), _heads(node, _ct(key), kv_heads), _heads(node, _ct(value), kv_heads), head


@REGISTRY.register("GroupQueryAttention", domain=MS)
def build_gqa(node: NodeView, ctx: KernelContext) -> Any:
    """query [B, S, N*H] (or packed [B, S, (N+2*Nkv)*H]), key/value [B, S, Nkv*H]; past_key/value
    [B, Nkv, P, H] buffers holding seqlens_k[b]+1-S valid entries; present [B, Nkv, max(P, T), H]."""
    heads, kv_heads = int(node.attr("num_heads")), int(node.attr("kv_num_heads"))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise fail(node, f"num_heads={heads} must be a positive multiple of kv_num_heads={kv_heads}")
    scale_attr = node.attr("scale")
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    window = int(node.attr("local_window_size", -1))
    do_rotary, interleaved = bool(node.attr("do_rotary", 0)), bool(node.attr("rotary_interleaved", 0))
    smooth = int(node.attr("smooth_softmax", -1)) == 1
    qk_mode = int(node.attr("qk_output", 0))
    for name, ok in (("k_quant_type", "NONE"), ("v_quant_type", "NONE")):
        val = node.attr(name, ok)
        if (val.decode() if isinstance(val, bytes) else val) != ok:
            raise NotImplementedByAnyEp(f"{node.describe()}: quantized KV caches ({name}) are not served; use NONE")
    causal = bool(int(node.attr("causal", 1)))
    if not causal and window != -1:  # onnxruntime refuses it too
        raise fail(node, "local_window_size must be -1 when causal is 0")
    if int(node.attr("kv_cache_bit_width", 0) or 0):
        raise fail(node, "kv_cache_bit_width must be 0 (unset) without a quantized KV cache")
    if int(node.attr("sliding_window_cache", 0)):
        raise NotImplementedByAnyEp(f"{node.describe()}: sliding_window_cache=1 is not served; use a linear cache (0)")
    if qk_mode not in (0, 1, 2):
        raise fail(node, f"qk_output must be 0, 1 or 2, got {qk_mode}")
    n_out = len(node.outputs)

    def compute(
        q: Array,
        key: Array | None,
        value: Array | None,
        past_key: Array | None,
        past_value: Array | None,
        seqlens_k: Array,
        total_len: Array,
        cos: Array | None = None,
        sin: Array | None = None,
        pos_ids: Array | None = None,
        attention_bias: Array | None = None,
        head_sink: Array | None = None,
        k_scale: Array | None = None,
        v_scale: Array | None = None,
        q_norm: Array | None = None,
        k_norm: Array | None = None,
    ) -> tuple[Array, ...]:
        if k_scale is not None or v_scale is not None or q_norm is not None or k_norm is not None:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: k_scale/v_scale/q_norm_weight/k_norm_weight are not served"
            )
        if (past_key is None) != (past_value is None):
            raise fail(node, "past_key and past_value must be given together")
        odt = q.dtype
        batch, s = q.shape[0], q.shape[1]
        qq, kk, vv, head = split_qkv(node, q, key, value, heads, kv_heads)
        total = int(np.asarray(total_len).reshape(-1)[0])
        lens = np.asarray(seqlens_k, dtype=np.int64).reshape(-1) + 1  # total valid length per batch
        if lens.shape[0] != batch:
            raise fail(node, f"seqlens_k must have {batch} entries, got {lens.shape[0]}")
        first_prompt = past_key is None or (s > 1 and s == total)
        past_lens = np.zeros(batch, np.int64) if first_prompt else lens - s
        if (past_lens < 0).any() or lens.max(initial=0) > total:
            raise fail(
                node,
                f"seqlens_k {list(lens - 1)} must be >= sequence_length-1={s - 1} and < total_sequence_length={total}",
            )
        if do_rotary:
            if cos is None or sin is None or cos.shape != sin.shape or cos.ndim != 2 or 2 * cos.shape[1] > head:
                raise fail(node, f"do_rotary needs cos_cache and sin_cache [max_pos, <= {head // 2}]")
            if first_prompt:
                start = np.zeros(1, np.int64) if pos_ids is None else np.asarray(pos_ids).reshape(-1)[:1]
                positions = _positions(node, start, batch, s, cos.shape[0])
            else:
                given = pos_ids if pos_ids is not None else past_lens[:, None] + np.arange(s)
                positions = _positions(node, given, batch, s, cos.shape[0])
            c, sn = _ct(cos)[positions][:, None], _ct(sin)[positions][:, None]
            qq, kk = _rotate(qq, c, sn, interleaved), _rotate(kk, c, sn, interleaved)
        buf = total if past_key is None else max(past_key.shape[2], total)
        present_k = np.zeros((batch, kv_heads, buf, head), dtype=qq.dtype)
        present_v = np.zeros_like(present_k)
        if past_key is not None and past_value is not None:  # copy the past, clear what is stale
            n_past = min(past_key.shape[2], buf)
            present_k[:, :, :n_past] = past_key[:, :, :n_past]
            present_v[:, :, :n_past] = past_value[:, :, :n_past]
            stale = np.arange(n_past) >= past_lens[:, None]  # [B, P]
            if stale.any():
                present_k.transpose(0, 2, 1, 3)[:, :n_past][stale] = 0
                present_v.transpose(0, 2, 1, 3)[:, :n_past][stale] = 0
        slots = past_lens[:, None] + np.arange(s)  # [B, S] where the new entries go
        if slots.max(initial=0) >= buf:
            raise fail(node, f"seqlens_k {list(lens - 1)} overflow the present buffer of length {buf}")
        bidx = np.arange(batch)[:, None]
        present_k.transpose(0, 2, 1, 3)[bidx, slots] = kk.transpose(0, 2, 1, 3)
        present_v.transpose(0, 2, 1, 3)[bidx, slots] = vv.transpose(0, 2, 1, 3)
        group = heads // kv_heads  # query heads sharing a KV head: matmul broadcasts K, V over the group
        qg = qq.reshape(batch, kv_heads, group, s, head)
        sc = qq.dtype.type(_scale(scale_attr, head))
        scores = (np.matmul(qg, np.swapaxes(present_k, -1, -2)[:, :, None]) * sc).reshape(batch, heads, s, buf)
        if softcap > 0:
            scores = np.tanh(scores / softcap) * qq.dtype.type(softcap)
        if attention_bias is not None:
            _check_bias(node, attention_bias, batch, heads, s, total)
            scores[..., :total] += _ct(attention_bias)
        j = np.arange(buf)
        # [B, S] the last key each query sees: its own position, and never past the batch entry's
        # valid length (a padded prompt row sees up to seqlens_k[b], as onnxruntime's)
        last = np.minimum(past_lens[:, None] + np.arange(s), lens[:, None] - 1)
        allowed = j <= (last if causal else np.broadcast_to(lens[:, None] - 1, last.shape))[..., None]
        if window > 0:  # the window holds local_window_size keys, the query's own included
            allowed &= j > (last - window)[..., None]
        allowed = allowed[:, None]  # [B, 1, S, T]
        qk_raw = np.where(allowed, scores, 0)[..., :total] if qk_mode == 1 else None
        logits = np.where(allowed, scores, -np.inf)
        if smooth or head_sink is not None:
            sink = np.zeros((1, heads, 1, 1), qq.dtype) if head_sink is None else _ct(head_sink).reshape(1, heads, 1, 1)
            mx = np.maximum(logits.max(axis=-1, keepdims=True), sink)
            e = np.exp(logits - mx)
            probs = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - mx))
        else:
            probs = _softmax(logits)
        ctx4 = np.matmul(probs.reshape(batch, kv_heads, group, s, buf), present_v[:, :, None])
        out = _merge(ctx4.reshape(batch, heads, s, head)).astype(odt, copy=False)
        outs = [out, present_k.astype(odt, copy=False), present_v.astype(odt, copy=False)]
        if n_out > 3:
            qk = qk_raw if qk_mode == 1 else probs[..., :total] if qk_mode == 2 else None
            if qk is None:
                raise fail(node, "the output_qk output needs qk_output=1 (scores) or 2 (probabilities)")
            outs.append(qk.astype(odt, copy=False))
        return tuple(outs[:n_out])

    return compute


# ------------------------------------------------------------------------------------ EmbedLayerNormalization
@REGISTRY.register("EmbedLayerNormalization", domain=MS)
def build_embed_layer_norm(node: NodeView, ctx: KernelContext) -> Any:
    """LayerNorm(word[ids] + position[pos] + segment[seg]); mask [B, S] -> mask_index [B] (count
    of ones); embedding_sum is the sum before normalising."""
    eps = float(node.attr("epsilon", 1e-12))
    n_out = len(node.outputs)

    def compute(
        ids: Array,
        seg_ids: Array | None,
        word: Array,
        position: Array,
        segment: Array | None,
        gamma: Array,
        beta: Array,
        mask: Array | None = None,
        pos_ids: Array | None = None,
    ) -> tuple[Array, ...]:
        if ids.ndim != 2:
            raise fail(node, f"input_ids must be [batch, sequence], got shape {list(ids.shape)}")
        if (seg_ids is None) != (segment is None):
            raise fail(node, "segment_ids and segment_embedding must be given together")
        batch, s = ids.shape
        if pos_ids is None:
            pos = np.broadcast_to(np.arange(s), (batch, s))
        elif pos_ids.shape in ((batch, s), (1, s)):
            pos = np.broadcast_to(pos_ids, (batch, s))
        else:
            raise fail(node, f"position_ids must be [{batch}, {s}] or [1, {s}], got {list(pos_ids.shape)}")
        for name, idx, table in (
            ("input_ids", ids, word),
            ("position_ids", pos, position),
            ("segment_ids", seg_ids, segment),
        ):
            if idx is not None and table is not None and idx.size and (idx.min() < 0 or idx.max() >= table.shape[0]):
                raise fail(node, f"{name} must lie in [0, {table.shape[0]}), got {idx.min()}..{idx.max()}")
        emb = _ct(word)[ids] + _ct(position)[pos]
        if segment is not None:
            emb = emb + _ct(segment)[seg_ids]
        mean = emb.mean(axis=-1, keepdims=True)
        d = emb - mean
        var = np.mean(d * d, axis=-1, keepdims=True)
        y = d / np.sqrt(var + eps) * _ct(gamma) + _ct(beta)
        outs: list[Any] = [y.astype(word.dtype, copy=False)]
        if n_out > 1:
            idx = np.zeros(batch, np.int32) if mask is None else np.count_nonzero(mask == 1, axis=1).astype(np.int32)
            outs.append(idx)
        if n_out > 2:
            outs.append(emb.astype(word.dtype, copy=False))
        return tuple(outs)

    return compute


# ------------------------------------------------------------------------------------ BiasSoftmax
@REGISTRY.register("BiasSoftmax", domain=MS)
def build_bias_softmax(node: NodeView, ctx: KernelContext) -> Any:
    """Softmax(data + bias) over the axes from ``axis`` on (flattened as opset-1 Softmax does). It is
    onnxruntime's fusion of Add + Softmax, so bias broadcasts as Add's does; is_inner_broadcast only
    tells the GPU kernel which dims bias lacks (onnxruntime has no CPU kernel to compare with)."""
    axis_attr = int(node.attr("axis", 1))

    def compute(x: Array, bias: Array) -> tuple[Array]:
        axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
        if not 0 <= axis < x.ndim:
            raise fail(node, f"axis {axis_attr} is out of range for rank {x.ndim}")
        try:
            z = _ct(x) + _ct(bias)
        except ValueError as err:
            raise fail(node, f"bias {list(bias.shape)} does not broadcast to data {list(x.shape)}") from err
        flat = z.reshape(int(np.prod(z.shape[:axis], dtype=np.int64)), -1)
        return (_softmax(flat).reshape(z.shape).astype(x.dtype, copy=False),)

    return compute

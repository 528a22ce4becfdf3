"""com.microsoft attention-family and sequence-model ops beyond contrib_attention.py, following
onnxruntime 1.31's CPU contrib kernels: DecoderMaskedMultiHeadAttention (one decoding step over a
shared KV buffer, beam cache indirection included), SparseAttention (block-sparse causal GQA),
MRotaryEmbedding (three position streams), LinearAttention and LinearAttentionGate, and
CausalConvWithState; plus the ai.onnx LinearAttention-27 / CausalConvWithState-27 and the
ai.onnx.preview FlexAttention natively. The shared math (heads, softmax, rotation, scale) is
contrib_attention.py's, imported so there is one source of truth.

onnxruntime writes the new keys/values into the past buffer in place (past and present share it);
here the present is a copy of the past with the new entries written, which is what the shared
buffer holds after the step."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_seq_schemas import register_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.contrib_attention import _ct, _heads, _merge, _rotate, _scale, _softmax, split_qkv
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.registry import REGISTRY

Array = np.ndarray

register_schemas()


# ------------------------------------------------------------------------------------ DecoderMaskedMultiHeadAttention
@REGISTRY.register("DecoderMaskedMultiHeadAttention", domain=MS)
def build_dmmha(node: NodeView, ctx: KernelContext) -> Any:
    """query [B, 1, D]. Self attention: key/value [B, 1, D], past_key/value [B, N, M, H] holding
    past_sequence_length valid entries; the new entry goes to that slot. Cross attention (no past,
    no present): key/value are the projected [B, N, L, H]. With beam_width > 1, past position j of
    row b reads beam cache_indirection[b, j] of b's batch entry."""
    heads = int(node.attr("num_heads"))
    if heads <= 0:
        raise fail(node, f"num_heads must be positive, got {heads}")
    filter_value = float(node.attr("mask_filter_value", -10000.0))
    scale_attr = node.attr("scale")
    share = bool(node.attr("past_present_share_buffer", 0))
    want_qk = bool(node.attr("output_qk", 0))
    n_out = len(node.outputs)
    wants_present = n_out > 1 and any(node.outputs[1:3])

    def compute(
        q: Array,
        key: Array | None = None,
        value: Array | None = None,
        mask: Array | None = None,
        attention_bias: Array | None = None,
        past_key: Array | None = None,
        past_value: Array | None = None,
        past_len: Array | None = None,
        beam_width: Array | None = None,
        cache_indir: Array | None = None,
        bias: Array | None = None,
    ) -> tuple[Array | None, ...]:
        if q.ndim != 3 or q.shape[1] != 1:
            raise fail(node, f"query must be [batch, 1, hidden] (one decoding step), got {list(q.shape)}")
        if key is None or value is None:
            raise fail(node, "packed QKV is not served by onnxruntime's CPU kernel; give key and value")
        batch, d = q.shape[0], q.shape[2]
        if d % heads:
            raise fail(node, f"hidden size {d} does not split into {heads} heads")
        head = d // heads
        qq = _ct(q) + (_ct(bias)[:d] if bias is not None else 0)
        qh = _heads(node, qq, heads)  # [B, N, 1, H]
        scale = qh.dtype.type(_scale(scale_attr, head))
        cross = past_key is None and not wants_present
        if cross:
            if attention_bias is not None:
                raise NotImplementedByAnyEp(
                    f"{node.describe()}: attention_bias with cross attention is refused by onnxruntime too; drop it"
                )
            if key.ndim != 4 or value.shape != key.shape or key.shape[:2] != (batch, heads) or key.shape[3] != head:
                raise fail(
                    node, f"cross attention needs key/value [{batch}, {heads}, L, {head}], got {list(key.shape)}"
                )
            kk, vv, past = _ct(key), _ct(value), 0
            total = kk.shape[2]
            presents: list[Array | None] = [None, None]
        else:
            if not share:
                raise fail(node, "self attention needs past_present_share_buffer=1 (onnxruntime's CPU kernel does too)")
            if past_key is None or past_value is None or past_len is None:
                raise fail(node, "self attention needs past_key, past_value and past_sequence_length")
            if key.shape != q.shape or value.shape != q.shape:
                raise fail(node, f"key/value must be [{batch}, 1, {d}], got {list(key.shape)}, {list(value.shape)}")
            if past_key.ndim != 4 or past_key.shape != past_value.shape or past_key.shape[:2] != (batch, heads):
                raise fail(
                    node, f"past_key/value must be [{batch}, {heads}, max_len, {head}], got {list(past_key.shape)}"
                )
            past, cap = int(np.asarray(past_len).reshape(-1)[0]), past_key.shape[2]
            if not 0 <= past < cap:
                raise fail(node, f"past_sequence_length {past} must lie in [0, {cap}) (the buffer's length)")
            kc, vc = _ct(key), _ct(value)
            if bias is not None:
                bc = _ct(bias)
                kc, vc = kc + bc[d : 2 * d], vc + bc[2 * d :]
            kn, vn = _heads(node, kc, heads), _heads(node, vc, heads)
            pk, pv = _gather_beams(node, _ct(past_key), _ct(past_value), past, beam_width, cache_indir)
            kk, vv = np.concatenate((pk, kn), axis=2), np.concatenate((pv, vn), axis=2)
            total = past + 1
            present_k, present_v = past_key.copy(), past_value.copy()
            present_k[:, :, past] = kn[:, :, 0]
            present_v[:, :, past] = vn[:, :, 0]
            presents = [present_k, present_v]
        scores = np.matmul(qh, np.swapaxes(kk, -1, -2)) * scale  # [B, N, 1, T]
        if attention_bias is not None:
            s = attention_bias.shape
            if attention_bias.ndim != 4 or s[0] not in (1, batch) or s[1] not in (1, heads) or s[2:] != (1, total):
                raise fail(node, f"attention_bias must be [{batch} or 1, {heads} or 1, 1, {total}], got {list(s)}")
            scores = scores + _ct(attention_bias)
        if mask is not None:
            if mask.shape != (batch, total):
                raise NotImplementedByAnyEp(
                    f"{node.describe()}: only a 2-D key padding mask [{batch}, {total}] is served "
                    f"(as by onnxruntime's CPU kernel), got {list(mask.shape)}"
                )
            scores = scores + np.where(mask == 0, scores.dtype.type(filter_value), 0)[:, None, None, :]
        out = _merge(np.matmul(_softmax(scores), vv)).astype(q.dtype, copy=False)
        qk = scores.astype(q.dtype, copy=False) if want_qk else None
        if n_out > 3 and node.outputs[3] and qk is None:
            raise fail(node, "the qk output needs output_qk=1")
        return tuple([out, *presents, qk][:n_out])

    return compute


def _gather_beams(
    node: NodeView, pk: Array, pv: Array, past: int, beam_width: Array | None, cache_indir: Array | None
) -> tuple[Array, Array]:
    """The past entries each row attends to: [B, N, P, H]; with beams, position j of row b comes
    from beam cache_indirection[batch, beam, j] of the same batch entry."""
    width = 1 if beam_width is None else int(np.asarray(beam_width).reshape(-1)[0])
    if width <= 1:
        return pk[:, :, :past], pv[:, :, :past]
    if cache_indir is None:
        raise fail(node, "beam_width > 1 needs the cache_indirection input")
    rows, cap = pk.shape[0], pk.shape[2]
    if rows % width or cache_indir.shape != (rows // width, width, cap):
        raise fail(
            node, f"cache_indirection must be [{rows // max(width, 1)}, {width}, {cap}], got {list(cache_indir.shape)}"
        )
    sel = np.asarray(cache_indir, np.int64).reshape(rows, cap)[:, :past]  # [B, P] beam per position
    if sel.size and (sel.min() < 0 or sel.max() >= width):
        raise fail(node, f"cache_indirection entries must lie in [0, {width})")
    src = (np.arange(rows) // width * width)[:, None] + sel  # [B, P] source row
    j = np.arange(past)[None, :]
    return pk.transpose(0, 2, 1, 3)[src, j].transpose(0, 2, 1, 3), pv.transpose(0, 2, 1, 3)[src, j].transpose(
        0, 2, 1, 3
    )


# ------------------------------------------------------------------------------------ SparseAttention
@REGISTRY.register("SparseAttention", domain=MS)
def build_sparse_attention(node: NodeView, ctx: KernelContext) -> Any:
    """query [B, S, N*H] (or packed [B, S, (N+2*Nkv)*H]); past/present [B, Nkv, M, H] buffers;
    key_total_sequence_lengths[b] = valid keys after the step. Query at absolute position p sees
    keys <= p; in a sparse layout (head % layouts) only the key blocks that its block row lists
    (CSR block_row_indices / block_col_indices)."""
    heads, kv_heads = int(node.attr("num_heads")), int(node.attr("kv_num_heads"))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise fail(node, f"num_heads={heads} must be a positive multiple of kv_num_heads={kv_heads}")
    block = int(node.attr("sparse_block_size"))
    if block <= 0:
        raise fail(node, f"sparse_block_size must be positive, got {block}")
    scale_attr = node.attr("scale")
    do_rotary, interleaved = bool(node.attr("do_rotary", 0)), bool(node.attr("rotary_interleaved", 0))

    def compute(
        q: Array,
        key: Array | None,
        value: Array | None,
        past_key: Array,
        past_value: Array,
        rows: Array,
        cols: Array,
        total_len: Array,
        key_lens: Array,
        cos: Array | None = None,
        sin: Array | None = None,
    ) -> tuple[Array, Array, Array]:
        if q.ndim != 3:
            raise fail(node, f"query must be [batch, sequence, hidden], got {list(q.shape)}")
        batch, s = q.shape[:2]
        if key is not None and (key.shape[:2] != (batch, s) or value is None or value.shape != key.shape):
            raise fail(node, f"key/value must be [{batch}, {s}, kv_num_heads * head], got {list(key.shape)}")
        qq, kk, vv, head = split_qkv(node, q, key, value, heads, kv_heads)
        cap = past_key.shape[2]
        if past_key.shape != (batch, kv_heads, cap, head) or past_value.shape != past_key.shape:
            raise fail(
                node, f"past_key/value must be [{batch}, {kv_heads}, max_len, {head}], got {list(past_key.shape)}"
            )
        total = int(np.asarray(total_len).reshape(-1)[0])
        lens = np.asarray(key_lens, np.int64).reshape(-1)
        if lens.shape[0] != batch or lens.min(initial=s) < s or lens.max(initial=0) > min(total, cap):
            raise fail(node, f"key_total_sequence_lengths {lens.tolist()} must lie in [{s}, {min(total, cap)}]")
        past = np.zeros(batch, np.int64) if total == s else lens - s  # [B]
        if do_rotary:
            if cos is None or sin is None or cos.shape != sin.shape or cos.ndim != 2 or 2 * cos.shape[1] > head:
                raise fail(node, f"do_rotary needs cos_cache and sin_cache [max_pos, <= {head // 2}]")
            pos = past[:, None] + np.arange(s)
            if pos.max(initial=0) >= cos.shape[0]:
                raise fail(node, f"positions up to {pos.max()} exceed the rotary caches' {cos.shape[0]} rows")
            c, sn = _ct(cos)[pos][:, None], _ct(sin)[pos][:, None]
            qq, kk = _rotate(qq, c, sn, interleaved), _rotate(kk, c, sn, interleaved)
        present_k, present_v = past_key.copy(), past_value.copy()
        slots, bidx = past[:, None] + np.arange(s), np.arange(batch)[:, None]
        present_k.transpose(0, 2, 1, 3)[bidx, slots] = kk.transpose(0, 2, 1, 3)
        present_v.transpose(0, 2, 1, 3)[bidx, slots] = vv.transpose(0, 2, 1, 3)
        allowed = _sparse_allowed(node, rows, cols, heads, block, slots, cap)  # [B, N, S, M]
        group = heads // kv_heads
        pkc, pvc = _ct(present_k), _ct(present_v)
        sc = qq.dtype.type(_scale(scale_attr, head))
        scores = np.matmul(qq.reshape(batch, kv_heads, group, s, head), np.swapaxes(pkc, -1, -2)[:, :, None]) * sc
        scores = scores.reshape(batch, heads, s, cap)
        probs = _softmax(np.where(allowed, scores, np.finfo(scores.dtype).min))
        probs = np.where(np.arange(cap) <= slots[:, None, :, None], probs, 0)
        ctx4 = np.matmul(probs.reshape(batch, kv_heads, group, s, cap), pvc[:, :, None]).reshape(batch, heads, s, head)
        return _merge(ctx4).astype(q.dtype, copy=False), present_k, present_v

    return compute


def _sparse_allowed(node: NodeView, rows: Array, cols: Array, heads: int, block: int, pos: Array, cap: int) -> Array:
    """[B, N, S, M] keys each query may see: causal, and for a layout with sparse rows only the
    listed key blocks (a block row listing as many blocks as a dense one is treated as dense, as
    onnxruntime does). Masked keys get the lowest float, not -inf, so a row is never empty."""
    if rows.ndim != 2 or cols.ndim != 2 or rows.shape[0] != cols.shape[0] or rows.shape[0] == 0:
        raise fail(
            node,
            f"block_row_indices/block_col_indices must be [layouts, ...], got {list(rows.shape)}, {list(cols.shape)}",
        )
    n_layouts, n_rows = rows.shape[0], rows.shape[1] - 1
    if heads % n_layouts:
        raise fail(node, f"num_heads {heads} must be a multiple of the {n_layouts} sparse layouts")
    if pos.max(initial=0) // block >= n_rows:
        raise fail(node, f"positions up to {pos.max()} exceed the layout's {n_rows} block rows of {block}")
    n_blocks = -(-cap // block)
    dense_nnz = n_rows * (n_rows + 1) // 2
    masks = np.zeros((n_layouts, n_rows, max(n_blocks, n_rows)), bool)
    for lay in range(n_layouts):  # tiny CSR tables: one pass per layout
        r = rows[lay].astype(np.int64)
        counts = np.diff(r)
        if (counts < 0).any() or r[-1] > cols.shape[1]:
            raise fail(node, f"block_row_indices[{lay}] is not a valid CSR row pointer")
        row_of = np.repeat(np.arange(n_rows), counts)
        c = cols[lay, : r[-1]].astype(np.int64)
        if c.size and (c.min() < 0 or c.max() >= masks.shape[2]):
            raise fail(node, f"block_col_indices[{lay}] holds a block outside [0, {masks.shape[2]})")
        masks[lay, row_of, c] = True
        if r[-1] >= dense_nnz:  # a layout without sparsity is plain causal
            masks[lay] = True
        else:
            masks[lay, counts == np.arange(1, n_rows + 1)] = True
    keys = np.arange(cap)
    layout = np.arange(heads) % n_layouts  # [N]
    brow = pos // block  # [B, S]
    allowed = masks[layout[None, :, None, None], brow[:, None, :, None], (keys // block)[None, None, None, :]]
    return allowed & (keys <= pos[:, None, :, None])


# ------------------------------------------------------------------------------------ MRotaryEmbedding
@REGISTRY.register("MRotaryEmbedding", domain=MS)
def build_mrotary(node: NodeView, ctx: KernelContext) -> Any:
    """input [B, S, N*H] or [B, N, S, H]; position_ids [3, B, S] (T, H, W streams); rotary column
    c takes its cos/sin from the stream mrope_section assigns it (sectioned: contiguous chunks;
    interleaved: T with H and W every third column); cos/sin are multiplied by ``scale``."""
    section = [int(v) for v in node.attr("mrope_section")]
    if len(section) != 3 or min(section) < 0:
        raise fail(node, f"mrope_section must be 3 non-negative sizes, got {section}")
    layout = int(node.attr("mrope_layout", 0) or 0)
    if layout not in (0, 1):
        raise fail(node, f"mrope_layout must be 0 (sectioned) or 1 (interleaved), got {layout}")
    heads_attr = int(node.attr("num_heads", 0) or 0)
    rot_attr = int(node.attr("rotary_embedding_dim", 0) or 0)
    interleaved = int(node.attr("interleaved", 0) or 0) == 1
    scale = np.float32(node.attr("scale", 1.0) if node.attr("scale") is not None else 1.0)
    if node.attr("is_packed_batching", 0):
        raise NotImplementedByAnyEp(f"{node.describe()}: is_packed_batching is GPU-only in onnxruntime; drop it")
    if rot_attr > 0 and heads_attr <= 0:
        raise fail(node, "rotary_embedding_dim needs the num_heads attribute")

    def compute(x: Array, pos: Array, cos: Array, sin: Array) -> tuple[Array]:
        if x.ndim == 4:
            v = x
        elif x.ndim == 3:
            if heads_attr <= 0 or x.shape[2] % heads_attr:
                raise fail(node, f"a 3-D input needs num_heads dividing its hidden size {x.shape[2]}")
            v = _heads(node, x, heads_attr)
        else:
            raise fail(node, f"input must be 3-D or 4-D, got shape {list(x.shape)}")
        batch, _, s, head = v.shape
        rot = rot_attr or head
        if rot > head or cos.ndim != 2 or cos.shape != sin.shape or cos.shape[1] != rot // 2:
            raise fail(node, f"cos/sin caches must be [max_pos, {rot // 2}] with rotary dim <= head size {head}")
        if sum(section) != rot // 2:
            raise fail(node, f"sum of mrope_section {section} must equal rotary_embedding_dim / 2 = {rot // 2}")
        if pos.shape != (3, batch, s):
            raise fail(node, f"position_ids must be [3, {batch}, {s}], got {list(pos.shape)}")
        if pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
            raise fail(node, f"position_ids must lie in [0, {cos.shape[0]}), got {pos.min()}..{pos.max()}")
        stream = _mrope_streams(section, layout, rot // 2)  # [R/2] stream per column
        col = np.arange(rot // 2)
        p = np.moveaxis(np.asarray(pos, np.int64)[stream], 0, -1)  # [B, S, R/2]
        c = (_ct(cos)[p, col] * scale)[:, None]  # [B, 1, S, R/2]
        sn = (_ct(sin)[p, col] * scale)[:, None]
        out = _rotate(_ct(v), c.astype(_ct(v).dtype), sn.astype(_ct(v).dtype), interleaved).astype(x.dtype, copy=False)
        return (out if x.ndim == 4 else _merge(out),)

    return compute


def _mrope_streams(section: list[int], layout: int, half: int) -> Array:
    """Which position stream (0=T, 1=H, 2=W) owns each of the half rotary columns."""
    out = np.zeros(half, np.int64)
    if layout == 0:
        out[:] = np.repeat(np.arange(3), section)[:half]
    else:
        for dim in (1, 2):
            out[np.arange(dim, min(3 * section[dim], half), 3)] = dim
    return out


# ------------------------------------------------------------------------------------ LinearAttention
RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def _text(value: Any, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _linear_attention(
    node: NodeView,
    q: Array,
    k: Array,
    v: Array,
    past: Array | None,
    decay: Array | None,
    beta: Array | None,
    q_heads: int,
    kv_heads: int,
    rule: str,
    scale_attr: float,
    strict: bool,
) -> tuple[Array, Array]:
    """The recurrence, sequential over time and vectorised over batch and heads, in float32:
    S *= exp(g_t); delta rules: u = beta_t * (v_t - S^T k_t), else u = v_t; S += k_t u^T;
    o_t = scale * q_t^T S. Key heads may be fewer than KV heads (shared), query heads more
    (grouped) or, in com.microsoft's form, fewer (inverse grouping: the output has KV heads).
    ``strict`` is ai.onnx's form: decay/beta only for the rules that use them, K with KV heads."""
    gating, delta = RULES[rule]
    for name, x in (("query", q), ("key", k), ("value", v)):
        if x.ndim != 3:
            raise fail(node, f"{name} must be [batch, sequence, heads * size], got {list(x.shape)}")
    batch, steps = q.shape[:2]
    if k.shape[:2] != (batch, steps) or v.shape[:2] != (batch, steps):
        raise fail(node, f"key/value must be [{batch}, {steps}, ...], got {list(k.shape)}, {list(v.shape)}")
    if q.shape[2] % q_heads or v.shape[2] % kv_heads:
        raise fail(node, f"query/value hidden sizes must split into {q_heads}/{kv_heads} heads")
    dk, dv = q.shape[2] // q_heads, v.shape[2] // kv_heads
    k_heads = k.shape[2] // dk if k.shape[2] % dk == 0 else 0
    if not k_heads or kv_heads % k_heads or (strict and k_heads != kv_heads):
        raise fail(node, f"key hidden size {k.shape[2]} must be (a divisor of) kv_num_heads * {dk}")
    if max(q_heads, kv_heads) % min(q_heads, kv_heads) or (strict and q_heads % kv_heads):
        raise fail(node, f"q_num_heads={q_heads} and kv_num_heads={kv_heads} must divide one another")
    if gating and decay is None or delta and beta is None:
        raise fail(node, f"update_rule '{rule}' needs the {'decay' if gating and decay is None else 'beta'} input")
    if strict and (decay is not None and not gating or beta is not None and not delta):
        raise fail(
            node, f"update_rule '{rule}' takes no {'decay' if decay is not None and not gating else 'beta'} input"
        )
    f32 = np.float32
    q4 = q.astype(f32).reshape(batch, steps, q_heads, dk)
    k4 = np.repeat(k.astype(f32).reshape(batch, steps, k_heads, dk), kv_heads // k_heads, axis=2)
    v4 = v.astype(f32).reshape(batch, steps, kv_heads, dv)
    g4 = b4 = None
    if gating and decay is not None:
        if decay.ndim != 3 or decay.shape[:2] != (batch, steps) or decay.shape[2] not in (kv_heads, kv_heads * dk):
            raise fail(
                node, f"decay must be [{batch}, {steps}, {kv_heads} or {kv_heads * dk}], got {list(decay.shape)}"
            )
        g4 = np.exp(decay.astype(f32).reshape(batch, steps, kv_heads, -1))[..., None]  # [B, T, H, dk|1, 1]
    if delta and beta is not None:
        if beta.ndim != 3 or beta.shape[:2] != (batch, steps) or beta.shape[2] not in (kv_heads, 1):
            raise fail(node, f"beta must be [{batch}, {steps}, {kv_heads} or 1], got {list(beta.shape)}")
        b4 = beta.astype(f32).reshape(batch, steps, -1, 1)  # [B, T, H|1, 1]
    shape = (batch, kv_heads, dk, dv)
    if past is not None and past.shape != shape:
        raise fail(node, f"past_state must be {list(shape)}, got {list(past.shape)}")
    state = np.zeros(shape, f32) if past is None else past.astype(f32)
    scale = f32(scale_attr) if scale_attr else f32(1.0) / np.sqrt(f32(dk))
    grouped = q_heads >= kv_heads
    q_of = np.arange(kv_heads) * q_heads // kv_heads  # inverse grouping: the query head of each KV head
    out = np.empty((batch, steps, max(q_heads, kv_heads), dv), f32)
    for t in range(steps):  # the recurrence is sequential in time
        if g4 is not None:
            state = state * g4[:, t]
        kt = k4[:, t]
        u = v4[:, t]
        if b4 is not None:
            u = b4[:, t] * (u - np.einsum("bhkv,bhk->bhv", state, kt))
        state = state + kt[..., :, None] * u[..., None, :]
        if grouped:
            qt = q4[:, t].reshape(batch, kv_heads, q_heads // kv_heads, dk)
            out[:, t] = np.matmul(qt, state).reshape(batch, q_heads, dv) * scale
        else:
            out[:, t] = np.einsum("bhk,bhkv->bhv", q4[:, t, q_of], state) * scale
    sdt = past.dtype if past is not None else q.dtype
    return out.reshape(batch, steps, -1).astype(q.dtype, copy=False), state.astype(sdt, copy=False)


def _build_linear_attention(node: NodeView, strict: bool) -> Any:
    q_heads, kv_heads = int(node.attr("q_num_heads")), int(node.attr("kv_num_heads"))
    if q_heads <= 0 or kv_heads <= 0:
        raise fail(node, f"q_num_heads={q_heads} and kv_num_heads={kv_heads} must be positive")
    rule = _text(node.attr("update_rule"), "gated_delta")
    if rule not in RULES:
        raise fail(node, f"update_rule must be one of {sorted(RULES)}, got {rule!r}")
    scale = float(node.attr("scale", 0.0) or 0.0)
    if int(node.attr("state_window", 0) or 0):
        raise NotImplementedByAnyEp(f"{node.describe()}: state_window > 0 is CUDA-only in onnxruntime; use 0")
    # chunk_size only tiles a chunk-parallel evaluation of the same recurrence; results do not depend on it

    def compute(
        q: Array, k: Array, v: Array, past: Array | None = None, decay: Array | None = None, beta: Array | None = None
    ) -> tuple[Array, Array]:
        return _linear_attention(node, q, k, v, past, decay, beta, q_heads, kv_heads, rule, scale, strict)

    return compute


@REGISTRY.register("LinearAttention", domain=MS)
def build_linear_attention_ms(node: NodeView, ctx: KernelContext) -> Any:
    """com.microsoft::LinearAttention (onnxruntime's CPU kernel)."""
    return _build_linear_attention(node, strict=False)


@REGISTRY.register("LinearAttention", since=27)
def build_linear_attention(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx LinearAttention-27: query heads a multiple of KV heads, decay/beta only where used."""
    return _build_linear_attention(node, strict=True)


@REGISTRY.register("LinearAttentionGate", domain=MS)
def build_linear_attention_gate(node: NodeView, ctx: KernelContext) -> Any:
    """decay = decay_scale * softplus(a + dt_bias), beta = sigmoid(b), per head (the last axis),
    in float32 as onnxruntime computes them."""
    want_beta = len(node.outputs) > 1 and bool(node.outputs[1])

    def compute(a: Array, dt_bias: Array, decay_scale: Array, b: Array | None = None) -> tuple[Array, ...]:
        if a.ndim < 1 or dt_bias.size != a.shape[-1] or decay_scale.size != a.shape[-1]:
            raise fail(node, f"dt_bias and decay_scale must hold a's last dim ({a.shape[-1:]}) values")
        z = a.astype(np.float32) + dt_bias.astype(np.float32).reshape(-1)
        soft = np.where(z > 0, z + np.log1p(np.exp(-np.abs(z))), np.log1p(np.exp(np.minimum(z, 0))))
        decay = (decay_scale.astype(np.float32).reshape(-1) * soft).astype(a.dtype, copy=False)
        if not want_beta:
            return (decay,)
        if b is None or b.shape != a.shape:
            raise fail(node, f"the beta output needs input b shaped like a {list(a.shape)}")
        return decay, (1.0 / (1.0 + np.exp(-b.astype(np.float32)))).astype(a.dtype, copy=False)

    return compute


# ------------------------------------------------------------------------------------ CausalConvWithState
def _causal_conv(
    node: NodeView, x: Array, w: Array, bias: Array | None, past: Array | None, dilation: int, silu: bool, last: bool
) -> tuple[Array, Array]:
    """Depthwise causal conv over [B, C, L] (or channels-last [B, L, C...]): window = past (pad =
    (K-1)*dilation positions) then input; out[l] = bias + sum_k w[k] * window[l + k*dilation];
    present = the window's last pad positions."""
    if last:
        if x.ndim < 3:
            raise fail(node, f"channels_last input must be [batch, length, channels...], got {list(x.shape)}")
        xc = np.moveaxis(x.reshape(x.shape[0], x.shape[1], -1), 1, 2)
    else:
        if x.ndim != 3:
            raise fail(node, f"input must be [batch, channels, length], got {list(x.shape)}")
        xc = x
    batch, chans, length = xc.shape
    if w.ndim != 3 or w.shape[0] != chans or w.shape[1] != 1:
        raise fail(node, f"weight must be depthwise [{chans}, 1, k], got {list(w.shape)}")
    taps = w.shape[2]
    pad = (taps - 1) * dilation
    if bias is not None and bias.shape != (chans,):
        raise fail(node, f"bias must be [{chans}], got {list(bias.shape)}")
    f32 = np.float32
    if past is None:
        window = np.concatenate((np.zeros((batch, chans, pad), f32), xc.astype(f32)), axis=2)
    else:
        pc = np.moveaxis(past.reshape(batch, past.shape[1], -1), 1, 2) if last and past.ndim >= 3 else past
        if pc.shape != (batch, chans, pad):
            want = [batch, pad, *x.shape[2:]] if last else [batch, chans, pad]
            raise fail(node, f"past_state must be {want}, got {list(past.shape)}")
        window = np.concatenate((pc.astype(f32), xc.astype(f32)), axis=2)
    wf = w.astype(f32)[:, 0]  # [C, K]
    out = (
        np.zeros((batch, chans, length), f32) if bias is None else np.repeat(bias.astype(f32)[None, :, None], batch, 0)
    )
    out = np.broadcast_to(out, (batch, chans, length)).copy()
    for k in range(taps):  # K is a handful of taps: one vectorised pass per tap
        out += wf[None, :, k, None] * window[:, :, k * dilation : k * dilation + length]
    if silu:
        out = out / (f32(1.0) + np.exp(-out))
    present = window[:, :, window.shape[2] - pad :]
    if last:
        out = np.moveaxis(out, 1, 2).reshape(x.shape)
        present = np.moveaxis(present, 1, 2).reshape((batch, pad, *x.shape[2:]))
    return out.astype(x.dtype, copy=False), present.astype(x.dtype, copy=False)


def _build_causal_conv(node: NodeView, extended: bool) -> Any:
    act = _text(node.attr("activation"), "none")
    if act not in ("none", "silu", "swish"):
        raise fail(node, f"activation must be one of none, silu, swish; got {act!r}")
    dilation, last = 1, False
    if extended:
        if int(node.attr("ndim", 1)) != 1:
            raise NotImplementedByAnyEp(f"{node.describe()}: only ndim=1 is served (as by onnxruntime's CPU kernel)")
        if int(node.attr("state_window", 0)):
            raise NotImplementedByAnyEp(f"{node.describe()}: state_window > 0 is CUDA-only in onnxruntime; use 0")
        dilation, last = int(node.attr("dilation", 1)), bool(int(node.attr("channels_last", 0)))
        if dilation < 1:
            raise fail(node, f"dilation must be >= 1, got {dilation}")

    def compute(x: Array, w: Array, bias: Array | None = None, past: Array | None = None) -> tuple[Array, Array]:
        return _causal_conv(node, x, w, bias, past, dilation, act != "none", last)

    return compute


@REGISTRY.register("CausalConvWithState", domain=MS)
def build_causal_conv_ms(node: NodeView, ctx: KernelContext) -> Any:
    """com.microsoft::CausalConvWithState: dilation and channels-last layouts too."""
    return _build_causal_conv(node, extended=True)


@REGISTRY.register("CausalConvWithState", since=27)
def build_causal_conv(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx CausalConvWithState-27: [B, C, L], no dilation."""
    return _build_causal_conv(node, extended=False)


# ------------------------------------------------------------------------------------ FlexAttention
_SOFTMAX_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.float32),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
}


@REGISTRY.register("FlexAttention", domain="ai.onnx.preview")
def build_flex_attention(node: NodeView, ctx: KernelContext) -> Any:
    """ai.onnx.preview FlexAttention: Y = prob_mod(softmax(score_mod(scale * Q K^T))) V over
    [B, H, S, D] with K/V heads shared by contiguous query-head groups. The modifier subgraphs run
    through the session like control-flow bodies (outer-scope values arrive after Q, K, V)."""
    mods = {name: ctx.subgraph(name) for name in ("score_mod", "prob_mod") if name in node.subgraphs}
    for name, runner in mods.items():
        if len(runner.input_names) != 1 or len(runner.output_names) != 1:
            raise fail(
                node,
                f"{name} must take one tensor and give one, got {len(runner.input_names)} -> "
                f"{len(runner.output_names)}",
            )
    precision = node.attr("softmax_precision")
    if precision is not None and int(precision) not in _SOFTMAX_DTYPES:
        raise NotImplementedByAnyEp(
            f"{node.describe()}: softmax_precision {precision} is not served; use 1 (float), 10 (float16) or 11 (double)"
        )
    scale_attr = node.attr("scale")

    def compute(q: Array, k: Array, v: Array, *outer_values: Array) -> tuple[Array]:
        outer = dict(zip(node.implicit_inputs, outer_values, strict=False))
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise fail(node, f"Q, K, V must be rank 4, got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        hq, hkv = q.shape[1], k.shape[1]
        if v.shape[:3] != k.shape[:3] or k.shape[3] != q.shape[3] or hq % hkv:
            raise fail(node, f"K {list(k.shape)} / V {list(v.shape)} do not fit Q {list(q.shape)}")
        if hq != hkv:
            k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
        scale = 1.0 / np.sqrt(q.shape[3]) if scale_attr is None else float(scale_attr)
        root = np.asarray(np.sqrt(np.float32(scale)), dtype=q.dtype)  # onnx.reference scales both sides
        scores = np.matmul(q * root, np.swapaxes(k * root, -1, -2))
        cdt: np.dtype[Any] = (
            _SOFTMAX_DTYPES[int(precision)]
            if precision is not None
            else (np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32))
        )
        scores = scores.astype(cdt)
        if "score_mod" in mods:
            scores = np.asarray(mods["score_mod"].run([scores], outer)[0], dtype=cdt)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        if "prob_mod" in mods:
            probs = np.asarray(mods["prob_mod"].run([probs], outer)[0], dtype=cdt)
        return (np.matmul(probs, v.astype(cdt)).astype(v.dtype, copy=False),)

    return compute

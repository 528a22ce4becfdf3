"""com.microsoft Engram and hyper-connection ops new in onnxruntime 1.31, following its CPU
kernels and schema docs: EngramGate, HyperConnectionPreMix / HyperConnectionPostMix, and the
n-gram hash id ops NGramHashMapping / VarlenNGramHashMapping (wrapping integer arithmetic, EOS and
segment resets, chunked history through past_ids/present_ids)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_seq_schemas import register_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.registry import REGISTRY

Array = np.ndarray

register_schemas()


# ------------------------------------------------------------------------------------ EngramGate
def _rms(x: Array, eps: float) -> Array:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))


@REGISTRY.register("EngramGate", domain=MS)
def build_engram_gate(node: NodeView, ctx: KernelContext) -> Any:
    """key/query [B, S, G, H], value [B, S, H] shared by the G hyper-connections: dot =
    RMSNorm(key)*kscale . RMSNorm(query)*qscale / sqrt(H); gate = sigmoid(sign(dot) *
    sqrt(max(|dot|, 1e-6))); output = gate * value; gated_value_normed = RMSNorm(output)*cscale."""
    eps = float(node.attr("epsilon", 1e-5))
    want_normed = len(node.outputs) > 1 and bool(node.outputs[1])

    def compute(
        key: Array, query: Array, value: Array, kscale: Array, qscale: Array, cscale: Array | None = None
    ) -> tuple[Array, ...]:
        if key.ndim != 4 or query.shape != key.shape:
            raise fail(node, f"key/query must be [batch, sequence, hc_mult, hidden], got {list(key.shape)}")
        b, s, g, h = key.shape
        if value.shape != (b, s, h):
            raise fail(node, f"value must be [{b}, {s}, {h}], got {list(value.shape)}")
        for name, sc in (("key_norm_scale", kscale), ("query_norm_scale", qscale), ("conv_norm_scale", cscale)):
            if sc is not None and sc.shape != (g, h):
                raise fail(node, f"{name} must be [{g}, {h}], got {list(sc.shape)}")
        f32 = np.float32
        kn = _rms(key.astype(f32), eps) * kscale.astype(f32)
        qn = _rms(query.astype(f32), eps) * qscale.astype(f32)
        dot = np.sum(kn * qn, axis=-1, keepdims=True) / np.sqrt(f32(h))
        arg = np.sign(dot) * np.sqrt(np.maximum(np.abs(dot), f32(1e-6)))
        gate = f32(1.0) / (f32(1.0) + np.exp(-arg))
        out = gate * value.astype(f32)[:, :, None, :]
        outs = [out.astype(key.dtype, copy=False)]
        if want_normed:
            if cscale is None:
                raise fail(node, "the gated_value_normed output needs conv_norm_scale")
            outs.append((_rms(out, eps) * cscale.astype(f32)).astype(key.dtype, copy=False))
        return tuple(outs)

    return compute


# ------------------------------------------------------------------------------------ HyperConnection mixes
def _streams(node: NodeView, x: Array, branches: int) -> Array:
    """Streams as [..., C, H]: grouped as given, or flattened [..., C*H] with num_branches = C."""
    if branches <= 0:
        if x.ndim < 2:
            raise fail(node, f"grouped streams must be [..., C, H], got {list(x.shape)}")
        return x
    if x.ndim < 1 or x.shape[-1] % branches:
        raise fail(node, f"flattened streams {list(x.shape)} do not split into num_branches={branches}")
    return x.reshape(*x.shape[:-1], branches, x.shape[-1] // branches)


def _gates(node: NodeView, name: str, m: Array, xs: Array, flat: bool) -> Array:
    """A mix as [..., C, 1] or [..., C, H] against streams xs [..., C, H]: from (..., C),
    (..., C, 1), (..., C, H) or, for flattened streams, (..., C*H)."""
    lead, c, h = xs.shape[:-2], xs.shape[-2], xs.shape[-1]
    if m.shape == (*lead, c):
        return m[..., None]
    if m.shape in ((*lead, c, 1), (*lead, c, h)):
        return m
    if flat and m.shape == (*lead, c * h):
        return m.reshape(*lead, c, h)
    raise fail(node, f"{name} {list(m.shape)} must be {[*lead, c]}, {[*lead, c, 1]} or {[*lead, c, h]}")


@REGISTRY.register("HyperConnectionPreMix", domain=MS)
def build_hc_pre_mix(node: NodeView, ctx: KernelContext) -> Any:
    """Y[..., h] = reduction_scale * sum_c X[..., c, h] * pre_mix[..., c, h], in float32."""
    scale = np.float32(node.attr("reduction_scale", 1.0))
    branches = int(node.attr("num_branches", 0) or 0)

    def compute(x: Array, pre: Array) -> tuple[Array]:
        xs = _streams(node, x, branches).astype(np.float32)
        g = _gates(node, "pre_mix", pre, xs, branches > 0).astype(np.float32)
        return ((np.sum(xs * g, axis=-2) * scale).astype(x.dtype, copy=False),)

    return compute


@REGISTRY.register("HyperConnectionPostMix", domain=MS)
def build_hc_post_mix(node: NodeView, ctx: KernelContext) -> Any:
    """Y[..., k, h] = sum_c stream_mix[..., c, k] * X[..., c, h] + post_mix[..., k, h] *
    block_output[..., h]; stream_mix defaults to the identity."""
    branches = int(node.attr("num_branches", 0) or 0)

    def compute(x: Array, block: Array, post: Array, stream_mix: Array | None = None) -> tuple[Array]:
        xs = _streams(node, x, branches).astype(np.float32)
        lead, c, h = xs.shape[:-2], xs.shape[-2], xs.shape[-1]
        if block.shape != (*lead, h):
            raise fail(node, f"block_output must be {[*lead, h]}, got {list(block.shape)}")
        g = _gates(node, "post_mix", post, xs, False).astype(np.float32)
        y = g * block.astype(np.float32)[..., None, :]
        if stream_mix is None:
            y = y + xs
        else:
            if stream_mix.shape != (*lead, c, c):
                raise fail(node, f"stream_mix must be {[*lead, c, c]}, got {list(stream_mix.shape)}")
            y = y + np.matmul(np.swapaxes(stream_mix.astype(np.float32), -1, -2), xs)
        return (y.reshape(x.shape).astype(x.dtype, copy=False),)

    return compute


# ------------------------------------------------------------------------------------ NGramHashMapping
def _ngram_hashes(
    node: NodeView,
    ext: Array,
    seg_start: Array,
    mult: Array,
    vocab: Array,
    offsets: Array | None,
    eos: Any,
    reset: bool,
    fill: Any,
    n_max: int,
    heads: int,
) -> Array:
    """Hash ids [R, S, (n_max-1)*heads] over ext [R, L+S] (history then tokens, L = n_max-1).
    A shift k > 0 of token t reads ext[L+t-k] unless that position lies before t's reset
    boundary (the last EOS before t when reset_on_eos, the segment start ``seg_start`` [R, S]),
    where it reads ``fill``. mix = XOR_k token * multipliers[k] (wrapping), then a positive modulo
    per head, plus head_offsets (wrapping)."""
    dt = ext.dtype
    hist = n_max - 1
    rows, width = ext.shape
    steps = width - hist
    pos = np.arange(width)
    boundary = np.broadcast_to(seg_start, (rows, steps)).astype(np.int64)  # first non-reset position
    if reset and eos is not None:
        after_eos = np.where(ext == eos, pos + 1, 0)  # an EOS resets positions up to and including it
        last = np.maximum.accumulate(after_eos, axis=1)  # [R, width]
        prev = np.concatenate((np.zeros((rows, 1), np.int64), last[:, :-1]), axis=1)[:, hist:]  # EOS strictly before t
        boundary = np.maximum(boundary, prev)
    t = np.arange(steps)[None, :] + hist  # positions of the current tokens in ext
    u = _unsigned(dt)
    mu = np.asarray(mult[:n_max]).astype(dt).astype(u)
    with np.errstate(over="ignore"):
        mixes = []
        mix = None
        for k in range(n_max):
            src = t - k
            tok = np.take_along_axis(ext, np.broadcast_to(src, (rows, steps)), axis=1)
            if k:
                tok = np.where(src < boundary, dt.type(fill), tok)
            prod = (tok.astype(u) * mu[k]).astype(dt)
            mix = prod if mix is None else mix ^ prod
            if k:
                mixes.append(mix)  # the (k+1)-gram
        per_n = np.stack(mixes, axis=-1)  # [R, S, n_max-1]
        full = np.repeat(per_n, heads, axis=-1)  # heads of n=2 first, then n=3, ...
        v = vocab.astype(dt)
        out = np.mod(full, v)  # numpy's mod is non-negative for a positive divisor
        if offsets is not None:
            out = (out.astype(u) + offsets.astype(dt).astype(u)).astype(dt)
    return out


def _unsigned(dt: np.dtype) -> Any:
    return np.uint32 if np.dtype(dt).itemsize == 4 else np.uint64


def _ngram_setup(node: NodeView) -> tuple[int, int, int, bool]:
    n_max, heads, pad = int(node.attr("max_ngram_size")), int(node.attr("n_head_per_ngram")), int(node.attr("pad_id"))
    if n_max < 2 or heads < 1:
        raise fail(node, f"max_ngram_size ({n_max}) must be >= 2 and n_head_per_ngram ({heads}) >= 1")
    return n_max, heads, pad, bool(int(node.attr("reset_on_eos", 0)))


def _ngram_tables(
    node: NodeView, ids: Array, mult: Array, vocab: Array, offsets: Array | None, n_max: int, heads: int
) -> None:
    n_out = (n_max - 1) * heads
    if mult.ndim != 1 or mult.shape[0] < n_max:
        raise fail(node, f"multipliers must hold at least max_ngram_size={n_max} values, got {list(mult.shape)}")
    if vocab.shape != (n_out,) or (vocab <= 0).any():
        raise fail(node, f"vocab_sizes must be {n_out} positive values, got {vocab.tolist()}")
    if offsets is not None and offsets.shape != (n_out,):
        raise fail(node, f"head_offsets must be [{n_out}], got {list(offsets.shape)}")
    info = np.iinfo(ids.dtype)
    pad = int(node.attr("pad_id"))
    if not info.min <= pad <= info.max:
        raise fail(node, f"pad_id {pad} does not fit the ids' type {ids.dtype}")


@REGISTRY.register("NGramHashMapping", domain=MS)
def build_ngram_hash(node: NodeView, ctx: KernelContext) -> Any:
    """input_ids [B, S] -> hash_ids [B, S, (max_ngram_size-1)*n_head_per_ngram] and present_ids
    [B, max_ngram_size-1] (the trailing window of past_ids ++ input_ids)."""
    n_max, heads, pad, reset = _ngram_setup(node)

    def compute(
        ids: Array,
        mult: Array,
        vocab: Array,
        past: Array | None = None,
        offsets: Array | None = None,
        eos_t: Array | None = None,
        seg: Array | None = None,
    ) -> tuple[Array, Array]:
        if ids.ndim != 2:
            raise fail(node, f"input_ids must be [batch, sequence], got {list(ids.shape)}")
        _ngram_tables(node, ids, mult, vocab, offsets, n_max, heads)
        batch, steps = ids.shape
        hist = n_max - 1
        eos = None if eos_t is None else ids.dtype.type(np.asarray(eos_t).reshape(-1)[0])
        fill = pad if eos is None else eos
        if past is None:
            past = np.full((batch, hist), fill, ids.dtype)
        elif past.shape != (batch, hist):
            raise fail(node, f"past_ids must be [{batch}, {hist}], got {list(past.shape)}")
        ext = np.concatenate((past.astype(ids.dtype), ids), axis=1)
        starts = np.zeros((batch, steps), np.int64)
        if seg is not None:
            if seg.shape != ids.shape:
                raise fail(node, f"segment_ids must be [{batch}, {steps}], got {list(seg.shape)}")
            change = np.concatenate((np.zeros((batch, 1), bool), seg[:, 1:] != seg[:, :-1]), axis=1)
            starts = np.maximum.accumulate(np.where(change, np.arange(steps) + hist, 0), axis=1)
        out = _ngram_hashes(node, ext, starts, mult, vocab, offsets, eos, reset, fill, n_max, heads)
        return out, ext[:, ext.shape[1] - hist :].copy()

    return compute


@REGISTRY.register("VarlenNGramHashMapping", domain=MS)
def build_varlen_ngram_hash(node: NodeView, ctx: KernelContext) -> Any:
    """NGramHashMapping over a packed batch: request r holds input_ids[cu[r]:cu[r+1]] and its own
    history past_ids[r]; segment boundaries also count against past_segment_ids; state_update[r, i]
    is the trailing window after prefix token i (i < capture_count[r]), pad_id elsewhere."""
    n_max, heads, pad, reset = _ngram_setup(node)
    capacity = int(node.attr("state_update_capacity", 0))
    if not 0 <= capacity <= 8:
        raise fail(node, f"state_update_capacity must lie in [0, 8], got {capacity}")
    n_out = len(node.outputs)

    def compute(
        ids: Array,
        mult: Array,
        vocab: Array,
        cu: Array,
        past: Array | None = None,
        offsets: Array | None = None,
        eos_t: Array | None = None,
        seg: Array | None = None,
        past_seg: Array | None = None,
        capture: Array | None = None,
    ) -> tuple[Array | None, ...]:
        if ids.ndim != 1:
            raise fail(node, f"input_ids must be packed [total_tokens], got {list(ids.shape)}")
        _ngram_tables(node, ids, mult, vocab, offsets, n_max, heads)
        cu = np.asarray(cu, np.int64).reshape(-1)
        batch, hist, total = cu.shape[0] - 1, n_max - 1, ids.shape[0]
        lens = np.diff(cu)
        if batch < 1 or cu[0] != 0 or cu[-1] != total or (lens < 1).any():
            raise fail(node, f"cumulative_sequence_length {cu.tolist()} must rise from 0 to {total}, >= 1 token each")
        if (capture is None) != (capacity == 0):
            raise fail(node, "capture_count is required exactly when state_update_capacity > 0")
        eos = None if eos_t is None else ids.dtype.type(np.asarray(eos_t).reshape(-1)[0])
        fill = pad if eos is None else eos
        if past is None:
            past = np.full((batch, hist), fill, ids.dtype)
        elif past.shape != (batch, hist):
            raise fail(node, f"past_ids must be [{batch}, {hist}], got {list(past.shape)}")
        width = int(lens.max())
        row = np.repeat(np.arange(batch), lens)  # request of each packed token
        col = np.arange(total) - cu[row]  # its position within the request
        ext = np.full((batch, hist + width), fill, ids.dtype)
        ext[:, :hist] = past
        ext[row, hist + col] = ids
        starts = np.zeros((batch, width), np.int64)
        ext_seg = None
        if seg is not None:
            if seg.shape != ids.shape:
                raise fail(node, f"segment_ids must be [{total}], got {list(seg.shape)}")
            if past_seg is not None and past_seg.shape != (batch, hist):
                raise fail(node, f"past_segment_ids must be [{batch}, {hist}], got {list(past_seg.shape)}")
            first = seg[cu[:-1]]
            ext_seg = np.repeat(first[:, None], hist + width, axis=1).astype(np.int32)
            if past_seg is not None:
                ext_seg[:, :hist] = past_seg
            ext_seg[row, hist + col] = seg
            valid = np.arange(hist + width)[None, :] < (hist + lens)[:, None]
            change = np.zeros_like(valid)
            change[:, 1:] = (ext_seg[:, 1:] != ext_seg[:, :-1]) & valid[:, 1:]
            starts = np.maximum.accumulate(np.where(change, np.arange(hist + width), 0), axis=1)[:, hist:]
        hashes = _ngram_hashes(node, ext, starts, mult, vocab, offsets, eos, reset, fill, n_max, heads)
        outs: list[Array | None] = [hashes[row, col]]
        tail = lens[:, None] + np.arange(hist)  # the trailing window of each request in ext
        outs.append(np.take_along_axis(ext, tail, axis=1))
        if n_out > 2:
            outs.append(None if ext_seg is None else np.take_along_axis(ext_seg, tail, axis=1))
        if n_out > 3:
            state = np.full((batch, capacity, hist), pad, ids.dtype)
            if capacity:
                count = np.minimum(np.minimum(np.asarray(capture, np.int64).reshape(-1), lens), capacity)
                i = np.arange(capacity)
                windows = np.take_along_axis(ext[:, None, :], (i[:, None] + 1 + np.arange(hist))[None], axis=2)
                state = np.where((i[None, :] < count[:, None])[..., None], windows, state)
            outs.append(state)
        if n_out > 2 and node.outputs[2] and outs[2] is None:
            raise fail(node, "the present_segment_ids output needs segment_ids")
        return tuple(outs[:n_out])

    return compute

"""onnxruntime's mixture-of-experts and recurrent contrib ops (com.microsoft): MoE, QMoE (int4/int8
expert weights) and AttnLSTM, following onnxruntime 1.31's CPU kernels (contrib_ops/cpu/moe/*,
contrib_ops/cpu/rnn/attention_wrapper*, attn_lstm*).

Routing and expert arithmetic are float32 as there (float16 inputs converted); experts run as one
batched GEMM per expert over the tokens routed to it, so the cost is the tokens' share of each
expert, not every expert for every token. Forms onnxruntime's CPU kernels refuse (FC3 gating,
non-interleaved SwiGLU) are refused the same way, naming the way out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_moe_schemas import register_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.kernels.nn_rnn import _sigmoid
from ep_cpu_reference.kernels.quantize_ms import _int8_blocks, _unpack
from ep_cpu_reference.registry import REGISTRY

register_schemas()

F32 = np.float32
Array = np.ndarray
_ACTS = ("relu", "gelu", "silu", "identity", "swiglu")


# ----------------------------------------------------------------------- shared MoE core
class _MoeSpec:
    """The attributes MoE and QMoE share, validated as onnxruntime's MoEBaseCPU does."""

    def __init__(self, node: NodeView, always_normalize: bool = False) -> None:
        self.node = node
        self.k = int(node.attr("k", 1))
        self.act = node.attr("activation_type", "relu")
        self.act = self.act.decode() if isinstance(self.act, bytes) else str(self.act)
        if self.act not in _ACTS:
            raise fail(node, f"activation_type {self.act!r}: one of {', '.join(_ACTS)}")
        self.normalize = always_normalize or int(node.attr("normalize_routing_weights", 0)) == 1
        if int(node.attr("use_sparse_mixer", 0)) == 1:
            # onnxruntime's CPU kernels check k=2 and then route by plain top-2 softmax, ignoring it
            raise NotImplementedByAnyEp(
                f"{node.describe()}: use_sparse_mixer=1 is not implemented (onnxruntime's CPU kernel ignores it "
                "and routes by plain top-k softmax): export with use_sparse_mixer=0 for that routing"
            )
        self.swiglu = self.act == "swiglu"
        if self.swiglu and int(node.attr("swiglu_fusion", 0)) != 1:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: SwiGLU with swiglu_fusion={node.attr('swiglu_fusion', 0)}; onnxruntime's CPU "
                "kernel (and this EP) serve the interleaved form only: export with swiglu_fusion=1"
            )
        self.alpha = F32(node.attr("activation_alpha", 1.0))
        self.beta = F32(node.attr("activation_beta", 0.0))
        limit = node.attr("swiglu_limit")
        self.limit = F32(np.inf) if limit is None else F32(limit)

    def route(self, probs: Array) -> tuple[Array, Array]:
        """Top-k experts per token and their weights: softmax over all experts, the k largest
        (ties to the higher expert index, as std::partial_sort with std::greater on (p, index)),
        renormalised over the k when normalize_routing_weights=1."""
        p = probs.astype(F32)
        e = np.exp(p - p.max(axis=1, keepdims=True))
        soft = e / e.sum(axis=1, keepdims=True)
        n_exp = soft.shape[1]
        order = np.lexsort((-np.arange(n_exp)[None, :].repeat(len(soft), 0), -soft), axis=1)[:, : self.k]
        weights = np.take_along_axis(soft, order, axis=1)
        if self.normalize:
            weights = weights / weights.sum(axis=1, keepdims=True)
        return order, weights

    def activate(self, x: Array) -> Array:
        """onnxruntime's MoE activations in float32 (GELU is the tanh form there)."""
        if self.act == "relu":
            return np.maximum(x, F32(0))
        if self.act == "gelu":
            return F32(0.5) * x * (F32(1) + np.tanh(F32(0.7978845608) * (x + F32(0.044715) * x * x * x)))
        if self.act == "silu":
            return x * _sigmoid(x)
        if self.act == "identity":
            return x
        gate, linear = np.minimum(x[:, 0::2], self.limit), np.clip(x[:, 1::2], -self.limit, self.limit)
        return gate * _sigmoid(self.alpha * gate) * (linear + self.beta)

    def run(
        self,
        x: Array,
        probs: Array,
        expert: Callable[[int, Array], Array],
    ) -> Array:
        """sum over the routed experts of weight * expert(e, tokens), in float32."""
        hidden = x.shape[-1]
        tokens = x.reshape(-1, hidden).astype(F32)
        if probs.ndim != 2 or probs.shape[0] != len(tokens):
            raise fail(self.node, f"router_probs must be [{len(tokens)}, num_experts], got {list(probs.shape)}")
        if not 1 <= self.k <= probs.shape[1]:
            raise fail(self.node, f"k={self.k} must lie in [1, {probs.shape[1]}]")
        order, weights = self.route(probs)
        out = np.zeros_like(tokens)
        flat_e, flat_w = order.reshape(-1), weights.reshape(-1)
        flat_t = np.repeat(np.arange(len(tokens)), self.k)
        keep = flat_w > 0
        for e in np.unique(flat_e[keep]):
            sel = keep & (flat_e == e)
            y = expert(int(e), tokens[flat_t[sel]])
            np.add.at(out, flat_t[sel], flat_w[sel, None] * y)
        return out.reshape(x.shape).astype(x.dtype, copy=False)


def _check_weights(node: NodeView, name: str, w: Array, experts: int, rows: int, cols: int) -> None:
    if w.shape != (experts, rows, cols):
        raise fail(
            node,
            f"{name} of shape {list(w.shape)} must be [{experts}, {rows}, {cols}] (onnxruntime's CPU layout: "
            "[experts, out_features, in_features])",
        )


def _bias(node: NodeView, name: str, b: Array | None, experts: int, n: int) -> Array | None:
    if b is None:
        return None
    if b.shape != (experts, n):
        raise fail(node, f"{name} of shape {list(b.shape)} must be [{experts}, {n}]")
    return b.astype(F32)


# ----------------------------------------------------------------------- MoE
@REGISTRY.register("MoE", domain=MS)
def build_moe(node: NodeView, ctx: KernelContext) -> Any:
    """Per token: route to the top-k experts; each expert is act(x @ W1^T + b1) @ W2^T + b2 with
    W1 [E, inter (x2 for SwiGLU), hidden] and W2 [E, hidden, inter]; the weighted sum is the output."""
    spec = _MoeSpec(node)

    def compute(
        x: Array,
        probs: Array,
        w1: Array,
        b1: Array | None = None,
        w2: Array | None = None,
        b2: Array | None = None,
        w3: Array | None = None,
        b3: Array | None = None,
    ) -> tuple[Array]:
        if w3 is not None or b3 is not None:
            raise NotImplementedByAnyEp(f"{node.describe()}: FC3 gating is not implemented (nor by onnxruntime's CPU)")
        assert w2 is not None
        hidden, n_exp = x.shape[-1], probs.shape[-1]
        inter = w2.shape[1] * w2.shape[2] // hidden
        fc1_out = 2 * inter if spec.swiglu else inter
        _check_weights(node, "fc1_experts_weights", w1, n_exp, fc1_out, hidden)
        _check_weights(node, "fc2_experts_weights", w2, n_exp, hidden, inter)
        bias1, bias2 = (
            _bias(node, "fc1_experts_bias", b1, n_exp, fc1_out),
            _bias(node, "fc2_experts_bias", b2, n_exp, hidden),
        )
        half = x.dtype == np.float16

        def rnd(v: Array) -> Array:  # onnxruntime's float16 MoE keeps intermediates in half
            return v.astype(np.float16).astype(F32) if half else v

        def expert(e: int, t: Array) -> Array:
            h = rnd(t @ w1[e].astype(F32).T)
            if bias1 is not None:
                h = rnd(h + bias1[e])
            h = rnd(spec.activate(h))
            y = rnd(h @ w2[e].astype(F32).T)
            return y if bias2 is None else rnd(y + bias2[e])

        return (spec.run(x, probs, expert),)

    return compute


# ----------------------------------------------------------------------- QMoE
def _dequant_experts(
    node: NodeView,
    name: str,
    q: Array,
    scales: Array | None,
    zps: Array | None,
    bits: int,
    block: int,
    rows: int,
    cols: int,
) -> Array:
    """[E, rows, cols] float32 weights from [E, rows, cols * bits / 8] codes (low bits first): per row
    (block_size 0) or per block of ``block`` columns, ``(q - zero_point) * scale`` with zero point
    2^(bits-1) unless given (packed like the codes)."""
    experts = q.shape[0]
    per = 8 // bits
    if q.dtype != np.uint8 or q.shape != (experts, rows, cols // per):
        raise fail(node, f"{name} of shape {list(q.shape)} must be uint8 [{experts}, {rows}, {cols // per}]")
    if scales is None:
        raise fail(node, f"{name} needs its scales")
    n_blocks = -(-cols // block) if block else 1
    if scales.size != experts * rows * n_blocks:
        raise fail(node, f"scales of {name}: {list(scales.shape)} must hold [{experts}, {rows}, {n_blocks}]")
    codes = (_unpack(q, bits, cols) if per > 1 else q).astype(F32)
    s = scales.astype(F32).reshape(experts, rows, n_blocks)
    if zps is None:
        z: Any = F32(1 << (bits - 1))
    elif block:  # packed along each row's blocks
        z = (_unpack(zps.reshape(experts, rows, -1), bits, n_blocks) if per > 1 else zps).astype(F32)
        z = z.reshape(experts, rows, n_blocks)
    else:  # one per row, packed along the rows
        z = (_unpack(zps.reshape(experts, -1), bits, rows) if per > 1 else zps).astype(F32)
        z = z.reshape(experts, rows, 1)
    if block:
        s = np.repeat(s, block, axis=2)[:, :, :cols]
        z = z if np.ndim(z) == 0 else np.repeat(z, block, axis=2)[:, :, :cols]
    return (codes - z) * s


_QMOE_UNSUPPORTED = ("router_weights", "fc1_global_scale", "fc2_global_scale", "fc1_act_scale", "fc2_act_scale",
                     "fc1_act_block_scale", "fc2_act_block_scale")  # fmt: skip


@REGISTRY.register("QMoE", domain=MS)
def build_qmoe(node: NodeView, ctx: KernelContext) -> Any:
    """MoE whose expert weights are int4/int8 codes ([E, out, in * bits / 8], low nibble first) with
    per-row or blocked scales and optional zero points; dequantized once when constant, then the
    MoE core runs in float32."""
    spec = _MoeSpec(node, always_normalize=True)
    bits = int(node.attr("expert_weight_bits", 4))
    per_fc = [node.attr(f"fc{i}_expert_weight_bits") for i in (1, 2)]
    if any(b is not None and int(b) != bits for b in per_fc):
        raise NotImplementedByAnyEp(f"{node.describe()}: per-FC weight bits differing from expert_weight_bits={bits}")
    if bits not in (4, 8):
        raise fail(node, f"expert_weight_bits={bits}: 4 or 8")
    block = int(node.attr("block_size", 0) or 0)
    if block and (block < 16 or block & (block - 1)):
        raise fail(node, f"block_size={block} must be 0 or a power of 2 of at least 16")
    qtype = node.attr("quant_type", "int")
    if (qtype.decode() if isinstance(qtype, bytes) else str(qtype)) != "int":
        raise NotImplementedByAnyEp(f"{node.describe()}: quant_type={qtype!r}; the reference EP serves 'int'")
    names = list(node.inputs) + [""] * (21 - len(node.inputs))
    for i, what in enumerate(_QMOE_UNSUPPORTED, start=14):
        if names[i]:
            raise NotImplementedByAnyEp(f"{node.describe()}: input {what} is not implemented by the reference EP")
    if names[8] or names[9] or names[10] or names[13]:
        raise NotImplementedByAnyEp(f"{node.describe()}: FC3 gating is not implemented (nor by onnxruntime's CPU)")
    constant = all(ctx.constant(names[i]) is not None for i in (2, 3, 5, 6, 11, 12) if names[i])
    int8_a = block > 0 and (bits == 8 or int(node.attr("accuracy_level", 0)) == 4)
    cache: dict[str, Array] = {}

    def compute(x: Array, probs: Array, w1: Array, s1: Array | None = None, b1: Array | None = None,
                w2: Array | None = None, s2: Array | None = None, b2: Array | None = None,
                *rest: Array | None) -> tuple[Array]:  # fmt: skip
        assert w2 is not None
        rest = rest + (None,) * (13 - len(rest))
        z1, z2 = rest[3], rest[4]
        hidden, n_exp = x.shape[-1], probs.shape[-1]
        inter = w2.shape[2] * (8 // bits)
        fc1_out = 2 * inter if spec.swiglu else inter
        if "w1" in cache:
            d1, d2 = cache["w1"], cache["w2"]
        else:
            d1 = _dequant_experts(node, "fc1_experts_weights", w1, s1, z1, bits, block, fc1_out, hidden)
            d2 = _dequant_experts(node, "fc2_experts_weights", w2, s2, z2, bits, block, hidden, inter)
            if constant:
                cache["w1"], cache["w2"] = d1, d2
        if d1.shape[0] != n_exp:
            raise fail(node, f"{d1.shape[0]} experts in the weights, {n_exp} in router_probs")
        bias1, bias2 = (
            _bias(node, "fc1_experts_bias", b1, n_exp, fc1_out),
            _bias(node, "fc2_experts_bias", b2, n_exp, hidden),
        )

        def mm(a: Array, w: Array) -> Array:
            return _int8_blocks(a, w, block) if int8_a else a @ w.T

        def expert(e: int, t: Array) -> Array:
            h = mm(t, d1[e])
            if bias1 is not None:
                h = h + bias1[e]
            y = mm(spec.activate(h), d2[e])
            return y if bias2 is None else y + bias2[e]

        return (spec.run(x, probs, expert),)

    return compute

"""The native com.microsoft attention kernels (ep_cpu_reference/kernels/contrib_attention.py)
against onnxruntime 1.31's CPU contrib kernels: Attention, MultiHeadAttention, GroupQueryAttention,
EmbedLayerNormalization and RotaryEmbedding in several configurations each (masks in every form,
past/present caches, causality, scales, rotary variants), and a small BERT-like model fused by
onnxscript's ort_fusions run end to end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _support.oracle import ours, theirs
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
RNG = np.random.default_rng(1234)
INT_OUTS = {"mask_index": TensorProto.INT32}


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(
    op: str, inputs: list[Any], attrs: dict[str, Any], outs: list[str], out_type: int = TensorProto.FLOAT
) -> bytes:
    """One com.microsoft node; ``None`` inputs are omitted (empty names), ``""`` outputs skipped."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outs, domain=MS, **attrs)
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in zip(names, inputs)
        if n
    ]
    ovs = [helper.make_tensor_value_info(o, INT_OUTS.get(o, out_type), None) for o in outs if o]
    graph = helper.make_graph([node], "g", vis, ovs)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _feeds(inputs: list[Any]) -> dict[str, np.ndarray]:
    return {f"in{i}": v for i, v in enumerate(inputs) if v is not None}


_ours = ours


_theirs = theirs


def _check(
    op: str,
    inputs: list[Any],
    attrs: dict[str, Any],
    outs: list[str],
    rtol: float = 1e-5,
    out_type: int = TensorProto.FLOAT,
) -> list[Any]:
    model = _model(op, inputs, attrs, outs, out_type)
    got, want = _ours(model, _feeds(inputs)), _theirs(model, _feeds(inputs))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(
            g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max(initial=0))), err_msg=f"output {i}"
        )
    return got


def _i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def _mask(*shape: int) -> np.ndarray:
    return RNG.integers(0, 2, shape).astype(np.int32)


# ------------------------------------------------------------------------------------ schemas
@pytest.mark.parametrize(
    "op",
    [
        "Attention",
        "MultiHeadAttention",
        "GroupQueryAttention",
        "EmbedLayerNormalization",
        "RotaryEmbedding",
        "BiasSoftmax",
    ],
)
def test_schema_matches_onnxruntime(op: str) -> None:
    """Input/output names and options, attribute names, kinds, requiredness and defaults are
    onnxruntime's, so models exported for it check and infer the same here."""
    from onnx import defs
    from onnxruntime.capi import _pybind_state

    import ep_cpu_reference.kernels.contrib_attention  # noqa: F401  (registers the schemas)

    theirs = next(s for s in _pybind_state.get_all_operator_schema() if s.domain == MS and s.name == op)
    ours = defs.get_schema(op, 1, MS)
    assert [(p.name, int(p.option.value)) for p in ours.inputs] == [
        (p.name, int(p.option.value)) for p in theirs.inputs
    ]
    assert [(p.name, int(p.option.value)) for p in ours.outputs] == [
        (p.name, int(p.option.value)) for p in theirs.outputs
    ]
    assert sorted(ours.attributes) == sorted(theirs.attributes)
    for name, a in theirs.attributes.items():
        mine = ours.attributes[name]
        assert (mine.required, int(mine.type.value)) == (a.required, int(a.type.value)), name
        want = a._default_value
        if want:
            from onnx import AttributeProto

            parsed = AttributeProto.FromString(want)
            assert helper.get_attribute_value(mine.default_value) == helper.get_attribute_value(parsed), name
        else:
            assert not mine.default_value.name, name


# ------------------------------------------------------------------------------------ Attention
B, S, D, N = 2, 4, 16, 2
_X, _W, _BIAS = _f(B, S, D), _f(D, 3 * D, scale=0.3), _f(3 * D)
_PAST = _f(2, B, N, 3, D // N)
ATTENTION = {
    "plain": ([_X, _W, _BIAS], {}),
    "key_lengths": ([_X, _W, _BIAS, _i32(3, 2)], {}),
    "end_start": ([_X, _W, _BIAS, _i32(3, 4, 1, 0)], {}),
    "mask_2d": ([_X, _W, _BIAS, _i32(1, 1, 0, 1, 1, 0, 0, 0).reshape(2, 4)], {"mask_filter_value": -500.0}),
    "mask_3d": ([_X, _W, _BIAS, _mask(B, S, S)], {}),
    "unidirectional": ([_X, _W, _BIAS, _i32(3, 2)], {"unidirectional": 1}),
    "scale": ([_X, _W, _BIAS], {"scale": 0.2}),
    "qkv_hidden_sizes": ([_X, _f(D, 40), _f(40)], {"qkv_hidden_sizes": [16, 16, 8]}),
    "attention_bias": ([_X, _W, _BIAS, None, None, _f(1, N, S, S)], {}),
    "attention_bias_b": ([_X, _W, _BIAS, _i32(2, 4), None, _f(B, 1, S, S)], {}),
}
ATTENTION_PAST = {
    "past": ([_X, _W, _BIAS, None, _PAST], {}),
    "past_causal": ([_X, _W, _BIAS, None, _PAST], {"unidirectional": 1}),
    "past_mask_2d": ([_X, _W, _BIAS, _mask(B, 7), _PAST], {"unidirectional": 1}),
    "present_only": ([_X, _W, _BIAS], {}),
    "past_sequence_length": ([_X, _W, _BIAS, None, _PAST, None, _i32(3)], {}),
}


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention(case: str) -> None:
    inputs, attrs = ATTENTION[case]
    _check("Attention", inputs, {"num_heads": N, **attrs}, ["y"])


@pytest.mark.parametrize("case", sorted(ATTENTION_PAST))
def test_attention_past_present(case: str) -> None:
    inputs, attrs = ATTENTION_PAST[case]
    _check("Attention", inputs, {"num_heads": N, **attrs}, ["y", "present"])


def test_attention_without_bias() -> None:
    """onnxruntime's CPU kernel crashes without the (optional) bias; ours equals a zero bias."""
    model = _model("Attention", [_X, _W], {"num_heads": N}, ["y"])
    got = _ours(model, _feeds([_X, _W]))[0]
    want = _check("Attention", [_X, _W, np.zeros(3 * D, np.float32)], {"num_heads": N}, ["y"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("inputs", "attrs", "match"),
    [
        ([_X, _W, _BIAS, np.ones((B, 1, S, S), np.int32)], {}, "4-D mask"),
        ([_X, _W, _BIAS], {"do_rotary": 1}, "MultiHeadAttention \\+ RotaryEmbedding"),
        ([_X, _W, _BIAS, _i32(1, 2, 3)], {}, "1-D mask must have 2 or 4 entries"),
    ],
)
def test_attention_refusals(inputs: list[Any], attrs: dict[str, Any], match: str) -> None:
    """Forms onnxruntime's CPU kernel refuses are refused too, typed and naming the way out."""
    from ep_core.sdk.errors import EpCoreError

    with pytest.raises(EpCoreError, match=match):
        _ours(_model("Attention", inputs, {"num_heads": N, **attrs}, ["y"]), _feeds(inputs))


# ------------------------------------------------------------------------------------ MultiHeadAttention
L, H = 5, D // N
_Q, _K, _V, _B3 = _f(B, S, D), _f(B, L, D), _f(B, L, D), _f(3 * D)
_PK, _PV = _f(B, N, 4, H), _f(B, N, 4, H)
_KS, _VS = _f(B, S, D), _f(B, S, D)
MHA = {
    "plain": ([_Q, _K, _V, _B3], {}, 1),
    "no_bias": ([_Q, _K, _V], {}, 1),
    "self_causal": ([_Q, _KS, _VS], {"unidirectional": 1}, 1),
    "key_lengths": ([_Q, _K, _V, _B3, _i32(4, 2)], {}, 1),
    "key_lengths_3b2": ([_Q, _K, _V, _B3, _i32(4, 2, 0, 0, 4, 5, 5, 5)], {}, 1),
    "mask_2d": ([_Q, _K, _V, _B3, _mask(B, L)], {"mask_filter_value": -500.0}, 1),
    "mask_3d": ([_Q, _K, _V, _B3, _mask(B, S, L)], {}, 1),
    "attention_bias": ([_Q, _K, _V, _B3, None, _f(B, N, S, L)], {}, 1),
    "attention_bias_bcast": ([_Q, _K, _V, None, None, _f(1, 1, S, L)], {"scale": 0.3}, 1),
    "bnsh_kv": ([_Q, _f(B, N, L, H), _f(B, N, L, H), _B3], {}, 1),
    "v_head_size": ([_Q, _K, _f(B, L, 8)], {}, 1),
    "past": ([_Q, _KS, _VS, _B3, None, None, _PK, _PV], {}, 3),
    "past_causal_mask": ([_Q, _KS, _VS, _B3, _mask(B, S + 4), None, _PK, _PV], {"unidirectional": 1}, 3),
    "present_without_past": ([_Q, _K, _V, _B3], {}, 3),
    "qk": ([_Q, _K, _V, _B3, _i32(4, 2), _f(B, N, S, L)], {}, 4),
}


@pytest.mark.parametrize("case", sorted(MHA))
def test_multihead_attention(case: str) -> None:
    inputs, attrs, n_out = MHA[case]
    _check("MultiHeadAttention", inputs, {"num_heads": N, **attrs}, ["y", "present_k", "present_v", "qk"][:n_out])


def test_multihead_attention_packed_forms() -> None:
    """Packed KV [B, L, N, 2, H] and packed QKV [B, S, N, 3, H] (GPU-only in onnxruntime) equal the
    unpacked inputs onnxruntime's CPU kernel serves."""
    kv = np.stack((_K.reshape(B, L, N, H), _V.reshape(B, L, N, H)), axis=3)
    want = _check("MultiHeadAttention", [_Q, _K, _V, _B3], {"num_heads": N}, ["y"])[0]
    got = _ours(_model("MultiHeadAttention", [_Q, kv, None, _B3], {"num_heads": N}, ["y"]), _feeds([_Q, kv, None, _B3]))
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    qkv = np.stack((_Q.reshape(B, S, N, H), _KS.reshape(B, S, N, H), _VS.reshape(B, S, N, H)), axis=3)
    want = _check("MultiHeadAttention", [_Q, _KS, _VS, _B3], {"num_heads": N}, ["y"])[0]
    got = _ours(
        _model("MultiHeadAttention", [qkv, None, None, _B3], {"num_heads": N}, ["y"]), _feeds([qkv, None, None, _B3])
    )
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ GroupQueryAttention
GN, KV = 4, 2


def _gqa(case: dict[str, Any]) -> None:
    """One GroupQueryAttention case: S new tokens over a past buffer with seqlens_k valid lengths."""
    b, s, hd, past_len = case.get("b", 2), case["s"], case.get("h", 8), case.get("past", 8)
    q, k, v = _f(b, s, GN * hd), _f(b, s, KV * hd), _f(b, s, KV * hd)
    if case.get("packed"):
        q, k, v = np.concatenate((q, k, v), axis=-1), None, None
    pk = _f(b, KV, past_len, hd) if past_len else None
    pv = _f(b, KV, past_len, hd) if past_len else None
    inputs = [q, k, v, pk, pv, _i32(*case["lens"]), _i32(case["total"]), *case.get("extra", [])]
    outs = ["y", "present_k", "present_v", "qk"][: 4 if case.get("attrs", {}).get("qk_output") else 3]
    _check("GroupQueryAttention", inputs, {"num_heads": GN, "kv_num_heads": KV, **case.get("attrs", {})}, outs)


_COS16, _SIN16 = _f(16, 8), _f(16, 8)
PROMPT = {"s": 5, "lens": [4, 4], "total": 5}
TOKEN = {"s": 1, "lens": [5, 3], "total": 6}
ROT = {"h": 16, "attrs": {"do_rotary": 1}, "extra": [_COS16, _SIN16]}
GQA = {
    "prompt_no_past": {**PROMPT, "past": 0},
    # a padded prompt row (position >= seqlens_k + 1) sees keys up to seqlens_k only, as onnxruntime
    "prompt_padded_rows": {"s": 5, "lens": [4, 2], "total": 5, "past": 0},
    "prompt_padded_rows_buffer": {"s": 5, "lens": [1, 4], "total": 5},
    "prompt_buffer": PROMPT,
    "token_ragged": TOKEN,
    "token_tight_buffer": {"s": 1, "lens": [5, 5], "total": 6, "past": 5},
    "continued_prompt": {"b": 1, "s": 2, "lens": [5], "total": 6},
    "rotary_prompt": {**PROMPT, **ROT},
    "rotary_prompt_interleaved": {**PROMPT, **ROT, "attrs": {"do_rotary": 1, "rotary_interleaved": 1}},
    "rotary_token": {**TOKEN, **ROT},
    "rotary_token_positions": {**TOKEN, **ROT, "extra": [_COS16, _SIN16, np.array([[7], [2]], np.int64)]},
    # onnxruntime reads only the first position id in a first prompt (then consecutive positions)
    "rotary_prompt_positions": {
        **PROMPT,
        **ROT,
        "extra": [_COS16, _SIN16, np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])],
    },
    "rotary_partial": {**PROMPT, "h": 32, "attrs": {"do_rotary": 1}, "extra": [_f(16, 8), _f(16, 8)]},
    "rotary_continued": {"b": 1, "s": 3, "lens": [5], "total": 6, **ROT},
    "rotary_packed": {**TOKEN, **ROT, "packed": True},
    "not_causal_prompt": {**PROMPT, "attrs": {"causal": 0}},
    "not_causal_token": {**TOKEN, "attrs": {"causal": 0}},
    "local_window_prompt": {**PROMPT, "attrs": {"local_window_size": 2}},
    "local_window_token": {**TOKEN, "attrs": {"local_window_size": 2}},
    "softcap": {**PROMPT, "attrs": {"softcap": 1.5}},
    "softcap_window": {**TOKEN, "attrs": {"softcap": 1.5, "local_window_size": 3}},
    "smooth_softmax": {**PROMPT, "attrs": {"smooth_softmax": 1}},
    "head_sink": {**TOKEN, "extra": [None, None, None, None, _f(GN)]},
    "attention_bias": {**PROMPT, "extra": [None, None, None, _f(2, GN, 5, 5)]},
    "attention_bias_softcap": {**TOKEN, "attrs": {"softcap": 1.0}, "extra": [None, None, None, _f(2, 1, 1, 6)]},
    "packed_qkv": {**PROMPT, "packed": True},
    "scale": {**PROMPT, "attrs": {"scale": 0.1}},
    "qk_scores": {**PROMPT, "attrs": {"qk_output": 1}},
    "qk_probs": {**PROMPT, "attrs": {"qk_output": 2}},
    "qk_scores_token": {
        "s": 1,
        "lens": [5, 5],
        "total": 6,
        "attrs": {"qk_output": 1, "softcap": 1.0},
        "extra": [None, None, None, _f(2, 1, 1, 6)],
    },
    "qk_probs_token": {"s": 1, "lens": [5, 5], "total": 6, "attrs": {"qk_output": 2}},
}


@pytest.mark.parametrize("case", sorted(GQA))
def test_group_query_attention(case: str) -> None:
    _gqa(GQA[case])


# ------------------------------------------------------------------------------------ RotaryEmbedding
_COS, _SIN = _f(12, 4), _f(12, 4)
_P0, _P2 = np.array([2], np.int64), RNG.integers(0, 12, (B, 3)).astype(np.int64)
ROTARY = {
    "3d_start": ([_f(B, 3, 16), _P0, _COS, _SIN], {}),
    "3d_interleaved": ([_f(B, 3, 16), _P2, _COS, _SIN], {"interleaved": 1}),
    "4d_bnsh": ([_f(B, N, 3, 8), _P2, _COS, _SIN], {}),
    "partial": ([_f(B, 3, 32), _P2, _COS, _SIN], {"rotary_embedding_dim": 8, "num_heads": N}),
    "partial_interleaved": (
        [_f(B, 3, 32), _P0, _COS, _SIN],
        {"rotary_embedding_dim": 8, "num_heads": N, "interleaved": 1},
    ),
    "num_heads": ([_f(B, 3, 16), _P0, _COS, _SIN], {"num_heads": N}),
    "scale_unused": ([_f(B, 3, 16), _P0, _COS, _SIN], {"scale": 0.5}),  # onnxruntime's kernels never read it
}


@pytest.mark.parametrize("case", sorted(ROTARY))
def test_rotary_embedding(case: str) -> None:
    inputs, attrs = ROTARY[case]
    _check("RotaryEmbedding", inputs, attrs, ["y"])


# ------------------------------------------------------------------------------------ EmbedLayerNormalization
VOCAB, MAXPOS, HID = 30, 10, 16
_IDS, _SEG = RNG.integers(0, VOCAB, (B, 5)).astype(np.int32), RNG.integers(0, 2, (B, 5)).astype(np.int32)
_TABLES = [_f(VOCAB, HID), _f(MAXPOS, HID), _f(2, HID), _f(HID), _f(HID)]
_EMASK = _i32(1, 1, 1, 0, 0, 1, 1, 1, 1, 1).reshape(2, 5)
EMBED = {
    "mask": ([_IDS, _SEG, *_TABLES, _EMASK], {}, ["y", "mask_index"]),
    "no_segment": ([_IDS, None, _TABLES[0], _TABLES[1], None, *_TABLES[3:]], {}, ["y", "mask_index"]),
    "embedding_sum": ([_IDS, _SEG, *_TABLES, _EMASK], {"epsilon": 1e-5}, ["y", "mask_index", "embedding_sum"]),
    "position_ids": (
        [_IDS, _SEG, *_TABLES, None, RNG.integers(0, MAXPOS, (B, 5)).astype(np.int32)],
        {},
        ["y", "", "embedding_sum"],
    ),
    "mask_not_01": ([_IDS, _SEG, *_TABLES, _i32(1, 2, 1, 0, 1, 0, 0, 1, 1, 1).reshape(2, 5)], {}, ["y", "mask_index"]),
    "mask_index_type_0": ([_IDS, _SEG, *_TABLES, _EMASK], {"mask_index_type": 0}, ["y", "mask_index"]),
}


@pytest.mark.parametrize("case", sorted(EMBED))
def test_embed_layer_normalization(case: str) -> None:
    inputs, attrs, outs = EMBED[case]
    _check("EmbedLayerNormalization", inputs, attrs, outs)


def test_embed_layer_normalization_out_of_range_ids() -> None:
    """An id past the table is an INVALID_ARGUMENT naming the input, as in onnxruntime."""
    from ep_core.sdk.errors import InvalidArgument

    inputs = [_IDS + VOCAB, _SEG, *_TABLES, _EMASK]
    with pytest.raises(InvalidArgument, match="input_ids must lie in"):
        _ours(_model("EmbedLayerNormalization", inputs, {}, ["y", "mask_index"]), _feeds(inputs))


# ------------------------------------------------------------------------------------ BiasSoftmax
@pytest.mark.parametrize(("axis", "bias_shape", "inner"), [(1, (2, 1, 4, 5), 0), (2, (4, 5), 1), (-1, (2, 3, 4, 5), 0)])
def test_bias_softmax(axis: int, bias_shape: tuple[int, ...], inner: int) -> None:
    """onnxruntime serves BiasSoftmax on GPU only: compared with its unfused Add + Softmax here."""
    x, bias = _f(2, 3, 4, 5), _f(*bias_shape)
    got = _ours(
        _model("BiasSoftmax", [x, bias], {"axis": axis, "is_inner_broadcast": inner}, ["y"]), _feeds([x, bias])
    )[0]
    z = (x + bias).reshape(int(np.prod(x.shape[: axis % 4])), -1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(axis=1, keepdims=True)).reshape(x.shape), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------ a fused BERT end to end
def _bert(b: int = 2, s: int = 8, d: int = 32, heads: int = 4, layers: int = 2, vocab: int = 50, ffn: int = 64) -> Any:
    """An unfused float BERT encoder as exporters write it: embeddings + LayerNormalization, then
    per layer Q/K/V MatMul+Add, Reshape/Transpose into heads, scaled QK^T + additive padding mask,
    Softmax, context, output projection, residual LayerNormalization, Erf-GELU feed-forward."""
    from onnx import numpy_helper

    rng = np.random.default_rng(7)
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Any) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name: str, *shape: int, scale: float = 0.2) -> str:
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op: str, ins: list[str], out: str, **kw: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    hd = d // heads
    const("shape4", np.array([b, s, heads, hd], np.int64))
    const("shape3", np.array([b, s, d], np.int64))
    for name, v in (("sqrt_h", np.sqrt(hd)), ("half", 0.5), ("one", 1.0), ("sqrt2", np.sqrt(2)), ("neg", -10000.0)):
        const(name, np.array(v, np.float32))
    const("pos_ids", np.arange(s, dtype=np.int64)[None])
    const("ax12", np.array([1, 2], np.int64))
    emb = node(
        "Add",
        [
            node("Gather", [weight("wemb", vocab, d), "ids"], "we"),
            node("Gather", [weight("pemb", s, d), "pos_ids"], "pe"),
        ],
        "emb",
    )
    x = node("LayerNormalization", [emb, weight("g0", d), weight("b0", d)], "x0", axis=-1, epsilon=1e-12)
    mask = node("Cast", [node("Unsqueeze", ["mask", "ax12"], "m4")], "mf", to=TensorProto.FLOAT)
    additive = node("Mul", [node("Sub", ["one", mask], "minv"), "neg"], "madd")
    for layer in range(layers):
        p = f"l{layer}_"

        def dense(t: str, name: str, n_in: int = d, n_out: int = d, p: str = p) -> str:
            mm = node("MatMul", [t, weight(p + name + "_w", n_in, n_out)], p + name + "_mm")
            return node("Add", [mm, weight(p + name + "_b", n_out, scale=0.05)], p + name)

        def split(t: str, name: str, p: str = p) -> str:
            return node(
                "Transpose", [node("Reshape", [t, "shape4"], p + name + "_r")], p + name + "_t", perm=[0, 2, 1, 3]
            )

        q, k, v = split(dense(x, "q"), "qh"), split(dense(x, "k"), "kh"), split(dense(x, "v"), "vh")
        kt = node("Transpose", [k], p + "kT", perm=[0, 1, 3, 2])
        scores = node(
            "Add", [node("Div", [node("MatMul", [q, kt], p + "qk"), "sqrt_h"], p + "sc"), additive], p + "msk"
        )
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        ctx4 = node("Transpose", [node("MatMul", [probs, v], p + "ctx4")], p + "ctxT", perm=[0, 2, 1, 3])
        att = dense(node("Reshape", [ctx4, "shape3"], p + "ctx"), "o")
        x = node(
            "LayerNormalization",
            [node("Add", [x, att], p + "r1"), weight(p + "g1", d), weight(p + "b1", d)],
            p + "x1",
            axis=-1,
            epsilon=1e-12,
        )
        f1 = dense(x, "f1", d, ffn)
        erf = node("Erf", [node("Div", [f1, "sqrt2"], p + "gs")], p + "ge")
        gelu = node("Mul", ["half", node("Mul", [f1, node("Add", [erf, "one"], p + "gp1")], p + "gx")], p + "gelu")
        f2 = dense(gelu, "f2", ffn, d)
        x = node(
            "LayerNormalization",
            [node("Add", [x, f2], p + "r2"), weight(p + "g2", d), weight(p + "b2", d)],
            p + "x2",
            axis=-1,
            epsilon=1e-12,
        )
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [b, s]) for n in ("ids", "mask")]
    graph = helper.make_graph(
        nodes, "bert", inputs, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, s, d])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_fused_bert_end_to_end() -> None:
    """onnxscript's ort_fusions turn the unfused encoder into MultiHeadAttention,
    SkipLayerNormalization and BiasGelu; the fused model runs natively here and matches
    onnxruntime on it, and on the unfused original."""
    ir = pytest.importorskip("onnx_ir")
    ort_fusions = pytest.importorskip("onnxscript.rewriter.ort_fusions")
    unfused = _bert()
    fused_ir, counts = ort_fusions.optimize_for_ort(ir.from_proto(unfused))
    fused = ir.to_proto(fused_ir)
    ops = {n.op_type for n in fused.graph.node if n.domain == MS}
    assert {"MultiHeadAttention", "SkipLayerNormalization", "BiasGelu"} <= ops, counts
    feeds = {
        "ids": RNG.integers(0, 50, (2, 8)).astype(np.int64),
        "mask": np.array([[1] * 8, [1] * 5 + [0] * 3], np.int64),
    }
    got = _ours(fused.SerializeToString(), feeds)[0]
    want = _theirs(fused.SerializeToString(), feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, _theirs(unfused.SerializeToString(), feeds)[0], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------ float16
def _h(*shape: int) -> np.ndarray:
    return _f(*shape).astype(np.float16)


FLOAT16 = {
    "Attention": ([_h(2, 4, 16), _h(16, 48), _h(48), _i32(3, 2)], {"num_heads": 2}, ["y"]),
    "MultiHeadAttention": ([_h(2, 4, 16), _h(2, 5, 16), _h(2, 5, 16), _h(48)], {"num_heads": 2}, ["y"]),
    "GroupQueryAttention": (
        [
            _h(2, 5, 64),
            _h(2, 5, 32),
            _h(2, 5, 32),
            _h(2, 2, 8, 16),
            _h(2, 2, 8, 16),
            _i32(4, 4),
            _i32(5),
            _h(16, 8),
            _h(16, 8),
        ],
        {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1},
        ["y", "present_k", "present_v"],
    ),
    "RotaryEmbedding": ([_h(2, 3, 16), np.array([1], np.int64), _h(12, 4), _h(12, 4)], {}, ["y"]),
    "EmbedLayerNormalization": (
        [_IDS, None, _h(VOCAB, 16), _h(MAXPOS, 16), None, _h(16), _h(16)],
        {},
        ["y", "mask_index"],
    ),
}


@pytest.mark.parametrize("op", sorted(FLOAT16))
def test_float16(op: str) -> None:
    """float16 models compute in float32 and round once, as onnxruntime's CPU kernels do."""
    inputs, attrs, outs = FLOAT16[op]
    _check(op, inputs, attrs, outs, rtol=2e-3, out_type=TensorProto.FLOAT16)


# ------------------------------------------------------------------------------------ refusals
def _refused(op: str, inputs: list[Any], attrs: dict[str, Any], match: str) -> None:
    from ep_core.sdk.errors import EpCoreError

    with pytest.raises(EpCoreError, match=match):
        _ours(_model(op, inputs, attrs, ["y"]), _feeds(inputs))


_GQA_IN = [_f(2, 1, 32), _f(2, 1, 16), _f(2, 1, 16), _f(2, 2, 4, 8), _f(2, 2, 4, 8), _i32(3, 3), _i32(4)]
REFUSED = {
    "mha_cache_indirection": (
        "MultiHeadAttention",
        [_Q, _KS, _VS, None, None, None, _PK, _PV, None, np.zeros((B, 1, 4), np.int32)],
        {"num_heads": N},
        "cache_indirection",
    ),
    "mha_past_sequence_length": (
        "MultiHeadAttention",
        [_Q, _KS, _VS, None, None, None, _PK, _PV, _i32(2)],
        {"num_heads": N},
        "past_sequence_length 2 differs",
    ),
    "gqa_quantized_cache": (
        "GroupQueryAttention",
        _GQA_IN,
        {"num_heads": 4, "kv_num_heads": 2, "k_quant_type": "PER_TENSOR"},
        "k_quant_type",
    ),
    "gqa_not_causal_window": (
        "GroupQueryAttention",
        _GQA_IN,
        {"num_heads": 4, "kv_num_heads": 2, "causal": 0, "local_window_size": 2},
        "local_window_size must be -1 when causal is 0",
    ),
    "gqa_kv_cache_bit_width": (
        "GroupQueryAttention",
        _GQA_IN,
        {"num_heads": 4, "kv_num_heads": 2, "kv_cache_bit_width": 8},
        "kv_cache_bit_width must be 0",
    ),
    "gqa_sliding_cache": (
        "GroupQueryAttention",
        _GQA_IN,
        {"num_heads": 4, "kv_num_heads": 2, "sliding_window_cache": 1},
        "sliding_window_cache",
    ),
    "rotary_packed_batching": (
        "RotaryEmbedding",
        [_f(2, 3, 16), np.array([0]), _f(8, 4), _f(8, 4)],
        {"is_packed_batching": 1},
        "is_packed_batching",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_forms(case: str) -> None:
    """GPU-only modes are refused with a typed error naming the attribute/input, never ignored."""
    _refused(*REFUSED[case])

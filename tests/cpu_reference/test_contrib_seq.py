"""The native com.microsoft sequence-model kernels (ep_cpu_reference/kernels/contrib_seq.py and
contrib_engram.py) against onnxruntime 1.31's CPU contrib kernels, one single-node model per case:
DecoderMaskedMultiHeadAttention, SparseAttention, MRotaryEmbedding, LinearAttention(+Gate),
CausalConvWithState, EngramGate, HyperConnectionPre/PostMix, (Varlen)NGramHashMapping; the ai.onnx
LinearAttention / CausalConvWithState against onnxruntime's com.microsoft twins and onnx.reference,
and ai.onnx.preview FlexAttention against onnx.reference (onnxruntime has no kernel for it).

SparseAttention's CPU kernel insists that past and present share one buffer, which onnxruntime
only arranges through IO binding, so its side binds each present output to its past input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _support.oracle import ours
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
RNG = np.random.default_rng(4321)


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def _model(op: str, inputs: list[Any], attrs: dict[str, Any], outs: list[str], out_types: dict[str, int]) -> bytes:
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
    ovs = [helper.make_tensor_value_info(o, out_types.get(o, TensorProto.FLOAT), None) for o in outs if o]
    graph = helper.make_graph([node], "g", vis, ovs)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _feeds(inputs: list[Any]) -> dict[str, np.ndarray]:
    return {f"in{i}": v for i, v in enumerate(inputs) if v is not None}


_ours = ours


def _theirs(model: bytes, feeds: dict[str, np.ndarray], share: dict[str, str] | None = None) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    if not share:
        return sess.run(None, feeds)
    binding = sess.io_binding()
    owned = {n: v.copy() for n, v in feeds.items()}  # an OrtValue from numpy borrows the array's memory
    values = {n: ort.OrtValue.ortvalue_from_numpy(v) for n, v in owned.items()}
    for n, v in values.items():
        binding.bind_ortvalue_input(n, v)
    for o in (o.name for o in sess.get_outputs()):
        if o in share:
            binding.bind_ortvalue_output(o, values[share[o]])
        else:
            binding.bind_output(o)
    sess.run_with_iobinding(binding)
    return [v.numpy().copy() for v in binding.get_outputs()]


def _check(
    op: str,
    inputs: list[Any],
    attrs: dict[str, Any],
    outs: list[str],
    rtol: float = 1e-5,
    out_types: dict[str, int] | None = None,
    share: dict[str, str] | None = None,
) -> list[np.ndarray]:
    model = _model(op, inputs, attrs, outs, out_types or {})
    got, want = _ours(model, _feeds(inputs)), _theirs(model, _feeds(inputs), share)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape, g.dtype, w.dtype)
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            scale = max(1.0, float(np.abs(w.astype(np.float64)).max(initial=0)))
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=f"output {i}")
    return got


def _refused(op: str, inputs: list[Any], attrs: dict[str, Any], outs: list[str], match: str) -> None:
    from ep_core.sdk.errors import InvalidArgument, NotImplementedByAnyEp

    model = _model(op, inputs, attrs, outs, {})
    with pytest.raises((InvalidArgument, NotImplementedByAnyEp), match=match):
        _ours(model, _feeds(inputs))


SEQ_OPS = [
    "DecoderMaskedMultiHeadAttention",
    "SparseAttention",
    "MRotaryEmbedding",
    "LinearAttention",
    "LinearAttentionGate",
    "CausalConvWithState",
    "EngramGate",
    "HyperConnectionPreMix",
    "HyperConnectionPostMix",
    "NGramHashMapping",
    "VarlenNGramHashMapping",
]


# ------------------------------------------------------------------------------------ schemas
@pytest.mark.parametrize("op", SEQ_OPS)
def test_schema_matches_onnxruntime(op: str) -> None:
    """Input/output names and options, attribute names, kinds, requiredness and defaults are
    onnxruntime's."""
    from onnx import AttributeProto, defs
    from onnxruntime.capi import _pybind_state

    import ep_cpu_reference.kernels.contrib_seq  # noqa: F401  (registers the schemas)

    theirs = next(s for s in _pybind_state.get_all_operator_schema() if s.domain == MS and s.name == op)
    ours = defs.get_schema(op, 1, MS)
    for mine, other in ((ours.inputs, theirs.inputs), (ours.outputs, theirs.outputs)):
        assert [(p.name, int(p.option.value)) for p in mine] == [(p.name, int(p.option.value)) for p in other]
    assert sorted(ours.attributes) == sorted(theirs.attributes)
    for name, a in theirs.attributes.items():
        mine_a = ours.attributes[name]
        assert (mine_a.required, int(mine_a.type.value)) == (a.required, int(a.type.value)), name
        if a._default_value:
            want = helper.get_attribute_value(AttributeProto.FromString(a._default_value))
            assert helper.get_attribute_value(mine_a.default_value) == want, name
        else:
            assert not mine_a.default_value.name, name


# ------------------------------------------------------------------------------------ DecoderMaskedMultiHeadAttention
B, N, H, M = 2, 2, 4, 6
D = N * H
_Q, _K, _V = _f(B, 1, D), _f(B, 1, D), _f(B, 1, D)
_PK, _PV = _f(B, N, M, H), _f(B, N, M, H)
_MASK = np.ones((B, 4), np.int32)
_MASK[0, 1] = 0
SHARE = {"past_present_share_buffer": 1, "num_heads": N}
DMMHA = {
    "self": ([_Q, _K, _V, None, None, _PK, _PV, _i32(3)], SHARE),
    "self_scale": ([_Q, _K, _V, None, None, _PK, _PV, _i32(0)], {**SHARE, "scale": 0.7}),
    "mask": ([_Q, _K, _V, _MASK, None, _PK, _PV, _i32(3)], SHARE),
    "mask_filter": ([_Q, _K, _V, _MASK, None, _PK, _PV, _i32(3)], {**SHARE, "mask_filter_value": -50.0}),
    "attention_bias": ([_Q, _K, _V, None, _f(B, N, 1, 4), _PK, _PV, _i32(3)], SHARE),
    "attention_bias_bcast": ([_Q, _K, _V, None, _f(1, 1, 1, 5), _PK, _PV, _i32(4)], SHARE),
    "bias": ([_Q, _K, _V, None, None, _PK, _PV, _i32(2), None, None, _f(3 * D)], SHARE),
    "beams": (
        [
            _Q,
            _K,
            _V,
            _MASK,
            None,
            _PK,
            _PV,
            _i32(3),
            _i32(2),
            np.array([[[1, 0, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0]]], np.int32),
        ],
        SHARE,
    ),
    "beam_width_1": ([_Q, _K, _V, None, None, _PK, _PV, _i32(3), _i32(1), np.zeros((B, 1, M), np.int32)], SHARE),
}


@pytest.mark.parametrize("case", sorted(DMMHA))
def test_dmmha_self_matches_onnxruntime(case: str) -> None:
    inputs, attrs = DMMHA[case]
    _check("DecoderMaskedMultiHeadAttention", inputs, attrs, ["out", "present_key", "present_value"])


def test_dmmha_qk_output_matches_onnxruntime() -> None:
    inputs, attrs = DMMHA["mask"]
    _check("DecoderMaskedMultiHeadAttention", inputs, {**attrs, "output_qk": 1}, ["o", "pk", "pv", "qk"])


@pytest.mark.parametrize("with_qk", [False, True])
def test_dmmha_cross_attention_matches_onnxruntime(with_qk: bool) -> None:
    ck, cv = _f(B, N, 5, H), _f(B, N, 5, H)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    outs = ["o", "", "", "qk"] if with_qk else ["o"]
    _check("DecoderMaskedMultiHeadAttention", [_Q, ck, cv, mask], {"num_heads": N, "output_qk": int(with_qk)}, outs)


def test_dmmha_refusals_name_the_way_out() -> None:
    op = "DecoderMaskedMultiHeadAttention"
    _refused(op, [_Q, _K, _V, None, None, _PK, _PV, _i32(3)], {"num_heads": N}, ["o", "pk", "pv"], "share_buffer")
    _refused(op, [_f(B, 2, D), _K, _V, None, None, _PK, _PV, _i32(3)], SHARE, ["o", "pk", "pv"], "one decoding step")
    bad_mask = np.ones((B, M), np.int32)
    _refused(op, [_Q, _K, _V, bad_mask, None, _PK, _PV, _i32(3)], SHARE, ["o", "pk", "pv"], "2-D key padding mask")
    _refused(op, [_Q, _K, _V, None, None, _PK, _PV, _i32(3), _i32(2)], SHARE, ["o", "pk", "pv"], "cache_indirection")


# ------------------------------------------------------------------------------------ SparseAttention
def _csr(rowsets: list[set[int]]) -> tuple[list[int], list[int]]:
    rows, cols = [0], []
    for s in rowsets:
        cols += sorted(s)
        rows.append(len(cols))
    return rows, cols


def _layouts(n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Layout 0: local (own and previous block) + global first block; layout 1: dense causal."""
    local = _csr([{0, max(r - 1, 0), r} for r in range(n_blocks)])
    dense = _csr([set(range(r + 1)) for r in range(n_blocks)])
    width = max(len(local[1]), len(dense[1]))
    rows = np.array([local[0], dense[0]], np.int32)
    cols = np.full((2, width), -1, np.int32)
    cols[0, : len(local[1])], cols[1, : len(dense[1])] = local[1], dense[1]
    return rows, cols


SN, SKV, SH, SM = 4, 2, 16, 16
_ROWS, _COLS = _layouts(8)


def _sparse_inputs(s: int, lens: tuple[int, int], total: int, packed: bool = False, rotary: bool = False) -> list[Any]:
    q = _f(2, s, (SN + 2 * SKV) * SH) if packed else _f(2, s, SN * SH)
    k = None if packed else _f(2, s, SKV * SH)
    v = None if packed else _f(2, s, SKV * SH)
    pk, pv = _f(2, SKV, SM, SH), _f(2, SKV, SM, SH)
    cos_sin = [_f(SM, SH // 2), _f(SM, SH // 2)] if rotary else []
    return [q, k, v, pk, pv, _ROWS, _COLS, _i32(total), _i32(*lens), *cos_sin]


SPARSE = {
    "prompt": (_sparse_inputs(7, (7, 7), 7), {}),
    "decode": (_sparse_inputs(1, (12, 12), 12), {}),
    "packed": (_sparse_inputs(7, (7, 7), 7, packed=True), {}),
    "rotary_prompt": (_sparse_inputs(7, (7, 7), 7, rotary=True), {"do_rotary": 1}),
    "rotary_decode": (_sparse_inputs(1, (12, 12), 12, rotary=True), {"do_rotary": 1, "rotary_interleaved": 1}),
    "scale": (_sparse_inputs(2, (5, 5), 5), {"scale": 0.3}),
}


@pytest.mark.parametrize("case", sorted(SPARSE))
def test_sparse_attention_matches_onnxruntime(case: str) -> None:
    inputs, extra = SPARSE[case]
    attrs = {"num_heads": SN, "kv_num_heads": SKV, "sparse_block_size": 2, **extra}
    _check("SparseAttention", inputs, attrs, ["o", "pk", "pv"], share={"pk": "in3", "pv": "in4"})


# ------------------------------------------------------------------------------------ MRotaryEmbedding
def _mrope_pos(b: int, s: int, max_pos: int) -> np.ndarray:
    return RNG.integers(0, max_pos, (3, b, s)).astype(np.int64)


MROPE = {
    "sectioned_3d": (_f(2, 3, 2 * 16), _mrope_pos(2, 3, 10), {"num_heads": 2, "mrope_section": [2, 3, 3]}, 16),
    "interleaved_layout": (
        _f(2, 3, 2 * 16),
        _mrope_pos(2, 3, 10),
        {"num_heads": 2, "mrope_section": [4, 2, 2], "mrope_layout": 1},
        16,
    ),
    "bnsh_interleaved": (_f(2, 2, 3, 16), _mrope_pos(2, 3, 10), {"mrope_section": [4, 2, 2], "interleaved": 1}, 16),
    "partial_rotary": (
        _f(1, 4, 2 * 16),
        _mrope_pos(1, 4, 10),
        {"num_heads": 2, "rotary_embedding_dim": 8, "mrope_section": [2, 1, 1]},
        8,
    ),
    "scale": (_f(1, 4, 2 * 16), _mrope_pos(1, 4, 10), {"num_heads": 2, "mrope_section": [2, 3, 3], "scale": 0.5}, 16),
}


@pytest.mark.parametrize("case", sorted(MROPE))
def test_mrotary_matches_onnxruntime(case: str) -> None:
    x, pos, attrs, rot = MROPE[case]
    cos, sin = _f(10, rot // 2), _f(10, rot // 2)
    _check("MRotaryEmbedding", [x, pos, cos, sin], attrs, ["out"])


def test_mrotary_refuses_bad_section() -> None:
    x, pos, _, _ = MROPE["sectioned_3d"]
    attrs = {"num_heads": 2, "mrope_section": [2, 2, 2]}
    _refused("MRotaryEmbedding", [x, pos, _f(10, 8), _f(10, 8)], attrs, ["out"], "mrope_section")


def test_sparse_attention_ragged_batch_matches_onnxruntime_per_entry() -> None:
    """Key lengths that differ across the batch: onnxruntime 1.31's CPU kernel strides its
    probabilities by total_sequence_length when writing and by the entry's length when reading
    (garbage for shorter entries), so each entry is compared with onnxruntime run on it alone."""
    inputs = _sparse_inputs(1, (9, 12), 12)
    attrs = {"num_heads": SN, "kv_num_heads": SKV, "sparse_block_size": 2}
    got = _ours(_model("SparseAttention", inputs, attrs, ["o", "pk", "pv"], {}), _feeds(inputs))
    for b, length in enumerate((9, 12)):
        one = [x[b : b + 1] if i < 5 else x for i, x in enumerate(inputs)]
        one[7], one[8] = _i32(length), _i32(length)
        want = _theirs(
            _model("SparseAttention", one, attrs, ["o", "pk", "pv"], {}), _feeds(one), {"pk": "in3", "pv": "in4"}
        )
        for g, w in zip(got, want):
            np.testing.assert_allclose(g[b : b + 1], w, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ LinearAttention
def _la_inputs(b: int, t: int, hq: int, hk: int, hkv: int, dk: int, dv: int, past: bool) -> list[Any]:
    q, k, v = _f(b, t, hq * dk, scale=0.5), _f(b, t, hk * dk, scale=0.5), _f(b, t, hkv * dv)
    return [q, k, v, _f(b, hkv, dk, dv) if past else None]


def _la_case(rule: str, hq: int, hk: int, hkv: int, past: bool, decay_dims: int, beta_dims: int, t: int = 5) -> Any:
    dk, dv = 4, 3
    inputs = _la_inputs(2, t, hq, hk, hkv, dk, dv, past)
    decay = -np.abs(_f(2, t, decay_dims)) if decay_dims else None
    beta = 1.0 / (1.0 + np.exp(-_f(2, t, beta_dims))) if beta_dims else None
    return inputs + [decay, None if beta is None else beta.astype(np.float32)], {
        "q_num_heads": hq,
        "kv_num_heads": hkv,
        "update_rule": rule,
    }


LINEAR = {
    "linear": _la_case("linear", 2, 2, 2, False, 0, 0),
    "linear_past": _la_case("linear", 2, 2, 2, True, 0, 0),
    "gated_head": _la_case("gated", 4, 2, 2, True, 2, 0),
    "gated_keydim": _la_case("gated", 2, 2, 2, False, 2 * 4, 0),
    "delta": _la_case("delta", 2, 2, 2, True, 0, 2),
    "delta_beta1": _la_case("delta", 2, 2, 2, False, 0, 1),
    "gated_delta": _la_case("gated_delta", 4, 2, 2, True, 2, 2),
    "gated_delta_decode": _la_case("gated_delta", 2, 2, 2, True, 2 * 4, 2, t=1),
    "inverse_gqa": _la_case("gated_delta", 2, 2, 4, True, 4, 4),
    "shared_keys": _la_case("gated_delta", 4, 1, 2, False, 2, 2),
}


@pytest.mark.parametrize("case", sorted(LINEAR))
def test_linear_attention_matches_onnxruntime(case: str) -> None:
    inputs, attrs = LINEAR[case]
    _check("LinearAttention", inputs, attrs, ["out", "state"], rtol=1e-5)


def test_linear_attention_scale_and_chunk_size() -> None:
    inputs, attrs = LINEAR["gated_delta"]
    _check("LinearAttention", inputs, {**attrs, "scale": 0.25, "chunk_size": 2}, ["out", "state"])


def _onnx_model(op: str, inputs: list[Any], attrs: dict[str, Any], outs: list[str], opset: int = 27) -> Any:
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outs, **attrs)
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in zip(names, inputs)
        if n
    ]
    ovs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], "g", vis, ovs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize("case", ["linear_past", "gated_head", "gated_delta", "delta_beta1"])
def test_onnx_linear_attention_is_native_and_matches(case: str) -> None:
    """ai.onnx LinearAttention-27 runs natively (not delegated) and agrees with onnxruntime's
    com.microsoft kernel (same recurrence) and with onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    from ep_cpu_reference.registry import REGISTRY

    assert not any(e.kernel_def.delegated for e in REGISTRY if e.kernel_def.op_type == "LinearAttention")
    inputs, attrs = LINEAR[case]
    model = _onnx_model("LinearAttention", inputs, attrs, ["out", "state"])
    got = _ours(model.SerializeToString(), _feeds(inputs))
    ms = _theirs(_model("LinearAttention", inputs, attrs, ["out", "state"], {}), _feeds(inputs))
    ref = ReferenceEvaluator(model).run(None, _feeds(inputs))
    for g, w, r in zip(got, ms, ref):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_onnx_linear_attention_refuses_unused_decay() -> None:
    inputs, attrs = LINEAR["linear"]
    inputs = inputs[:4] + [_f(2, 5, 2)]
    from ep_core.sdk.errors import InvalidArgument, InvalidGraph

    with pytest.raises((InvalidArgument, InvalidGraph), match="forbids decay|takes no decay"):
        _ours(_onnx_model("LinearAttention", inputs, attrs, ["out", "state"]).SerializeToString(), _feeds(inputs))


@pytest.mark.parametrize("with_beta", [False, True])
def test_linear_attention_gate_matches_onnxruntime(with_beta: bool) -> None:
    a = _f(2, 3, 4, scale=4.0)
    inputs = [a, _f(4), -np.abs(_f(4)), _f(2, 3, 4, scale=3.0) if with_beta else None]
    _check("LinearAttentionGate", inputs, {}, ["decay", "beta"] if with_beta else ["decay"])


# ------------------------------------------------------------------------------------ CausalConvWithState
CONV = {
    "prefill": ([_f(2, 3, 6), _f(3, 1, 4), None, None], {}),
    "prefill_bias_past": ([_f(2, 3, 6), _f(3, 1, 4), _f(3), _f(2, 3, 3)], {}),
    "decode_silu": ([_f(2, 3, 1), _f(3, 1, 4), _f(3), _f(2, 3, 3)], {"activation": "silu"}),
    "decode_k6": ([_f(2, 3, 1), _f(3, 1, 6), None, _f(2, 3, 5)], {"activation": "swish"}),
    "dilation": ([_f(2, 3, 5), _f(3, 1, 3), _f(3), _f(2, 3, 4)], {"dilation": 2}),
    "dilation_decode": ([_f(2, 3, 1), _f(3, 1, 3), None, _f(2, 3, 4)], {"dilation": 2}),
    "channels_last": ([_f(2, 5, 3), _f(3, 1, 3), _f(3), _f(2, 2, 3)], {"channels_last": 1}),
    "channels_last_4d": ([_f(2, 5, 2, 3), _f(6, 1, 3), None, None], {"channels_last": 1}),
    "k1": ([_f(2, 3, 4), _f(3, 1, 1), _f(3), None], {}),
}


@pytest.mark.parametrize("case", sorted(CONV))
def test_causal_conv_with_state_matches_onnxruntime(case: str) -> None:
    inputs, attrs = CONV[case]
    _check("CausalConvWithState", inputs, attrs, ["out", "state"])


@pytest.mark.parametrize("case", ["prefill", "prefill_bias_past", "decode_silu", "k1"])
def test_onnx_causal_conv_is_native_and_matches(case: str) -> None:
    from onnx.reference import ReferenceEvaluator

    from ep_cpu_reference.registry import REGISTRY

    assert not any(e.kernel_def.delegated for e in REGISTRY if e.kernel_def.op_type == "CausalConvWithState")
    inputs, attrs = CONV[case]
    model = _onnx_model("CausalConvWithState", inputs, attrs, ["out", "state"])
    got = _ours(model.SerializeToString(), _feeds(inputs))
    ms = _theirs(_model("CausalConvWithState", inputs, attrs, ["out", "state"], {}), _feeds(inputs))
    ref = ReferenceEvaluator(model).run(None, _feeds(inputs))
    for g, w, r in zip(got, ms, ref):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ EngramGate / HyperConnection
@pytest.mark.parametrize("normed", [False, True])
def test_engram_gate_matches_onnxruntime(normed: bool) -> None:
    key, query, value = _f(2, 3, 2, 8), _f(2, 3, 2, 8), _f(2, 3, 8)
    key[0, 0, 0] = 0.0  # a zero dot: the gate's sign term
    inputs = [key, query, value, _f(2, 8), _f(2, 8), _f(2, 8) if normed else None]
    _check("EngramGate", inputs, {"epsilon": 1e-4} if normed else {}, ["out", "normed"] if normed else ["out"])


PRE = {
    "grouped_c": ([_f(2, 3, 4, 5), _f(2, 3, 4)], {}),
    "grouped_c1": ([_f(2, 3, 4, 5), _f(2, 3, 4, 1)], {"reduction_scale": 0.5}),
    "grouped_ch": ([_f(2, 3, 4, 5), _f(2, 3, 4, 5)], {}),
    "flat_c": ([_f(2, 3, 20), _f(2, 3, 4)], {"num_branches": 4}),
    "flat_ch": ([_f(2, 3, 20), _f(2, 3, 20)], {"num_branches": 4}),
    "flat_grouped_gate": ([_f(2, 3, 20), _f(2, 3, 4, 5)], {"num_branches": 4}),
}


@pytest.mark.parametrize("case", sorted(PRE))
def test_hyper_connection_pre_mix_matches_onnxruntime(case: str) -> None:
    inputs, attrs = PRE[case]
    _check("HyperConnectionPreMix", inputs, attrs, ["out"])


POST = {
    "grouped_identity": ([_f(2, 3, 4, 5), _f(2, 3, 5), _f(2, 3, 4)], {}),
    "grouped_mix": ([_f(2, 3, 4, 5), _f(2, 3, 5), _f(2, 3, 4, 1), _f(2, 3, 4, 4)], {}),
    "grouped_feature_gate": ([_f(2, 3, 4, 5), _f(2, 3, 5), _f(2, 3, 4, 5), _f(2, 3, 4, 4)], {}),
    "flat": ([_f(2, 3, 20), _f(2, 3, 5), _f(2, 3, 4), _f(2, 3, 4, 4)], {"num_branches": 4}),
}


@pytest.mark.parametrize("case", sorted(POST))
def test_hyper_connection_post_mix_matches_onnxruntime(case: str) -> None:
    inputs, attrs = POST[case]
    _check("HyperConnectionPostMix", inputs, attrs, ["out"])


# ------------------------------------------------------------------------------------ NGramHashMapping
INT64 = {"hash": TensorProto.INT64, "present": TensorProto.INT64}
INT32 = {"hash": TensorProto.INT32, "present": TensorProto.INT32}
_NG_MULT = np.array([1, 0x9E3779B1, 0x7FEB352D, 0x846CA68B], np.int64)  # products overflow: wrapping
_NG_VOCAB = np.array([101, 103, 107, 109, 113, 127], np.int64)
_NG_IDS = np.array([[5, 9, 2, 7, 2, 11, 3], [4, 4, 2, 8, 1, 2, 6]], np.int64)  # 2 is the EOS in eos cases
_NG_SEG = np.array([[0, 0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 1, 1, 1]], np.int32)
_NG_PAST = np.array([[2, 13, 17], [19, 2, 23]], np.int64)
_NG_OFF = np.array([0, 101, 204, 311, 420, 533], np.int64)
NGRAM = {
    "plain": [_NG_IDS, _NG_MULT, _NG_VOCAB],
    "past": [_NG_IDS, _NG_MULT, _NG_VOCAB, _NG_PAST],
    "offsets": [_NG_IDS, _NG_MULT, _NG_VOCAB, None, _NG_OFF],
    "eos_fill": [_NG_IDS, _NG_MULT, _NG_VOCAB, None, None, np.array(2, np.int64)],
    "eos_reset_past": [_NG_IDS, _NG_MULT, _NG_VOCAB, _NG_PAST, None, np.array(2, np.int64)],
    "segments": [_NG_IDS, _NG_MULT, _NG_VOCAB, _NG_PAST, None, None, _NG_SEG],
    "segments_eos": [_NG_IDS, _NG_MULT, _NG_VOCAB, _NG_PAST, _NG_OFF, np.array(2, np.int64), _NG_SEG],
    "negative_ids": [-_NG_IDS, -_NG_MULT, _NG_VOCAB],
}


@pytest.mark.parametrize("reset", [0, 1])
@pytest.mark.parametrize("case", sorted(NGRAM))
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_ngram_hash_mapping_matches_onnxruntime(case: str, reset: int, dtype: Any) -> None:
    inputs = [x if x is None or x.dtype == np.int32 and x.ndim == 2 else x.astype(dtype) for x in NGRAM[case]]
    attrs = {"max_ngram_size": 4, "n_head_per_ngram": 2, "pad_id": 0, "reset_on_eos": reset}
    types = INT64 if dtype is np.int64 else INT32
    _check("NGramHashMapping", inputs, attrs, ["hash", "present"], out_types=types)


_VL_IDS = np.concatenate((_NG_IDS[0, :4], _NG_IDS[1], _NG_IDS[0, 4:5]))  # requests of 4, 7 and 1 tokens
_VL_CU = _i32(0, 4, 11, 12)
_VL_SEG = np.concatenate((_NG_SEG[0, :4], _NG_SEG[1], _NG_SEG[0, 4:5])).astype(np.int32)
_VL_PAST = np.array([[2, 13, 17], [19, 2, 23], [29, 31, 2]], np.int64)
_VL_PSEG = np.array([[0, 0, 0], [5, 5, 1], [3, 4, 1]], np.int32)
VARLEN = {
    "plain": ([_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU], {}),
    "past_offsets": ([_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU, _VL_PAST, _NG_OFF], {}),
    "eos": ([_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU, _VL_PAST, None, np.array(2, np.int64)], {"reset_on_eos": 1}),
    "segments": ([_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU, _VL_PAST, None, None, _VL_SEG], {}),
    "segments_past": ([_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU, _VL_PAST, None, None, _VL_SEG, _VL_PSEG], {}),
    "capture": (
        [_VL_IDS, _NG_MULT, _NG_VOCAB, _VL_CU, _VL_PAST, None, np.array(2, np.int64), _VL_SEG, _VL_PSEG, _i32(2, 9, 1)],
        {"state_update_capacity": 3, "reset_on_eos": 1},
    ),
}


@pytest.mark.parametrize("case", sorted(VARLEN))
def test_varlen_ngram_hash_mapping_matches_onnxruntime(case: str) -> None:
    inputs, extra = VARLEN[case]
    attrs = {"max_ngram_size": 4, "n_head_per_ngram": 2, "pad_id": 0, **extra}
    outs = ["hash", "present"]
    types = dict(INT64)
    if len(inputs) > 7:
        outs.append("present_seg")
        types["present_seg"] = TensorProto.INT32
    if "state_update_capacity" in extra:
        outs.append("state")
        types["state"] = TensorProto.INT64
    _check("VarlenNGramHashMapping", inputs, attrs, outs, out_types=types)


def test_varlen_equals_per_request_ngram() -> None:
    """The documented contract: packing requests gives each one's NGramHashMapping result."""
    inputs, _ = VARLEN["past_offsets"]
    attrs = {"max_ngram_size": 4, "n_head_per_ngram": 2, "pad_id": 0}
    packed = _ours(_model("VarlenNGramHashMapping", inputs, attrs, ["hash", "present"], INT64), _feeds(inputs))
    for r, (lo, hi) in enumerate(zip(_VL_CU[:-1], _VL_CU[1:])):
        one = [_VL_IDS[None, lo:hi], _NG_MULT, _NG_VOCAB, _VL_PAST[r : r + 1], _NG_OFF]
        h, p = _ours(_model("NGramHashMapping", one, attrs, ["hash", "present"], INT64), _feeds(one))
        np.testing.assert_array_equal(packed[0][lo:hi], h[0])
        np.testing.assert_array_equal(packed[1][r], p[0])


# ------------------------------------------------------------------------------------ FlexAttention
def _flex_model(
    attrs: dict[str, Any], q: np.ndarray, k: np.ndarray, v: np.ndarray, outer: bool, inline: bool = False
) -> Any:
    """FlexAttention with optional modifiers; ``outer``: score_mod adds a bias, a graph-level
    initializer (an outer-scope value) or, ``inline``, the same bias held inside the subgraph (for
    onnx.reference, which cannot pass outer-scope values into these subgraphs); else score_mod adds
    a causal mask held inside the subgraph."""
    from onnx import numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(q.dtype)
    soft = TensorProto.DOUBLE if q.dtype == np.float64 else TensorProto.FLOAT
    s_len, t_len = q.shape[2], k.shape[2]
    graphs: dict[str, Any] = {}
    if attrs.pop("with_score_mod", False):
        if outer:
            body = [helper.make_node("Add", ["s", "bias"], ["s2"])]
            inits = [numpy_helper.from_array(FLEX_BIAS, "bias")] if inline else []
        else:
            mask = np.where(np.tril(np.ones((s_len, t_len))) > 0, 0.0, -np.inf)
            inits = [numpy_helper.from_array(mask.astype(helper.tensor_dtype_to_np_dtype(soft)), "mask")]
            body = [helper.make_node("Add", ["s", "mask"], ["s2"])]
        graphs["score_mod"] = helper.make_graph(
            body,
            "score_mod",
            [helper.make_tensor_value_info("s", soft, None)],
            [helper.make_tensor_value_info("s2", soft, None)],
            inits,
        )
    if attrs.pop("with_prob_mod", False):
        half = numpy_helper.from_array(np.array(0.5, helper.tensor_dtype_to_np_dtype(soft)), "half")
        graphs["prob_mod"] = helper.make_graph(
            [helper.make_node("Mul", ["p", "half"], ["p2"])],
            "prob_mod",
            [helper.make_tensor_value_info("p", soft, None)],
            [helper.make_tensor_value_info("p2", soft, None)],
            [half],
        )
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", **attrs, **graphs)
    ins = [helper.make_tensor_value_info(n, elem, x.shape) for n, x in (("q", q), ("k", k), ("v", v))]
    inits = [numpy_helper.from_array(FLEX_BIAS, "bias")] if outer and not inline else []
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", elem, None)], inits)
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("ai.onnx.preview", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


FLEX_BIAS = _f(1, 1, 3, 4)
FLEX = {
    "plain": ({}, (2, 4, 3, 8), (2, 4, 5, 8), False),
    "gqa_scale": ({"scale": 0.2}, (1, 4, 3, 8), (1, 2, 5, 8), False),
    "score_mod_causal": ({"with_score_mod": True}, (2, 2, 5, 8), (2, 2, 5, 8), False),
    "score_mod_outer": ({"with_score_mod": True}, (2, 2, 3, 8), (2, 2, 4, 8), True),
    "prob_mod": ({"with_prob_mod": True, "with_score_mod": True}, (1, 2, 4, 8), (1, 2, 4, 8), False),
    "softmax_double": ({"softmax_precision": TensorProto.DOUBLE}, (1, 2, 4, 8), (1, 2, 4, 8), False),
}


@pytest.mark.parametrize("case", sorted(FLEX))
def test_flex_attention_is_native_and_matches_onnx_reference(case: str) -> None:
    """onnxruntime has no FlexAttention; the oracle is onnx.reference (which defines it)."""
    from onnx.reference import ReferenceEvaluator

    from ep_cpu_reference.registry import REGISTRY

    assert not any(e.kernel_def.delegated for e in REGISTRY if e.kernel_def.op_type == "FlexAttention")
    attrs, qs, ks, outer = FLEX[case]
    q, k, v = _f(*qs), _f(*ks), _f(*ks)
    model = _flex_model(dict(attrs), q, k, v, outer)
    feeds = {"q": q, "k": k, "v": v}
    got = _ours(model.SerializeToString(), feeds)[0]
    oracle = _flex_model(dict(attrs), q, k, v, outer, inline=True) if outer else model
    want = ReferenceEvaluator(oracle).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ float16
def _h(*shape: int) -> np.ndarray:
    return _f(*shape).astype(np.float16)


FP16 = {
    "MRotaryEmbedding": (
        [_h(2, 3, 32), _mrope_pos(2, 3, 10), _h(10, 8), _h(10, 8)],
        {"num_heads": 2, "mrope_section": [2, 3, 3]},
        ["out"],
    ),
    "LinearAttentionGate": ([_h(2, 3, 4), _f(4), _f(4), _h(2, 3, 4)], {}, ["decay", "beta"]),
    "HyperConnectionPreMix": ([_h(2, 3, 4, 5), _h(2, 3, 4)], {}, ["out"]),
    "HyperConnectionPostMix": ([_h(2, 3, 4, 5), _h(2, 3, 5), _h(2, 3, 4), _h(2, 3, 4, 4)], {}, ["out"]),
    "EngramGate": ([_h(2, 3, 2, 8), _h(2, 3, 2, 8), _h(2, 3, 8), _h(2, 8), _h(2, 8), _h(2, 8)], {}, ["o", "n"]),
}


@pytest.mark.parametrize("op", sorted(FP16))
def test_float16_matches_onnxruntime(op: str) -> None:
    """float16 in and out, computed in float32 as onnxruntime does (within one float16 ulp)."""
    inputs, attrs, outs = FP16[op]
    _check(op, inputs, attrs, outs, rtol=1e-3, out_types={o: TensorProto.FLOAT16 for o in outs})

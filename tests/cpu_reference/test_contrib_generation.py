"""com.microsoft::GreedySearch (ep_cpu_reference/kernels/contrib_generation.py) against
onnxruntime 1.31's CPU kernel, over tiny GPT-2-style decoders built with onnx.helper: token and
position embeddings, pasts that grow by the step's keys, an attention-mask-weighted readout of
each past, logits. Every logits processor and the padding/EOS rules are exercised.

When every row ends before max_length, onnxruntime leaves the rest of its output uninitialised;
those cases compare the part onnxruntime wrote and check that ours holds pad_token_id after it."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
V, D, N, H, LAYERS = 11, 8, 2, 4, 2
ORDER = ["input_ids", "max_length", "min_length", "repetition_penalty", "vocab_mask", "prefix_vocab_mask"]
ORDER += ["attention_mask"]
BEAM_ORDER = ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences", "length_penalty"]
BEAM_ORDER += ["repetition_penalty", "vocab_mask", "prefix_vocab_mask", "attention_mask"]
TYPES = {
    "num_beams": (TensorProto.INT32, [1]),
    "num_return_sequences": (TensorProto.INT32, [1]),
    "length_penalty": (TensorProto.FLOAT, [1]),
    "input_ids": (TensorProto.INT32, ["b", "s"]),
    "max_length": (TensorProto.INT32, [1]),
    "min_length": (TensorProto.INT32, [1]),
    "repetition_penalty": (TensorProto.FLOAT, [1]),
    "vocab_mask": (TensorProto.INT32, [V]),
    "prefix_vocab_mask": (TensorProto.INT32, ["b", V]),
    "attention_mask": (TensorProto.INT32, ["b", "s"]),
}


def _decoder(seed: int, outer_w: bool) -> Any:
    """A GPT-2-shaped decoder; ``outer_w``: its output projection W is an outer-scope value."""
    r = np.random.default_rng(seed)
    t = numpy_helper.from_array
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["te"]),
        helper.make_node("Gather", ["P", "position_ids"], ["pe"]),
        helper.make_node("Add", ["te", "pe"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "ax_mask"], ["mask5"]),  # [1, B, 1, T, 1]
        helper.make_node("Reshape", ["h", "kvshape"], ["hk"]),  # [B, S, N, H]
        helper.make_node("Transpose", ["hk"], ["hkt"], perm=[0, 2, 1, 3]),
        helper.make_node("Unsqueeze", ["hkt", "ax0"], ["hk1"]),
        helper.make_node("Concat", ["hk1", "hk1"], ["kv"], axis=0),  # [2, B, N, S, H]
    ]
    inits = [
        t(r.standard_normal((V, D)).astype(np.float32), "E"),
        t((r.standard_normal((32, D)) * 0.5).astype(np.float32), "P"),
        t(np.array([0, 2, 4], np.int64), "ax_mask"),
        t(np.array([0], np.int64), "ax0"),
        t(np.array([0, 0, N, H], np.int64), "kvshape"),
        t(np.array([0, 0, -1], np.int64), "mshape"),
        t(np.array([3], np.int64), "ax3"),
        t(np.array(0, np.int64), "zero"),
    ]
    w = t(r.standard_normal((D, V)).astype(np.float32), "W")
    if not outer_w:
        inits.append(w)
    ins = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["B", "S"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT32, ["B", "S"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["B", "T"]),
    ]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", V])]
    acc = "h"
    for i in range(LAYERS):
        ins.append(helper.make_tensor_value_info(f"past_{i}", TensorProto.FLOAT, [2, "B", N, "P", H]))
        outs.append(helper.make_tensor_value_info(f"present_{i}", TensorProto.FLOAT, [2, "B", N, "T", H]))
        inits.append(t((r.standard_normal((H, H)) * 0.7).astype(np.float32), f"A{i}"))
        nodes += [
            helper.make_node("MatMul", ["kv", f"A{i}"], [f"kvA{i}"]),
            helper.make_node("Concat", [f"past_{i}", f"kvA{i}"], [f"present_{i}"], axis=3),
            helper.make_node("Mul", [f"present_{i}", "mask5"], [f"pm{i}"]),
            helper.make_node("ReduceSum", [f"pm{i}", "ax3"], [f"ctx{i}"], keepdims=1),  # [2, B, N, 1, H]
            helper.make_node("Gather", [f"ctx{i}", "zero"], [f"c{i}"], axis=0),
            helper.make_node("Transpose", [f"c{i}"], [f"ct{i}"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [f"ct{i}", "mshape"], [f"cr{i}"]),  # [B, 1, D]
            helper.make_node("Tanh", [f"cr{i}"], [f"tc{i}"]),
            helper.make_node("Add", [acc, f"tc{i}"], [f"acc{i}"]),
        ]
        acc = f"acc{i}"
    nodes.append(helper.make_node("MatMul", [acc, "W"], ["logits"]))
    return helper.make_graph(nodes, "decoder", ins, outs, inits), w


def _model(
    feeds: dict[str, np.ndarray],
    attrs: dict[str, Any],
    seed: int,
    outer_w: bool = False,
    op: str = "GreedySearch",
    outs: tuple[str, ...] = ("sequences",),
) -> bytes:
    graph, w = _decoder(seed, outer_w)
    order = BEAM_ORDER if op == "BeamSearch" else ORDER
    last = max(order.index(n) for n in feeds)
    names = [n if n in feeds else "" for n in order[: last + 1]]
    node = helper.make_node(op, names, list(outs), domain=MS, decoder=graph, **attrs)
    vis = [helper.make_tensor_value_info(n, *TYPES[n]) for n in names if n]
    out_types = {"sequences": TensorProto.INT32}
    ovs = [helper.make_tensor_value_info(o, out_types.get(o, TensorProto.FLOAT), None) for o in outs if o]
    main = helper.make_graph([node], "g", vis, ovs, [w] if outer_w else [])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(main, opset_imports=opsets, ir_version=8).SerializeToString()


def _run_all(model: bytes, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    import ep_core

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    want = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    return sess.run(None, feeds), want


def _run_both(feeds: dict[str, np.ndarray], attrs: dict[str, Any], seed: int, outer_w: bool = False) -> Any:
    got, want = _run_all(_model(feeds, attrs, seed, outer_w), feeds)
    return got[0], want[0]


RNG = np.random.default_rng(5)
PROMPTS = [RNG.integers(1, V, (3, 4)).astype(np.int32) for _ in range(4)]
for _p in PROMPTS:
    _p[1, 0] = 0  # a left pad (pad_token_id 0)
VOCAB_MASK = np.ones(V, np.int32)
VOCAB_MASK[[6, 7]] = 0
PREFIX_MASK = np.ones((3, V), np.int32)
PREFIX_MASK[:, :5] = 0
ATTN = np.ones((3, 4), np.int32)
ATTN[2, :2] = 0
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "plain": ({}, {}),
    "eos_mid": ({}, {"eos_token_id": 4}),
    "min_length": ({"min_length": np.array([8], np.int32)}, {"eos_token_id": 6}),
    "repetition_penalty": ({"repetition_penalty": np.array([1.5], np.float32)}, {}),
    "no_repeat_2gram": ({}, {"no_repeat_ngram_size": 2}),
    "no_repeat_1gram": ({}, {"no_repeat_ngram_size": 1}),
    "vocab_mask": ({"vocab_mask": VOCAB_MASK}, {}),
    "prefix_vocab_mask": ({"prefix_vocab_mask": PREFIX_MASK}, {}),
    "attention_mask": ({"attention_mask": ATTN}, {}),
    "all": (
        {
            "min_length": np.array([6], np.int32),
            "repetition_penalty": np.array([1.3], np.float32),
            "vocab_mask": VOCAB_MASK,
            "prefix_vocab_mask": PREFIX_MASK,
            "attention_mask": ATTN,
        },
        {"no_repeat_ngram_size": 3},
    ),
}


def _compare(ours: np.ndarray, theirs: np.ndarray, pad: int) -> None:
    """Equal where onnxruntime wrote; after an all-rows early stop, ours is pad."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    tail = ours.shape[1]
    while tail > 0 and (ours[:, tail - 1] == pad).all():
        tail -= 1
    np.testing.assert_array_equal(ours[:, :tail], theirs[:, :tail])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_search_matches_onnxruntime(case: str, seed: int) -> None:
    extra_feeds, extra_attrs = CASES[case]
    feeds = {"input_ids": PROMPTS[seed], "max_length": np.array([11], np.int32), **extra_feeds}
    attrs = {"eos_token_id": 3, "pad_token_id": 0, **extra_attrs}
    ours, theirs = _run_both(feeds, attrs, seed)
    _compare(ours, theirs, 0)


def test_greedy_search_outer_scope_decoder_weights() -> None:
    """The decoder reads W from the main graph (an implicit input of the GreedySearch node)."""
    feeds = {"input_ids": PROMPTS[1], "max_length": np.array([9], np.int32)}
    ours, theirs = _run_both(feeds, {"eos_token_id": 3, "pad_token_id": 0}, 1, outer_w=True)
    _compare(ours, theirs, 0)


def test_greedy_search_early_stop_pads() -> None:
    """Identical rows with eos = the first generated token: every row ends at the first step, and
    the rest of the output is pad here (onnxruntime's is uninitialised)."""
    feeds = {"input_ids": np.repeat(PROMPTS[2][:1], 3, axis=0), "max_length": np.array([10], np.int32)}
    first, _ = _run_both(feeds, {"eos_token_id": 3, "pad_token_id": 0}, 2)
    eos = int(first[0, 4])
    ours, theirs = _run_both(feeds, {"eos_token_id": eos, "pad_token_id": 0}, 2)
    assert (ours[:, 4:] == 0).all()
    np.testing.assert_array_equal(ours[:, :5], theirs[:, :5])


def test_greedy_search_refuses_encoder_decoder() -> None:
    from ep_core.sdk.errors import NotImplementedByAnyEp

    feeds = {"input_ids": PROMPTS[0], "max_length": np.array([9], np.int32)}
    model = _model(feeds, {"eos_token_id": 3, "pad_token_id": 0, "model_type": 1}, 0)
    import ep_core

    with pytest.raises(NotImplementedByAnyEp, match="model_type 1"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)


# ------------------------------------------------------------------------------------ BeamSearch
def _i(v: int) -> np.ndarray:
    return np.array([v], np.int32)


BEAM_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "beams2": ({"num_beams": _i(2), "num_return_sequences": _i(1)}, {}),
    "beams3_return3": ({"num_beams": _i(3), "num_return_sequences": _i(3)}, {}),
    "eos_hypotheses": ({"num_beams": _i(3), "num_return_sequences": _i(2)}, {"eos_token_id": 6}),
    "early_stopping": ({"num_beams": _i(2), "num_return_sequences": _i(2)}, {"eos_token_id": 4, "early_stopping": 1}),
    "length_penalty": (
        {"num_beams": _i(3), "num_return_sequences": _i(2), "length_penalty": np.array([0.6], np.float32)},
        {"eos_token_id": 6},
    ),
    "processors": (
        {
            "num_beams": _i(2),
            "num_return_sequences": _i(2),
            "min_length": _i(7),
            "repetition_penalty": np.array([1.4], np.float32),
            "vocab_mask": VOCAB_MASK,
            "prefix_vocab_mask": PREFIX_MASK,
            "attention_mask": ATTN,
        },
        {"no_repeat_ngram_size": 2},
    ),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", sorted(BEAM_CASES))
def test_beam_search_matches_onnxruntime(case: str, seed: int) -> None:
    extra_feeds, extra_attrs = BEAM_CASES[case]
    base = {"min_length": _i(0), "length_penalty": np.array([1.0], np.float32)}  # onnxruntime's type inference
    feeds = {"input_ids": PROMPTS[seed], "max_length": _i(10), **base, **extra_feeds}  # needs input 5 typed
    attrs = {"eos_token_id": 3, "pad_token_id": 0, **extra_attrs}
    outs = ("sequences", "sequences_scores", "scores")
    got, want = _run_all(_model(feeds, attrs, seed, op="BeamSearch", outs=outs), feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    steps = want[2].shape[0]
    assert got[2].shape == want[2].shape
    np.testing.assert_allclose(got[2][:steps], want[2][:steps], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", ["GreedySearch", "BeamSearch"])
def test_schema_matches_onnxruntime(op: str) -> None:
    from onnx import AttributeProto, defs
    from onnxruntime.capi import _pybind_state

    import ep_cpu_reference.kernels.contrib_generation  # noqa: F401  (registers the schemas)

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

"""The attention family at the default level: an unfused BERT-like encoder layer becomes one
com.microsoft Attention, a GPT-like block with rotary embeddings RotaryEmbedding + MultiHeadAttention;
outputs equal those at ORT_DISABLE_ALL and onnxruntime's; no intermediate op of onnxscript's
(ai.onnxruntime._fusion) survives; an EP lacking the ops first gets none of it."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from opt_helpers import LEVELS, op_counts, session

from ep_core import InferenceSession, SessionOptions
from ep_core.optimizer import optimize_model
from ep_core.optimizer.fusions import INTERNAL

node = helper.make_node
B, S, D, H = 2, 8, 16, 2
DH = D // H


def _model(nodes: list[Any], inputs: list[Any], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _heads(x: str, out: str, reshape: str = "to4d") -> list[Any]:
    """[B, S, D] -> [B, H, S, Dh]"""
    return [node("Reshape", [x, reshape], [f"{x}_r"]), node("Transpose", [f"{x}_r"], [out], perm=[0, 2, 1, 3])]


def _sdpa(q: str, k: str, v: str, mask: str, out: str) -> list[Any]:
    """softmax(q k^T / sqrt(Dh) + mask) v, merged back to [B, S, D]"""
    return [
        node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", [q, "kt"], ["scores"]),
        node("Div", ["scores", "sqrt_dh"], ["scaled"]),
        node("Add", ["scaled", mask], ["masked"]),
        node("Softmax", ["masked"], ["probs"], axis=-1),
        node("MatMul", ["probs", v], ["ctx"]),
        node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        node("Reshape", ["ctx_t", "to3d"], [out]),
    ]


def _common(rng: np.random.Generator) -> dict[str, np.ndarray]:
    w = {n: (rng.standard_normal((D, D)) / 4).astype(np.float32) for n in ("Wq", "Wk", "Wv", "Wo")}
    return w | {
        "to4d": np.array([0, 0, H, DH], np.int64),
        "to3d": np.array([0, 0, D], np.int64),
        "sqrt_dh": np.array(np.sqrt(DH), np.float32),
    }


def encoder(rng: np.random.Generator) -> onnx.ModelProto:
    """A BERT self-attention layer as exporters write it: biased Q/K/V projections, heads split by
    Reshape+Transpose, scaled scores plus an additive mask [B, 1, S, S], Softmax, output projection."""
    nodes = []
    for p in "qkv":
        nodes += [node("MatMul", ["X", f"W{p}"], [f"{p}_mm"]), node("Add", [f"{p}_mm", f"b{p}"], [p])]
        nodes += _heads(p, f"{p}h")
    nodes += _sdpa("qh", "kh", "vh", "mask", "attn")
    nodes += [node("MatMul", ["attn", "Wo"], ["o"]), node("Add", ["o", "X"], ["Y"])]
    inits = _common(rng) | {f"b{p}": (rng.standard_normal(D) / 4).astype(np.float32) for p in "qkv"}
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("X", f, [B, S, D]), helper.make_tensor_value_info("mask", f, [B, 1, S, S])]
    return _model(nodes, inputs, inits)


def _rotate(x: str, out: str) -> list[Any]:
    """x * cos + rotate_half(x) * sin (the Llama form)"""
    return [
        node("Slice", [x, "zero", "half", "axis3", "one"], [f"{x}_1"]),
        node("Slice", [x, "half", "big", "axis3", "one"], [f"{x}_2"]),
        node("Neg", [f"{x}_2"], [f"{x}_n"]),
        node("Concat", [f"{x}_n", f"{x}_1"], [f"{x}_rot"], axis=-1),
        node("Mul", [x, "cos"], [f"{x}_c"]),
        node("Mul", [f"{x}_rot", "sin"], [f"{x}_s"]),
        node("Add", [f"{x}_c", f"{x}_s"], [out]),
    ]


def decoder(rng: np.random.Generator) -> onnx.ModelProto:
    """A GPT-like (Llama) attention block: Q/K/V projections, rotary embeddings with the cos/sin
    computed from position_ids and inv_freq as transformers writes it, a causal mask."""
    nodes = [node("MatMul", ["X", f"W{p}"], [p]) for p in "qkv"]
    for p in "qkv":
        nodes += _heads(p, f"{p}h")
    nodes += [
        node("Unsqueeze", ["position_ids", "one"], ["pos3"]),
        node("Cast", ["pos3"], ["posf"], to=TensorProto.FLOAT),
        node("MatMul", ["inv_freq", "posf"], ["freqs"]),
        node("Transpose", ["freqs"], ["freqs_t"], perm=[0, 2, 1]),
        node("Concat", ["freqs_t", "freqs_t"], ["emb"], axis=-1),
        node("Cos", ["emb"], ["cos3"]),
        node("Sin", ["emb"], ["sin3"]),
        node("Unsqueeze", ["cos3", "one"], ["cos"]),
        node("Unsqueeze", ["sin3", "one"], ["sin"]),
    ]
    nodes += _rotate("qh", "qr") + _rotate("kh", "kr") + _sdpa("qr", "kr", "vh", "causal", "attn")
    nodes += [node("MatMul", ["attn", "Wo"], ["o"]), node("Add", ["o", "X"], ["Y"])]
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, DH, 2, dtype=np.float32) / DH))
    causal = np.triu(np.full((S, S), -1e9, np.float32), 1)[None, None]
    inits = _common(rng) | {
        "inv_freq": inv_freq.reshape(1, -1, 1),
        "causal": causal,
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "half": np.array([DH // 2], np.int64),
        "big": np.array([DH], np.int64),
        "axis3": np.array([3], np.int64),
    }
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, S, D]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, S]),
    ]
    return _model(nodes, inputs, inits)


def _encoder_feed(rng: np.random.Generator) -> dict[str, np.ndarray]:
    keep = np.ones((B, S), np.float32)
    keep[1, -3:] = 0  # padding in the second sequence
    mask = ((1 - keep) * -10000.0)[:, None, None, :].repeat(S, 2)
    return {"X": rng.standard_normal((B, S, D)).astype(np.float32), "mask": mask.astype(np.float32)}


def _decoder_feed(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((1, S, D)).astype(np.float32), "position_ids": np.arange(S)[None]}


def _check(model: onnx.ModelProto, feed: dict[str, np.ndarray], tmp_path: Path) -> Counter[str]:
    """The op counts of the default level's graph, after checking its outputs against ORT_DISABLE_ALL,
    onnxruntime on the model and onnxruntime on the optimized graph."""
    plain = session(model, LEVELS.ORT_DISABLE_ALL).run(None, feed)[0]
    s = session(model, LEVELS.ORT_ENABLE_ALL, tmp_path / "opt.onnx")
    got = s.run(None, feed)[0]
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for m in (model.SerializeToString(), str(tmp_path / "opt.onnx")):
        want = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    counts = op_counts(s._built.model)
    assert not [op for op in counts if op.startswith(INTERNAL)]
    assert not any(f.domain == INTERNAL for f in s._built.model.functions) and INTERNAL not in {
        o.domain for o in s._built.model.opset_import
    }
    return counts


def test_a_bert_encoder_layer_becomes_one_attention(rng: np.random.Generator, tmp_path: Path) -> None:
    counts = _check(encoder(rng), _encoder_feed(rng), tmp_path)
    assert counts["com.microsoft::Attention"] == 1
    assert {"Softmax", "Transpose", "com.microsoft::MultiHeadAttention"}.isdisjoint(counts)
    assert counts["MatMul"] == 1  # the output projection


def test_a_rotary_decoder_block_gets_rotary_embedding_and_multi_head_attention(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    counts = _check(decoder(rng), _decoder_feed(rng), tmp_path)
    assert counts["com.microsoft::RotaryEmbedding"] == 2
    assert counts["com.microsoft::MultiHeadAttention"] == 1
    assert {"Softmax", "Neg"}.isdisjoint(counts), counts  # Cos/Sin stay: the cache over max(position_ids)+1


class Records:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, severity: int, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)


def test_an_ep_lacking_the_ops_gets_nothing_fused(rng: np.random.Generator) -> None:
    for model in (encoder(rng), decoder(rng)):
        checked = onnx.shape_inference.infer_shapes(model)
        log = Records()
        out = optimize_model(checked, LEVELS.ORT_ENABLE_ALL, lambda op, domain: domain == "", 64 << 20, log)
        counts = op_counts(out)
        assert counts["Softmax"] == 1 and not [op for op in counts if "::" in op], counts
        assert any("MultiHeadAttention fusion skipped" in line for line in log.lines)
    # the rotary fusion alone: the first EP has RotaryEmbedding, not MultiHeadAttention
    only_rotary = optimize_model(
        onnx.shape_inference.infer_shapes(decoder(rng)),
        LEVELS.ORT_ENABLE_ALL,
        lambda op, domain: domain == "" or op == "RotaryEmbedding",
        64 << 20,
        Records(),
    )
    assert op_counts(only_rotary)["com.microsoft::RotaryEmbedding"] == 2 and op_counts(only_rotary)["Softmax"] == 1


def test_numba_cpu_first_gets_the_attention_op_it_delegates(rng: np.random.Generator) -> None:
    """The Numba CPU EP runs com.microsoft::Attention through the reference kernel (a delegated step
    of its group): the fusion is made for it as for the reference EP, and it runs the node."""
    pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
    model, feed = encoder(rng), _encoder_feed(rng)
    first = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]
    s = session(model, LEVELS.ORT_ENABLE_ALL, providers=first)
    counts = op_counts(s._built.model)
    assert counts["com.microsoft::Attention"] == 1 and "Softmax" not in counts
    assert {a["ep"] for a in s.get_node_assignment().values()} == {"NumbaCpuExecutionProvider"}
    plain = session(model, LEVELS.ORT_DISABLE_ALL, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(s.run(None, feed)[0], plain, rtol=1e-5, atol=1e-5)


def test_an_intermediate_op_left_drops_the_optimizer_work_with_a_warning(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Were an SDPA neither fused further nor turned into MultiHeadAttention, the session would run
    the unoptimized model rather than one holding an op no EP serves."""
    from onnxscript.rewriter.ort_fusions import sdpa_via_mha

    from ep_core.optimizer import fusions

    monkeypatch.setattr(sdpa_via_mha, "_rules", SimpleNamespace(apply_to_model=lambda model: 0))
    mha = next(f for f in fusions.EXTENDED if f.name == "MultiHeadAttention fusion")
    only_sdpa = fusions.Fusion(mha.name, mha.makes, mha.anchors, fusions._attention("sdpa"), sequential=True)
    monkeypatch.setattr(
        "ep_core.optimizer.passes.EXTENDED", tuple(only_sdpa if f is mha else f for f in fusions.EXTENDED)
    )
    model = encoder(rng)
    with caplog.at_level(logging.WARNING, logger="ep_core"):
        s = session(model, LEVELS.ORT_ENABLE_ALL)
    assert "intermediate attention ops resolved" in caplog.text and "SDPA" in caplog.text
    assert op_counts(s._built.model)["Softmax"] == 1  # unoptimized


def test_gqa_fusion_is_opt_in(rng: np.random.Generator) -> None:
    """onnxscript's GroupQueryAttention rewrite assumes onnxruntime-genai's inputs (attention_mask all
    ones, position_ids consecutive): not applied unless the session asks for it."""
    from ep_core.optimizer.fusions import EXTENDED, GQA_CONFIG

    gqa = next(f for f in EXTENDED if f.name == "GroupQueryAttention fusion")
    assert gqa.opt_in == GQA_CONFIG
    log = Records()
    optimize_model(
        onnx.shape_inference.infer_shapes(decoder(rng)), LEVELS.ORT_ENABLE_ALL, lambda o, d: True, 64 << 20, log
    )
    assert not any("GroupQueryAttention" in line for line in log.lines)
    # asked for, on a block it does not match: the SDPA it made still becomes the same MultiHeadAttention
    so = SessionOptions()
    so.add_session_config_entry(GQA_CONFIG, "1")
    model, feed = decoder(rng), _decoder_feed(rng)
    s = InferenceSession(model.SerializeToString(), so)
    assert op_counts(s._built.model) == op_counts(session(model, LEVELS.ORT_ENABLE_ALL)._built.model)
    plain = session(model, LEVELS.ORT_DISABLE_ALL).run(None, feed)[0]
    np.testing.assert_allclose(s.run(None, feed)[0], plain, rtol=1e-5, atol=1e-5)

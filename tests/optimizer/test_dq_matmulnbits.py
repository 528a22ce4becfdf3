"""DequantizeLinear of 4/8-bit weights -> MatMul or Gemm becomes com.microsoft MatMulNBits at
ORT_ENABLE_EXTENDED, as onnxruntime 1.31 makes it (ep_core/optimizer/dq_matmulnbits.py): the same
graph as onnxruntime's optimized model, and onnxruntime's outputs (its accuracy level 4 quantizes
A to int8 per block: 0.5-1.4% from the exact float product on int4 transformer exports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from ep_core import InferenceSession
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

N = 24
NP = {TP.INT4: np.int8, TP.UINT4: np.uint8, TP.INT8: np.int8, TP.UINT8: np.uint8}
LOW_HIGH = {TP.INT4: (-8, 8), TP.UINT4: (0, 16), TP.INT8: (-128, 128), TP.UINT8: (0, 256)}


def _model(
    wtype: int, per: str, op: str = "MatMul", zp: bool = True, shared_scale: bool = False, f16: bool = False
) -> bytes:
    """K = 40 in blocks of 16 (a partial last block) in float32; 64 in blocks of 32 in float16, where
    onnxruntime 1.31's fused MatMulNBits gives zeros for blocks of 16."""
    rng = np.random.default_rng(wtype * 10 + len(per))
    K, B = (64, 32) if f16 else (40, 16)
    lo, hi = LOW_HIGH[wtype]
    fdt, et = (np.float16, TP.FLOAT16) if f16 else (np.float32, TP.FLOAT)
    sshape = {"block": [(K + B - 1) // B, N], "channel": [N], "tensor": []}[per]
    attrs = {"block": {"axis": 0, "block_size": B}, "channel": {"axis": 1}, "tensor": {}}[per]
    inits, nodes, outs = [], [], []
    for i in range(2 if shared_scale else 1):
        w = rng.integers(lo, hi, (K, N)).astype(NP[wtype])
        inits.append(h.make_tensor(f"w{i}", wtype, [K, N], w.ravel().tolist()))
        ins = [f"w{i}", "s"]
        if zp:
            z = rng.integers(lo, hi, sshape).astype(NP[wtype])
            inits.append(h.make_tensor(f"z{i}", wtype, sshape, z.ravel().tolist()))
            ins.append(f"z{i}")
        nodes.append(h.make_node("DequantizeLinear", ins, [f"d{i}"], **attrs))
        if op == "MatMul":
            nodes.append(h.make_node("MatMul", ["a", f"d{i}"], [f"y{i}"]))
        else:
            inits.append(nh.from_array(rng.standard_normal(N).astype(fdt), f"c{i}"))
            nodes.append(h.make_node("Gemm", ["a", f"d{i}", f"c{i}"], [f"y{i}"]))
        outs.append(h.make_tensor_value_info(f"y{i}", et, None))
    inits.append(nh.from_array((rng.random(sshape) * 0.05 + 0.01).astype(fdt), "s"))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", et, ["M", K])], outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10).SerializeToString()


def _onnxruntime(model: bytes, feed: dict[str, np.ndarray], path: Path, **config: str) -> tuple[list[Any], list[str]]:
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(path)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    out = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)
    return out, [n.op_type for n in onnx.load(str(path)).graph.node]


def _ours(model: bytes, feed: dict[str, np.ndarray], provider: str, **config: str) -> tuple[list[Any], list[str]]:
    so = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    so.add_session_config_entry("session.optimizer_cache", "0")
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    sess = InferenceSession(model, so, providers=[provider])
    return sess.run(None, feed), [n.op_type for n in sess._built.model.graph.node]


def _feed(f16: bool = False) -> dict[str, np.ndarray]:
    return {
        "a": np.random.default_rng(5).standard_normal((3, 64 if f16 else 40)).astype(np.float16 if f16 else np.float32)
    }


def _same(got: list[Any], want: list[Any], rtol: float = 2e-6) -> None:
    for g, w in zip(got, want, strict=True):
        scale = float(np.abs(w.astype(np.float32)).max())
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=0, atol=rtol * max(1.0, scale))


PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("per", ["block", "channel", "tensor"])
@pytest.mark.parametrize("wtype", [TP.INT4, TP.UINT4, TP.INT8, TP.UINT8])
def test_weight_only_dq_matmul_is_onnxruntime_s_matmulnbits(
    wtype: int, per: str, provider: str, tmp_path: Path
) -> None:
    model, feed = _model(wtype, per, zp=per != "tensor"), _feed()
    want, ort_ops = _onnxruntime(model, feed, tmp_path / "o.onnx")
    got, ops = _ours(model, feed, provider)
    assert ops == ort_ops == ["MatMulNBits"]
    _same(got, want)


@pytest.mark.parametrize(
    "case", ["Gemm with a bias", "float16", "no zero points", "shared scale", "accuracy 0", "block 16"]
)
def test_the_variants_as_onnxruntime_fuses_them(case: str, tmp_path: Path) -> None:
    """A Gemm's bias becomes MatMulNBits' bias; DQs sharing a scale stay DQ -> MatMul there; the
    two session keys take effect."""
    f16 = False
    model = _model(
        TP.INT4, "channel" if case == "block 16" else "block", op="Gemm" if case == "Gemm with a bias" else "MatMul",
        zp=case != "no zero points", shared_scale=case == "shared scale", f16=f16,
    )  # fmt: skip
    config = {
        "accuracy 0": {"session.qdq_matmulnbits_accuracy_level": "0"},
        "block 16": {"session.qdq_matmulnbits_block_size": "16"},
    }.get(case, {})
    want, ort_ops = _onnxruntime(model, _feed(f16), tmp_path / "o.onnx", **config)
    got, ops = _ours(model, _feed(f16), PROVIDERS[0], **config)
    assert [o for o in ops if o != "Cast"] == [o for o in ort_ops if o != "Cast"]
    _same(got, want, rtol=1e-3 if f16 else 2e-6)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_float16_fuses_and_computes_in_float32(provider: str) -> None:
    """onnxruntime fuses a float16 DQ -> MatMul between Casts to float32; its fused kernel gave
    zeros on this model (its unfused run is the reference here: within the int8 quantization of A)."""
    model, feed = _model(TP.INT4, "block", f16=True), _feed(True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    exact = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got, ops = _ours(model, feed, provider)
    assert ops == ["MatMulNBits"] and got[0].dtype == np.float16
    np.testing.assert_allclose(got[0].astype(np.float32), exact.astype(np.float32), rtol=0, atol=0.05)
    level_0, _ = _ours(model, feed, provider, **{"session.qdq_matmulnbits_accuracy_level": "0"})
    np.testing.assert_allclose(level_0[0].astype(np.float32), exact.astype(np.float32), rtol=0, atol=4e-3)


def test_the_fusion_is_turned_off_with_the_qdq_fusions() -> None:
    so = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    so.add_session_config_entry("session.disable_quant_qdq", "1")
    sess = InferenceSession(_model(TP.INT4, "block"), so)
    assert "MatMulNBits" not in [n.op_type for n in sess._built.model.graph.node]
    so = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    so.add_session_config_entry("optimization.disable_specified_optimizers", "QDQSelectorActionTransformer")
    sess = InferenceSession(_model(TP.INT4, "block"), so)
    assert "MatMulNBits" not in [n.op_type for n in sess._built.model.graph.node]

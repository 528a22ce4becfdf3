"""Blocked-quantization, mixture-of-experts and recurrent contrib kernels of the reference EP
(kernels/quantize_blocks.py, kernels/contrib_moe.py) against the real onnxruntime 1.31.1.

Integer outputs (MatMulInteger16) must be identical; outputs of dequantize-only ops
(GatherBlockQuantized) too, as both compute float32 ``(q - zp) * scale``. Float outputs that go
through a GEMM, softmax or LayerNorm must agree within 1e-5 of the output's scale (float16 outputs
within a few half ulps)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _support.oracle import one_node_model, run_both
from onnx import TensorProto, helper, numpy_helper

import ep_core

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
_R = np.random.default_rng(1431)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (_R.standard_normal(shape) * scale).astype(np.float32)


def _model(op: str, ins: list[tuple[str, Any]], outs: list[Any], consts: set[str], **attrs: Any) -> tuple[bytes, dict]:
    return one_node_model(op, ins, outs, consts, MS, **attrs)


_run_both = run_both


def _exact(mf: tuple[bytes, dict]) -> None:
    got, want = _run_both(*mf)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def _close(mf: tuple[bytes, dict], rel: float = 1e-5) -> None:
    got, want = _run_both(*mf)
    for g, w in zip(got, want, strict=True):
        w64, g64 = np.asarray(w, np.float64), np.asarray(g, np.float64)
        scale = max(float(np.max(np.abs(w64))) if w64.size else 0.0, 1e-30)
        tol = rel if w.dtype != np.float16 else 2e-3
        assert float(np.max(np.abs(g64 - w64))) <= tol * scale, float(np.max(np.abs(g64 - w64))) / scale


def _refused(mf: tuple[bytes, dict], match: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match=match):
            ep_core.InferenceSession(mf[0], providers=["CpuReferenceExecutionProvider"]).run(None, mf[1])


# ----------------------------------------------------------------------- GatherBlockQuantized
def _u8(*shape: int) -> np.ndarray:
    return _R.integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("scale_dt", [np.float32, np.float16])
def test_gather_block_quantized_uint8(bits: int, with_zp: bool, scale_dt: Any) -> None:
    rows, cols, blk = 7, 64, 16
    per = 8 // bits
    data = _u8(rows, cols // per)
    n_blocks = cols // blk
    scales = _f32(rows, n_blocks).astype(scale_dt)
    zps = _u8(rows, -(-n_blocks // per)) if with_zp else None
    idx = np.array([[0, 6, -1], [3, 3, 9]], np.int64)  # 9 is out of range: a zero row, as onnxruntime
    ins = [("data", data), ("idx", idx), ("scales", scales), ("zp", zps)]
    _exact(_model("GatherBlockQuantized", ins, [scale_dt], {"data", "scales", "zp"}, bits=bits, block_size=blk))


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
@pytest.mark.parametrize(("g", "qa"), [(0, 1), (1, 0), (0, 0), (1, 2), (2, 1)])
def test_gather_block_quantized_int4(elem: int, g: int, qa: int) -> None:
    dt = helper.tensor_dtype_to_np_dtype(elem)
    lo, hi = (-8, 8) if elem == TensorProto.INT4 else (0, 16)
    shape = [4, 32, 6] if 2 in (g, qa) else [32, 48]
    data = _R.integers(lo, hi, shape).astype(dt)
    sshape = list(shape)
    sshape[qa] = -(-shape[qa] // 16)
    scales = _f32(*sshape)
    zps = _R.integers(lo, hi, sshape).astype(dt)
    idx = np.array([1, 0, 3, -2, 2], np.int32)
    ins = [("data", data), ("idx", idx), ("scales", scales), ("zp", zps)]
    attrs = {"gather_axis": g, "quantize_axis": qa, "block_size": 16}
    _exact(_model("GatherBlockQuantized", ins, [np.float32], {"data", "zp"}, **attrs))


@pytest.mark.parametrize(
    "elem", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT4E2M1]
)
@pytest.mark.parametrize("blk", [0, 16])
def test_gather_block_quantized_float8(elem: int, blk: int) -> None:
    dt = helper.tensor_dtype_to_np_dtype(elem)
    data = (_f32(10, 32) * 2).astype(dt)
    scales = _f32(1, 1 if blk == 0 else 2)  # broadcast over rows
    idx = np.array([[9, 0], [4, 4]], np.int64)
    ins = [("data", data), ("idx", idx), ("scales", scales)]
    _exact(_model("GatherBlockQuantized", ins, [np.float32], {"data"}, block_size=blk, quantize_axis=-1))


def test_gather_block_quantized_refusals() -> None:
    ins = [("data", _u8(4, 16)), ("idx", np.array([1], np.int64)), ("scales", _f32(4, 2))]
    _refused(_model("GatherBlockQuantized", ins, [np.float32], set(), block_size=24), "power of 2")
    _refused(_model("GatherBlockQuantized", ins, [np.float32], set(), block_size=16, bits=3), "bits=3")


# ----------------------------------------------------------------------- MatMulBnb4
def _bnb4_quantize(w: np.ndarray, blk: int, qt: int) -> tuple[np.ndarray, np.ndarray]:
    """Random 4-bit codes and absmax for an (N, K) weight (their meaning is what is tested)."""
    count = w.size
    codes = _R.integers(0, 16, count + (count % 2), dtype=np.uint8)
    packed = (codes[0::2] << 4) | codes[1::2]
    absmax = np.abs(_f32(-(-count // blk))) + 0.1
    return packed.astype(np.uint8), absmax


@pytest.mark.parametrize("qt", [0, 1])
@pytest.mark.parametrize(("n", "k", "blk"), [(8, 64, 64), (5, 33, 16), (16, 40, 256)])
def test_matmul_bnb4(qt: int, n: int, k: int, blk: int) -> None:
    b, absmax = _bnb4_quantize(np.zeros((n, k)), blk, qt)
    a = _f32(2, 3, k)
    ins = [("A", a), ("B", b), ("absmax", absmax)]
    _close(_model("MatMulBnb4", ins, [np.float32], {"B", "absmax"}, K=k, N=n, block_size=blk, quant_type=qt))


def test_matmul_bnb4_float16() -> None:
    b, absmax = _bnb4_quantize(np.zeros((8, 64)), 64, 1)
    ins = [("A", _f32(3, 64).astype(np.float16)), ("B", b), ("absmax", absmax.astype(np.float16))]
    _close(_model("MatMulBnb4", ins, [np.float16], {"B", "absmax"}, K=64, N=8, block_size=64, quant_type=1))


def test_matmul_bnb4_refusals() -> None:
    b, absmax = _bnb4_quantize(np.zeros((4, 32)), 16, 1)
    ins = [("A", _f32(2, 32)), ("B", b), ("absmax", absmax)]
    _refused(_model("MatMulBnb4", ins, [np.float32], set(), K=32, N=4, block_size=8, quant_type=1), "block_size=8")
    mf = _model("MatMulBnb4", ins, [np.float32], set(), K=32, N=4, block_size=16, quant_type=1, transB=0)
    _refused(mf, "transB=0")


# ----------------------------------------------------------------------- MatMulFpQ4
@pytest.mark.parametrize("qt", [0, 1])
@pytest.mark.parametrize(("k", "n"), [(64, 8), (52, 5)])
def test_matmul_fpq4(qt: int, k: int, n: int) -> None:
    kb = -(-k // 32)
    blob = _u8(n, kb, 20 + qt)
    blob[:, :, :4] = np.abs(_f32(n, kb, 1) * 0.1).view(np.uint8)
    if qt:
        blob[:, :, 4] = _R.integers(0, 16, (n, kb))
    ins = [("A", _f32(3, 2, k)), ("B", blob.reshape(-1)), ("S", np.array([k, n], np.int64))]
    _close(_model("MatMulFpQ4", ins, [np.float32], {"B", "S"}, blk_quant_type=qt))


# ----------------------------------------------------------------------- MatMulInteger16
@pytest.mark.parametrize(("sa", "sb"), [((3, 5), (5, 4)), ((2, 3, 40), (40, 6)), ((4,), (4, 2))])
def test_matmul_integer16(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a = _R.integers(-32768, 32768, sa).astype(np.int16)
    b = _R.integers(-32768, 32768, sb).astype(np.int16)
    _exact(_model("MatMulInteger16", [("A", a), ("B", b)], [np.int32], set()))


# ----------------------------------------------------------------------- QEmbedLayerNormalization
@pytest.mark.parametrize("qdt", [np.uint8, np.int8])
@pytest.mark.parametrize("segments", [True, False])
def test_qembed_layer_norm(qdt: Any, segments: bool) -> None:
    info = np.iinfo(qdt)
    hidden, vocab, batch, seq = 16, 30, 2, 5

    def q(*shape: int) -> np.ndarray:
        return _R.integers(info.min, info.max + 1, shape).astype(qdt)

    def sz() -> tuple[np.ndarray, np.ndarray]:
        return np.array(0.02 + _R.random() * 0.05, np.float32), np.array(
            _R.integers(-5, 6) + (0 if info.min else 128), qdt
        )

    ids = _R.integers(0, vocab, (batch, seq)).astype(np.int32)
    seg = _R.integers(0, 2, (batch, seq)).astype(np.int32) if segments else None
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    (ws, wz), (ps, pz), (ss, s_z), (gs, gz), (bs, bz) = (sz() for _ in range(5))
    ins = [
        ("ids", ids), ("seg", seg), ("word", q(vocab, hidden)), ("pos", q(8, hidden)),
        ("segemb", q(2, hidden) if segments else None), ("gamma", q(hidden)), ("beta", q(hidden)), ("mask", mask),
        ("ws", ws), ("ps", ps), ("ss", ss if segments else None), ("gs", gs), ("bs", bs),
        ("wz", wz), ("pz", pz), ("sz", s_z if segments else None), ("gz", gz), ("bz", bz),
    ]  # fmt: skip
    consts = {n for n, _ in ins} - {"ids", "seg", "mask"}
    _close(_model("QEmbedLayerNormalization", ins, [np.float32, np.int32], consts, epsilon=1e-5))


# ----------------------------------------------------------------------- MoE / QMoE
def _moe_attrs(act: str, k: int, norm: int, limit: float | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"activation_type": act, "k": k, "normalize_routing_weights": norm}
    if act == "swiglu":
        attrs.update(swiglu_fusion=1, activation_alpha=1.702, activation_beta=1.0)
    if limit is not None:
        attrs["swiglu_limit"] = limit
    return attrs


def _moe(act: str, k: int, norm: int, bias: bool, dt: Any = np.float32, limit: float | None = None):
    e, h, i, t = 4, 8, 6, 7
    fc1 = 2 * i if act == "swiglu" else i
    ins = [
        ("x", _f32(t, h)), ("r", _f32(t, e)), ("w1", _f32(e, fc1, h, scale=0.5)),
        ("b1", _f32(e, fc1) if bias else None), ("w2", _f32(e, h, i, scale=0.5)), ("b2", _f32(e, h) if bias else None),
    ]  # fmt: skip
    ins = [(n, None if a is None else a.astype(dt)) for n, a in ins]
    return _model("MoE", ins, [dt], {"w1", "b1", "w2", "b2"}, **_moe_attrs(act, k, norm, limit))


@pytest.mark.parametrize(
    ("act", "k", "norm", "bias", "limit"),
    [
        ("relu", 1, 0, True, None),
        ("gelu", 2, 0, True, None),
        ("silu", 2, 1, False, None),
        ("identity", 3, 1, True, None),
        ("swiglu", 2, 1, True, None),
        ("swiglu", 1, 0, False, 0.5),
    ],
)
def test_moe(act: str, k: int, norm: int, bias: bool, limit: float | None) -> None:
    _close(_moe(act, k, norm, bias, limit=limit))


def test_moe_float16_matches_float32_semantics() -> None:
    """onnxruntime 1.31.1's float16 CPU MoE returns zeros for the expert GEMMs on x86 (its MLAS
    half GEMM is absent there), so float16 is checked against onnxruntime on the same values in
    float32, within half precision."""
    model16, feeds16 = _moe("silu", 2, 1, True, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ep_core.InferenceSession(model16, providers=["CpuReferenceExecutionProvider"]).run(None, feeds16)[0]
    import onnx

    m = onnx.load_from_string(model16)
    for init in m.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {n: a.astype(np.float32) for n, a in feeds16.items()}
    )[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=1e-2 * float(np.abs(want).max()))


def test_moe_refusals() -> None:
    _refused(_moe_sparse(), "use_sparse_mixer")
    model, feeds = _moe("swiglu", 1, 0, True)
    import onnx

    m = onnx.load_from_string(model)
    for a in m.graph.node[0].attribute:
        if a.name == "swiglu_fusion":
            a.i = 0
    _refused((m.SerializeToString(), feeds), "interleaved")


def _moe_sparse() -> tuple[bytes, dict]:
    import onnx

    model, feeds = _moe("relu", 2, 0, True)
    m = onnx.load_from_string(model)
    m.graph.node[0].attribute.append(helper.make_attribute("use_sparse_mixer", 1))
    return m.SerializeToString(), feeds


def _qmoe(bits: int, block: int, zp: bool, act: str = "swiglu", k: int = 2, acc: int = 0, dt: Any = np.float32):
    e, h, i, t = 3, 64, 32, 9
    fc1, per = (2 * i if act == "swiglu" else i), 8 // bits
    nb1, nb2 = (h // block, i // block) if block else (1, 1)
    sh1, sh2 = ((e, fc1, nb1), (e, h, nb2)) if block else ((e, fc1), (e, h))
    z1 = _u8(e, fc1, -(-nb1 // per)) if block else _u8(e, -(-fc1 // per))
    z2 = _u8(e, h, -(-nb2 // per)) if block else _u8(e, -(-h // per))
    ins = [
        ("x", _f32(t, h).astype(dt)), ("r", _f32(t, e).astype(dt)), ("w1", _u8(e, fc1, h // per)),
        ("s1", (np.abs(_f32(*sh1)) * 0.05).astype(dt)), ("b1", _f32(e, fc1).astype(dt)), ("w2", _u8(e, h, i // per)),
        ("s2", (np.abs(_f32(*sh2)) * 0.05).astype(dt)), ("b2", _f32(e, h).astype(dt)),
        ("w3", None), ("s3", None), ("b3", None), ("z1", z1 if zp else None), ("z2", z2 if zp else None),
    ]  # fmt: skip
    attrs = _moe_attrs(act, k, 0, None) | {"expert_weight_bits": bits, "accuracy_level": acc}
    if block:
        attrs["block_size"] = block
    consts = {"w1", "s1", "b1", "w2", "s2", "b2", "z1", "z2"}
    return _model("QMoE", ins, [dt], consts, **attrs)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("block", "zp", "acc"), [(0, False, 0), (0, True, 4), (16, True, 0), (32, False, 4)])
def test_qmoe(bits: int, block: int, zp: bool, acc: int) -> None:
    """Blocked 8-bit experts (and blocked 4-bit ones at accuracy_level 4) take onnxruntime's int8
    activation path: A quantized per block, as MatMulNBits' CompInt8 does."""
    _close(_qmoe(bits, block, zp, acc=acc))


@pytest.mark.parametrize(("act", "k"), [("relu", 1), ("silu", 3)])
def test_qmoe_activations(act: str, k: int) -> None:
    """QMoE routes by softmax over the top-k logits: always normalised, as onnxruntime's CPU kernel."""
    _close(_qmoe(4, 0, False, act=act, k=k))


def test_qmoe_float16() -> None:
    _close(_qmoe(4, 32, True, dt=np.float16))

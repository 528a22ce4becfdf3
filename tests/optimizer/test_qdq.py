"""The QDQ fusion rules (ep_core.optimizer.qdq) against onnxruntime: a CNN quantized by
onnxruntime.quantization.quantize_static (QDQ format), rewritten with onnxscript, has the integer
ops onnxruntime's optimized model has, and runs on the reference EP to onnxruntime's outputs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxscript.rewriter import RewriteRuleSet, rewrite

from ep_core import InferenceSession
from ep_core.optimizer.qdq import qdq_rules
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

SHAPE = [1, 3, 16, 16]


def _f(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv/Relu/MaxPool/Sigmoid/Mul/Add/AveragePool/LeakyRelu/Concat/GlobalAveragePool/Reshape/
    Gemm/MatMul/Softmax, with residual fan-out (one DQ shared by three consumers)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Sigmoid", ["c2"], ["s2"]),
        n("Mul", ["s2", "p1"], ["m2"]),
        n("Add", ["m2", "p1"], ["a2"]),
        n("AveragePool", ["a2"], ["ap"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        n("Conv", ["ap", "w3"], ["c3"]),
        n("LeakyRelu", ["c3"], ["l3"], alpha=0.1),
        n("Concat", ["ap", "l3"], ["cat"], axis=1),
        n("GlobalAveragePool", ["cat"], ["g"]),
        n("Reshape", ["g", "shape"], ["flat"]),
        n("Gemm", ["flat", "wg", "bg"], ["fc"], transB=1),
        n("MatMul", ["fc", "wm"], ["mm"]),
        n("Softmax", ["mm"], ["y"], axis=-1),
    ]
    inits = [
        _f("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _f("b1", rng.normal(0, 0.1, 8)),
        _f("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
        _f("b2", rng.normal(0, 0.1, 8)),
        _f("w3", rng.normal(0, 0.3, (8, 8, 1, 1))),
        numpy_helper.from_array(np.array([1, 16], np.int64), "shape"),
        _f("wg", rng.normal(0, 0.3, (12, 16))),
        _f("bg", rng.normal(0, 0.1, 12)),
        _f("wm", rng.normal(0, 0.3, (12, 10))),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


class _Calibration(CalibrationDataReader):
    def __init__(self, rng: np.random.Generator) -> None:
        self.feeds = iter([{"x": rng.normal(0, 1, SHAPE).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


TYPES = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
CONFIGS = [("u8", "s8", False), ("u8", "s8", True), ("u8", "u8", False), ("s8", "s8", False), ("s8", "s8", True)]


@pytest.fixture(scope="module")
def float_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qdq") / "float.onnx"
    onnx.save(cnn(np.random.default_rng(0)), path)
    return path


def quantized(float_model: Path, act: str, weight: str, per_channel: bool) -> Path:
    out = float_model.with_name(f"q_{act}{weight}{'_pc' if per_channel else ''}.onnx")
    quantize_static(
        str(float_model),
        str(out),
        _Calibration(np.random.default_rng(1)),
        quant_format=QuantFormat.QDQ,
        activation_type=TYPES[act],
        weight_type=TYPES[weight],
        per_channel=per_channel,
    )
    return out


def ort_optimized(path: Path) -> onnx.ModelProto:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(path.with_suffix(".ort.onnx"))
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


def ours(path: Path) -> onnx.ModelProto:
    """The rules applied until nothing changes (a fusion waits for an S8->U8 conversion first)."""
    model = ir.serde.deserialize_model(onnx.load(path))
    model.opset_imports.setdefault("com.microsoft", 1)
    rules = RewriteRuleSet(qdq_rules())
    for _ in range(4):
        if rules.apply_to_model(model) == 0:
            break
    return ir.serde.serialize_model(model)


def counts(model: onnx.ModelProto) -> Counter[str]:
    """Op types but Constant (our zero points) and DequantizeLinear (onnxruntime duplicates a DQ per
    consumer), which ``dq_edges`` compares instead."""
    ops = Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph.node)
    del ops["Constant"], ops["DequantizeLinear"]
    return ops


def dq_edges(model: onnx.ModelProto) -> int:
    """DQ output uses: one per DQ in onnxruntime's graph, as many as consumers in ours."""
    dq_outs = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    uses = sum(i in dq_outs for n in model.graph.node for i in n.input)
    return uses + sum(o.name in dq_outs for o in model.graph.output)


def reference(model: onnx.ModelProto) -> Any:
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    return InferenceSession(model.SerializeToString(), so, providers=["CpuReferenceExecutionProvider"])


@pytest.mark.parametrize(("act", "weight", "per_channel"), CONFIGS)
def test_same_integer_ops_as_onnxruntime(float_model: Path, act: str, weight: str, per_channel: bool) -> None:
    path = quantized(float_model, act, weight, per_channel)
    want, got = ort_optimized(path), ours(path)
    assert counts(got) == counts(want)
    assert dq_edges(got) == dq_edges(want)
    if act == "u8":  # every group fused: the model is integer end to end
        assert counts(got)["QLinearConv"] == 3 and counts(got)["com.microsoft::QGemm"] == 1
        assert sum(counts(got)[op] for op in ("Conv", "Add", "Mul", "Sigmoid", "Softmax", "MatMul")) == 0


@pytest.mark.parametrize(("act", "weight", "per_channel"), CONFIGS)
def test_reference_ep_runs_it_as_onnxruntime(float_model: Path, act: str, weight: str, per_channel: bool) -> None:
    path = quantized(float_model, act, weight, per_channel)
    session, oracle = reference(ours(path)), ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.normal(0, 1.5, SHAPE).astype(np.float32)
        got, want = session.run(None, {"x": x})[0], oracle.run(None, {"x": x})[0]
        if act == "u8":  # integer all the way: exact
            np.testing.assert_array_equal(got, want)
        else:  # int8 Conv/Mul/Add stay float on x86, as in onnxruntime; float rounding may flip a step
            assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def _tiny(nodes: list[Any], inits: list[onnx.TensorProto], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _qdq(name: str, src: str, scale: float, zp: int, dtype: Any = np.uint8) -> tuple[list[Any], list[Any]]:
    """Q then DQ of ``src`` into ``name``."""
    inits = [_f(f"{name}_s", np.float32(scale)), numpy_helper.from_array(np.array(zp, dtype), f"{name}_z")]
    nodes = [
        helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
        helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [name]),
    ]
    return nodes, inits


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node if n.op_type != "Constant")


@pytest.mark.parametrize(("zp", "fused"), [(0, True), (10, False)])
def test_relu_before_q_is_absorbed_only_when_the_q_clips(zp: int, fused: bool) -> None:
    """IsClipMadeRedundantByQ: Relu -> Q with zero point 0 (uint8) clips anyway; with 10 it does not,
    and then onnxruntime fuses nothing of the group."""
    a, ai = _qdq("a", "x", 0.05, 128)
    nodes = a + [
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "o_s", "o_z"], ["o_q"]),
        helper.make_node("DequantizeLinear", ["o_q", "o_s", "o_z"], ["y"]),
    ]
    inits = ai + [_f("o_s", np.float32(0.004)), numpy_helper.from_array(np.array(zp, np.uint8), "o_z")]
    model = _tiny(nodes, inits)
    got = rewrite(model, pattern_rewrite_rules=qdq_rules())
    assert _ops(got)["QLinearSigmoid"] == int(fused) and _ops(got)["Relu"] == int(not fused)
    assert _ops(ort_optimized_proto(model))["QLinearSigmoid"] == int(fused)
    x = np.random.default_rng(2).normal(0, 2, (1, 4, 6, 6)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(reference(got).run(None, {"x": x})[0], want[0])


def ort_optimized_proto(model: onnx.ModelProto, tmp: Path | None = None) -> onnx.ModelProto:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(model, path)
        return ort_optimized(path)


def test_data_movement_runs_on_integers() -> None:
    """DQ -> Transpose/MaxPool -> Q with equal parameters: the op takes the integers (MaxPool from
    opset 12, the first with 8-bit MaxPool; onnxruntime 1.31 drops them around MaxPool-22 too),
    and a MaxPool whose Q has other parameters keeps them."""
    a, ai = _qdq("a", "x", 0.05, 128)
    nodes = a + [
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("QuantizeLinear", ["t", "a_s", "a_z"], ["t_q"]),
        helper.make_node("DequantizeLinear", ["t_q", "a_s", "a_z"], ["t_d"]),
        helper.make_node("MaxPool", ["t_d"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("QuantizeLinear", ["p", "a_s", "a_z"], ["p_q"]),
        helper.make_node("DequantizeLinear", ["p_q", "a_s", "a_z"], ["y"]),
    ]
    other_scale = [_f("b_s", np.float32(0.07))]
    moved = [
        helper.make_node(n.op_type, [i.replace("a_s", "b_s") if n.output[0] == "p_q" else i for i in n.input], n.output)
        if n.output[0] == "p_q"
        else n
        for n in nodes
    ]
    for opset, body, inits, maxpool_dropped in (
        (17, nodes, ai, True),
        (22, nodes, ai, True),
        (17, moved, ai + other_scale, False),
    ):
        model = _tiny(body, inits, opset)
        got = rewrite(model, pattern_rewrite_rules=qdq_rules())
        want = ort_optimized_proto(model)
        assert _ops(got)["QuantizeLinear"] == _ops(want)["QuantizeLinear"] == (1 if maxpool_dropped else 2)
        x = np.random.default_rng(3).normal(0, 2, (1, 4, 6, 6)).astype(np.float32)
        oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(reference(got).run(None, {"x": x})[0], oracle.run(None, {"x": x})[0])


def test_matmul_without_q_is_matmul_integer_to_float() -> None:
    a, ai = _qdq("a", "x", 0.05, 128)
    w = np.random.default_rng(4).integers(-127, 127, (6, 5)).astype(np.int8)
    inits = ai + [
        numpy_helper.from_array(w, "w_q"),
        _f("w_s", np.float32(0.02)),
        numpy_helper.from_array(np.array(0, np.int8), "w_z"),
    ]
    nodes = a + [
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"]),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    model = _tiny(nodes, inits)
    got = rewrite(model, pattern_rewrite_rules=qdq_rules())
    assert _ops(got)["MatMulIntegerToFloat"] == _ops(ort_optimized_proto(model))["MatMulIntegerToFloat"] == 1
    x = np.random.default_rng(3).normal(0, 2, (1, 4, 6, 6)).astype(np.float32)
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = oracle.run(None, {"x": x})[0]
    got_y = reference(got).run(None, {"x": x})[0]
    assert np.abs(got_y - want).max() <= 1e-6 * np.abs(want).max()


def _session_ops(path: Path, **config: str) -> Counter[str]:
    import ep_core

    so = ep_core.SessionOptions()
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    sess = ep_core.InferenceSession(str(path), so, providers=["CpuReferenceExecutionProvider"])
    return Counter(n.op_type for n in sess.model.graph.node)


def test_the_session_fuses_as_onnxruntime_and_the_config_keys_take_effect(float_model: Path) -> None:
    """Wired into the session's optimizer at EXTENDED: the session's graph has onnxruntime's integer
    ops; session.disable_quant_qdq=1 keeps the Q/DQ groups; session.qdqisint8allowed=1 keeps int8
    pairs int8 (no uint8 conversion, so QLinearConv takes int8 activations)."""
    path = quantized(float_model, "s8", "s8", False)
    fused, theirs = _session_ops(path), counts(ort_optimized(path))
    assert fused["QLinearConv"] == theirs["QLinearConv"] > 0 and fused["Conv"] == theirs["Conv"], (fused, theirs)
    kept = _session_ops(path, **{"session.disable_quant_qdq": "1"})
    assert kept["Conv"] and not kept["QLinearConv"], kept
    model = ep_core_model(path, **{"session.qdqisint8allowed": "1"})
    conv = next(n for n in model.graph.node if n.op_type == "QLinearConv")
    producer = {o: n for n in model.graph.node for o in n.output}
    assert _elem_type(model, conv.input[0]) == onnx.TensorProto.INT8, producer.get(conv.input[0])


def ep_core_model(path: Path, **config: str) -> onnx.ModelProto:
    import ep_core

    so = ep_core.SessionOptions()
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return ep_core.InferenceSession(str(path), so, providers=["CpuReferenceExecutionProvider"]).model


def _elem_type(model: onnx.ModelProto, name: str) -> int:
    for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]:
        if v.name == name:
            return v.type.tensor_type.elem_type
    raise AssertionError(f"no type for {name!r}")

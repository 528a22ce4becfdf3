"""float16 models compute as onnxruntime's CPU EP computes them (ep_core/optimizer/fp16.py): the
nodes it has no float16 kernel for, and the isolated ones between them, in float32, with values
between two such nodes kept float32. Checked against the model onnxruntime itself writes at
ORT_DISABLE_ALL (its inserted Casts name the nodes it runs in float32) and against its outputs."""

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

import ep_core
from ep_core.optimizer import fp16
from ep_core.runtime.load import check_and_infer

F16 = np.float16
vi = h.make_tensor_value_info


def _model(
    nodes: list[Any], inits: list[Any], inputs: tuple[str, ...] = ("x",), shape: tuple[int, ...] = (2, 8)
) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", [vi(n, TP.FLOAT16, list(shape)) for n in inputs], [vi("y", TP.FLOAT16, None)], inits)
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(g, opset_imports=opsets, ir_version=8)


def _c(name: str, value: Any) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, F16), name)


CHAINS = {
    "masked softmax": _model(
        [h.make_node("Add", ["x", "mask"], ["a"]), h.make_node("Softmax", ["a"], ["y"], axis=-1)],
        [_c("mask", -65504.0)],
    ),
    "Add -> Reshape -> Sub": _model(
        [
            h.make_node("Add", ["x", "c"], ["a"]),
            h.make_node("Reshape", ["a", "s"], ["b"]),
            h.make_node("Sub", ["b", "c"], ["y"]),
        ],
        [_c("c", 1000.0), nh.from_array(np.array([2, 8], np.int64), "s")],
    ),
    "Add -> Max(graph input) -> Sub": _model(
        [
            h.make_node("Add", ["x", "c"], ["a"]),
            h.make_node("Max", ["a", "z"], ["b"]),
            h.make_node("Sub", ["b", "c"], ["y"]),
        ],
        [_c("c", 1000.0)],
        inputs=("x", "z"),
    ),
    "two fp16-kernel nodes in a row stay float16": _model(
        [
            h.make_node("Add", ["x", "c"], ["a"]),
            h.make_node("Reshape", ["a", "s"], ["b"]),
            h.make_node("Transpose", ["b"], ["t"], perm=[1, 0]),
            h.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
            h.make_node("Sub", ["u", "c"], ["y"]),
        ],
        [_c("c", 1000.0), nh.from_array(np.array([2, 8], np.int64), "s")],
    ),
    "a skip layer norm fed by a gather stays float16": _model(
        [
            h.make_node("Gather", ["emb", "ids"], ["e"]),
            h.make_node("Add", ["x", "c"], ["a"]),
            h.make_node(
                "SkipSimplifiedLayerNormalization", ["e", "a", "w"], ["n"], domain="com.microsoft", epsilon=1e-5
            ),
            h.make_node("Mul", ["n", "c"], ["y"]),
        ],
        [
            _c("c", 3.0),
            _c("w", np.ones(8)),
            _c("emb", np.random.default_rng(0).standard_normal((4, 8))),
            nh.from_array(np.array([1, 3], np.int64), "ids"),
        ],
    ),
}


def _onnxruntime_float32_nodes(model: onnx.ModelProto, tmp_path: Path) -> set[str]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    written = onnx.load(str(tmp_path / "ort.onnx"))
    widened = {n.name for n in written.graph.node if any("InsertedPrecisionFreeCast_" in o for o in n.output)}
    kept = {n.name for n in written.graph.node}  # a Softmax it has no kernel for is written as its function's nodes
    return {n.name for n in model.graph.node if n.name in widened or n.name not in kept}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_float32_nodes_and_outputs_are_onnxruntime_s(name: str, tmp_path: Path) -> None:
    model = CHAINS[name]
    for i, n in enumerate(model.graph.node):
        n.name = n.name or f"n{i}"
    ours = fp16.upcast_float16(check_and_infer(onnx.ModelProto.FromString(model.SerializeToString())))
    widened = {
        n.name for n in ours.graph.node if n.op_type != "Cast" and any(o.endswith("__ep_core_fp32") for o in n.output)
    }
    assert widened == _onnxruntime_float32_nodes(model, tmp_path)
    rng = np.random.default_rng(1)
    feed = {i.name: rng.standard_normal((2, 8)).astype(F16) for i in model.graph.input}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    for provider in ("CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"):
        ours_so = ep_core.SessionOptions(graph_optimization_level=ep_core.GraphOptimizationLevel.ORT_DISABLE_ALL)
        got = ep_core.InferenceSession(model.SerializeToString(), ours_so, providers=[provider]).run(None, feed)[0]
        assert got.dtype == F16
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    if name == "masked softmax":  # float16 at every node made it uniform
        assert not np.allclose(got.astype(np.float32), 0.125)


def test_the_kernel_table_is_the_installed_onnxruntime_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "table.toml"
    copy.write_text(fp16.TABLE.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(fp16, "TABLE", copy)
    fp16.write_table()
    assert copy.read_text(encoding="utf-8") == Path(fp16.__file__).with_name("onnxruntime_fp16_kernels.toml").read_text(
        encoding="utf-8"
    )


def test_a_float32_model_and_a_non_host_first_ep_are_left_alone() -> None:
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, None)])
    model = check_and_infer(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8))
    assert fp16.upcast_float16(model) is model

"""A model onnxruntime saved from an ORT_ENABLE_ALL session holds its NCHWc ops (blocked for the
saving machine's MLAS): ep-core refuses it at session creation with the reason and the way out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.errors import NotImplementedByAnyEp


def test_an_onnxruntime_enable_all_model_is_refused_with_the_way_out(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")],
    )
    source = tmp_path / "cnn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), source)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "all.onnx")
    ort.InferenceSession(str(source), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(str(tmp_path / "all.onnx"))
    if not any(n.domain == "com.microsoft.nchwc" for n in saved.graph.node):
        pytest.skip("onnxruntime's NCHWc transformer does not run on this CPU")
    for provider in ("CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"):
        with pytest.raises(NotImplementedByAnyEp, match="save the optimized one at ORT_ENABLE_EXTENDED"):
            ep_core.InferenceSession(str(tmp_path / "all.onnx"), providers=[provider])
    ep_core.InferenceSession(str(source))  # the original runs

"""The reference EP's com.microsoft FusedConv and FusedGemm against the real onnxruntime (its CPU
contrib kernels, graph optimizations off so it runs the node as given)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ep_core import InferenceSession
from ep_core.sdk.errors import InvalidGraph

MS = "com.microsoft"


def model(node: onnx.NodeProto, inputs: str) -> bytes:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    ops = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(g, opset_imports=ops, ir_version=10).SerializeToString()


def both(m: bytes, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return InferenceSession(m, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)[0], theirs


CONV = [("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 0.7])]
CONV += [("HardSigmoid", [0.3, 0.4]), ("", None)]


@pytest.mark.parametrize("with_z", [False, True])
@pytest.mark.parametrize(("act", "params"), CONV)
def test_fused_conv_matches_onnxruntime(act: str, params: list[float] | None, with_z: bool) -> None:
    rng = np.random.default_rng(3)
    feeds = {
        "X": rng.standard_normal((2, 3, 7, 7)).astype(np.float32),
        "W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "B": rng.standard_normal(4).astype(np.float32),
    }
    attrs: dict[str, Any] = {"pads": [1, 1, 1, 1], "strides": [1, 1]}
    if act:
        attrs["activation"] = act
    if params:
        attrs["activation_params"] = params
    if with_z:
        feeds["Z"] = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    ins = "XWBZ" if with_z else "XWB"
    mine, theirs = both(model(helper.make_node("FusedConv", list(ins), ["Y"], domain=MS, **attrs), ins), feeds)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


GEMM = [
    ("Relu", {}),
    ("Tanh", {}),
    ("Sigmoid", {}),
    ("Softsign", {}),
    ("Softplus", {}),
    ("LeakyRelu", {"activation_alpha": 0.2}),
    ("Elu", {"activation_alpha": 0.7}),
    ("ThresholdedRelu", {"activation_alpha": 0.5}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
    ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.3}),
    ("ParametricSoftplus", {"activation_alpha": 1.5, "activation_beta": 0.3}),
]


@pytest.mark.parametrize(("act", "attrs"), GEMM)
def test_fused_gemm_matches_onnxruntime(act: str, attrs: dict[str, float]) -> None:
    rng = np.random.default_rng(4)
    feeds = {
        "A": (rng.standard_normal((5, 6)) * 3).astype(np.float32),
        "B": rng.standard_normal((4, 6)).astype(np.float32),
        "C": rng.standard_normal(4).astype(np.float32),
    }
    node = helper.make_node(
        "FusedGemm", ["A", "B", "C"], ["Y"], domain=MS, activation=act, transB=1, alpha=0.5, beta=2.0, **attrs
    )
    mine, theirs = both(model(node, "ABC"), feeds)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs", "why"),
    [
        ("FusedConv", {"activation": "Elu"}, "not one of FusedConv's"),
        ("FusedConv", {"activation": "LeakyRelu"}, "needs exactly 1 activation_params"),
        (
            "FusedGemm",
            {"activation": "HardSigmoid", "activation_alpha": 0.2},
            r"needs the attribute\(s\) \['activation_beta'\]",
        ),
        ("FusedGemm", {"activation": "Clip"}, "not one of FusedGemm's"),
    ],
)
def test_what_onnxruntime_refuses_is_refused(op: str, attrs: dict[str, Any], why: str) -> None:
    ins = "XWB" if op == "FusedConv" else "ABC"
    with pytest.raises(InvalidGraph, match=why):
        InferenceSession(model(helper.make_node(op, list(ins), ["Y"], domain=MS, **attrs), ins))

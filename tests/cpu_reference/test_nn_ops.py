"""Op-level tests of the native NN kernels: every onnx node test case of those ops, opset
semantics onnx.reference gets wrong (BatchNormalization-9, Softmax before 13), and the
com.microsoft contrib ops against onnxruntime."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from ep_core.tools import conformance

EXCLUSIONS = conformance.load_exclusions(Path(__file__).resolve().parents[2] / "docs/conformance/cpu_reference.toml")

NN_OPS = {
    "Conv",
    "ConvTranspose",
    "ConvInteger",
    "QLinearConv",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "LpPool",
    "GlobalLpPool",
    "MaxUnpool",
    "MaxRoiPool",
    "RoiAlign",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "RMSNormalization",
    "LpNormalization",
    "LRN",
    "MeanVarianceNormalization",
    "LSTM",
    "GRU",
    "RNN",
    "Resize",
    "Upsample",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "MatMul",
    "MatMulInteger",
    "QLinearMatMul",
    "Gemm",
    "Einsum",
    "DepthToSpace",
    "SpaceToDepth",
    "Col2Im",
    "GridSample",
    "DeformConv",
    "Attention",
}


def _nn_cases() -> list:
    out = []
    for case in conformance.collect():
        ops = {n.op_type for n in case.model.graph.node}
        if case.model.graph.node and len(case.model.graph.node) == 1 and ops & NN_OPS:
            out.append(case)
    return out


_CASES = _nn_cases()


@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_nn_node_case(case) -> None:
    reason = EXCLUSIONS.reason(case.name)
    if reason is not None:  # the conformance file's exclusions (a Resize case onnxruntime differs on)
        pytest.skip(reason)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case)


def _run(model, feed):
    import ep_core

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"]).run(
            None, feed
        )


def test_batchnorm9_is_inference_mode() -> None:
    """BN-9 with momentum: normalise with the given running statistics, not batch statistics."""
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    s, b = np.array([1.0, 2.0, 0.5], np.float32), np.array([0.1, -0.2, 0.3], np.float32)
    m, v = np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.25, 4.0], np.float32)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], momentum=0.9, epsilon=1e-5)
    g = helper.make_graph(
        [node],
        "bn",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 4, 4] if n == "x" else [3]) for n in "xsbmv"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    (y,) = _run(model, {"x": x, "s": s, "b": b, "m": m, "v": v})
    sh = (1, 3, 1, 1)
    want = (x - m.reshape(sh)) / np.sqrt(v.reshape(sh) + 1e-5) * s.reshape(sh) + b.reshape(sh)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_13_coerces_to_2d(op: str) -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=1)
    g = helper.make_graph(
        [node],
        "sm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
    )
    (y,) = _run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), {"x": x})
    flat = x.reshape(2, 12)
    if op == "Softmax":
        e = np.exp(flat - flat.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    elif op == "LogSoftmax":
        d = flat - flat.max(1, keepdims=True)
        want = d - np.log(np.exp(d).sum(1, keepdims=True))
    else:
        want = np.zeros_like(flat)
        want[np.arange(2), flat.argmax(1)] = 1
    np.testing.assert_allclose(y, want.reshape(x.shape), rtol=1e-5, atol=1e-6)


def _ms_model(op: str, inputs: dict, n_out: int = 1, **attrs):
    node = helper.make_node(op, list(inputs), [f"y{i}" for i in range(n_out)], domain="com.microsoft", **attrs)
    g = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(
                f"y{i}", TensorProto.FLOAT, [f"d{j}" for j in range(next(iter(inputs.values())).ndim)]
            )
            for i in range(n_out)
        ],
    )
    return helper.make_model(
        g, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )


_R = np.random.default_rng(3)
_X = (_R.standard_normal((2, 5, 16)) * 2).astype(np.float32)
_H = lambda *s: _R.standard_normal(s).astype(np.float32)  # noqa: E731
CONTRIB = [
    ("Gelu", {"x": _X}, 1, {}),
    ("FastGelu", {"x": _X, "bias": _H(16)}, 1, {}),
    ("BiasGelu", {"a": _X, "b": _H(16)}, 1, {}),
    ("QuickGelu", {"x": _X}, 1, {"alpha": 1.5}),
    ("BiasAdd", {"x": _H(2, 4, 8), "bias": _H(8), "skip": _H(2, 4, 8)}, 1, {}),
    (
        "SkipLayerNormalization",
        {"x": _X, "skip": _H(2, 5, 16), "gamma": _H(16), "beta": _H(16), "bias": _H(16)},
        4,
        {"epsilon": 1e-5},
    ),
    ("SkipSimplifiedLayerNormalization", {"x": _X, "skip": _H(2, 5, 16), "gamma": _H(16)}, 1, {"epsilon": 1e-6}),
    ("SkipSimplifiedLayerNormalization", {"x": _X * 1e-5, "skip": _H(2, 5, 16) * 1e-5, "gamma": _H(16)}, 1, {}),
    ("SkipLayerNormalization", {"x": _X * 1e-5, "skip": _H(2, 5, 16) * 1e-5, "gamma": _H(16)}, 1, {}),
    ("LayerNormalization", {"x": _X, "scale": _H(16), "b": _H(16)}, 1, {"epsilon": 1e-5}),
    ("SimplifiedLayerNormalization", {"x": _X, "scale": _H(16)}, 1, {"epsilon": 1e-6}),
    ("FusedMatMul", {"a": _H(2, 3, 5, 4), "b": _H(2, 3, 6, 5)}, 1, {"alpha": 0.5, "transA": 1, "transB": 1}),
]


@pytest.mark.parametrize("op,inputs,n_out,attrs", CONTRIB, ids=[c[0] for c in CONTRIB])
def test_contrib_op_matches_onnxruntime(op, inputs, n_out, attrs) -> None:
    """The model passes onnx.checker (schemas registered) and matches onnxruntime's contrib kernel."""
    ort = pytest.importorskip("onnxruntime")
    model = _ms_model(op, inputs, n_out, **attrs)
    got = _run(model, inputs)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if op in ("LayerNormalization", "SimplifiedLayerNormalization", "BiasAdd"):
        # onnxruntime keeps the two norms in the ONNX domain and has BiasAdd on CUDA only:
        # compare against the NumPy formula instead
        x = inputs["x"].astype(np.float64)
        if op == "BiasAdd":
            want = [x + inputs["bias"] + inputs["skip"]]
        elif op == "LayerNormalization":
            d = x - x.mean(-1, keepdims=True)
            want = [d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * inputs["scale"] + inputs["b"]]
        else:
            want = [x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * inputs["scale"]]
    else:
        want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, inputs)
    for g, w in zip(got, want, strict=False):
        np.testing.assert_allclose(np.asarray(g, np.float64).reshape(np.shape(w)), w, rtol=1e-4, atol=1e-5)


def _ort_compare(model, feed, rtol=1e-4, atol=1e-5) -> None:
    ort = pytest.importorskip("onnxruntime")
    got = _run(model, feed)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(got, want, strict=True):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=atol)


def _single(op, inputs: dict, inits: dict, n_out: int, opset: int = 17, ranks=None, **attrs):
    from onnx import numpy_helper

    node = helper.make_node(op, list(inputs) + list(inits), [f"y{i}" for i in range(n_out)], **attrs)
    g = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [f"d{j}" for j in range(rank)])
            for i, rank in enumerate(ranks or [next(iter(inputs.values())).ndim] * n_out)
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


_CONV_CASES = [
    # (x shape, w shape, attrs): each hits one code path of plan_conv
    ((1, 64, 12, 10), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # shift-add GEMM
    ((1, 64, 12, 10), (8, 64, 3, 3), {"dilations": [2, 1], "pads": [2, 0, 1, 1]}),
    ((1, 64, 12, 10), (8, 64, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((2, 16, 9, 11), (32, 16, 3, 3), {"strides": [2, 1], "pads": [0, 1, 2, 1]}),  # im2col
    ((1, 24, 10, 10), (24, 1, 5, 5), {"group": 24, "pads": [2, 2, 2, 2]}),  # small depthwise
    ((1, 8, 90, 90), (16, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),  # depthwise, multiplier 2
    ((1, 12, 7, 7), (6, 4, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER"}),  # grouped
    ((2, 16, 5, 5), (8, 16, 1, 1), {}),  # 1x1
    ((1, 4, 50), (6, 4, 5), {"strides": [3], "pads": [2, 1]}),  # 1-D
    ((1, 3, 6, 7, 5), (4, 3, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0]}),  # 3-D
]


@pytest.mark.parametrize("xs,ws,attrs", _CONV_CASES)
def test_conv_paths_match_onnxruntime(xs, ws, attrs) -> None:
    r = np.random.default_rng(5)
    x = r.standard_normal(xs).astype(np.float32)
    inits = {"w": r.standard_normal(ws).astype(np.float32), "b": r.standard_normal(ws[0]).astype(np.float32)}
    _ort_compare(_single("Conv", {"x": x}, inits, 1, **attrs), {"x": x})


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        {"group": 2, "strides": [2, 1], "dilations": [1, 2]},
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ],
)
def test_conv_transpose_matches_onnxruntime(attrs) -> None:
    r = np.random.default_rng(6)
    x = r.standard_normal((1, 4, 5, 6)).astype(np.float32)
    inits = {
        "w": r.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "b": r.standard_normal(3 * attrs.get("group", 1)).astype(np.float32),
    }
    _ort_compare(_single("ConvTranspose", {"x": x}, inits, 1, **attrs), {"x": x})


@pytest.mark.parametrize(
    "op,gates,attrs",
    [
        ("LSTM", 4, {"direction": "bidirectional"}),
        ("LSTM", 4, {"direction": "reverse", "clip": 0.7, "input_forget": 1}),
        ("GRU", 3, {"direction": "bidirectional", "linear_before_reset": 1}),
        ("GRU", 3, {"direction": "reverse"}),
        ("RNN", 1, {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}),
    ],
)
def test_recurrent_matches_onnxruntime(op, gates, attrs) -> None:
    """All directions with per-batch sequence lengths and initial states (reverse within each length)."""
    r = np.random.default_rng(7)
    nd = 2 if attrs["direction"] == "bidirectional" else 1
    seq, batch, inp, hid = 5, 3, 4, 6
    feed = {"x": r.standard_normal((seq, batch, inp)).astype(np.float32)}
    inits = {
        "w": (r.standard_normal((nd, gates * hid, inp)) * 0.5).astype(np.float32),
        "r": (r.standard_normal((nd, gates * hid, hid)) * 0.5).astype(np.float32),
        "b": (r.standard_normal((nd, 2 * gates * hid)) * 0.2).astype(np.float32),
        "seq_lens": np.array([5, 2, 4], dtype=np.int32),
        "h0": r.standard_normal((nd, batch, hid)).astype(np.float32),
    }
    n_out = 2
    if op == "LSTM":
        inits["c0"] = r.standard_normal((nd, batch, hid)).astype(np.float32)
        inits["p"] = (r.standard_normal((nd, 3 * hid)) * 0.3).astype(np.float32)
        n_out = 3
    model = _single(op, feed, inits, n_out, opset=14, ranks=[4, 3, 3][:n_out], hidden_size=hid, **attrs)
    _ort_compare(model, feed)


@pytest.mark.parametrize(
    "attrs,scales",
    [
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, [1, 1, 2, 3]),
        # (ties at exact .5 are onnxruntime's too now: coordinates in float32, as it maps them;
        # tests/cpu_reference/test_resize_gridsample_vs_onnxruntime.py sweeps them)
        ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, [1, 1, 0.6, 1.6]),
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, [1, 1, 1.5, 0.5]),
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 2.0, 2.0]),
        ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.35]),
        (
            {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel", "exclude_outside": 1},
            [1, 1, 1.7, 0.8],
        ),
        ({"mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.5}, [1, 1, 0.4, 0.6]),
    ],
)
def test_resize_matches_onnxruntime(attrs, scales) -> None:
    r = np.random.default_rng(8)
    x = r.standard_normal((1, 2, 9, 11)).astype(np.float32)
    inits = {"roi": np.array([], np.float32), "scales": np.array(scales, np.float32)}
    _ort_compare(_single("Resize", {"x": x}, inits, 1, opset=18, **attrs), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
        ("MaxPool", {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 0, 1]}),
        ("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER", "storage_order": 1}),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
        ),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 1, 0]}),
        ("LpPool", {"kernel_shape": [3, 3], "p": 3, "pads": [1, 1, 1, 1]}),
    ],
)
def test_pools_match_onnxruntime(op, attrs) -> None:
    r = np.random.default_rng(9)
    x = r.standard_normal((2, 3, 10, 9)).astype(np.float32)
    n_out = 2 if op == "MaxPool" else 1
    model = _single(op, {"x": x}, {}, n_out, opset=18, **attrs)
    if op == "MaxPool":
        model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    _ort_compare(model, {"x": x})

"""The miscellaneous com.microsoft contrib kernels (kernels/contrib_misc.py) and the legacy
ai.onnx ones (kernels/legacy.py) against the real onnxruntime: integer, boolean and string
outputs identical, float outputs within 1e-5 relative (of the output's scale)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.errors import EpCoreError

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
_R = np.random.default_rng(1431)


def _f32(*shape: int) -> np.ndarray:
    return _R.standard_normal(shape).astype(np.float32)


def _model(
    op: str,
    ins: list[tuple[str, Any]],
    outs: list[Any],
    domain: str = MS,
    consts: tuple[str, ...] = (),
    opset: int = 21,
    **attrs: Any,
) -> tuple[bytes, dict[str, np.ndarray]]:
    """A one-node model; ``ins`` are (name, array or None for an absent optional input), those
    named in ``consts`` initializers; ``outs`` the output element types."""
    names = [n if a is not None else "" for n, a in ins]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(len(outs))], domain=domain, **attrs)

    def elem(a: np.ndarray) -> int:
        return TensorProto.STRING if a.dtype == object else helper.np_dtype_to_tensor_dtype(a.dtype)

    graph_in = [
        helper.make_tensor_value_info(n, elem(a), list(a.shape)) for n, a in ins if a is not None and n not in consts
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in ins if a is not None and n in consts]
    graph_out = [
        helper.make_tensor_value_info(
            f"y{i}", TensorProto.STRING if t is object else helper.np_dtype_to_tensor_dtype(np.dtype(t)), None
        )
        for i, t in enumerate(outs)
    ]
    graph = helper.make_graph([node], op, graph_in, graph_out, inits)
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, ir_version=10 if opset > 9 else 4, opset_imports=opsets)
    return model.SerializeToString(), {n: a for n, a in ins if a is not None and n not in consts}


def _compare(model: bytes, feeds: dict[str, np.ndarray], rtol: float = 1e-5) -> list[Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
        got = sess.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype or (w.dtype.kind in "OU" and g.dtype.kind in "OU"), (g.dtype, w.dtype)
        if w.dtype.kind == "f":
            if w.dtype == np.float16:  # half precision: a float16 ulp, not 1e-5
                rtol = max(rtol, 1e-3)
            scale = max(float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)), 1e-30)
            fin = np.isfinite(w)
            assert np.array_equal(np.isfinite(g), fin) and np.array_equal(g[~fin], w[~fin])
            np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=rtol * scale)
        else:
            assert np.array_equal(g, w), (g, w)
    return got


# ------------------------------------------------------------------------------- legacy ai.onnx
X4 = _f32(2, 3, 5, 6)

LEGACY = {
    "Affine": ([("x", X4)], {"alpha": 1.5, "beta": -0.25}),
    "Scale": ([("x", X4)], {"scale": 3.0}),
    "ScaledTanh": ([("x", X4)], {"alpha": 0.7, "beta": 1.3}),
    "ParametricSoftplus": ([("x", X4 * 20)], {"alpha": 0.5, "beta": 2.0}),
    "ImageScaler": ([("x", X4)], {"scale": 2.0, "bias": [0.1, -0.2, 0.3]}),
    "Crop": ([("x", X4)], {"border": [1, 2, 0, 1]}),
    "Crop-scale": ([("x", X4)], {"border": [1, 1, 1, 1], "scale": [3, 4]}),
}


@pytest.mark.parametrize("case", sorted(LEGACY))
def test_legacy_op_matches_onnxruntime(case: str) -> None:
    ins, attrs = LEGACY[case]
    _compare(*_model(case.split("-")[0], ins, [np.float32], domain="", opset=9, **attrs))


def test_dynamic_slice_matches_onnxruntime() -> None:
    x = _f32(4, 6, 5)
    for axes in (None, np.array([2, 0], np.int64)):
        starts, ends = np.array([1, -3], np.int64), np.array([100, 3], np.int64)
        if axes is None:
            starts, ends = np.array([1, -5, 0], np.int64), np.array([3, 100, -1], np.int64)
        ins = [("x", x), ("starts", starts), ("ends", ends), ("axes", axes)]
        _compare(*_model("DynamicSlice", ins, [np.float32], domain="", opset=9))


def test_simplified_layer_normalization_in_the_onnx_domain() -> None:
    """onnxruntime registers it in ai.onnx (not com.microsoft); the contrib_ms builder serves it."""
    ins = [("x", _f32(2, 3, 16)), ("scale", _f32(16))]
    _compare(*_model("SimplifiedLayerNormalization", ins, [np.float32], domain="", epsilon=1e-6))


def test_legacy_ops_end_at_opset_9_as_in_onnxruntime() -> None:
    model, feeds = _model("Affine", [("x", X4)], [np.float32], domain="", opset=13, alpha=2.0)
    with pytest.raises(Exception, match="Affine"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(EpCoreError, match="Affine"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)


# ------------------------------------------------------------------------- com.microsoft ops
def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


CASES: dict[str, tuple[str, list[tuple[str, Any]], list[Any], dict[str, Any]]] = {
    "CDist-sq": ("CDist", [("a", _f32(5, 4)), ("b", _f32(3, 4))], [np.float32], {}),
    "CDist-eu": (
        "CDist",
        [("a", _f32(5, 4).astype(np.float64)), ("b", _f32(3, 4).astype(np.float64))],
        [np.float64],
        {"metric": "euclidean"},
    ),
    "ExpandDims": ("ExpandDims", [("x", _f32(2, 3)), ("axis", np.array(-1, np.int32))], [np.float32], {}),
    "ExpandDims-0": ("ExpandDims", [("x", _f32(2, 3)), ("axis", np.array(0, np.int32))], [np.float32], {}),
    "GatherND": ("GatherND", [("x", _f32(3, 4, 5)), ("i", np.array([[0, 1], [2, 3]], np.int32))], [np.float32], {}),
    "GatherND-i64": ("GatherND", [("x", _f32(3, 4)), ("i", _i64(2, 1, 0, 3).reshape(2, 2))], [np.float32], {}),
    "GridSample": (
        "GridSample",
        [("x", _f32(1, 2, 5, 6)), ("g", _R.uniform(-1.1, 1.1, (1, 4, 3, 2)).astype(np.float32))],
        [np.float32],
        {},
    ),
    "GridSample-nearest": (
        "GridSample",
        [("x", _f32(1, 2, 5, 6)), ("g", _R.uniform(-1, 1, (1, 4, 3, 2)).astype(np.float32))],
        [np.float32],
        {"mode": "nearest", "padding_mode": "border", "align_corners": 1},
    ),
    "Inverse": ("Inverse", [("x", (_f32(2, 3, 3) + 3 * np.eye(3, dtype=np.float32)))], [np.float32], {}),
    "Inverse-f16": (
        "Inverse",
        [("x", (_f32(3, 3) + 3 * np.eye(3, dtype=np.float32)).astype(np.float16))],
        [np.float16],
        {},
    ),
    "Pad-constant": (
        "Pad",
        [("x", _f32(2, 3)), ("pads", _i64(1, 0, 2, 1)), ("v", np.array(1.5, np.float32))],
        [np.float32],
        {},
    ),
    "Pad-reflect": (
        "Pad",
        [("x", _f32(3, 4)), ("pads", _i64(1, 2, 1, 1).reshape(1, 4))],
        [np.float32],
        {"mode": "reflect"},
    ),
    "Pad-edge": ("Pad", [("x", _f32(3, 4)), ("pads", _i64(0, 2, 1, 0))], [np.float32], {"mode": "edge"}),
    "Range": (
        "Range",
        [("s", np.array(2, np.int64)), ("l", np.array(11, np.int64)), ("d", np.array(3, np.int64))],
        [np.int64],
        {},
    ),
    "Range-nodelta": ("Range", [("s", np.array(-1.5, np.float32)), ("l", np.array(3.0, np.float32))], [np.float32], {}),
    "Trilu": ("Trilu", [("x", _f32(2, 4, 5)), ("k", np.array(1, np.int64))], [np.float32], {}),
    "Trilu-lower": ("Trilu", [("x", _R.integers(0, 9, (4, 4)).astype(np.int64))], [np.int64], {"upper": 0}),
    "Unique": ("Unique", [("x", np.array([2, 1, 1, 3, 4, 3, 2, 0], np.float32))], [np.float32, np.int64, np.int64], {}),
    "TransposeMatMul": (
        "TransposeMatMul",
        [("a", _f32(2, 5, 3)), ("b", _f32(2, 4, 5))],
        [np.float32],
        {"transA": 1, "transB": 1, "alpha": 0.5},
    ),
    "ScaledSiLU": ("ScaledSiLU", [("x", _f32(3, 7))], [np.float32], {"alpha": 1.7}),
    "ScaledSiLU-scale": ("ScaledSiLU", [("x", _f32(3, 7)), ("s", np.array(0.6, np.float32))], [np.float32], {}),
    "ScaledSiLU-f16": ("ScaledSiLU", [("x", _f32(3, 7).astype(np.float16))], [np.float16], {"alpha": 1.3}),
    "GatedAdd": ("GatedAdd", [("x", _f32(2, 3, 8)), ("y", _f32(2, 3, 8)), ("g", _f32(2, 3, 1))], [np.float32], {}),
    "GatedAdd-f16": (
        "GatedAdd",
        [
            ("x", _f32(2, 8).astype(np.float16)),
            ("y", _f32(2, 8).astype(np.float16)),
            ("g", _f32(2, 1).astype(np.float16)),
        ],
        [np.float16],
        {},
    ),
    "GatedRMSNorm": ("GatedRMSNorm", [("x", _f32(2, 3, 8)), ("s", _f32(4)), ("g", _f32(2, 3, 8))], [np.float32], {}),
    "GatedRMSNorm-sigmoid": (
        "GatedRMSNorm",
        [("x", _f32(2, 8)), ("s", _f32(8)), ("g", _f32(2, 8))],
        [np.float32],
        {"activation": "sigmoid", "epsilon": 1e-3},
    ),
    "BranchwiseRMSNorm": ("BranchwiseRMSNorm", [("x", _f32(2, 3, 4, 8)), ("s", _f32(8))], [np.float32], {}),
    "BranchwiseRMSNorm-flat": (
        "BranchwiseRMSNorm",
        [("x", _f32(2, 3, 12)), ("s", _f32(3, 4))],
        [np.float32],
        {"num_branches": 3},
    ),
    "BranchwiseRMSNorm-noscale": ("BranchwiseRMSNorm", [("x", _f32(5, 2, 6))], [np.float32], {}),
    "UnfoldTensor": ("UnfoldTensor", [("x", _f32(2, 9, 3))], [np.float32], {"dim": 1, "size": 3, "step": 2}),
    "UnfoldTensor-last": (
        "UnfoldTensor",
        [("x", _R.integers(0, 50, (3, 7)).astype(np.int32))],
        [np.int32],
        {"size": 4},
    ),
    "NGramRepeatBlock": (
        "NGramRepeatBlock",
        [("ids", _i64(1, 2, 3, 1, 2, 5, 1, 2, 3, 1, 2, 4, 4, 4, 4, 4).reshape(2, 8)), ("s", _f32(2, 10))],
        [np.float32],
        {"ngram_size": 3},
    ),
    "NGramRepeatBlock-1": (
        "NGramRepeatBlock",
        [("ids", _i64(0, 3, 3, 7).reshape(1, 4)), ("s", _f32(1, 9))],
        [np.float32],
        {"ngram_size": 1},
    ),
    "DynamicTimeWarping": ("DynamicTimeWarping", [("x", np.abs(_f32(6, 9)))], [np.int32], {}),
    "DynamicTimeWarping-ties": (
        "DynamicTimeWarping",
        [("x", _R.integers(0, 2, (1, 5, 4)).astype(np.float32))],
        [np.int32],
        {},
    ),
    "SampleOp": ("SampleOp", [("x", _f32(3, 4))], [np.float32], {}),
    "MaxpoolWithMask": (
        "MaxpoolWithMask",
        [("x", _f32(1, 2, 6, 6)), ("m", _R.integers(0, 4, (1, 1, 6, 6)).astype(np.int32))],
        [np.float32],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "MaxpoolWithMask-1d": (
        "MaxpoolWithMask",
        [("x", _f32(2, 3, 9)), ("m", _R.integers(0, 5, (1, 1, 9)).astype(np.int32))],
        [np.float32],
        {"kernel_shape": [3], "strides": [2]},
    ),
    "NhwcMaxPool": (
        "NhwcMaxPool",
        [("x", _R.integers(-128, 128, (1, 5, 6, 3)).astype(np.int8))],
        [np.int8],
        {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 1]},
    ),
    "NhwcMaxPool-u8": (
        "NhwcMaxPool",
        [("x", _R.integers(0, 256, (2, 7, 7, 4)).astype(np.uint8))],
        [np.uint8],
        {"kernel_shape": [3, 3], "strides": [2, 2]},
    ),
    "ConvTransposeWithDynamicPads": (
        "ConvTransposeWithDynamicPads",
        [("x", _f32(1, 2, 4, 5)), ("w", _f32(2, 3, 3, 3)), ("p", _i64(1, 0, 1, 2)), ("b", _f32(3))],
        [np.float32],
        {"strides": [2, 1]},
    ),
    "CropAndResize": (
        "CropAndResize",
        [
            ("x", _f32(2, 3, 8, 9)),
            ("r", np.array([[0.1, 0.2, 0.8, 0.9], [-0.2, 0.0, 0.5, 1.3], [0.3, 0.3, 0.3, 0.6]], np.float32)),
            ("b", np.array([0, 1, 1], np.int32)),
            ("c", np.array([4, 5], np.int32)),
        ],
        [np.float32],
        {},
    ),
    "CropAndResize-nearest": (
        "CropAndResize",
        [
            ("x", _f32(1, 2, 6, 7)),
            ("r", np.array([[0.0, 0.1, 1.0, 0.9], [0.2, -0.1, 0.7, 0.6]], np.float32)),
            ("b", np.array([0, 0], np.int32)),
            ("c", np.array([3, 1], np.int32)),
        ],
        [np.float32],
        {"mode": "nearest", "extrapolation_value": -1.0},
    ),
    "MurmurHash3-i32": (
        "MurmurHash3",
        [("x", _R.integers(-(2**31), 2**31 - 1, (3, 5)).astype(np.int32))],
        [np.uint32],
        {"seed": 7},
    ),
    "MurmurHash3-u32-neg": (
        "MurmurHash3",
        [("x", _R.integers(0, 2**32 - 1, (6,)).astype(np.uint32))],
        [np.int32],
        {"positive": 0},
    ),
    "MurmurHash3-str": (
        "MurmurHash3",
        [("x", np.array(["", "a", "ab", "abc", "abcd", "héllo wörld", "the quick brown fox", "ab"], dtype=object))],
        [np.uint32],
        {"seed": 42},
    ),
    "MurmurHash3-i64": ("MurmurHash3", [("x", _i64(1, -2, 3, 10**12))], [np.uint32], {"seed": 3}),
    "MurmurHash3-f64": ("MurmurHash3", [("x", np.array([0.5, -2.25, 1e300], np.float64))], [np.int32], {"positive": 0}),
    "GatherND-negative": ("GatherND", [("x", _f32(3, 4)), ("i", _i64(-1, 1, 2, -3).reshape(2, 2))], [np.float32], {}),
    "GridSample-bicubic": (
        "GridSample",
        [("x", _f32(1, 2, 5, 6)), ("g", _R.uniform(-1.2, 1.2, (1, 4, 3, 2)).astype(np.float32))],
        [np.float32],
        {"mode": "bicubic", "padding_mode": "reflection"},
    ),
    "MaxpoolWithMask-nc-mask": (
        "MaxpoolWithMask",
        [("x", _f32(2, 3, 5, 5)), ("m", _R.integers(0, 3, (2, 3, 5, 5)).astype(np.int32))],
        [np.float32],
        {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
    ),
    "MaxpoolWithMask-3d": (
        "MaxpoolWithMask",
        [("x", _f32(1, 2, 4, 4, 4)), ("m", _R.integers(0, 3, (1, 1, 4, 4, 4)).astype(np.int32))],
        [np.float32],
        {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
    ),
    "BifurcationDetector": (
        "BifurcationDetector",
        [
            ("src", _i64(5, 6, 7, 8, 9, 5, 6, 1)),
            ("cur", _i64(1, 5, 6)),
            ("prev", _i64(2)),
            ("pred", _i64(7, 8, 3, 4, 5, 6, 7)),
        ],
        [np.int64, np.int64],
        {},
    ),
    "BifurcationDetector-nopred": (
        "BifurcationDetector",
        [("src", _i64(1, 2, 3, 4, 2, 3, 9)), ("cur", _i64(0, 3, 4)), ("prev", _i64(0))],
        [np.int64, np.int64],
        {"min_ngram_size": 1, "max_ngram_size": 2},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_contrib_op_matches_onnxruntime(case: str) -> None:
    op, ins, outs, attrs = CASES[case]
    _compare(*_model(op, ins, outs, **attrs))


def test_word_conv_embedding_matches_onnxruntime() -> None:
    seq = np.array([[3, 1, 4, 0, 0, 0], [2, 0, 0, 0, 0, 0], [5, 6, 2, 7, 1, 3], [1, 2, 3, 4, 0, 0]], np.int32)
    ins = [("seq", seq), ("w", _f32(5, 1, 3, 4)), ("b", _f32(5)), ("c", _f32(8, 4))]
    _compare(*_model("WordConvEmbedding", ins, [np.float32], consts=("w", "b", "c")))


TOKENIZER = {
    "chars": ({"separators": [""], "mincharnum": 1}, ["abc", "dé", ""]),
    "chars-tokenexp": ({"tokenexp": ".", "mincharnum": 1}, ["hello", "x"]),
    "separators": ({"separators": [" ", ","], "mincharnum": 1}, ["a b,c", "hello world,,x y", "one"]),
    "separators-min": ({"separators": [";"], "mincharnum": 2}, ["ab;c;def;;g", "x;yy"]),
    "regex-separator": ({"separators": ["[0-9]+"], "mincharnum": 1}, ["ab12cd3e", "99x"]),
    "tokenexp": ({"tokenexp": "[a-z]+", "mincharnum": 1}, ["hello 12 world", "a1b2cc", "123"]),
    "tokenexp-alternation": ({"tokenexp": "a|ab", "mincharnum": 1}, ["abcab", "aab"]),  # RE2 leftmost-longest
    "tokenexp-empty-matches": ({"tokenexp": "[a-z]*", "mincharnum": 1}, ["ab1cd", "x"]),
    "all-separators": ({"separators": [";"], "mincharnum": 1}, [";;", ";"]),
    "separators-in-turn": ({"separators": [" ", "\\."], "mincharnum": 1}, ["a.b c.d", "xx"]),
    "tokenexp-min": ({"tokenexp": "[a-z]+", "mincharnum": 3}, ["ab cde fghij k", "xyz"]),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER))
@pytest.mark.parametrize("mark", [0, 1])
def test_tokenizer_matches_onnxruntime(case: str, mark: int) -> None:
    attrs, strings = TOKENIZER[case]
    x = np.array(strings, dtype=object).reshape(1, -1)
    _compare(*_model("Tokenizer", [("x", x)], [object], mark=mark, pad_value="#", **attrs))


def test_refusals_are_typed_and_name_the_node() -> None:
    model, feeds = _model("CDist", [("a", _f32(2, 3)), ("b", _f32(2, 3))], [np.float32], metric="cosine")
    with pytest.raises(EpCoreError, match="metric"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)
    model, feeds = _model("Inverse", [("x", _f32(2, 3))], [np.float32])
    with pytest.raises(EpCoreError, match="square"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)
    # onnxruntime requires the Pads input though its schema marks it optional: so does the kernel
    model, feeds = _model(
        "ConvTransposeWithDynamicPads", [("x", _f32(1, 2, 4, 5)), ("w", _f32(2, 3, 3, 3))], [np.float32]
    )
    with pytest.raises(Exception, match="Dynamic pads tensor is required"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(EpCoreError, match="Pads input is required"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize(
    ("op", "attrs", "why"),
    [
        ("ScaledTanh", {}, "'alpha' is required"),
        ("ParametricSoftplus", {"alpha": 1.0}, "'beta' is required"),
        ("Crop", {}, "border needs four values"),
        ("ImageScaler", {"scale": 2.0}, "bias has 0 values for 3 channels"),
    ],
)
def test_legacy_refusals_match_onnxruntimes(op: str, attrs: dict[str, Any], why: str) -> None:
    model, feeds = _model(op, [("x", X4)], [np.float32], domain="", opset=9, **attrs)
    with pytest.raises(Exception, match=op if op != "Crop" else "border"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(EpCoreError, match=why):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)

"""Every onnx node test case (``onnx.backend.test.case.node``) through the reference EP.

Cases in the reference EP's exclusions file (docs/conformance/cpu_reference.toml) are skipped with
their written reason; the comparison is the conformance runner's (``ep_core.tools.conformance``:
dtype, shape, per-case rtol/atol, sequences, optionals)."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

from ep_core.tools import conformance

EXCLUSIONS = conformance.load_exclusions(Path(__file__).resolve().parents[2] / "docs/conformance/cpu_reference.toml")
_CASES = conformance.collect()


@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_node_case(case: object) -> None:
    reason = EXCLUSIONS.reason(case.name)  # type: ignore[attr-defined]
    if reason is not None:
        pytest.skip(reason)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case)


def test_case_count_is_the_pinned_onnx_suite() -> None:
    """The suite is onnx 1.23's 1884 node cases: a different count means a different onnx."""
    import onnx

    if onnx.__version__ == "1.23.2":
        assert len(_CASES) == 1884


def test_exclusions_have_reasons_and_match_cases() -> None:
    """Each exclusion is written down and still matches a case (no stale entries)."""
    import re

    names = [c.name for c in _CASES]
    assert EXCLUSIONS.ep == "CpuReferenceExecutionProvider"
    for e in EXCLUSIONS.entries:
        assert len(e.why) > 30, e.cases
        assert any(re.search(e.cases, n) for n in names), f"exclusion {e.cases!r} matches no case"


# where the ONNX reference and onnxruntime differ, the reference EP gives onnxruntime's result
ONNXRUNTIME_PARITY = {
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_cubic_align_corners",
}


def test_only_random_cases_and_onnxruntime_s_differences_are_skipped() -> None:
    """Every other case runs where the dev extra is installed (``make test``): the image-decoder
    cases need Pillow, which the extra pins; skipped are Bernoulli's unseeded expectations and the
    two Resize cases whose expectation onnxruntime (and PyTorch) do not give."""
    skipped = [c.name for c in _CASES if EXCLUSIONS.reason(c.name) is not None]
    assert skipped and all(n.startswith("test_bernoulli") or n in ONNXRUNTIME_PARITY for n in skipped), skipped
    assert ONNXRUNTIME_PARITY <= set(skipped)
    if onnx_version_is_pinned():
        assert len(_CASES) - len(skipped) == 1876


def onnx_version_is_pinned() -> bool:
    import onnx

    return onnx.__version__ == "1.23.2"


def test_comparison_is_strict() -> None:
    """The runner's comparison catches dtype, shape, value, string and sequence differences."""
    close = conformance.assert_close
    close(np.float32([1.0]), np.float32([1.0005]), 1e-3, 0.0)
    for expected, actual in (
        (np.float32([1.0]), np.float64([1.0])),
        (np.float32([1.0]), np.float32([[1.0]])),
        (np.float32([1.0]), np.float32([1.1])),
        (np.array(["a"], dtype=object), np.array(["b"], dtype=object)),
        ([np.int64([1])], [np.int64([1]), np.int64([2])]),
        (None, np.int64([1])),
        (np.int32([1, 2]), np.int32([1, 3])),
    ):
        with pytest.raises(AssertionError):
            close(expected, actual, 1e-3, 1e-7)


# ---------------------------------------------------------------------------------------------
# Hand-made cases for what onnx's node suite does not reach: ai.onnx.ml ops (native and
# delegated), legacy opsets the reference EP serves, and the random ops whose suite cases are
# excluded. Expected values are written out or computed here with plain NumPy formulas.
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as oh  # noqa: E402

ML = "ai.onnx.ml"


def _model(node: object, inputs: list, outputs: list, opset: int = 18, ml: int = 3) -> bytes:
    graph = oh.make_graph([node], "case", inputs, outputs)
    imports = [oh.make_opsetid("", opset), oh.make_opsetid(ML, ml)]
    return oh.make_model(graph, opset_imports=imports, ir_version=8).SerializeToString()


def _t(name: str, elem: int, shape: list | None) -> object:
    return oh.make_tensor_value_info(name, elem, shape)


def _run_model(model: bytes, feed: dict) -> list:
    import ep_core

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ep_core.InferenceSession(model).run(None, feed)


X2 = np.array([[1.0, -2.0, 3.0], [0.0, 0.0, 0.0], [4.0, 5.0, -6.0]], dtype=np.float32)


def _ml_cases() -> dict[str, tuple[bytes, dict, list]]:
    """name -> (model, feed, expected outputs)."""
    x = X2
    cases: dict[str, tuple[bytes, dict, list]] = {}
    f3 = [_t("x", T.FLOAT, [3, 3])]

    cases["scaler"] = (
        _model(
            oh.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[1.0, 0.0, -1.0], scale=[2.0, 0.5, 1.0]),
            f3,
            [_t("y", T.FLOAT, [3, 3])],
        ),
        {"x": x},
        [((x - np.float32([1, 0, -1])) * np.float32([2, 0.5, 1])).astype(np.float32)],
    )
    for norm in ("MAX", "L1", "L2"):
        if norm == "MAX":
            d = x.max(axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(x).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt((x * x).sum(axis=1, keepdims=True))
        want = np.where(d == 0, x, x / np.where(d == 0, 1, d)).astype(np.float32)
        cases[f"normalizer_{norm.lower()}"] = (
            _model(oh.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm), f3, [_t("y", T.FLOAT, [3, 3])]),
            {"x": x},
            [want],
        )
    xn = np.array([[1.0, np.nan], [np.nan, 4.0]], dtype=np.float32)
    cases["imputer_nan_per_feature"] = (
        _model(
            oh.make_node(
                "Imputer", ["x"], ["y"], domain=ML, imputed_value_floats=[7.0, 8.0], replaced_value_float=float("nan")
            ),
            [_t("x", T.FLOAT, [2, 2])],
            [_t("y", T.FLOAT, [2, 2])],
        ),
        {"x": xn},
        [np.array([[1.0, 8.0], [7.0, 4.0]], dtype=np.float32)],
    )
    w = np.array([[0.5, -1.0, 2.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    cases["linear_regressor_2_targets"] = (
        _model(
            oh.make_node(
                "LinearRegressor",
                ["x"],
                ["y"],
                domain=ML,
                coefficients=w.ravel().tolist(),
                intercepts=[1.0, -1.0],
                targets=2,
            ),
            f3,
            [_t("y", T.FLOAT, [3, 2])],
        ),
        {"x": x},
        [(x @ w.T + np.float32([1.0, -1.0])).astype(np.float32)],
    )
    cases["one_hot_encoder_ints"] = (
        _model(
            oh.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_int64s=[1, 3, 5]),
            [_t("x", T.INT64, [4])],
            [_t("y", T.FLOAT, [4, 3])],
        ),
        {"x": np.array([5, 1, 2, 3], dtype=np.int64)},
        [np.array([[0, 0, 1], [1, 0, 0], [0, 0, 0], [0, 1, 0]], dtype=np.float32)],
    )
    cases["feature_vectorizer"] = (
        _model(
            oh.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain=ML, inputdimensions=[2, 3]),
            [_t("a", T.FLOAT, [2, 2]), _t("b", T.FLOAT, [2, 2])],  # X is homogeneous: one type
            [_t("y", T.FLOAT, [2, 5])],
        ),
        {"a": np.array([[1, 2], [3, 4]], dtype=np.float32), "b": np.array([[0.5, 1.5], [2.5, 3.5]], dtype=np.float32)},
        [np.array([[1, 2, 0.5, 1.5, 0], [3, 4, 2.5, 3.5, 0]], dtype=np.float32)],
    )
    cases["category_mapper_str_to_int"] = (
        _model(
            oh.make_node(
                "CategoryMapper",
                ["x"],
                ["y"],
                domain=ML,
                cats_strings=["a", "b"],
                cats_int64s=[10, 20],
                default_int64=-7,
            ),
            [_t("x", T.STRING, [3])],
            [_t("y", T.INT64, [3])],
        ),
        {"x": np.array(["b", "z", "a"], dtype=object)},
        [np.array([20, -7, 10], dtype=np.int64)],
    )
    cases["category_mapper_int_to_str"] = (
        _model(
            oh.make_node("CategoryMapper", ["x"], ["y"], domain=ML, cats_strings=["a", "b"], cats_int64s=[10, 20]),
            [_t("x", T.INT64, [3])],
            [_t("y", T.STRING, [3])],
        ),
        {"x": np.array([20, 5, 10], dtype=np.int64)},
        [np.array(["b", "_Unused", "a"], dtype=object)],
    )
    # three classes, linear scores X @ W.T + b, label = argmax (delegated to onnx.reference)
    wc = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    bc = np.float32([0.0, 0.5, -0.5])
    scores = x @ wc.T + bc
    cases["linear_classifier_3_classes"] = (
        _model(
            oh.make_node(
                "LinearClassifier",
                ["x"],
                ["label", "scores"],
                domain=ML,
                coefficients=wc.ravel().tolist(),
                intercepts=bc.tolist(),
                classlabels_ints=[7, 8, 9],
            ),
            f3,
            [_t("label", T.INT64, [3]), _t("scores", T.FLOAT, [3, 3])],
        ),
        {"x": x},
        [np.array([7, 8, 9], dtype=np.int64)[scores.argmax(axis=1)], scores.astype(np.float32)],
    )
    sv = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], dtype=np.float32)
    coef = np.float32([2.0, -1.0])
    cases["svm_regressor_linear_kernel"] = (
        _model(
            oh.make_node(
                "SVMRegressor",
                ["x"],
                ["y"],
                domain=ML,
                kernel_type="LINEAR",
                support_vectors=sv.ravel().tolist(),
                coefficients=coef.tolist(),
                rho=[0.25],
                n_supports=2,
            ),
            f3,
            [_t("y", T.FLOAT, [3, 1])],
        ),
        {"x": x},
        [((x @ sv.T) @ coef + np.float32(0.25)).reshape(3, 1).astype(np.float32)],
    )
    # one tree: x0 <= 0.5 ? leaf 1 : leaf 2
    tree = dict(
        nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0],
    )
    xt = np.array([[0.0, 9.0], [1.0, -9.0], [0.5, 0.0]], dtype=np.float32)
    cases["tree_ensemble_regressor_one_split"] = (
        _model(
            oh.make_node(
                "TreeEnsembleRegressor",
                ["x"],
                ["y"],
                domain=ML,
                n_targets=1,
                target_treeids=[0, 0],
                target_nodeids=[1, 2],
                target_ids=[0, 0],
                target_weights=[1.5, -2.0],
                **tree,
            ),
            [_t("x", T.FLOAT, [3, 2])],
            [_t("y", T.FLOAT, [3, 1])],
        ),
        {"x": xt},
        [np.array([[1.5], [-2.0], [1.5]], dtype=np.float32)],
    )
    cases["tree_ensemble_classifier_3_classes"] = (
        _model(
            oh.make_node(
                "TreeEnsembleClassifier",
                ["x"],
                ["label", "probs"],
                domain=ML,
                class_treeids=[0, 0],
                class_nodeids=[1, 2],
                class_ids=[0, 2],
                class_weights=[1.0, 1.0],
                classlabels_int64s=[10, 20, 30],
                **tree,
            ),
            [_t("x", T.FLOAT, [3, 2])],
            [_t("label", T.INT64, [3]), _t("probs", T.FLOAT, [3, 3])],
        ),
        {"x": xt},
        [np.array([10, 30, 10], dtype=np.int64), np.array([[1, 0, 0], [0, 0, 1], [1, 0, 0]], dtype=np.float32)],
    )
    map_type = oh.make_map_type_proto(T.STRING, oh.make_tensor_type_proto(T.FLOAT, []))
    cases["dict_vectorizer_strings"] = (
        _model(
            oh.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a", "b", "c"]),
            [oh.make_value_info("x", map_type)],
            [_t("y", T.FLOAT, [3])],
        ),
        {"x": {"a": 1.0, "c": 3.0}},
        [np.array([[1.0, 0.0, 3.0]], dtype=np.float32)],  # [1, N] as onnxruntime, whatever the graph declares
    )
    seq_of_maps = oh.make_sequence_type_proto(oh.make_map_type_proto(T.INT64, oh.make_tensor_type_proto(T.FLOAT, [])))
    cases["zipmap_int_labels"] = (
        _model(
            oh.make_node("ZipMap", ["x"], ["y"], domain=ML, classlabels_int64s=[3, 4]),
            [_t("x", T.FLOAT, [2, 2])],
            [oh.make_value_info("y", seq_of_maps)],
        ),
        {"x": np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32)},
        [[{3: 0.25, 4: 0.75}, {3: 1.0, 4: 0.0}]],
    )
    int_map = oh.make_map_type_proto(T.INT64, oh.make_tensor_type_proto(T.FLOAT, []))
    cases["cast_map_dense_to_float"] = (
        _model(
            oh.make_node("CastMap", ["x"], ["y"], domain=ML, cast_to="TO_FLOAT", map_form="DENSE"),
            [oh.make_value_info("x", int_map)],
            [_t("y", T.FLOAT, [1, 3])],
        ),
        {"x": {5: 0.5, 1: 1.5, 3: 3.5}},
        [np.array([[1.5, 3.5, 0.5]], dtype=np.float32)],
    )
    cases["cast_map_sparse_to_int64"] = (
        _model(
            oh.make_node("CastMap", ["x"], ["y"], domain=ML, cast_to="TO_INT64", map_form="SPARSE", max_map=5),
            [oh.make_value_info("x", int_map)],
            [_t("y", T.INT64, [1, 5])],
        ),
        {"x": {4: 2.0, 1: 7.0}},
        [np.array([[0, 7, 0, 0, 2]], dtype=np.int64)],
    )
    mats = np.array([[[2.0, 1.0], [1.0, 3.0]], [[0.5, 0.0], [0.0, 4.0]]], dtype=np.float16)
    cases["det_float16_batched"] = (
        _model(oh.make_node("Det", ["x"], ["y"]), [_t("x", T.FLOAT16, [2, 2, 2])], [_t("y", T.FLOAT16, [2])]),
        {"x": mats},
        [np.array([5.0, 2.0], dtype=np.float16)],
    )
    # legacy opsets the node suite no longer exports
    xi = np.arange(6, dtype=np.float32).reshape(2, 3)
    cases["cast_opset1_string_to"] = (
        _model(
            oh.make_node("Cast", ["x"], ["y"], to="INT32"),
            [_t("x", T.FLOAT, [2, 3])],
            [_t("y", T.INT32, [2, 3])],
            opset=1,
        ),
        {"x": xi + 0.25},
        [xi.astype(np.int32)],
    )
    cases["concat_opset1_default_axis"] = (
        _model(
            oh.make_node("Concat", ["a", "b"], ["y"]),
            [_t("a", T.FLOAT, [2, 3]), _t("b", T.FLOAT, [2, 3])],
            [_t("y", T.FLOAT, [2, 6])],
            opset=1,
        ),
        {"a": xi, "b": -xi},
        [np.concatenate([xi, -xi], axis=1)],
    )
    cases["pad_opset1_paddings"] = (
        _model(
            oh.make_node("Pad", ["x"], ["y"], paddings=[0, 1, 0, 2], value=9.0),
            [_t("x", T.FLOAT, [2, 3])],
            [_t("y", T.FLOAT, [2, 6])],
            opset=1,
        ),
        {"x": xi},
        [np.array([[9, 0, 1, 2, 9, 9], [9, 3, 4, 5, 9, 9]], dtype=np.float32)],
    )
    cases["tile_opset1_axis_input"] = (
        _model(
            oh.make_node("Tile", ["x", "tiles", "axis"], ["y"]),
            [_t("x", T.FLOAT, [2, 3]), _t("tiles", T.FLOAT, []), _t("axis", T.FLOAT, [])],  # Tile-1: all T
            [_t("y", T.FLOAT, [4, 3])],
            opset=1,
        ),
        {"x": xi, "tiles": np.array(2, dtype=np.float32), "axis": np.array(0, dtype=np.float32)},
        [np.concatenate([xi, xi], axis=0)],
    )
    cases["add_opset6_broadcast_axis"] = (
        _model(
            oh.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=0),
            [_t("a", T.FLOAT, [2, 3]), _t("b", T.FLOAT, [2])],
            [_t("y", T.FLOAT, [2, 3])],
            opset=6,
        ),
        {"a": xi, "b": np.float32([10, 20])},
        [xi + np.float32([[10], [20]])],
    )
    return cases


_EXTRA = _ml_cases()


@pytest.mark.parametrize("name", sorted(_EXTRA))
def test_hand_made_case(name: str) -> None:
    model, feed, expected = _EXTRA[name]
    got = _run_model(model, feed)
    assert len(got) == len(expected)
    for i, (e, a) in enumerate(zip(expected, got, strict=False)):
        if isinstance(e, list) and e and isinstance(e[0], dict):
            assert a == e, f"output {i}"
        else:
            conformance.assert_close(e, a, 1e-5, 1e-6, f"output {i}")


def test_random_ops_are_seeded_and_in_range() -> None:
    """What the excluded Bernoulli cases cannot check: seeded draws repeat, unseeded ones vary,
    values lie in range and p = 0 / p = 1 are exact."""
    p = np.array([0.0, 1.0, 0.0, 1.0] * 50, dtype=np.float32)
    model = _model(
        oh.make_node("Bernoulli", ["p"], ["y"], seed=3.0),
        [_t("p", T.FLOAT, [200])],
        [_t("y", T.FLOAT, [200])],
        opset=15,
    )
    (y,) = _run_model(model, {"p": p})
    np.testing.assert_array_equal(y, p)
    half = np.full(4000, 0.5, dtype=np.float32)
    model = _model(
        oh.make_node("Bernoulli", ["p"], ["y"], seed=1.0),
        [_t("p", T.FLOAT, [4000])],
        [_t("y", T.FLOAT, [4000])],
        opset=15,
    )
    a, b = _run_model(model, {"p": half})[0], _run_model(model, {"p": half})[0]
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 1.0} and 0.45 < a.mean() < 0.55
    node = oh.make_node("RandomUniform", [], ["y"], shape=[1000], low=2.0, high=3.0)
    model = _model(node, [], [_t("y", T.FLOAT, [1000])], opset=15)
    import ep_core

    sess = ep_core.InferenceSession(model)
    u1, u2 = sess.run(None, {})[0], sess.run(None, {})[0]
    assert u1.dtype == np.float32 and u1.min() >= 2.0 and u1.max() < 3.0
    assert not np.array_equal(u1, u2), "an unseeded generator must not repeat"
    logits = np.log(np.array([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]], dtype=np.float32) + 1e-30)
    node = oh.make_node("Multinomial", ["x"], ["y"], sample_size=3000, seed=2.0, dtype=T.INT64)
    (m,) = _run_model(_model(node, [_t("x", T.FLOAT, [2, 3])], [_t("y", T.INT64, [2, 3000])], opset=15), {"x": logits})
    assert m.dtype == np.int64 and m.shape == (2, 3000)
    assert (m[0] == 1).all()
    freq = np.bincount(m[1], minlength=3) / 3000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.04)
    node = oh.make_node("RandomNormal", [], ["y"], shape=[5000], mean=1.0, scale=2.0, seed=5.0)
    (n,) = _run_model(_model(node, [], [_t("y", T.FLOAT, [5000])], opset=15), {})
    assert abs(n.mean() - 1.0) < 0.15 and abs(n.std() - 2.0) < 0.15


def _png_bytes(img: np.ndarray, filters: list[int]) -> bytes:
    """A PNG (8-bit RGB) whose rows use the given filter types, encoded here from the spec."""
    import struct
    import zlib

    h, w, c = img.shape
    raw = img.reshape(h, w * c).astype(np.int32)
    lines = []
    for y in range(h):
        f = filters[y % len(filters)]
        cur, prev = raw[y], raw[y - 1] if y else np.zeros(w * c, dtype=np.int32)
        left = np.concatenate([np.zeros(c, dtype=np.int32), cur[:-c]])
        upleft = np.concatenate([np.zeros(c, dtype=np.int32), prev[:-c]])
        if f == 0:
            pred = np.zeros_like(cur)
        elif f == 1:
            pred = left
        elif f == 2:
            pred = prev
        elif f == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = np.abs(p - left), np.abs(p - prev), np.abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        lines.append(bytes([f]) + ((cur - pred) & 0xFF).astype(np.uint8).tobytes())

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"".join(lines)))
        + chunk(b"IEND", b"")
    )


def test_image_decoder_png_filters_pixel_formats_and_missing_codec() -> None:
    """Every PNG row filter decodes exactly; BGR and Grayscale follow from RGB; a JPEG without
    a codec library fails naming the format."""
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    r, g, b = (img[..., i].astype(np.uint32) for i in range(3))
    data = np.frombuffer(_png_bytes(img, [0, 1, 2, 3, 4]), dtype=np.uint8)
    for fmt, want in (
        ("RGB", img),
        ("BGR", img[:, :, ::-1]),
        ("Grayscale", ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]),
    ):
        node = oh.make_node("ImageDecoder", ["x"], ["y"], pixel_format=fmt)
        model = _model(node, [_t("x", T.UINT8, [data.size])], [_t("y", T.UINT8, [None, None, None])], opset=20)
        (got,) = _run_model(model, {"x": data})
        np.testing.assert_array_equal(got, want)
    if importlib.util.find_spec("PIL") is None:
        node = oh.make_node("ImageDecoder", ["x"], ["y"])
        jpeg = np.frombuffer(b"\xff\xd8\xff\xe0" + bytes(20), dtype=np.uint8)
        model = _model(node, [_t("x", T.UINT8, [jpeg.size])], [_t("y", T.UINT8, [None, None, None])], opset=20)
        with pytest.raises(Exception, match="JPEG images need a codec library"):
            _run_model(model, {"x": jpeg})


# SVMClassifier has no node test and its score/vote conventions are not written down: the
# oracle is onnxruntime (a dev dependency), run on the same model (the native kernel,
# kernels/svm.py, is pinned in depth by tests/cpu_reference/test_svm.py).
SVM_CONFIGS = {
    "svm_classifier_linear_3_classes": dict(
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
        coefficients=[1.0, 0, 0, 0, 1, 0, 0, 0, 1],
        rho=[0.0, 0.5, -0.5],
        classlabels_ints=[7, 8, 9],
    ),
    "svm_classifier_rbf_3_classes": dict(
        kernel_type="RBF",
        kernel_params=[0.5, 0.0, 0.0],
        support_vectors=[1.0, 0, 0, 0, 1, 0, 0, 0, 1],
        vectors_per_class=[1, 1, 1],
        coefficients=[1.0, -1, 0.5, -0.5, 1, -1],
        rho=[0.1, -0.2, 0.3],
        classlabels_ints=[7, 8, 9],
    ),
    "svm_classifier_linear_kernel_2_classes": dict(
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
        support_vectors=[1.0, 0, 0, 0, 1, 1],
        vectors_per_class=[1, 1],
        coefficients=[0.7, -0.3],
        rho=[0.2],
        classlabels_ints=[0, 1],
    ),
    "svm_classifier_poly_2_classes_string_labels": dict(
        kernel_type="POLY",
        kernel_params=[0.3, 1.0, 2.0],
        support_vectors=[1.0, 0, 0, 0, 1, 1, 1, 1, 0],
        vectors_per_class=[2, 1],
        coefficients=[0.7, -0.3, 0.4],
        rho=[0.2],
        classlabels_strings=["no", "yes"],
    ),
}


_TREE = dict(
    nodes_treeids=[0, 0, 0],
    nodes_nodeids=[0, 1, 2],
    nodes_featureids=[0, 0, 0],
    nodes_values=[0.5, 0.0, 0.0],
    nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
    nodes_truenodeids=[1, 0, 0],
    nodes_falsenodeids=[2, 0, 0],
)
# (op, attributes): classifier configurations checked against onnxruntime
ORT_CLASSIFIERS: dict[str, tuple[str, dict]] = {
    **{k: ("SVMClassifier", v) for k, v in SVM_CONFIGS.items()},
    **{
        f"linear_classifier_binary_{post.lower()}": (
            "LinearClassifier",
            dict(coefficients=[1.0, -1, 0.5], intercepts=[0.1], classlabels_ints=[3, 4], post_transform=post),
        )
        for post in ("NONE", "LOGISTIC", "SOFTMAX")
    },
    **{
        f"linear_classifier_3_classes_{post.lower()}": (
            "LinearClassifier",
            dict(
                coefficients=[1.0, 0, 0, 0, 1, 0, 0, 0, 1],
                intercepts=[0, 0.5, -0.5],
                classlabels_strings=["a", "b", "c"],
                post_transform=post,
            ),
        )
        for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")
    },
    "tree_ensemble_classifier_3_classes_strings": (
        "TreeEnsembleClassifier",
        dict(
            class_treeids=[0, 0],
            class_nodeids=[1, 2],
            class_ids=[0, 2],
            class_weights=[1.0, 1.0],
            classlabels_strings=["x", "y", "z"],
            **_TREE,
        ),
    ),
    "tree_ensemble_classifier_binary": (
        "TreeEnsembleClassifier",
        dict(
            class_treeids=[0, 0],
            class_nodeids=[1, 2],
            class_ids=[1, 1],
            class_weights=[0.3, 0.8],
            classlabels_int64s=[0, 1],
            **_TREE,
        ),
    ),
    "svm_classifier_rbf_3_classes_probabilities": (
        "SVMClassifier",
        dict(
            kernel_type="RBF",
            kernel_params=[0.5, 0, 0],
            support_vectors=[1.0, 0, 0, 0, 1, 0, 0, 0, 1],
            vectors_per_class=[1, 1, 1],
            coefficients=[1.0, -1, 0.5, -0.5, 1, -1],
            rho=[0.1, -0.2, 0.3],
            prob_a=[-1.0, -2, -0.5],
            prob_b=[0.1, 0, -0.1],
            classlabels_ints=[7, 8, 9],
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(ORT_CLASSIFIERS))
def test_classifier_matches_onnxruntime(name: str) -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for the ML classifiers")
    op, attrs = ORT_CLASSIFIERS[name]
    label_type = T.STRING if "classlabels_strings" in attrs else T.INT64
    node = oh.make_node(op, ["x"], ["label", "scores"], domain=ML, **attrs)
    model = _model(node, [_t("x", T.FLOAT, [4, 3])], [_t("label", label_type, [4]), _t("scores", T.FLOAT, [4, None])])
    x = np.array([[1.0, -2.0, 3.0], [0.0, 0.5, 0.0], [4.0, 5.0, -6.0], [-1, -1, -1]], dtype=np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = _run_model(model, {"x": x})
    assert [str(v) for v in got[0].tolist()] == [str(v) for v in want[0].tolist()]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)

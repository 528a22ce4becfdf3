"""Classical-ML ops at the edges, against onnxruntime (found by a red-team run over skl2onnx,
onnxmltools, LightGBM, XGBoost and CatBoost models): a batch of no rows, NaN and infinite
inputs, non-ASCII text. Both CPU EPs (the Numba EP runs these through the reference kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import ep_core
from ep_core.sdk.errors import InvalidArgument

ML = "ai.onnx.ml"
PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _model(node: Any, x_type: int, outs: list[tuple[str, int]], x_shape: list[Any]) -> bytes:
    g = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("X", x_type, x_shape)],
        [h.make_tensor_value_info(n, t, None) for n, t in outs],
    )
    opsets = [h.make_opsetid("", 17), h.make_opsetid(ML, 3)]
    return h.make_model(g, opset_imports=opsets, ir_version=8).SerializeToString()


def _both(model: bytes, x: np.ndarray, provider: str) -> tuple[list[Any], list[Any]]:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, {"X": x})
    return want, got


def _tree() -> Any:
    return h.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0], nodes_values=[0.5, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[-1.5, 2.0],
    )  # fmt: skip


def _svm(kernel: str) -> Any:
    return h.make_node(
        "SVMRegressor", ["X"], ["Y"], domain=ML, kernel_type=kernel, kernel_params=[0.3, 1.0, 3.0],
        support_vectors=[0.5, -1.0, 2.0, 0.25, -0.75, 1.5], n_supports=3, coefficients=[0.7, -0.4, 0.2], rho=[0.1],
    )  # fmt: skip


def _linear() -> Any:
    return h.make_node(
        "LinearClassifier", ["X"], ["L", "S"], domain=ML, coefficients=[1.0, -2.0, 0.5, 0.25, -1.0, 1.5],
        intercepts=[0.1, -0.2, 0.3], classlabels_ints=[4, 5, 6], post_transform="SOFTMAX",
    )  # fmt: skip


ZERO_ROWS = {
    "TreeEnsembleRegressor": (_tree, [("Y", TP.FLOAT)]),
    "SVMRegressor": (lambda: _svm("RBF"), [("Y", TP.FLOAT)]),
    "LinearClassifier": (_linear, [("L", TP.INT64), ("S", TP.FLOAT)]),
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", sorted(ZERO_ROWS))
def test_a_batch_of_no_rows_gives_empty_outputs(op: str, provider: str) -> None:
    """reshape(0, -1) cannot size the features: every tree, SVM and linear model failed."""
    make, outs = ZERO_ROWS[op]
    want, got = _both(_model(make(), TP.FLOAT, outs, ["N", 2]), np.zeros((0, 2), np.float32), provider)
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("kernel", ["RBF", "POLY"])
def test_svm_kernels_on_infinite_and_huge_inputs(kernel: str, provider: str) -> None:
    """RBF from |x|^2 + |v|^2 - 2 x.v gave inf - inf = NaN for an infinite input; onnxruntime sums
    the squared distance (exp(-inf) = 0). POLY's whole degree is now multiplied out."""
    x = np.array([[0.3, -0.2], [np.inf, 1.0], [-3e38 if kernel == "RBF" else -3e3, 2.0], [1.0, 2.0]], np.float32)
    want, got = _both(_model(_svm(kernel), TP.FLOAT, [("Y", TP.FLOAT)], ["N", 2]), x, provider)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, equal_nan=True)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_passes_nan_over_unless_it_comes_first(op: str, provider: str) -> None:
    """numpy's first NaN wins; onnxruntime's scan never picks a NaN after index 0 (skl2onnx's
    KBinsDiscretizer put a row with one NaN in the last bin)."""
    x = np.array([[np.nan, 1, 2, 3], [1, np.nan, 5, 2], [1, 2, 3, np.nan], [4, 3, np.nan, 9]], np.float32)
    for keep_last in (0, 1):
        node = h.make_node(op, ["X"], ["Y"], axis=1, keepdims=0, select_last_index=keep_last)
        want, got = _both(_model(node, TP.FLOAT, [("Y", TP.INT64)], [4, 4]), x, provider)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_normalizer_max_keeps_a_nan_to_its_own_entry(provider: str) -> None:
    x = np.array([[0.5, np.nan, -2.0, 1.5], [np.nan, 1.0, 2.0, 3.0], [1.0, 2.0, 4.0, -8.0]], np.float32)
    node = h.make_node("Normalizer", ["X"], ["Y"], domain=ML, norm="MAX")
    want, got = _both(_model(node, TP.FLOAT, [("Y", TP.FLOAT)], [3, 4]), x, provider)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-7, equal_nan=True)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_string_normalizer_changes_case_character_by_character(action: str, provider: str) -> None:
    """onnxruntime's towlower/towupper: "ß" stays, "İ" lowers to "i", a final "Σ" lowers to "σ"."""
    x = np.array(["İSTANBUL", "Straße ß", "ΣΟΦΙΑΣ", "ǅemal", "ÉCOLE", "plain"], dtype=object)
    node = h.make_node(
        "StringNormalizer", ["X"], ["Y"], case_change_action=action, stopwords=["straße ß"], locale="C.UTF-8"
    )
    want, got = _both(_model(node, TP.STRING, [("Y", TP.STRING)], [6]), x, provider)
    assert list(got[0]) == list(want[0])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_float16_matmul_is_one_rounding_of_the_float32_product(provider: str) -> None:
    """As onnxruntime's CPU EP multiplies float16 (through casts): NumPy's own float16 matmul has
    no BLAS and rounded as it went (340x onnxruntime on a [128, 768] x [768, 768] product)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 64, 96)).astype(np.float16)
    b = rng.standard_normal((96, 80)).astype(np.float16)
    g = h.make_graph(
        [h.make_node("MatMul", ["X", "B"], ["Y"])], "g",
        [h.make_tensor_value_info("X", TP.FLOAT16, [2, 64, 96]), h.make_tensor_value_info("B", TP.FLOAT16, [96, 80])],
        [h.make_tensor_value_info("Y", TP.FLOAT16, None)],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, {"X": a, "B": b})[0]
    if provider == "CpuReferenceExecutionProvider":  # the Numba EP sums in its own order
        np.testing.assert_array_equal(got, (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16))
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": a, "B": b})[0]
    ulps = np.abs(got.astype(np.float32) - want.astype(np.float32)) / np.spacing(np.abs(want)).astype(np.float32)
    assert float(ulps.max()) <= 1.0


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("max_skip", [0, 2])
def test_tfidf_vectorizer_counts_as_onnxruntime(strings: bool, max_skip: int) -> None:
    """The n-grams of a whole batch counted at once (int64 keys, one bincount), unknown tokens and
    skips included, against onnxruntime (and the tuple-per-n-gram path it replaced)."""
    rng = np.random.default_rng(max_skip + 2 * strings)
    vocab = [f"t{i}" for i in range(9)] if strings else list(range(9))
    pool: list[Any] = []
    counts = []
    for n in (1, 2, 3):
        counts.append(len(pool))
        grams = {tuple(rng.choice(len(vocab), n)) for _ in range(12)}
        pool += [vocab[i] for g in sorted(grams) for i in g]
    size = sum(1 for _ in range(counts[1])) + (counts[2] - counts[1]) // 2 + (len(pool) - counts[2]) // 3
    attrs = {"pool_strings" if strings else "pool_int64s": pool}
    node = h.make_node(
        "TfIdfVectorizer", ["X"], ["Y"], mode="TFIDF", min_gram_length=1, max_gram_length=3, max_skip_count=max_skip,
        ngram_counts=counts, ngram_indexes=list(range(size)), weights=list(rng.random(size).round(3)), **attrs,
    )  # fmt: skip
    tokens = vocab + (["zz", "t1 "] if strings else [99, -1])
    x = np.array(
        [[tokens[i] for i in row] for row in rng.integers(0, len(tokens), (50, 17))],
        dtype=object if strings else np.int64,
    )
    model = _model(node, TP.STRING if strings else TP.INT64, [("Y", TP.FLOAT)], [50, 17])
    for provider in PROVIDERS:
        want, got = _both(model, x, provider)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("exclusive", [0, 1])
def test_cumsum_over_an_empty_axis_is_empty(provider: str, exclusive: int) -> None:
    """An exclusive CumSum took element 0 of an empty axis (torchvision detection with no box)."""
    g = h.make_graph(
        [h.make_node("CumSum", ["X", "axis"], ["Y"], exclusive=exclusive, reverse=1)], "g",
        [h.make_tensor_value_info("X", TP.FLOAT, [3, "n"])], [h.make_tensor_value_info("Y", TP.FLOAT, None)],
        [h.make_tensor("axis", TP.INT64, [], [1])],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    want, got = _both(model, np.zeros((3, 0), np.float32), provider)
    assert got[0].shape == want[0].shape == (3, 0)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_of_many_boxes_as_onnxruntime(provider: str, center: int) -> None:
    """Thousands of overlapping boxes, torchvision's unbounded form (max_output_boxes_per_class
    INT64_MAX, no score threshold): decided a block at a time, in float32 as onnxruntime."""
    rng = np.random.default_rng(center)
    xy = rng.random((1, 1500, 2)).astype(np.float32) * 100
    wh = rng.random((1, 1500, 2)).astype(np.float32) * 20 + 1
    boxes = np.concatenate([xy, xy + wh], axis=-1) if not center else np.concatenate([xy, wh], axis=-1)
    scores = rng.random((1, 2, 1500)).astype(np.float32)
    g = h.make_graph(
        [h.make_node("NonMaxSuppression", ["X", "S", "m", "t"], ["Y"], center_point_box=center)], "g",
        [h.make_tensor_value_info("X", TP.FLOAT, [1, 1500, 4]), h.make_tensor_value_info("S", TP.FLOAT, [1, 2, 1500])],
        [h.make_tensor_value_info("Y", TP.INT64, None)],
        [h.make_tensor("m", TP.INT64, [1], [2**63 - 1]), h.make_tensor("t", TP.FLOAT, [1], [0.5])],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    feed = {"X": boxes, "S": scores}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feed)[0]
    np.testing.assert_array_equal(got, want)


def _nms_model(iou: float, score: float, spatial: int, classes: int) -> bytes:
    g = h.make_graph(
        [h.make_node("NonMaxSuppression", ["X", "S", "m", "i", "s"], ["Y"])], "g",
        [h.make_tensor_value_info("X", TP.FLOAT, None), h.make_tensor_value_info("S", TP.FLOAT, None)],
        [h.make_tensor_value_info("Y", TP.INT64, None)],
        [h.make_tensor("m", TP.INT64, [1], [50]), h.make_tensor("i", TP.FLOAT, [1], [iou]),
         h.make_tensor("s", TP.FLOAT, [1], [score])],
    )  # fmt: skip
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_non_max_suppression_score_threshold_keeps_tie_order(provider: str) -> None:
    """The score threshold is applied before the sort (a YOLO tail: 80 classes of 8400 boxes,
    few above it); scores tied at quantised values still come out in index order, as onnxruntime."""
    rng = np.random.default_rng(7)
    xy = rng.random((2, 600, 2)).astype(np.float32) * 50
    boxes = np.concatenate([xy, xy + rng.random((2, 600, 2)).astype(np.float32) * 10 + 1], axis=-1)
    scores = (np.round(rng.random((2, 5, 600)) * 8) / 8).astype(np.float32)  # many exact ties
    model = _nms_model(0.4, 0.5, 600, 5)
    feed = {"X": boxes, "S": scores}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feed)[0]
    assert len(want) > 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("iou", "boxes_shape", "scores_shape", "message"),
    [
        (1.5, (1, 4, 4), (1, 2, 4), "iou_threshold must be in range"),
        (0.5, (1, 4, 4), (1, 2, 5), "same batch and spatial dims"),
        (0.5, (2, 4, 4), (1, 2, 4), "same batch and spatial dims"),
    ],
)
def test_non_max_suppression_refuses_what_onnxruntime_refuses(
    provider: str, iou: float, boxes_shape: tuple[int, ...], scores_shape: tuple[int, ...], message: str
) -> None:
    model = _nms_model(iou, 0.0, boxes_shape[1], scores_shape[1])
    feed = {"X": np.zeros(boxes_shape, np.float32), "S": np.ones(scores_shape, np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own class is its Python binding's
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    with pytest.raises(InvalidArgument, match=message):
        ep_core.InferenceSession(model, providers=[provider]).run(None, feed)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_topk_of_a_long_axis_with_ties_as_onnxruntime(provider: str, largest: int, axis: int) -> None:
    """A small k over a long axis takes a partition (one pass) instead of a full sort: ties still go
    to the lower index, in onnxruntime's order."""
    x = np.random.default_rng(abs(axis) + 2 * largest).integers(0, 50, (3, 2000)).astype(np.float32)
    x = x.T.copy() if axis == 0 else x
    g = h.make_graph(
        [h.make_node("TopK", ["X", "k"], ["V", "I"], axis=axis, largest=largest)], "g",
        [h.make_tensor_value_info("X", TP.FLOAT, list(x.shape))],
        [h.make_tensor_value_info("V", TP.FLOAT, None), h.make_tensor_value_info("I", TP.INT64, None)],
        [h.make_tensor("k", TP.INT64, [1], [37])],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    want, got = _both(model, x, provider)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("flags", [(0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 1, 0), (0, 1, 1, 1), (1, 1, 1, 1)])
def test_fused_matmul_trans_batch_as_onnxruntime(flags: tuple[int, int, int, int], rank: int) -> None:
    """transBatchA/B (nn.MultiheadAttention's in-projection, fused at the default level) were
    refused, failing the session; the first axis moves behind the batch axes, as onnxruntime's."""
    ta, tb, ba, bb = flags
    rng = np.random.default_rng(rank)
    dims = {3: (2, 5, 3), 4: (2, 4, 5, 3)}[rank]
    a = rng.standard_normal(dims).astype(np.float32)
    # B chosen so the product is defined whichever flags: build op(B) then undo the flags
    op_a = np.moveaxis(a, 0, -2) if ba else a
    op_a = np.swapaxes(op_a, -1, -2) if ta else op_a
    b_op = rng.standard_normal((*op_a.shape[:-2], op_a.shape[-1], 6)).astype(np.float32)
    b = np.swapaxes(b_op, -1, -2) if tb else b_op
    b = np.moveaxis(b, -2, 0) if bb else b
    node = h.make_node(
        "FusedMatMul",
        ["X", "B"],
        ["Y"],
        domain="com.microsoft",
        transA=ta,
        transB=tb,
        transBatchA=ba,
        transBatchB=bb,
        alpha=0.5,
    )
    g = h.make_graph(
        [node], "g", [h.make_tensor_value_info("X", TP.FLOAT, list(a.shape)), h.make_tensor_value_info("B", TP.FLOAT, list(b.shape))],
        [h.make_tensor_value_info("Y", TP.FLOAT, None)],
    )  # fmt: skip
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    model = h.make_model(g, opset_imports=opsets, ir_version=8).SerializeToString()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": a, "B": b})[0]
    got = ep_core.InferenceSession(model).run(None, {"X": a, "B": b})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _one(op: str, inputs: list[tuple[str, Any]], out_type: int = TP.FLOAT) -> tuple[bytes, dict[str, np.ndarray]]:
    infos = [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in inputs]
    node = h.make_node(op, [n for n, _ in inputs], ["Y"])
    g = h.make_graph([node], "g", infos, [h.make_tensor_value_info("Y", out_type, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString(), dict(inputs)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "case",
    [
        "GatherND with empty index tuples",
        "Range of 10000 float steps",
    ],
)
def test_detection_graph_edges_as_onnxruntime(provider: str, case: str) -> None:
    """Found in torchvision exports: GatherND with indices of last dim 0 failed; a float Range is
    onnxruntime's step-by-step sum, not start + i * delta."""
    model, feed = {
        "GatherND with empty index tuples": lambda: _one(
            "GatherND", [("x", np.arange(4, dtype=np.float32).reshape(2, 2)), ("i", np.zeros((3, 0), np.int64))]
        ),
        "Range of 10000 float steps": lambda: _one(
            "Range",
            [("s", np.array(0.1, np.float32)), ("l", np.array(1000.0, np.float32)), ("d", np.array(0.1, np.float32))],
        ),
    }[case]()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feed)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)

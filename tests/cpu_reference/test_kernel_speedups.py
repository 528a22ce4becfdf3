"""The speed paths of the reference EP's kernels against the real onnxruntime (or, for a helper,
the function it replaces): Softmax without the row-max shift where the tensor's range allows it,
SkipLayerNormalization computed in place, If reading its condition directly, the recurrent input
projection's small-batch copy, and DynamicQuantizeLSTM's per-step quantization parameters."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_cpu_reference.kernels import _rnn_fast as fast
from ep_cpu_reference.kernels.quantize import dynamic_params

ort = pytest.importorskip("onnxruntime")
_R = np.random.default_rng(11)


def _model(nodes: list, feeds: dict[str, np.ndarray], outs: list[str], consts: dict | None = None, ms: bool = False):
    consts = consts or {}
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in feeds.items()
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(a, n) for n, a in consts.items()],
    )
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    return helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()


def _both(model: bytes, feed: dict[str, np.ndarray]) -> tuple[list[Any], list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)
    return got, want


@pytest.mark.parametrize(
    "scale,extra",
    [(3.0, None), (59.0, None), (200.0, None), (1.0, -np.inf), (1.0, 1e4), (1.0, np.nan)],
    ids=["small", "near-bound", "beyond-bound", "masked", "large", "nan"],
)
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_shift_skipped_only_where_safe(scale: float, extra: Any, axis: int) -> None:
    """In range, the unshifted exp gives onnxruntime's result to a few ulps; a value beyond it
    (a mask of -inf, a large logit, a NaN) takes the shifted form, as onnxruntime computes."""
    x = (_R.standard_normal((2, 3, 16, 16)) * scale).astype(np.float32)
    if scale == 59.0:  # the whole tensor just inside the bound: exp up to e^59.9, unshifted
        x = _R.uniform(-59.9, 59.9, x.shape).astype(np.float32)
    if extra is not None:
        x[0, 1, 2, :5] = extra
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], {"x": x}, ["y"])
    (got,), (want,) = _both(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("with_bias,with_beta", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("n_out", [1, 4])
def test_skip_layer_norm_outputs_match_onnxruntime(with_bias: bool, with_beta: bool, n_out: int) -> None:
    """Output and input_skip_bias_sum against onnxruntime (its CPU kernel leaves mean and
    inv_std_var empty), whichever buffers the in-place kernel reuses."""
    hid = 32
    feed = {
        "x": _R.standard_normal((2, 5, hid)).astype(np.float32),
        "s": _R.standard_normal((2, 5, hid)).astype(np.float32),
    }
    consts = {"g": _R.standard_normal(hid).astype(np.float32)}
    names = ["x", "s", "g", "", ""]
    if with_beta:
        consts["be"], names[3] = _R.standard_normal(hid).astype(np.float32), "be"
    if with_bias:
        consts["bi"], names[4] = _R.standard_normal(hid).astype(np.float32), "bi"
    while not names[-1]:
        names.pop()
    outs = ["y", "mean", "inv", "sum"][:n_out]
    node = helper.make_node("SkipLayerNormalization", names, outs, domain="com.microsoft", epsilon=1e-5)
    got, want = _both(_model([node], feed, outs, consts, ms=True), feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6)
    if n_out == 4:
        np.testing.assert_array_equal(got[3], want[3])
        s = feed["x"] + feed["s"] + (consts["bi"] if with_bias else 0)
        np.testing.assert_allclose(got[1][..., 0], s.mean(-1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2][..., 0], 1 / np.sqrt(s.var(-1) + 1e-5), rtol=1e-4)


@pytest.mark.parametrize("cond", [np.array(True), np.array([False]), np.array([[1]], np.int64)], ids=str)
def test_if_condition_of_one_element_any_shape(cond: np.ndarray) -> None:
    """If reads a one-element condition of any shape and type; the branch sees outer values."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    a = _R.standard_normal(4).astype(np.float32)
    feed = {"c": cond.astype(bool) if cond.dtype != bool else cond, "a": a}
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    (got,), (want,) = _both(_model([node], feed, ["y"]), feed)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, a + a if bool(cond.reshape(-1)[0]) else -a)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch", [2, 12])
def test_recurrent_projection_small_and_large_batch_paths(op: str, batch: int) -> None:
    """The input projection is copied per batch row up to 8 rows, as one transpose beyond."""
    g, t, i, h = {"LSTM": 4, "GRU": 3}[op], 5, 6, 7
    consts = {
        "w": (_R.standard_normal((2, g * h, i)) * 0.5).astype(np.float32),
        "r": (_R.standard_normal((2, g * h, h)) * 0.5).astype(np.float32),
        "b": _R.standard_normal((2, 2 * g * h)).astype(np.float32),
    }
    feed = {"x": _R.standard_normal((t, batch, i)).astype(np.float32)}
    node = helper.make_node(op, ["x", "w", "r", "b"], ["y", "yh"], direction="bidirectional", hidden_size=h)
    got, want = _both(_model([node], feed, ["y", "yh"], consts), feed)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)


def test_project_paths_agree_bit_for_bit() -> None:
    x = _R.standard_normal((4, 9, 5)).astype(np.float32)
    wt = _R.standard_normal((2, 5, 3 * 6)).astype(np.float32)
    bias = _R.standard_normal((2, 3 * 6)).astype(np.float32)
    big = fast.project(x, wt, bias, (False, True), 6)  # 9 rows: one transpose
    small = np.concatenate([fast.project(x[:, k : k + 1], wt, bias, (False, True), 6) for k in range(9)], axis=-1)
    np.testing.assert_array_equal(big, small)


@pytest.mark.parametrize(
    "h",
    [
        np.zeros(6, np.float32),
        np.linspace(0.1, 2.0, 6, dtype=np.float32),
        -np.linspace(0.1, 2.0, 6, dtype=np.float32),
        np.array([3.5], np.float32),
        _R.standard_normal(768).astype(np.float32),
    ],
    ids=["zeros", "positive", "negative", "one", "normal"],
)
def test_step_quantization_params_are_dynamic_params(h: np.ndarray) -> None:
    sc, zp = fast._dynamic_params(h)
    want_sc, want_zp = dynamic_params(h)
    assert sc.dtype == np.float32 and sc == want_sc and zp == want_zp and type(zp) is int


@pytest.mark.parametrize(
    ("b_dtype", "k", "zp", "batched"),
    [
        (np.uint8, 64, 128, False),  # one float32 slice
        (np.uint8, 1024, 0, False),  # column sums past 2^24 / 255: several float32 slices
        (np.int8, 700, -3, True),  # a batched constant B, sliced
    ],
)
def test_matmul_integer_exact_in_float32_slices(b_dtype: Any, k: int, zp: int, batched: bool) -> None:
    """MatMulInteger with a constant B is exact (identical to int64 arithmetic) whichever layout
    its column sums call for, and matches onnxruntime."""
    from _support.oracle import one_node_model

    rng = np.random.default_rng(k)
    info = np.iinfo(b_dtype)
    a = rng.integers(0, 256, (3, 5, k)).astype(np.uint8)
    b = rng.integers(info.min, info.max + 1, ((3,) if batched else ()) + (k, 40)).astype(b_dtype)
    ins = [("a", a), ("b", b), ("az", np.array(7, np.uint8)), ("bz", np.array(zp, b_dtype))]
    model, feed = one_node_model("MatMulInteger", ins, [np.int32], {"b", "bz"}, domain="")
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    want = np.matmul(a.astype(np.int64) - 7, b.astype(np.int64) - zp)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    if not batched:
        from ep_cpu_reference.kernels.nn_matmul import exact_slices

        slices = exact_slices(b.astype(np.float64) - zp)
        assert all(p.dtype == np.float32 for _, p in slices) and (len(slices) > 1) == (k == 1024)
        ort = pytest.importorskip("onnxruntime")
        np.testing.assert_array_equal(
            got, ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        )


@pytest.mark.parametrize(
    ("k", "extreme", "want_dtype"),
    [
        (258, True, np.float32),  # 255 * 255 * 258 < 2^24: float32 without looking at the data
        (400, False, np.float32),  # past that bound, but these values' column sums stay under it
        (400, True, np.float64),  # sums near 400 * 255 * 255 = 2.6e7 > 2^24: float32 would round
    ],
)
def test_matmul_integer_with_a_runtime_b_is_exact(k: int, extreme: bool, want_dtype: Any) -> None:
    """MatMulInteger and QLinearMatMul whose B is an input (attention's Q @ K^T, P @ V in a QDQ
    model) pick float32 BLAS only where every partial sum is an exact float32 integer, so the
    result is int64 arithmetic's whatever the values; odd products near the extremes would round
    past 2^24 in float32."""
    from _support.oracle import one_node_model

    from ep_cpu_reference.kernels.nn_matmul import int_matmul

    rng = np.random.default_rng(k)
    hi_a, lo_b = (
        (rng.integers(250, 256, (2, 6, 16, k)), rng.integers(0, 6, (2, 6, k, 24)))
        if extreme
        else (
            rng.integers(0, 256, (2, 6, 16, k)),
            rng.integers(100, 156, (2, 6, k, 24)),
        )
    )
    a, b = hi_a.astype(np.uint8), lo_b.astype(np.uint8)  # b - 255 near -255 when extreme
    az, bz = np.array(0, np.uint8), np.array(255, np.uint8)
    assert int_matmul(a, az, b, bz).dtype == want_dtype
    want = np.matmul(a.astype(np.int64), b.astype(np.int64) - 255)
    model, feed = one_node_model(
        "MatMulInteger", [("a", a), ("b", b), ("az", az), ("bz", bz)], [np.int32], {"az", "bz"}, domain=""
    )
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(got, want)
    if extreme and k == 400:  # the bound is not idle: float32 BLAS gets these sums wrong
        f32 = np.matmul(a.astype(np.float32), b.astype(np.float32) - 255)
        assert not np.array_equal(f32.astype(np.int64), want)


def _bits(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v).tobytes()


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize("n", [2, 5, 7, 8, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_last_axis_reductions_are_onnxruntime_s_floats(op: str, n: int, dtype: Any) -> None:
    """A reduction over a short last axis (whole-array ufunc calls below 8 elements for Max/Min;
    sums in onnxruntime's order, ``row_sums``) gives onnxruntime's floats bit for bit, signed zeros
    and inf included, NaN where it gives NaN. (Max/Min rows holding a NaN are left out: onnxruntime's
    vectorised max drops a NaN in some lanes, ep-core gives NaN, as NumPy and the ONNX reference.)"""
    import onnxruntime as ort

    x = (_R.standard_normal((3, 40, n)) * np.exp(_R.standard_normal((3, 40, n)) * 4)).astype(dtype)
    x[0, 0, :] = -0.0
    x[0, 1, 0], x[0, 2, 1], x[1, 3, :2] = np.nan, np.inf, (np.inf, -np.inf)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("y", t, None)],
        [numpy_helper.from_array(np.array([-1], np.int64), "axes")],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    with np.errstate(invalid="ignore", over="ignore"):
        got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == (3, 40, 1) and got.dtype == dtype
    keep = ~np.isnan(x).any(axis=-1, keepdims=True) if op in ("ReduceMax", "ReduceMin") else np.ones(got.shape, bool)
    got, want = got[keep], want[keep]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert _bits(got[~np.isnan(got)]) == _bits(want[~np.isnan(want)])


@pytest.mark.parametrize("shapes", [((300, 1), (1, 257)), ((2, 3, 40, 1), (3, 1, 50)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_outer_product_matmul_is_blas_bit_for_bit(shapes: Any, dtype: Any) -> None:
    """MatMul with K = 1 is one broadcast multiply; its floats are BLAS's, signed zeros and NaN
    included, and onnxruntime's."""
    a = _R.standard_normal(shapes[0]).astype(dtype)
    b = _R.standard_normal(shapes[1]).astype(dtype)
    for v, special in ((a, (-0.0, np.inf, 0.0)), (b, (0.0, -0.0, np.nan))):
        flat = v.reshape(-1)
        flat[: len(special)] = special[: flat.size]
    feed = {"a": a, "b": b}
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info(k, t, list(v.shape)) for k, v in feed.items()],
        [helper.make_tensor_value_info("y", t, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    got, want = _both(model, feed)
    with np.errstate(invalid="ignore"):
        blas = np.matmul(a, b)
    assert _bits(got[0]) == _bits(blas)
    np.testing.assert_array_equal(got[0], want[0])


def test_two_row_products_follow_the_blas_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rows times a matrix: two gemvs under OpenBLAS's AVX2 kernels, one product (left to the
    caller) under its AVX-512 ones up to a 1 MB B (256 x 512 here), two gemvs beyond (256 x 1536); one row is always a gemv. The
    gemvs give a @ b's values."""
    import threadpoolctl

    from ep_cpu_reference.kernels import nn_common

    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 256)).astype(np.float32)
    small = rng.standard_normal((256, 512)).astype(np.float32)
    large = rng.standard_normal((256, 1536)).astype(np.float32)
    for arch, leaves_small in (("SkylakeX", True), ("Haswell", False)):
        info = [{"internal_api": "openblas", "architecture": arch}]
        monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda info=info: info)
        nn_common._two_row_gemm_pays.cache_clear()
        assert (nn_common.few_rows(a, small) is None) is leaves_small
        np.testing.assert_allclose(nn_common.few_rows(a, large), a @ large, rtol=1e-5, atol=1e-4)
        assert nn_common.few_rows(a[:1], small) is not None
        assert nn_common.few_rows(a, np.asfortranarray(small)) is not None  # a strided B: gemvs
    nn_common._two_row_gemm_pays.cache_clear()

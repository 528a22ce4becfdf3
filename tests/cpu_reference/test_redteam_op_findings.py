"""Op semantics red-teams 18 (old opsets) and 19 (data types) found different from onnxruntime: each
case runs on onnxruntime and on both CPU EPs and must agree exactly (values, dtype, shape), or both
must refuse."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import ep_core
from ep_core.sdk.errors import EpCoreError

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _model(
    node: Any, feeds: dict[str, np.ndarray], out_type: int, inits: dict[str, np.ndarray] | None = None, opset: int = 21
) -> bytes:
    inputs = [
        h.make_tensor_value_info(
            k, h.np_dtype_to_tensor_dtype(v.dtype) if v.dtype != object else TP.STRING, [None] * v.ndim
        )
        for k, v in feeds.items()
    ]
    outputs = [h.make_tensor_value_info(o, out_type, None) for o in node.output]
    graph = h.make_graph(
        [node], "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    )
    return h.make_model(
        graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10 if opset >= 21 else 8
    ).SerializeToString()


def _both(model: bytes, feeds: dict[str, np.ndarray], provider: str) -> list[Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime refuses: so must ep-core
        with pytest.raises(EpCoreError):
            ep_core.InferenceSession(model, providers=[provider]).run(None, feeds)
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy warning leaks from a kernel, as none from onnxruntime
        got = ep_core.InferenceSession(model, providers=[provider]).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        np.testing.assert_array_equal(g, w)
    return got


@pytest.mark.parametrize("provider", PROVIDERS)
def test_gather_elements_with_indices_shorter_off_the_axis(provider: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 3, 2, 1], [1, 0, 3, 2]], np.int64)
    for axis in (1, -1):
        _both(
            _model(h.make_node("GatherElements", ["x", "i"], ["y"], axis=axis), {"x": x, "i": idx}, TP.FLOAT),
            {"x": x, "i": idx},
            provider,
        )


@pytest.mark.parametrize(
    ("auto_pad", "size", "output_padding"),
    list(itertools.product(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"], [6, 7, 8, 9, 11], [0, 1])),
)
def test_conv_transpose_output_shape_cuts_as_onnxruntime(auto_pad: str, size: int, output_padding: int) -> None:
    """output_shape under every auto_pad: the odd element comes off the start except under SAME_UPPER
    (NOTSET/VALID cut the end before: every value one place off); larger than the full output: refused."""
    attrs: dict[str, Any] = {"strides": [2], "output_shape": [size], "output_padding": [output_padding]}
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 4)
    node = h.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    model = _model(node, {"x": x}, TP.FLOAT, {"w": np.array([[[1, 2, 4]]], np.float32)}, opset=17)
    _both(model, {"x": x}, "CpuReferenceExecutionProvider")


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_sizes_are_onnxruntime_s(op: str, static: bool) -> None:
    """ceil_mode under VALID and SAME (VALID ignored it), and SAME padding from the undilated kernel
    (onnxruntime's, one or more windows fewer than the spec's when dilated); with static input
    lengths the inferred shapes are onnxruntime's sizes too (onnx's made the contract refuse the
    run: ``optimizer.onnxruntime_sizes``)."""
    for ap, ceil, d, s, k, n in itertools.product(
        ["VALID", "SAME_UPPER", "SAME_LOWER"], [0, 1], [1, 2], [1, 2, 3], [2, 3], [5, 7]
    ):
        if (op == "AveragePool" and d > 1) or (ap != "VALID" and s > k):
            continue  # AveragePool-19 dilations aside; SAME with stride past the kernel: onnxruntime refuses some
        attrs: dict[str, Any] = {"kernel_shape": [k], "strides": [s], "ceil_mode": ceil, "auto_pad": ap}
        if d > 1:
            attrs["dilations"] = [d]
        x = np.arange(1, n + 1, dtype=np.float32).reshape(1, 1, n)
        g = h.make_graph(
            [h.make_node(op, ["x"], ["y"], **attrs)], "g",
            [h.make_tensor_value_info("x", TP.FLOAT, [1, 1, n] if static else [1, 1, "L"])],
            [h.make_tensor_value_info("y", TP.FLOAT, None)],
        )  # fmt: skip
        model = h.make_model(g, opset_imports=[h.make_opsetid("", 19)], ir_version=9).SerializeToString()
        _both(model, {"x": x}, "CpuReferenceExecutionProvider")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_chain_of_nodes_onnxruntime_sizes_otherwise_runs_with_static_shapes(provider: str) -> None:
    """Conv+Relu (fused by the optimizer), a ceil_mode MaxPool whose last window starts in the
    padding, a dilated SAME AveragePool, a SAME ConvTranspose with output_padding: each size feeds
    the next, and the shapes settle to onnxruntime's kernels' (its get_outputs says 7x7 from onnx's
    inference; its run, and ep-core's, give 2x2)."""
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1),
        h.make_node("AveragePool", ["p"], ["q"], kernel_shape=[2, 2], dilations=[2, 2], auto_pad="SAME_UPPER"),
        h.make_node("ConvTranspose", ["q", "wt"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER", output_padding=[1, 1]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w"),
        numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "wt"),
    ]
    x_info = h.make_tensor_value_info("x", TP.FLOAT, [1, 2, 6, 6])
    g = h.make_graph(nodes, "g", [x_info], [h.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 19)], ir_version=9).SerializeToString()
    x = np.random.default_rng(0).random((1, 2, 6, 6), np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    (want,) = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = ep_core.InferenceSession(model, providers=[provider])
    (got,) = session.run(None, {"x": x})
    assert got.shape == want.shape == (1, 1, 2, 2) and session.get_outputs()[0].shape == [1, 1, 2, 2]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_linear_resize_of_integers_truncates(provider: str, dtype: Any) -> None:
    """onnxruntime interpolates integers in float32 and truncates (rounding float64 sums made a third
    of the pixels one off). int32 is left out: onnxruntime's four-term bilinear sum is not followed
    term by term, one pixel in ~150 of this feed truncates the other way."""
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000), (1, 2, 3, 5)).astype(dtype)
    for mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        node = h.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", coordinate_transformation_mode=mode)
        model = _model(
            node,
            {"x": x},
            h.np_dtype_to_tensor_dtype(np.dtype(dtype)),
            {"s": np.array([1, 1, 2, 2.5], np.float32)},
            opset=18,
        )
        _both(model, {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cast_numbers_to_strings_as_onnxruntime_writes_them(provider: str) -> None:
    """%.8g (float16 widened), NaN/INF/-INF, booleans 1/0."""
    values = [0.0, -0.0, 1.0, 300.7, 0.99, 1e-10, 1.5e20, 123456789.0, np.nan, np.inf, -np.inf, 0.1, 5e-324]
    for dtype in (np.float32, np.float64, np.float16, np.bool_):
        with np.errstate(all="ignore"):
            x = np.array(values if dtype is not np.bool_ else [0, 1], dtype)
        _both(_model(h.make_node("Cast", ["x"], ["y"], to=TP.STRING), {"x": x}, TP.STRING), {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("to", [TP.INT8, TP.INT32, TP.INT64, TP.UINT64, TP.BOOL, TP.FLOAT, TP.DOUBLE])
def test_cast_strings_to_numbers_reads_the_leading_number(provider: str, to: int) -> None:
    """C's stoll/stoull (integers, bool) and strtod (floats): '1.5' is 1, '1_000' is 1, '0x10' is 16.0."""
    texts = ["1.5", "1e3", " 7", "-0.0", "0.1", "0x10", "1_000", "+3", "255", "-2.5e1", "inf", "NaN"]
    for text in texts:
        if to not in (TP.FLOAT, TP.DOUBLE) and text in ("inf", "NaN"):
            continue
        x = np.array([text], object)
        _both(_model(h.make_node("Cast", ["x"], ["y"], to=to), {"x": x}, to), {"x": x}, provider)
    x = np.array(["abc"], object)
    _both(_model(h.make_node("Cast", ["x"], ["y"], to=to), {"x": x}, to), {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_quantize_linear_of_float16_divides_in_float32(provider: str, zp_dtype: Any) -> None:
    """x / scale overflowed float16 to inf and quantized to the wrong end of the range."""
    x = np.array([1, 448, 500, 57344, 60000, -60000], np.float16)
    inits = {"s": np.array(0.75, np.float16), "z": np.array(0, zp_dtype)}
    model = _model(
        h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
        {"x": x},
        h.np_dtype_to_tensor_dtype(np.dtype(zp_dtype)),
        inits,
    )
    _both(model, {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("to", [TP.INT4, TP.UINT4])
def test_cast_floats_to_int4_rounds_half_away_from_zero(provider: str, to: int) -> None:
    x = np.array([0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 0.99, 127.5, -0.4], np.float32)
    g = h.make_graph(
        [h.make_node("Cast", ["x"], ["q"], to=to), h.make_node("Cast", ["q"], ["y"], to=TP.FLOAT)],
        "g", [h.make_tensor_value_info("x", TP.FLOAT, [9])], [h.make_tensor_value_info("y", TP.FLOAT, [9])],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10).SerializeToString()
    _both(model, {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("maxsplit", [None, 0, 1, 2])
def test_string_split_without_delimiter_splits_on_spaces_only(provider: str, maxsplit: int | None) -> None:
    x = np.array(["  a  b c d  ", "x\ty z", "", "   ", "a\u00a0b c"], object)
    kw = {} if maxsplit is None else {"maxsplit": maxsplit}
    node = h.make_node("StringSplit", ["x"], ["y", "n"], **kw)
    g = h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", TP.STRING, [None])],
        [h.make_tensor_value_info("y", TP.STRING, None), h.make_tensor_value_info("n", TP.INT64, None)],
    )  # fmt: skip
    _both(h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=9).SerializeToString(), {"x": x}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_small_elementwise_differences(provider: str) -> None:
    """Sign(NaN) of float16 is 0; ReduceL2 with noop_with_empty_axes still takes |x|; Log(0), Sqrt(-1)
    and an overflowing Exp warn nothing (``_both`` turns warnings into errors)."""
    x16 = np.array([np.nan, -2, 0, 3], np.float16)
    _both(_model(h.make_node("Sign", ["x"], ["y"]), {"x": x16}, TP.FLOAT16), {"x": x16}, provider)
    x = np.array([[-1.5, 2], [0.5, -3]], np.float32)
    _both(
        _model(h.make_node("ReduceL2", ["x"], ["y"], noop_with_empty_axes=1), {"x": x}, TP.FLOAT, opset=18),
        {"x": x},
        provider,
    )
    for op, v in (("Log", 0.0), ("Sqrt", -1.0), ("Exp", 1000.0), ("Reciprocal", 0.0)):
        xs = np.array([v, 0.0 if op == "Exp" else 1.0], np.float32)  # exp(1) is an ulp from MLAS's
        _both(_model(h.make_node(op, ["x"], ["y"]), {"x": xs}, TP.FLOAT), {"x": xs}, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("after_conv", [False, True])
def test_batch_normalization_with_statistics_outputs_trains_before_opset_14(provider: str, after_conv: bool) -> None:
    """onnxruntime trains a BatchNormalization-7/9 whose statistics outputs are asked for: batch
    statistics normalise, the running ones are updated, the saved mean and inverse std come out (the
    inputs passed through before; after a Conv the optimizer folded it as an inference one)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5), np.float32)
    params = {k: rng.random(3, np.float32) + 0.5 for k in "sbmv"}
    outs = ["y", "om", "ov", "sm", "sv"]
    nodes = [h.make_node("BatchNormalization", ["xc" if after_conv else "x", "s", "b", "m", "v"], outs)]
    inits = [numpy_helper.from_array(v, k) for k, v in params.items()]
    if after_conv:
        nodes.insert(0, h.make_node("Conv", ["x", "w"], ["xc"]))
        inits.append(numpy_helper.from_array(np.eye(3, dtype=np.float32).reshape(3, 3, 1, 1), "w"))
    x_info = h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 4, 5])
    g = h.make_graph(nodes, "g", [x_info], [h.make_tensor_value_info(o, TP.FLOAT, None) for o in outs], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 9)], ir_version=4).SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 4
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, {"x": x})
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_prelu_whose_slope_widens_its_input_broadcasts_both_ways(provider: str) -> None:
    """x [15, 1] by a slope [1, 15]: onnxruntime gives [15, 15]; onnx infers x's shape, and the
    contract refused the kernel's (right) result."""
    g = h.make_graph(
        [h.make_node("PRelu", ["x", "s"], ["y"])], "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [15, 1]), h.make_tensor_value_info("s", TP.FLOAT, [1, 15])],
        [h.make_tensor_value_info("y", TP.FLOAT, None)],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 16)], ir_version=8).SerializeToString()
    feeds = {
        "x": np.linspace(-1, 1, 15, dtype=np.float32).reshape(15, 1),
        "s": np.linspace(0, 1, 15, dtype=np.float32).reshape(1, 15),
    }
    (y,) = _both(model, feeds, provider)
    assert y.shape == (15, 15)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_nonzero_of_a_declared_scalar_has_one_row(provider: str) -> None:
    """onnxruntime gives (1, nnz) for a rank-0 input; onnx infers [0, n], and the contract refused
    the (right) result. (onnxruntime's own get_outputs still shows onnx's [0, n].)"""
    g = h.make_graph(
        [h.make_node("NonZero", ["x"], ["y"]), h.make_node("Transpose", ["y"], ["t"])], "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [])],
        [h.make_tensor_value_info("y", TP.INT64, None), h.make_tensor_value_info("t", TP.INT64, None)],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString()
    for v in (3.0, 0.0):
        y, t = _both(model, {"x": np.array(v, np.float32)}, provider)
        assert y.shape == (1, int(v != 0)) and t.shape == (int(v != 0), 1)


def _recurrent(op: str, x_shape: list[int], lens: bool, opset: int = 14, **attrs: Any) -> bytes:
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    inputs = ["x", "w", "r", "b", "lens" if lens else "", "h0"] + (["c0"] if op == "LSTM" else [])
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((1, gates * 4, 3), np.float32) * 0.5,
        "r": rng.standard_normal((1, gates * 4, 4), np.float32) * 0.5,
        "b": rng.standard_normal((1, 2 * gates * 4), np.float32) * 0.1,
    }
    vi = h.make_tensor_value_info
    feeds = [vi("x", TP.FLOAT, x_shape), vi("h0", TP.FLOAT, [1, x_shape[1], 4])]
    feeds += [vi("c0", TP.FLOAT, [1, x_shape[1], 4])] if op == "LSTM" else []
    feeds += [vi("lens", TP.INT32, [x_shape[1]])] if lens else []
    node = h.make_node(op, inputs, outs, hidden_size=4, **attrs)
    g = h.make_graph(
        [node],
        "g",
        feeds,
        [vi(o, TP.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_a_recurrent_row_of_no_step_ends_in_zeros(provider: str, op: str) -> None:
    """sequence_lens 0 for a row, its initial state given: onnxruntime's final state there is 0
    (the initial state passed through before)."""
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((3, 2, 3), np.float32), "h0": rng.standard_normal((1, 2, 4), np.float32)}
    feeds |= {"c0": rng.standard_normal((1, 2, 4), np.float32)} if op == "LSTM" else {}
    feeds["lens"] = np.array([0, 2], np.int32)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    model = _recurrent(op, [3, 2, 3], True)
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feeds)
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-6)
    assert not got[1][:, 0].any()


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("x_shape", [[2, 0, 3], [0, 2, 3]])
def test_rnn_of_an_empty_batch_or_no_steps(provider: str, x_shape: list[int]) -> None:
    """An empty batch gives empty outputs; no steps gives zero states (a NumPy reshape error before)."""
    feeds = {"x": np.zeros(x_shape, np.float32), "h0": np.ones((1, x_shape[1], 4), np.float32)}
    _both(_recurrent("RNN", [None, None, 3], False), feeds, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "x",
    [[1.0, np.nan, -2.0], [1.0, -np.inf, np.nan, 0.5], [np.inf, -1.0, 2.0], [np.nan, np.nan, np.nan]],
    ids=["nan", "minus-inf", "inf", "all-nan"],
)
def test_dynamic_quantize_linear_leaves_nan_out_of_its_range(provider: str, x: list[float]) -> None:
    """onnxruntime's range ignores NaN and quantizes it to 0 (a NumPy 'cannot convert NaN' before);
    with -inf in x the scale is inf and the zero point's 0 - min / scale NaN, which onnxruntime's
    std::min turns into 255 (the same NumPy error before)."""
    xa = np.array(x, np.float32)
    node = h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    g = h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [len(x)])],
        [h.make_tensor_value_info("y", TP.UINT8, None), h.make_tensor_value_info("s", TP.FLOAT, None), h.make_tensor_value_info("z", TP.UINT8, None)],
    )  # fmt: skip
    _both(
        h.make_model(g, opset_imports=[h.make_opsetid("", 11)], ir_version=8).SerializeToString(), {"x": xa}, provider
    )


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_a_recurrent_clip_of_zero_or_less(provider: str, op: str) -> None:
    """onnxruntime's RNN ignores clip <= 0 (np.clip(x, 1, -1) made every pre-activation -1 before);
    its GRU and LSTM refuse it, and so does ep-core, naming the node."""
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 2, 3), np.float32), "h0": rng.standard_normal((1, 2, 4), np.float32)}
    feeds |= {"c0": rng.standard_normal((1, 2, 4), np.float32)} if op == "LSTM" else {}
    model = _recurrent(op, [3, 2, 3], False, clip=-1.0)
    if op != "RNN":
        with pytest.raises(EpCoreError, match="clip must be positive"):
            ep_core.InferenceSession(model, providers=[provider])
        return
    so = ort.SessionOptions()
    so.log_severity_level = 4
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feeds)
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-6)


def test_numba_batch_normalization_of_a_constant_input() -> None:
    """A BatchNormalization whose input is computed from constants only (its output a graph output):
    the Numba EP's plan never registered the input as a weight and refused the session."""
    rng = np.random.default_rng(3)
    c = numpy_helper.from_array(rng.standard_normal((2, 3, 1), np.float32), "c")
    stats = {k: numpy_helper.from_array((rng.random(3, np.float32) + 0.5), k) for k in "sbmv"}
    g = h.make_graph(
        [h.make_node("Relu", ["c"], ["r"]), h.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["y"]),
         h.make_node("Add", ["x", "y"], ["z"])], "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 1])],
        [h.make_tensor_value_info("y", TP.FLOAT, None), h.make_tensor_value_info("z", TP.FLOAT, None)],
        [c, *stats.values()],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 15)], ir_version=8).SerializeToString()
    x = np.ones((2, 3, 1), np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ep_core.InferenceSession(model, providers=["NumbaCpuExecutionProvider"]).run(None, {"x": x})
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_numba_recurrent_of_an_input_size_of_zero(op: str) -> None:
    """X [T, B, 0] (an earlier Slice left no features): the Numba EP's loop reshaped with -1 and
    failed with a NumPy error; the reference EP gave the bias-driven states (onnxruntime aborts on
    the GRU)."""
    gates = {"GRU": 3, "LSTM": 4}[op]
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(np.zeros((1, gates * 2, 0), np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((1, gates * 2, 2), np.float32), "r"),
        numpy_helper.from_array(rng.standard_normal((1, 2 * gates * 2), np.float32), "b"),
    ]
    node = h.make_node(op, ["x", "w", "r", "b"], ["y", "yh"], hidden_size=2)
    g = h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [3, 2, 0])],
        [h.make_tensor_value_info("y", TP.FLOAT, None), h.make_tensor_value_info("yh", TP.FLOAT, None)], inits,
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], ir_version=8).SerializeToString()
    x = np.zeros((3, 2, 0), np.float32)
    ref = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})
    got = ep_core.InferenceSession(model, providers=["NumbaCpuExecutionProvider"]).run(None, {"x": x})
    for g_, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g_, r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_int32_wraps_inside_a_fused_kernel(provider: str) -> None:
    """s = x + y in int32 wraps before a Cast or a comparison reads it in the same kernel (Numba
    computed the int64 sum there, so the exported s and Cast(s) disagreed in sign)."""
    vi = h.make_tensor_value_info
    g = h.make_graph(
        [h.make_node("Add", ["x", "y"], ["s"]), h.make_node("Cast", ["s"], ["f"], to=TP.FLOAT),
         h.make_node("Greater", ["s", "x"], ["g"])], "g",
        [vi("x", TP.INT32, [3]), vi("y", TP.INT32, [3])], [vi("s", TP.INT32, None), vi("f", TP.FLOAT, None), vi("g", TP.BOOL, None)],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    feeds = {"x": np.array([2**31 - 1, 5, -(2**31)], np.int32), "y": np.array([1, 3, -1], np.int32)}
    _, f, greater = _both(model, feeds, provider)
    assert f[0] < 0 and not greater[0]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_of_an_empty_batch_or_axis(provider: str, op: str) -> None:
    """An empty batch pools to an empty output (a NumPy reshape error before); an empty spatial axis
    or no channel is refused, typed, as onnxruntime refuses it."""
    g = h.make_graph(
        [h.make_node(op, ["x"], ["y"])], "g", [h.make_tensor_value_info("x", TP.FLOAT, [None] * 4)],
        [h.make_tensor_value_info("y", TP.FLOAT, None)],
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()
    (y,) = ep_core.InferenceSession(model, providers=[provider]).run(None, {"x": np.zeros((0, 2, 3, 3), np.float32)})
    assert y.shape == (0, 2, 1, 1)
    for shape in ((1, 2, 0, 3), (1, 0, 3, 3)):
        with pytest.raises(EpCoreError, match=r"no channel or an empty spatial axis"):
            ep_core.InferenceSession(model, providers=[provider]).run(None, {"x": np.zeros(shape, np.float32)})


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul"])
def test_integer_matmul_with_a_one_d_runtime_b_past_k_258(provider: str, op: str) -> None:
    """A 1-D B (one column) fed at run time with K > 258, where the float32 bound looks at B's
    column sums: an AxisError before."""
    a = np.full((2, 300), 200, np.uint8)
    b = np.full((300,), 100, np.uint8)
    if op == "MatMulInteger":
        feeds = {"a": a, "b": b}
        _both(_model(h.make_node(op, ["a", "b"], ["y"]), feeds, TP.INT32, opset=13), feeds, provider)
        return
    feeds = {"a": a, "b": b}
    inits = {k: np.array(v, np.float32) for k, v in (("sa", 0.02), ("sb", 0.03), ("sy", 500.0))}
    inits |= {"za": np.array(3, np.uint8), "zb": np.array(90, np.uint8), "zy": np.array(7, np.uint8)}
    node = h.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    _both(_model(node, feeds, TP.UINT8, inits, opset=21), feeds, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("constant_b", [False, True])
def test_matmul_integer_with_a_per_batch_per_column_b_zero_point(provider: str, constant_b: bool) -> None:
    """b_zero_point [2, 1, 4] for a B [2, 5, 4], as onnxruntime takes it: broadcast as shaped (a
    shape mismatch before, at run time or at kernel build)."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (2, 3, 5)).astype(np.uint8)
    b = rng.integers(0, 256, (2, 5, 4)).astype(np.uint8)
    bz = rng.integers(0, 256, (2, 1, 4)).astype(np.uint8)
    feeds, inits = ({"a": a}, {"b": b, "bz": bz}) if constant_b else ({"a": a, "b": b, "bz": bz}, {})
    got = _both(
        _model(h.make_node("MatMulInteger", ["a", "b", "", "bz"], ["y"]), feeds, TP.INT32, inits, 13), feeds, provider
    )
    np.testing.assert_array_equal(got[0], np.matmul(a.astype(np.int64), b.astype(np.int64) - bz))


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("alpha", [np.inf, -np.inf, 1e30])
def test_leaky_relu_with_an_infinite_or_huge_alpha(provider: str, alpha: float) -> None:
    """x where x >= 0: 0 * inf is NaN, so max/min of x and alpha * x picked NaN for x = 0."""
    x = np.array([0.0, -0.0, 2.0, -3.0, np.nan, 1e-30, -1e-30], np.float32)
    _both(
        _model(h.make_node("LeakyRelu", ["x"], ["y"], alpha=float(alpha)), {"x": x}, TP.FLOAT, opset=16),
        {"x": x},
        provider,
    )


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_log_sum_exp_of_integers(provider: str, dtype: Any) -> None:
    """onnxruntime's integer LogSumExp: exp(v - max) truncates to 1 for each maximum and 0 for the
    rest, so max + log(how many maxima), truncated toward zero ([-1, -1, -4]: 0; -1 before)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-6, 4, (300, 5)).astype(dtype)
    x[:20] = 3
    x[20:30, :3] = -1
    node = h.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=0)
    _both(_model(node, {"x": x}, h.np_dtype_to_tensor_dtype(np.dtype(dtype)), opset=13), {"x": x}, provider)


def _ml_model(node: Any, x_cols: int, outs: list[tuple[str, int]]) -> bytes:
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("X", TP.FLOAT, [None, x_cols])],
        [h.make_tensor_value_info(n, t, None) for n, t in outs],
    )
    opsets = [h.make_opsetid("", 13), h.make_opsetid("ai.onnx.ml", 1)]
    return h.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _linear_classifier(x_cols: int, **attrs: Any) -> bytes:
    """A LinearClassifier model over ``x_cols`` features, labels and scores out."""
    node = h.make_node("LinearClassifier", ["X"], ["L", "S"], domain="ai.onnx.ml", **attrs)
    return _ml_model(node, x_cols, [("L", TP.INT64), ("S", TP.FLOAT)])


def _close_to_onnxruntime(model: bytes, x: np.ndarray, provider: str) -> None:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, {"X": x})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_onnxruntime_s_own_logreg_iris_example_runs(provider: str) -> None:
    """onnxruntime's wheel ships datasets/logreg_iris.onnx (its tutorials' model): X declared [3, 2]
    under a LinearClassifier of 3 classes and 12 coefficients. onnxruntime takes the first
    classes x features coefficients; ep-core reshaped all 12 into 6 rows and failed to broadcast."""
    import os

    path = os.path.join(os.path.dirname(ort.__file__), "datasets", "logreg_iris.onnx")
    x = np.random.default_rng(3).uniform(0, 8, (3, 2)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"float_input": x})
    got = ep_core.InferenceSession(path, providers=[provider]).run(None, {"float_input": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert [sorted(r) for r in got[1]] == [sorted(r) for r in want[1]]  # ZipMap: a dict per row
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(w)], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
@pytest.mark.parametrize("classes", [1, 3])
def test_linear_classifier_reads_the_coefficients_x_needs(provider: str, post: str, classes: int) -> None:
    """Coefficients for 4 features, X of 2: the first classes x 2 weights, as onnxruntime; one class
    (one score) without labels gives onnxruntime's 1 / 0 labels and one score column."""
    rng = np.random.default_rng(classes)
    model = _linear_classifier(
        2,
        **({"classlabels_ints": [7, 8, 9]} if classes > 1 else {}),
        coefficients=rng.standard_normal(4 * classes).tolist(),
        intercepts=rng.standard_normal(classes).tolist(),
        post_transform=post,
    )
    _close_to_onnxruntime(model, rng.standard_normal((5, 2)).astype(np.float32), provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
@pytest.mark.parametrize(("targets", "intercepts"), [(2, 2), (2, 3), (1, 1)])
def test_linear_regressor_follows_onnxruntime(provider: str, post: str, targets: int, intercepts: int) -> None:
    """X of 2 features under coefficients for 4 took half the rows (a reshape to the coefficients'
    width: silently wrong); PROBIT was refused; intercepts not one per target are not used; one
    target takes PROBIT only (onnxruntime leaves a single column's LOGISTIC and SOFTMAX undone)."""
    rng = np.random.default_rng(intercepts + targets)
    node = h.make_node(
        "LinearRegressor",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        targets=targets,
        coefficients=(rng.standard_normal(4 * targets) * 0.3).tolist(),
        intercepts=(rng.standard_normal(intercepts) * 0.1).tolist(),
        post_transform=post,
    )
    x = rng.uniform(-0.5, 0.5, (6, 2)).astype(np.float32)  # PROBIT needs scores in (0, 1)
    if post == "PROBIT":
        x = np.abs(x)
    _close_to_onnxruntime(_ml_model(node, 2, [("Y", TP.FLOAT)]), x, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_linear_models_with_too_few_coefficients_say_so(provider: str) -> None:
    """onnxruntime reads past the coefficients' end here; ep-core refuses, naming the node and the fix."""
    node = h.make_node("LinearRegressor", ["X"], ["Y"], domain="ai.onnx.ml", targets=2, coefficients=[1.0] * 6)
    sess = ep_core.InferenceSession(_ml_model(node, 4, [("Y", TP.FLOAT)]), providers=[provider])
    with pytest.raises(EpCoreError, match=r"needs? 8 coefficients and the node has 6: feed rows of at most 3"):
        sess.run(None, {"X": np.ones((2, 4), np.float32)})


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("classes", "labels"), [(1, [1, 2, 3]), (3, []), (3, [1, 2])])
def test_linear_classifier_labels_that_do_not_fit_its_classes_are_refused(
    provider: str, classes: int, labels: list[int]
) -> None:
    """As onnxruntime 1.31 refuses them at session creation (ep-core labelled rows by argmax index)."""
    model = _linear_classifier(
        2,
        **({"classlabels_ints": labels} if labels else {}),
        coefficients=[0.5] * (2 * classes),
        intercepts=[0.1] * classes,
    )
    so = ort.SessionOptions()
    so.log_severity_level = 4
    with pytest.raises(Exception, match="LinearClassifier"):
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    with pytest.raises(EpCoreError, match=rf"{len(labels)} class labels for {classes} classes"):
        ep_core.InferenceSession(model, providers=[provider])


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("post", "match"), [("PROBIT", "PROBIT on a binary classifier"), ("SIGMOID", "must be one of")]
)
def test_linear_classifier_post_transforms_it_cannot_serve_are_refused_at_creation(
    provider: str, post: str, match: str
) -> None:
    """Refused when the session is made, naming the node and the choices (they failed at run time)."""
    model = _linear_classifier(
        2, classlabels_ints=[3, 4], coefficients=[0.5, 0.5], intercepts=[0.1], post_transform=post
    )
    with pytest.raises(EpCoreError, match=match):
        ep_core.InferenceSession(model, providers=[provider])

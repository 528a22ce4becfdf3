"""Resize and GridSample against onnxruntime on one-node models.

onnxruntime is the target where it and the ONNX spec differ: Resize coordinates from ``scales`` use
the integer output length (align_corners, tf_crop_and_resize), are computed in float32, and a
round_prefer_* coordinate within 1e-6 of a tie rounds as the tie; GridSample pads each cubic tap
index rather than the sample coordinate. Each case here differed from onnxruntime before that was
matched."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.errors import InvalidArgument

ort = pytest.importorskip("onnxruntime")

ROI = np.array([0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1], np.float32)  # crops H, reaches past both ends of W


def _resize_model(
    x_shape: tuple[int, ...], size_input: np.ndarray, opset: int = 19, roi: np.ndarray | None = None, **attrs: Any
) -> onnx.ModelProto:
    """Resize with ``size_input`` as scales (float) or sizes (int64) and an optional roi."""
    inits = [numpy_helper.from_array(size_input, "s")]
    roi_name = "" if roi is None else "roi"
    if roi is not None:
        inits.append(numpy_helper.from_array(roi, "roi"))
    if opset < 11:
        inputs = ["x", "s"]
    elif size_input.dtype == np.int64:
        inputs = ["x", roi_name, "", "s"]
    else:
        inputs = ["x", roi_name, "s"]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


def _run_both(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(onnxruntime CPU, ep-core reference EP) outputs of the model's single output."""
    blob = model.SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ep_core.InferenceSession(blob, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    return want, got


def _assert_matches_ort(model: onnx.ModelProto, feed: dict[str, np.ndarray], atol: float = 1e-4) -> np.ndarray:
    want, got = _run_both(model, feed)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
    return got


def _ramp(n: int) -> np.ndarray:
    """(1, 1, n, 1) with value == source index, so a nearest output names the pixel it read."""
    return np.arange(n, dtype=np.float32).reshape(1, 1, n, 1)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scale", [2.5, 1.7, 0.6])
def test_align_corners_from_fractional_scales(mode: str, scale: float) -> None:
    """9 * 2.5 = 22.5 rows -> 22: the corners map onto each other, so a ramp stays a ramp 0..8
    (dividing by 22.5 - 1 instead of 22 - 1 ended it at 7.81)."""
    x = _ramp(9)
    model = _resize_model(
        x.shape, np.array([1, 1, scale, 1], np.float32), mode=mode, coordinate_transformation_mode="align_corners"
    )
    y = _assert_matches_ort(model, {"x": x}).ravel()
    assert y[0] == pytest.approx(0.0, abs=1e-5) and y[-1] == pytest.approx(8.0, abs=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [(0.6, 0.6), (1.7, 2.5), (3.0, 0.8)])
def test_tf_crop_and_resize_from_fractional_scales(mode: str, scales: tuple[float, float]) -> None:
    """The roi maps onto (integer output length - 1) steps; outside it the extrapolation value."""
    x = np.random.default_rng(0).standard_normal((1, 2, 7, 9)).astype(np.float32)
    model = _resize_model(
        x.shape,
        np.array([1, 1, *scales], np.float32),
        roi=ROI,
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-7.0,
    )
    _assert_matches_ort(model, {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [(1.7, 2.5), (0.6, 0.6)])
def test_half_pixel_symmetric(mode: str, scales: tuple[float, float]) -> None:
    """Coordinates computed in float32 as onnxruntime does: in float64 one came out 7.000000000000001
    and its weights landed on taps 6, 7 (x + 1 rounded to 8.0); 0.5000002 is a tie to onnxruntime."""
    x = np.random.default_rng(1).standard_normal((1, 2, 7, 9)).astype(np.float32)
    model = _resize_model(
        x.shape, np.array([1, 1, *scales], np.float32), mode=mode, coordinate_transformation_mode="half_pixel_symmetric"
    )
    _assert_matches_ort(model, {"x": x})


@pytest.mark.parametrize(
    "n,ctm,rule,size_input",
    [
        # float32 coordinates land exactly on the boundary that float64 ones miss by an ulp
        (20, "asymmetric", "floor", np.array([1, 1, 0.6, 1], np.float32)),
        (20, "half_pixel", "floor", np.array([1, 1, 0.6, 1], np.float32)),
        (20, "asymmetric", "round_prefer_ceil", np.array([1, 1, 0.8, 1], np.float32)),
        (7, "half_pixel", "round_prefer_ceil", np.array([1, 1, 1.7, 1], np.float32)),
        # an ulp off a tie even in float32: onnxruntime's 1e-6 tie tolerance decides
        (7, "half_pixel_symmetric", "round_prefer_floor", np.array([1, 1, 0.6, 1], np.float32)),
        (13, "half_pixel_symmetric", "round_prefer_floor", np.array([1, 1, 0.4, 1], np.float32)),
        (7, "asymmetric", "round_prefer_ceil", np.array([1, 1, 4, 1], np.int64)),
        (13, "asymmetric", "round_prefer_ceil", np.array([1, 1, 4, 1], np.int64)),
    ],
)
def test_nearest_picks_the_same_pixels_at_ties(n: int, ctm: str, rule: str, size_input: np.ndarray) -> None:
    x = _ramp(n)
    model = _resize_model(x.shape, size_input, mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=rule)
    want, got = _run_both(model, {"x": x})
    assert got.ravel().astype(int).tolist() == want.ravel().astype(int).tolist()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_scale_one_axis_ignores_the_roi(mode: str) -> None:
    """onnxruntime maps an axis of scale exactly 1 onto itself even under tf_crop_and_resize."""
    x = np.random.default_rng(2).standard_normal((1, 2, 7, 9)).astype(np.float32)
    model = _resize_model(
        x.shape,
        np.array([1, 1, 2.0, 1.0], np.float32),
        roi=ROI,
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-7.0,
    )
    y = _assert_matches_ort(model, {"x": x})
    assert not np.any(y == -7.0)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_copies_an_axis_of_unchanged_length(mode: str) -> None:
    """7 * 1.05 = 7.35 -> 7 rows: onnxruntime's antialias path copies that axis whatever the scale."""
    x = np.random.default_rng(3).standard_normal((1, 2, 7, 9)).astype(np.float32)
    model = _resize_model(x.shape, np.array([1, 1, 1.05, 0.5], np.float32), mode=mode, antialias=1)
    _assert_matches_ort(model, {"x": x})


def test_pytorch_half_pixel_single_output_samples_zero() -> None:
    """A length-1 output samples coordinate 0 (spec and onnxruntime), not -0.5: it shows in cubic."""
    x = np.random.default_rng(4).standard_normal((1, 1, 9, 6)).astype(np.float32)
    model = _resize_model(
        x.shape,
        np.array([1, 1, 0.15, 1], np.float32),
        mode="cubic",
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    _assert_matches_ort(model, {"x": x})


@pytest.mark.parametrize("scale", [0.6, 0.8])
def test_resize10_nearest_downsample_takes_ceil(scale: float) -> None:
    x = _ramp(20)
    model = _resize_model(x.shape, np.array([1, 1, scale, 1], np.float32), opset=10, mode="nearest")
    want, got = _run_both(model, {"x": x})
    assert got.ravel().astype(int).tolist() == want.ravel().astype(int).tolist()


@pytest.mark.parametrize("sizes", [[1, 1, 0, 4], [1, 1, 3, -2]])
def test_resize_refuses_sizes_that_are_not_positive(sizes: list[int]) -> None:
    """As onnxruntime (a zero or negative scale): an empty output would hide the bad input."""
    model = _resize_model((1, 1, 2, 2), np.array(sizes, np.int64), mode="nearest")
    feed = {"x": np.ones((1, 1, 2, 2), np.float32)}
    so = ort.SessionOptions()
    so.log_severity_level = 4
    with pytest.raises(Exception, match="greater than 0"):
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    with pytest.raises(InvalidArgument, match="must be positive"):
        sess.run(None, feed)


def _grid_sample_model(x: np.ndarray, grid: np.ndarray, opset: int, **attrs: Any) -> onnx.ModelProto:
    tt = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)],
        "grid_sample",
        [
            helper.make_tensor_value_info("x", tt, list(x.shape)),
            helper.make_tensor_value_info("grid", tt, list(grid.shape)),
        ],
        [helper.make_tensor_value_info("y", tt, None)],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def _grid(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Sample points across [-1.6, 1.6] (outside the image too), plus the corners and near them."""
    grid = rng.uniform(-1.6, 1.6, shape).astype(dtype)
    grid.reshape(-1)[:8] = [1.0, -1.0, 0.999, -0.999, 1.25, -1.25, 0.0, 0.5]
    return grid


_GS_2D = [
    (opset, mode, pad, ac, dt)
    for opset, dt in ((16, np.float32), (20, np.float32), (20, np.float64))
    for mode, pad, ac in itertools.product(
        ("bilinear", "bicubic", "nearest") if opset == 16 else ("linear", "cubic", "nearest"),
        ("zeros", "border", "reflection"),
        (0, 1),
    )
]


@pytest.mark.parametrize("opset,mode,padding,align,dtype", _GS_2D)
def test_grid_sample_2d(opset: int, mode: str, padding: str, align: int, dtype: type) -> None:
    """Every mode x padding_mode x align_corners; cubic + border clamped the coordinate before."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    grid = _grid(rng, (2, 6, 7, 2), dtype)
    model = _grid_sample_model(x, grid, opset, mode=mode, padding_mode=padding, align_corners=align)
    _assert_matches_ort(model, {"x": x, "grid": grid})


@pytest.mark.parametrize(
    "mode,padding,align", list(itertools.product(("linear", "nearest"), ("zeros", "border", "reflection"), (0, 1)))
)
def test_grid_sample_3d(mode: str, padding: str, align: int) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 3, 4, 5)).astype(np.float32)
    grid = _grid(rng, (2, 3, 4, 5, 3), np.float32)
    model = _grid_sample_model(x, grid, 20, mode=mode, padding_mode=padding, align_corners=align)
    _assert_matches_ort(model, {"x": x, "grid": grid})

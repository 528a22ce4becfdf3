"""float32 ReduceSum / ReduceMean against onnxruntime: over leading axes the same floats bit for
bit (both add row after row); over middle axes (kept dims on both sides, where onnxruntime sums in
MLAS's blocked order) at least as accurate, in float64; trailing axes keep NumPy's pairwise sum.

Why it matters: magika 0.6.1 normalises with mean(x^2) - mean(x)^2 over axis 1, where the
cancellation magnifies a sum's error ~1000x; its probabilities were 7e-4 from onnxruntime's at
batch 2; at batch 1 (magika 1.0's application) the sum is a leading-axis one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import ep_core

ort = pytest.importorskip("onnxruntime")


def _reduce_model(op: str, shape: tuple[int, ...], axes: list[int]) -> bytes:
    if op == "ReduceSum":
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
        inits = [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)]
    else:
        node = helper.make_node(op, ["x"], ["y"], keepdims=1, axes=axes)
        inits = []
    graph = helper.make_graph(
        [node],
        "reduce",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def _both(op: str, x: np.ndarray, axes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    model = _reduce_model(op, x.shape, axes)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ours = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    return ours, theirs


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape,axes", [((2, 512, 256), [1]), ((4, 96, 1024), [1]), ((3, 700, 17), [1])])
def test_middle_axis_sums_in_float64_at_least_as_accurate_as_onnxruntime(
    op: str, shape: tuple[int, ...], axes: list[int]
) -> None:
    """Kept dims on both sides: onnxruntime's blocked order cannot be followed; float64's sum,
    rounded once, is never further from the exact one."""
    x = (np.random.default_rng(0).standard_normal(shape) + 3).astype(np.float32)  # a mean: errors grow
    ours, theirs = _both(op, x, axes)
    exact = getattr(np, "sum" if op == "ReduceSum" else "mean")(x.astype(np.float64), axis=tuple(axes), keepdims=True)
    assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max()
    np.testing.assert_allclose(ours, exact, rtol=2**-23, atol=0)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape,axes", [((512, 256), [0]), ((1, 1000, 64), [-2]), ((4, 3, 256), [0, 1])])
def test_leading_axis_sums_are_onnxruntimes_bit_for_bit(op: str, shape: tuple[int, ...], axes: list[int]) -> None:
    """Leading axes (dims of size 1 aside: a batch of one): onnxruntime adds row after row, and so
    does NumPy in float32. magika 1.0's application scores moved 1.1e-4 from onnxruntime's when
    these were summed in float64 too."""
    x = (np.random.default_rng(0).standard_normal(shape) + 3).astype(np.float32)
    ours, theirs = _both(op, x, axes)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize(
    ("shape", "axes"), [((8, 400, 384), [2]), ((2, 64, 13), [2]), ((3, 5, 7), [1, 2]), ((1, 999), [0, 1])]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trailing_axes_sum_in_onnxruntime_s_order(op: str, shape: tuple[int, ...], axes: list[int], dtype: Any) -> None:
    """Sums over trailing axes (and over all of them) are onnxruntime's bit for bit: ReduceSum and
    ReduceMean through Eigen's packets, each row from its first 16-byte-aligned element; the other
    sums element after element. NumPy's pairwise float32 sum differed in half the rows by an ulp,
    which the DynamicQuantizeLinear after a T5 RMS norm turned into 0.13 (red-team 27)."""
    import onnxruntime as ort

    x = (np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape) * 3 + 1).astype(dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t, list(shape))],
        [helper.make_tensor_value_info("y", t, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    if op == "ReduceSum" and dtype == np.float32 and shape[-1] > 8:  # the order matters on these rows
        assert np.add.reduce(x, axis=tuple(axes), keepdims=True).tobytes() != want.tobytes()


REDUCERS = "Mean Sum Max Min Prod L1 L2 LogSum LogSumExp SumSquare".split()


@pytest.mark.parametrize("op", [f"Reduce{r}" for r in REDUCERS])
def test_a_reduction_over_an_empty_axis_gives_onnxruntime_s_identity(op: str) -> None:
    """An empty EmbeddingBag bag in a torch export: the mean of nothing is 0 in onnxruntime (and
    torch), NaN in NumPy; the others are their identities (0, -inf, inf, 1...)."""
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()
    x = np.zeros((0, 3), np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2"])
def test_axes_fed_at_run_time_sum_in_the_same_order(op: str) -> None:
    """Axes given as a graph input (not a constant) take the same path, so the same floats."""
    import onnxruntime as ort

    x = (np.random.default_rng(7).standard_normal((16, 512)) * 3 + 1).astype(np.float32)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 512]),
            helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()
    feed = {"x": x, "axes": np.array([-1], np.int64)}
    got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert got.tobytes() == want.tobytes()

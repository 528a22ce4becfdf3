"""Cases a differential fuzzer (random graphs, both CPU EPs against onnxruntime, red-team 15)
found: each differed from onnxruntime or failed where onnxruntime runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as h
from onnx import numpy_helper

import ep_core

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _model(nodes: list[Any], feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray], opset: int = 17) -> bytes:
    out = next(iter(feeds.values())).dtype  # every case's output has its first input's type
    g = h.make_graph(
        nodes,
        "g",
        [
            h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), ["N", *v.shape[1:]])
            for k, v in feeds.items()
        ],
        [h.make_tensor_value_info("y", h.np_dtype_to_tensor_dtype(out), None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8).SerializeToString()


def _same_as_onnxruntime(model: bytes, feeds: dict[str, np.ndarray], provider: str) -> None:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


CASES = {
    # a start below -dim with a negative step takes the first element (the kernel took none)
    "slice negative step, start below -dim": (
        [h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
        {"x": np.arange(6, dtype=np.float32).reshape(2, 3)},
        {k: np.array([v], np.int64) for k, v in {"s": -9, "e": -10, "a": 1, "st": -1}.items()},
    ),
    # an inner dimension of 0: zeros (the Numba EP's reshape(-1, 0) failed)
    "matmul of an empty inner dimension": (
        [h.make_node("MatMul", ["x", "b"], ["y"])],
        {"x": np.ones((2, 0), np.float32)},
        {"b": np.ones((0, 3), np.float32)},
    ),
    # integer Pow is static_cast<T>(std::pow(double, double)): 2 ** -1 is 0, (-1) ** -1 is -1
    "integer pow, negative exponent": (
        [h.make_node("Pow", ["x", "p"], ["y"])],
        {"x": np.array([2, 1, -1, 3], np.int64)},
        {"p": np.array([-1, -2, -1, 2], np.int64)},
    ),
    # a scalar-valued exponent of rank 2 still broadcasts the result to rank 2
    "pow by a [1, 1] two": (
        [h.make_node("Pow", ["x", "p"], ["y"])],
        {"x": np.array([3.0, -0.5], np.float32)},
        {"p": np.array([[2.0]], np.float32)},
    ),
    # a batch of none through Softmax/LogSoftmax over that axis: empty, as onnxruntime
    "softmax over an empty axis": (
        [h.make_node("Softmax", ["x"], ["t"], axis=0), h.make_node("LogSoftmax", ["t"], ["y"], axis=0)],
        {"x": np.ones((0, 3), np.float32)},
        {},
    ),
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fuzzer_case_as_onnxruntime(case: str, provider: str) -> None:
    nodes, feeds, inits = CASES[case]
    _same_as_onnxruntime(_model(nodes, feeds, inits), feeds, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_integer_pow_of_constants_folds(provider: str) -> None:
    """Both operands constant: folded at session creation (it failed creation)."""
    nodes = [h.make_node("Pow", ["c", "p"], ["q"]), h.make_node("Add", ["x", "q"], ["y"])]
    feeds = {"x": np.zeros(3, np.int64)}
    inits = {"c": np.array([2, -1, 4], np.int64), "p": np.array([-1, -3, 2], np.int64)}
    _same_as_onnxruntime(_model(nodes, feeds, inits), feeds, provider)

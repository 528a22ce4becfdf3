"""Scatter reductions where NaN meets a number, against onnxruntime on both CPU EPs.

onnxruntime's ScatterND and ScatterElements max/min keep the update when either side is NaN
(std::max(update, data)), unlike NumPy's maximum (any NaN) and fmax (no NaN). Duplicate indices apply in
index order, so a NaN met early can be replaced by a later update."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import ep_core

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _case(op: str, reduction: str, seed: int) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((6, 3)).astype(np.float32)
    data[rng.random(data.shape) < 0.3] = np.nan
    if op == "ScatterND":
        idx = rng.integers(0, 6, (10, 1)).astype(np.int64)  # duplicates on purpose
        upd = rng.standard_normal((10, 3)).astype(np.float32)
        node = h.make_node(op, ["D", "I", "U"], ["Y"], reduction=reduction)
    else:
        idx = rng.integers(0, 6, (10, 3)).astype(np.int64)
        upd = rng.standard_normal((10, 3)).astype(np.float32)
        node = h.make_node(op, ["D", "I", "U"], ["Y"], reduction=reduction, axis=0)
    upd[rng.random(upd.shape) < 0.3] = np.nan
    feed = {"D": data, "I": idx, "U": upd}
    g = h.make_graph(
        [node], "g",
        [h.make_tensor_value_info(k, TP.INT64 if k == "I" else TP.FLOAT, list(v.shape)) for k, v in feed.items()],
        [h.make_tensor_value_info("Y", TP.FLOAT, None)],
    )  # fmt: skip
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8).SerializeToString(), feed


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scatter_max_min_with_nan_as_onnxruntime(provider: str, reduction: str, op: str, seed: int) -> None:
    model, feed = _case(op, reduction, seed)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ep_core.InferenceSession(model, providers=[provider]).run(None, feed)[0]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(got, want)

"""3-D convolution and pooling (NCDHW) and float16 conv/pool/BatchNormalization/Resize on the
Numba-CUDA EP, against the reference EP; float16 accumulates in float32 (a case that a float16
running sum cannot pass proves it). bfloat16 is declined with the reason (numba has no bfloat16
arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import EP, REF, all_on_ep, assert_close, run_both, session

F16_TOL = 1e-2  # float16 results rounded once from float32, against float16 reference outputs


def _model(node: Any, x: np.ndarray, inits: dict[str, np.ndarray], opset: int = 17) -> Any:
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("y", t, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _u(rng: np.random.Generator, *shape: int, dt: Any = np.float32) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dt)


CASES_3D = {
    # name: (x shape, w shape or None, op, attrs)
    "conv_direct": ((1, 2, 3, 4, 4), (3, 2, 2, 2, 2), "Conv", {"pads": [1, 0, 1, 0, 1, 0], "strides": [1, 2, 1]}),
    "conv_im2col": ((1, 4, 3, 3, 3), (2, 4, 2, 2, 2), "Conv", {"dilations": [1, 1, 2]}),
    "conv_grouped_same": ((1, 4, 2, 3, 3), (4, 2, 3, 1, 3), "Conv", {"group": 2, "auto_pad": "SAME_UPPER"}),
    "conv_transpose": (
        (1, 2, 2, 2, 2),
        (2, 3, 2, 2, 2),
        "ConvTranspose",
        {"strides": [2, 1, 2], "pads": [0, 1, 0, 0, 0, 1]},
    ),
    "maxpool": (
        (1, 2, 3, 4, 4),
        None,
        "MaxPool",
        {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2], "pads": [0, 1, 0, 0, 0, 1]},
    ),
    "avgpool_pad": (
        (1, 2, 3, 3, 3),
        None,
        "AveragePool",
        {"kernel_shape": [2, 2, 2], "pads": [1, 1, 1, 0, 0, 0], "count_include_pad": 1},
    ),
    "avgpool_ceil": (
        (1, 1, 4, 5, 3),
        None,
        "AveragePool",
        {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2], "ceil_mode": 1},
    ),
}


@pytest.mark.parametrize("name", list(CASES_3D))
def test_3d_conv_and_pooling_match_the_reference(name: str) -> None:
    x_shape, w_shape, op, attrs = CASES_3D[name]
    rng = np.random.default_rng(3)
    inits = {"w": _u(rng, *w_shape)} if w_shape else {}
    node = helper.make_node(op, ["x", "w"] if w_shape else ["x"], ["y"], name="op", **attrs)
    x = _u(rng, *x_shape)
    model = _model(node, x, inits)
    got, ref, sess = run_both(model, {"x": x})
    assert all_on_ep(sess) == {}, sess.get_partition_diagnostics()
    assert got[0].ndim == 5
    assert_close(got, ref, 1e-5, name)


F16_CASES = {
    "conv_direct": ("Conv", (1, 4, 5, 5), (4, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "conv_large_k": ("Conv", (1, 8, 4, 4), (3, 8, 3, 3), {}),  # im2col-sized: float16 still takes the direct kernel
    "conv3d": ("Conv", (1, 2, 2, 3, 3), (2, 2, 2, 2, 2), {}),
    "conv_transpose": ("ConvTranspose", (1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2]}),
    "maxpool": ("MaxPool", (1, 2, 5, 5), None, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "avgpool3d": ("AveragePool", (1, 2, 3, 3, 3), None, {"kernel_shape": [2, 2, 2]}),
}


@pytest.mark.parametrize("name", list(F16_CASES))
def test_float16_conv_and_pooling_match_the_reference(name: str) -> None:
    op, x_shape, w_shape, attrs = F16_CASES[name]
    rng = np.random.default_rng(4)
    inits = {"w": _u(rng, *w_shape, dt=np.float16)} if w_shape else {}
    node = helper.make_node(op, ["x", "w"] if w_shape else ["x"], ["y"], name="op", **attrs)
    x = _u(rng, *x_shape, dt=np.float16)
    model = _model(node, x, inits)
    got, ref, sess = run_both(model, {"x": x})
    assert all_on_ep(sess) == {}, sess.get_partition_diagnostics()
    assert got[0].dtype == np.float16
    assert_close(got, ref, F16_TOL, name)
    # and against float32 math on the same (float16) values: one rounding at the store
    x32 = {"x": x.astype(np.float32)}
    ref32 = session(_model(node, x32["x"], {k: v.astype(np.float32) for k, v in inits.items()}), [REF]).run(None, x32)
    np.testing.assert_allclose(got[0].astype(np.float32), ref32[0], rtol=2e-3, atol=2e-3)


def test_float16_conv_accumulates_in_float32() -> None:
    """1x1 conv over 64 channels: 2048 + 63 ones. A float16 running sum sticks at 2048 (its ulp
    there is 2); float32 accumulation gives 2111, stored as float16 2112."""
    w = np.ones((1, 64, 1, 1), np.float16)
    w[0, 0] = 2048
    x = np.ones((1, 64, 1, 2), np.float16)
    model = _model(helper.make_node("Conv", ["x", "w"], ["y"], name="op"), x, {"w": w})
    got = session(model).run(None, {"x": x})[0]
    assert got.dtype == np.float16 and got.tolist() == [[[[2112.0, 2112.0]]]]


def test_float16_batchnorm_and_resize_match_the_reference() -> None:
    rng = np.random.default_rng(5)
    x = _u(rng, 1, 3, 2, 3, dt=np.float16)
    bn_inits = {k: rng.uniform(0.5, 1.5, 3).astype(np.float16) for k in ("s", "b", "m", "v")}
    bn = _model(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="op"), x, bn_inits)
    rz_inits = {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 1.5], np.float32)}
    rz = _model(helper.make_node("Resize", ["x", "roi", "sc"], ["y"], name="op", mode="linear"), x, rz_inits)
    for model in (bn, rz):
        got, ref, sess = run_both(model, {"x": x})
        assert all_on_ep(sess) == {} and got[0].dtype == np.float16
        assert_close(got, ref, F16_TOL)


def test_float16_runs_in_nhwc_too() -> None:
    rng = np.random.default_rng(6)
    x = _u(rng, 1, 4, 4, 4, dt=np.float16)
    model = _model(
        helper.make_node("Conv", ["x", "w"], ["y"], name="op", pads=[1, 1, 1, 1]),
        x,
        {"w": _u(rng, 2, 4, 3, 3, dt=np.float16)},
    )
    sess = session(model, [(EP, {"prefer_nhwc": "1"})])
    assert sess.graph.node("op").domain == "com.ms.internal.nhwc" and all_on_ep(sess) == {}
    assert_close(sess.run(None, {"x": x}), session(model, [REF]).run(None, {"x": x}), F16_TOL)


def test_bfloat16_conv_is_declined_with_the_reason() -> None:
    from ep_cuda_numba.registry import BF16_REASON

    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w32")
    nodes = [
        helper.make_node("Cast", ["x"], ["xb"], name="to_bf16", to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["w32"], ["wb"], name="w_bf16", to=TensorProto.BFLOAT16),
        helper.make_node("Conv", ["xb", "wb"], ["yb"], name="conv"),
        helper.make_node("Cast", ["yb"], ["y"], name="to_f32", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    opset = [helper.make_opsetid("", 22)]  # Conv allows bfloat16 from opset 22
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=opset))
    sess = session(model, [EP, REF])
    assert sess.get_node_assignment()["conv"]["ep"] == REF
    assert sess.execution_providers[0].ep.declined["conv"] == BF16_REASON

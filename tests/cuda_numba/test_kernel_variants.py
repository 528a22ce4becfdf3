"""Attribute variants the per-type cases do not reach (modes, padding schemes, layouts of
operands), each against the reference EP."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import all_on_ep, assert_close, run_both

F = TensorProto.FLOAT


def one_node(
    op: str,
    inputs: dict[str, np.ndarray],
    consts: dict[str, Any],
    out_shape: list[int] | None,
    opset: int = 17,
    out_type: int = F,
    n_out: int = 1,
    **attrs: Any,
):
    names = list(inputs) + list(consts)
    node = helper.make_node(op, [n if n else "" for n in names], [f"y{i}" for i in range(n_out)], name=op, **attrs)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if k]
    graph = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info(f"y{i}", out_type, out_shape) for i in range(n_out)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def rnd(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def check(model, feeds: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    got, ref, sess = run_both(model, feeds)
    assert all_on_ep(sess) == {}, sess.get_partition_diagnostics()
    assert_close(got, ref, tol)


EMPTY = np.zeros(0, np.float32)
RESIZE = [
    ("nearest", ct, nm)
    for ct in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
] + [("linear", ct, "round_prefer_floor") for ct in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")]


@pytest.mark.parametrize(("mode", "ct", "nearest"), RESIZE)
def test_resize_modes(mode: str, ct: str, nearest: str) -> None:
    m = one_node(
        "Resize",
        {"x": rnd(1, 2, 3, 4)},
        {"roi": EMPTY, "scales": EMPTY, "sizes": np.array([1, 2, 5, 7], np.int64)},
        None,
        opset=13,
        mode=mode,
        coordinate_transformation_mode=ct,
        nearest_mode=nearest,
    )
    check(m, {"x": rnd(1, 2, 3, 4)})


def test_resize_downscale_by_scales() -> None:
    m = one_node(
        "Resize",
        {"x": rnd(1, 1, 6, 8)},
        {"roi": EMPTY, "scales": np.array([1, 1, 0.5, 0.75], np.float32)},
        None,
        opset=13,
        mode="linear",
    )
    check(m, {"x": rnd(1, 1, 6, 8)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode: str) -> None:
    consts = {"pads": np.array([1, 2, 2, 1], np.int64)}
    m = one_node("Pad", {"x": rnd(3, 4)}, consts, None, opset=19, mode=mode)
    check(m, {"x": rnd(3, 4)})


CONV = [
    dict(w=(5, 4, 3, 3), attrs={}),  # im2col + GEMM (4*3*3 >= 32)
    dict(w=(5, 4, 3, 3), attrs={"strides": [2, 2], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    dict(w=(4, 1, 3, 3), attrs={"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    dict(w=(6, 4, 3, 3), attrs={"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    dict(w=(6, 4, 2, 2), attrs={"auto_pad": "SAME_LOWER"}),
    dict(w=(6, 4, 1, 1), attrs={"auto_pad": "VALID"}),
]


@pytest.mark.parametrize("spec", CONV, ids=lambda s: str(s["attrs"]) or "plain")
@pytest.mark.parametrize("bias", [True, False])
def test_conv_variants(spec: dict, bias: bool) -> None:
    x = rnd(2, 4, 5, 6)
    consts = {"w": rnd(*spec["w"], seed=1)}
    if bias:
        consts["b"] = rnd(spec["w"][0], seed=2)
    check(one_node("Conv", {"x": x}, consts, None, **spec["attrs"]), {"x": x}, 1e-4)


def test_conv_1d() -> None:
    x = rnd(2, 3, 9)
    check(one_node("Conv", {"x": x}, {"w": rnd(4, 3, 3, seed=1)}, None, pads=[1, 2], strides=[2]), {"x": x}, 1e-4)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2]},
        {"strides": [2, 2], "output_padding": [1, 0]},
        {"output_shape": [7, 8], "strides": [2, 2]},
        {"group": 2, "pads": [1, 0, 0, 1]},
        {"dilations": [2, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"output_shape": [4, 7], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"output_shape": [5, 9], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    ],
)
def test_conv_transpose_variants(attrs: dict) -> None:
    x = rnd(1, 4, 3, 4)
    m = one_node(
        "ConvTranspose",
        {"x": x},
        {"w": rnd(4, 3, 2, 3, seed=1), "b": rnd(6 if attrs.get("group") else 3, seed=2)},
        None,
        **attrs,
    )
    if "output_shape" in attrs and "auto_pad" not in attrs:
        # with auto_pad=NOTSET, onnx.reference (and the reference EP after it) ignores output_shape
        # when placing the output; the spec's pads formula and onnxruntime put the odd pad first
        ort = pytest.importorskip("onnxruntime", reason="onnxruntime judges this spec corner")
        from .conftest import session

        m.ir_version = min(m.ir_version, 10)
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        sess = session(m)
        assert all_on_ep(sess) == {}
        assert_close(sess.run(None, {"x": x}), want, 1e-4)
        return
    check(m, {"x": x}, 1e-4)


POOL_ATTRS = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]},
]
POOLS = [(op, a) for op in ("MaxPool", "AveragePool") for a in POOL_ATTRS] + [
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
]


@pytest.mark.parametrize(("op", "attrs"), POOLS)
def test_pool_variants(op: str, attrs: dict) -> None:
    x = rnd(1, 2, 6, 7)
    check(one_node(op, {"x": x}, {}, None, **attrs), {"x": x})


def test_pool_1d() -> None:
    x = rnd(2, 3, 9)
    check(one_node("MaxPool", {"x": x}, {}, None, kernel_shape=[3], strides=[2]), {"x": x})


@pytest.mark.parametrize(
    ("a", "b"),
    [((4,), (4, 3)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 4), (3, 4, 2)), ((2, 19, 23), (23, 17))],
)  # several block tiles and K slabs, all ragged
def test_matmul_broadcasting(a: tuple, b: tuple) -> None:
    check(
        one_node("MatMul", {"a": rnd(*a), "b": rnd(*b, seed=1)}, {}, None), {"a": rnd(*a), "b": rnd(*b, seed=1)}, 1e-5
    )


@pytest.mark.parametrize("c_shape", [(), (1,), (3, 1), (3, 5)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (1, 1)])
def test_gemm_variants(c_shape: tuple, trans: tuple) -> None:
    a = rnd(*((4, 3) if trans[0] else (3, 4)))
    b = rnd(*((5, 4) if trans[1] else (4, 5)), seed=1)
    consts = {"c": np.asarray(rnd(*c_shape, seed=2) if c_shape else np.float32(0.5))}
    check(
        one_node("Gemm", {"a": a, "b": b}, consts, None, transA=trans[0], transB=trans[1], alpha=1.5, beta=0.5),
        {"a": a, "b": b},
    )


@pytest.mark.parametrize(
    ("axes", "keepdims", "noop"), [(None, 1, 0), (None, 0, 0), ([-1], 0, 0), ([0, 1, 2], 1, 0), ([], 1, 1), ([1], 1, 0)]
)
def test_reduce_axes(axes: list | None, keepdims: int, noop: int) -> None:
    x = rnd(2, 3, 4)
    consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
    check(
        one_node("ReduceMean", {"x": x}, consts, None, opset=18, keepdims=keepdims, noop_with_empty_axes=noop), {"x": x}
    )


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_axes(axis: int) -> None:
    x = rnd(2, 3, 4)
    check(one_node("Softmax", {"x": x}, {}, None, opset=13, axis=axis), {"x": x})
    check(one_node("LogSoftmax", {"x": x}, {}, None, opset=13, axis=axis), {"x": x})


def test_layernorm_over_two_axes_with_stats() -> None:
    x = rnd(2, 3, 4)
    m = one_node("LayerNormalization", {"x": x}, {"s": rnd(3, 4, seed=1), "b": rnd(4, seed=2)}, None, n_out=3, axis=1)
    check(m, {"x": x}, 1e-4)


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ([0], [100], [1], [1]),
        ([-1], [-100], [0], [-1]),
        ([1, 0], [3, 4], [0, 2], [1, 3]),
        ([5], [0], [2], [-2]),
    ],
)
def test_slice_variants(starts, ends, axes, steps) -> None:
    x = rnd(4, 5, 6)
    consts = {
        k: np.array(v, np.int64) for k, v in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))
    }
    check(one_node("Slice", {"x": x}, consts, None), {"x": x})


def test_gather_axis0_2d_indices_and_concat_negative_axis() -> None:
    x = rnd(5, 3)
    check(one_node("Gather", {"x": x}, {"i": np.array([[4, 0], [-1, 2]], np.int64)}, None, axis=0), {"x": x})
    a, b = rnd(2, 3), rnd(2, 1, seed=1)
    check(one_node("Concat", {"a": a, "b": b}, {}, None, axis=-1), {"a": a, "b": b})


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (np.float32, TensorProto.INT32),
        (np.float32, TensorProto.BOOL),
        (np.int64, TensorProto.FLOAT),
        (np.bool_, TensorProto.DOUBLE),
    ],
)
def test_cast_matrix(src, dst) -> None:
    x = (rnd(3, 4) * 3).astype(src) if src is not np.bool_ else rnd(3, 4) > 0
    check(one_node("Cast", {"x": x}, {}, None, out_type=dst, to=dst), {"x": x})


def test_transpose_default_perm_expand_up_rank_squeeze_all() -> None:
    x = rnd(2, 3, 4)
    check(one_node("Transpose", {"x": x}, {}, None), {"x": x})
    y = rnd(3, 1)
    check(one_node("Expand", {"y": y}, {"s": np.array([2, 1, 1, 4], np.int64)}, None), {"y": y})
    z = rnd(1, 3, 1)
    check(one_node("Squeeze", {"z": z}, {}, None), {"z": z})

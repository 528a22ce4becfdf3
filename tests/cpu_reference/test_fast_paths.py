"""The reference EP's specialised kernels agree with its general paths.

Builders specialise on inputs known at session creation (Slice starts/ends/axes/steps,
Squeeze/Unsqueeze axes, Reshape shape, Gather indices, Clip bounds) and on float32 (Sigmoid,
HardSigmoid, HardSwish without a float64 round trip). Each test runs the same node with those
inputs as initializers (specialised) and as graph inputs (general path), over several input
shapes in one session (the per-shape plans), and compares."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)


def _session(node, inputs: dict[str, np.ndarray], const: set[str], x_rank: int):
    """A one-node model: ``x`` a dynamic-shape float input, the names in ``const`` initializers,
    the other entries of ``inputs`` graph inputs."""
    import ep_core

    vis = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * x_rank)]
    inits = []
    for name, v in inputs.items():
        if name in const:
            inits.append(numpy_helper.from_array(v, name))
        else:
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    g = helper.make_graph([node], "g", vis, outs, initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])


def _both(node, params: dict[str, np.ndarray], shapes, x_dtype=np.float32):
    """Outputs of the specialised and the general session for x of each shape."""
    fast = _session(node, params, set(params), len(shapes[0]))
    slow = _session(node, params, set(), len(shapes[0]))
    for shape in shapes + shapes[:1]:  # back to the first shape: a cached plan is reused
        x = RNG.standard_normal(shape).astype(x_dtype)
        a = fast.run(None, {"x": x})
        b = slow.run(None, {"x": x, **params})
        yield x, a, b


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


@pytest.mark.parametrize(
    "starts,ends,axes,steps",
    [
        ((1,), (3,), (1,), (1,)),
        ((0, -3), (2**63 - 1, -1), (0, 2), (1, 1)),
        ((-1,), (-(2**63),), (2,), (-1,)),
        ((5,), (-10,), (-1,), (-2,)),
        ((0,), (100,), (0,), (3,)),
    ],
)
def test_slice_constant_params(starts, ends, axes, steps) -> None:
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    params = {"s": _i64(*starts), "e": _i64(*ends), "a": _i64(*axes), "t": _i64(*steps)}
    for _, a, b in _both(node, params, [(3, 4, 6), (5, 2, 7), (1, 1, 1)]):
        np.testing.assert_array_equal(a[0], b[0])


def test_constant_chain_in_if_branch() -> None:
    """Slice -> Concat -> Unsqueeze -> Cast of outer-scope weights inside an If branch (the
    silero-vad pattern; the core does not fold nodes that read outer-scope initializers): the
    slices are computed at creation and the ops after them once, on the first run; later runs
    with other data give the same answers, and the memoised values are never written."""
    import ep_core

    w = RNG.standard_normal((4, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Slice", ["w", "s1", "e1", "a"], ["w1"]),
        helper.make_node("Slice", ["w", "s2", "e2", "a"], ["w2"]),
        helper.make_node("Concat", ["w2", "w1"], ["wc"], axis=0),
        helper.make_node("Unsqueeze", ["wc", "a"], ["wu"]),
        helper.make_node("Cast", ["wu"], ["wd"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["wd"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "wf"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(v, n)
        for n, v in (("w", w), ("s1", _i64(0)), ("e1", _i64(1)), ("s2", _i64(2)), ("e2", _i64(4)), ("a", _i64(0)))
    ]
    branch = helper.make_graph(nodes, "b", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["z"])],
        "o",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 6])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 6])],
        initializer=inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    s = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    want_w = np.concatenate([w[2:4], w[0:1]])[None]
    for c in (True, False, True, True):
        x = RNG.standard_normal((1, 3, 6)).astype(np.float32)
        (y,) = s.run(None, {"c": np.array(c), "x": x})
        np.testing.assert_array_equal(y, x + want_w if c else x)
        y += 1  # outputs computed per run stay writable


@pytest.mark.parametrize("axes", [(0,), (-1,), (0, 2)])
def test_unsqueeze_constant_axes(axes) -> None:
    node = helper.make_node("Unsqueeze", ["x", "a"], ["y"])
    for _, a, b in _both(node, {"a": _i64(*axes)}, [(3, 4), (1, 5)]):
        assert a[0].shape == b[0].shape
        np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("axes", [(0,), (-1,), (0, 2)])
def test_squeeze_constant_axes(axes) -> None:
    node = helper.make_node("Squeeze", ["x", "a"], ["y"])
    for _, a, b in _both(node, {"a": _i64(*axes)}, [(1, 4, 1), (1, 7, 1)]):
        assert a[0].shape == b[0].shape
        np.testing.assert_array_equal(a[0], b[0])


def test_squeeze_constant_axes_rejects_non_unit_dim() -> None:
    node = helper.make_node("Squeeze", ["x", "a"], ["y"])
    from ep_core.sdk.errors import EpCoreError

    s = _session(node, {"a": _i64(1)}, {"a"}, 3)
    with pytest.raises(EpCoreError, match="squeeze"):
        s.run(None, {"x": np.zeros((1, 2, 1), np.float32)})


@pytest.mark.parametrize("shape", [(0, -1), (-1, 2), (2, 0, -1)])
def test_reshape_constant_shape(shape) -> None:
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    for _, a, b in _both(node, {"s": _i64(*shape)}, [(2, 4, 6), (2, 2, 2)]):
        assert a[0].shape == b[0].shape
        np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize(
    "axis,indices", [(0, np.array(1)), (1, np.array(-1)), (1, np.array([[0, -2], [1, 1]])), (-1, np.array([2, 0]))]
)
def test_gather_constant_indices(axis, indices) -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    for _, a, b in _both(node, {"i": indices.astype(np.int64)}, [(3, 4, 5), (4, 3, 3)]):
        assert isinstance(a[0], np.ndarray) and a[0].shape == b[0].shape
        np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-0.5, None), (None, 0.25), (1.0, -1.0)])
def test_clip_constant_bounds(lo, hi) -> None:
    names = ["x", "" if lo is None else "lo", "" if hi is None else "hi"]
    node = helper.make_node("Clip", names, ["y"])
    params = {k: np.array(v, np.float32) for k, v in (("lo", lo), ("hi", hi)) if v is not None}
    for x, a, b in _both(node, params, [(2, 3, 4)]):
        x[0, 0, 0] = np.nan
        np.testing.assert_array_equal(a[0], b[0])
        assert a[0].dtype == np.float32


def test_float32_activations_match_float64() -> None:
    """Sigmoid, HardSigmoid and HardSwish in float32 agree with the float64 formula to float32
    rounding, including the saturated ends and NaN; Sigmoid below -8 with onnxruntime's MLAS
    logistic instead (``special.with_mlas_tail``: 0 below about -18, as onnxruntime)."""
    import ep_core
    from ep_cpu_reference.kernels.special import mlas_logistic

    x = np.concatenate([RNG.standard_normal(1000) * 6, [-1e4, -100.0, -88.5, 0.0, 40.0, 1e4, np.nan]]).astype(
        np.float32
    )
    xd = x.astype(np.float64)
    with np.errstate(over="ignore"):
        sig = 1 / (1 + np.exp(-xd))
    want = {
        "Sigmoid": np.where(xd < -8, mlas_logistic(np.minimum(x, np.float32(-8))).astype(np.float64), sig),
        "HardSigmoid": np.clip(0.3 * xd + 0.4, 0, 1),
        "HardSwish": xd * np.clip(xd / 6 + 0.5, 0, 1),
    }
    for op, ref in want.items():
        attrs = {"alpha": 0.3, "beta": 0.4} if op == "HardSigmoid" else {}
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        g = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warnings from the float32 path
            (y,) = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"]).run(
                None, {"x": x}
            )
        assert y.dtype == np.float32
        # alpha*x + beta rounds to float32 before the clip: near 0 that is an absolute error of
        # up to half a float32 ULP of beta (HardSwish: times |x| <= 3), as onnxruntime's float32
        # kernels round too
        atol = {"Sigmoid": 1e-30, "HardSigmoid": 3e-8, "HardSwish": 1e-7}[op]
        if op == "Sigmoid":
            # (tanh(x/2) + 1) / 2 in float32: within float32 rounding of 1 (6e-8) everywhere, and
            # relatively no further from the true value than onnxruntime's own MLAS logistic where
            # the value is small (3.9e-5 against MLAS's 1.3e-4 on these inputs); MLAS's below -8
            tail = xd < -8
            np.testing.assert_array_equal(y[tail], ref[tail].astype(np.float32))
            np.testing.assert_allclose(y[~tail], ref[~tail], rtol=0, atol=6e-8, err_msg=op)
            mlas_rel = np.abs(mlas_logistic(x).astype(np.float64) - ref) / ref
            ours_rel = np.abs(y.astype(np.float64) - ref) / ref
            near = ~tail & (xd < 0)
            assert ours_rel[near].max() <= mlas_rel[near].max()
            continue
        np.testing.assert_allclose(y, ref, rtol=2e-7, atol=atol, err_msg=op)


def test_cast_plain_types_share_when_equal() -> None:
    import ep_core

    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    s = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    x = np.array([1.7, -2.5, 3.0], np.float32)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x.astype(np.int64))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(0, 2, 0, 3), (1, 0, 2, 1), (0, 4, 0, 4), (0, 5, 1, 6), (2, -1, 0, 1), (0, 0, 0, 0)])
def test_pad_matches_numpy(mode, pads) -> None:
    """Pad's slice/concatenate paths (and their np.pad fallbacks) against np.pad itself."""
    import ep_core

    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]),
            helper.make_tensor_value_info("p", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    s = ep_core.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString(),
        providers=["CpuReferenceExecutionProvider"],
    )
    for shape in [(3, 5), (3, 6), (3, 5)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        b0, b1, e0, e1 = pads
        crop = x[max(-b0, 0) : shape[0] - max(-e0, 0), max(-b1, 0) : shape[1] - max(-e1, 0)]
        width = [(max(b0, 0), max(e0, 0)), (max(b1, 0), max(e1, 0))]
        kw = {"constant_values": 1.5} if mode == "constant" else {}
        want = np.pad(crop, width, mode=mode, **kw)
        (y,) = s.run(None, {"x": x, "p": np.array(pads, np.int64), "v": np.array(1.5, np.float32)})
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [((1,), 0), ((-1, 0), 1), ((0, 1, 2), 0)])
def test_reduce_constant_axes(op, axes, keepdims) -> None:
    node = helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)
    for _, a, b in _both(node, {"a": _i64(*axes)}, [(3, 4, 5), (2, 1, 7)]):
        assert isinstance(a[0], np.ndarray) and a[0].shape == b[0].shape and a[0].dtype == b[0].dtype
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6)


def _vs_onnxruntime(node, inputs: dict[str, np.ndarray], const: dict[str, np.ndarray], opset: int = 18) -> None:
    """The node with ``const`` as initializers on the reference EP and on onnxruntime."""
    import onnxruntime as ort

    import ep_core

    vis = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in inputs.items()
    ]
    g = helper.make_graph(
        [node],
        "g",
        vis,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in const.items()],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9).SerializeToString()
    (got,) = ep_core.InferenceSession(data, providers=["CpuReferenceExecutionProvider"]).run(None, inputs)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, inputs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel,group", [((2, 2), 1), ((2, 2), 3), ((3, 2), 1)])
def test_conv_transpose_stride_equals_kernel(kernel, group) -> None:
    """stride == kernel: the non-overlapping col2im is one transposing copy."""
    x = RNG.standard_normal((2, 6, 5, 7)).astype(np.float32)
    w = RNG.standard_normal((6, 4 if group == 1 else 2, *kernel)).astype(np.float32)  # (C, M/group, k...)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=list(kernel), group=group)
    _vs_onnxruntime(node, {"x": x}, {"w": w})


@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 4, 3), (1, 2, 1, 2)])
def test_resize_integer_nearest(scales) -> None:
    """Integer nearest upsampling by repeats, against onnxruntime."""
    x = RNG.standard_normal((1, 3, 5, 6)).astype(np.float32)
    node = helper.make_node(
        "Resize",
        ["x", "", "s"],
        ["y"],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    _vs_onnxruntime(node, {"x": x}, {"s": np.array(scales, np.float32)})


@pytest.mark.parametrize("shape,k,stride", [((1, 16, 90, 90), 3, 1), ((1, 8, 64, 64), 5, 2), ((2, 12, 9, 30), 5, 1)])
def test_depthwise_conv_im2col(shape, k, stride) -> None:
    """Depthwise convolutions of large and small planes take im2col + batched matmul."""
    c = shape[1]
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, strides=[stride, stride], pads=[k // 2] * 4)
    _vs_onnxruntime(node, {"x": x}, {"w": w, "b": b})


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_lstm_forward_path_matches_general_driver(with_state, with_bias) -> None:
    """The plain forward LSTM loop agrees with the general driver (taken when sequence_lens is
    given, here all full length) on every output."""
    import ep_core

    t, bsz, i, h = 5, 3, 4, 6
    feeds = {"x": RNG.standard_normal((t, bsz, i)).astype(np.float32)}
    inits = {
        "w": RNG.standard_normal((1, 4 * h, i)).astype(np.float32),
        "r": RNG.standard_normal((1, 4 * h, h)).astype(np.float32),
    }
    if with_bias:
        inits["b"] = RNG.standard_normal((1, 8 * h)).astype(np.float32)
    if with_state:
        feeds["h0"] = RNG.standard_normal((1, bsz, h)).astype(np.float32)
        feeds["c0"] = RNG.standard_normal((1, bsz, h)).astype(np.float32)

    def run(lens: bool) -> list:
        names = [
            "x",
            "w",
            "r",
            "b" if with_bias else "",
            "lens" if lens else "",
            "h0" if with_state else "",
            "c0" if with_state else "",
        ]
        while not names[-1]:
            names.pop()
        node = helper.make_node("LSTM", names, ["y", "yh", "yc"], hidden_size=h)
        f = dict(feeds, **({"lens": np.full(bsz, t, np.int32)} if lens else {}))
        vis = [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for k, v in f.items()
        ]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "yh", "yc")]
        g = helper.make_graph(
            [node], "g", vis, outs, initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()]
        )
        data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString()
        return ep_core.InferenceSession(data, providers=["CpuReferenceExecutionProvider"]).run(None, f)

    for a, b in zip(run(False), run(True), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("axis,sizes", [(0, (1, 2)), (-1, (3, 1, 2)), (1, (0, 4))])
def test_split_constant_sizes(axis, sizes) -> None:
    node = helper.make_node("Split", ["x", "s"], [f"y{i}" for i in range(len(sizes))], axis=axis)
    shape = [3, 4, 6]
    shape[axis] = sum(sizes)
    for _, a, b in _both(node, {"s": _i64(*sizes)}, [tuple(shape)]):
        assert len(a) == len(b) == len(sizes)
        for u, v in zip(a, b, strict=True):
            assert u.shape == v.shape
            np.testing.assert_array_equal(u, v)


def test_split_num_outputs_uneven() -> None:
    import ep_core

    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abc"],
    )
    s = ep_core.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString(),
        providers=["CpuReferenceExecutionProvider"],
    )
    for width in (7, 9, 7):
        x = RNG.standard_normal((2, width)).astype(np.float32)
        got = s.run(None, {"x": x})
        chunk = -(-width // 3)
        want = [x[:, :chunk], x[:, chunk : 2 * chunk], x[:, 2 * chunk :]]
        for u, v in zip(got, want, strict=True):
            np.testing.assert_array_equal(u, v)


def test_runtime_params_change_between_runs() -> None:
    """Slice and Reshape parameters fed at run time are planned per value, not per shape only."""
    import ep_core

    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [12]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("e", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    s = ep_core.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString(),
        providers=["CpuReferenceExecutionProvider"],
    )
    x = np.arange(12, dtype=np.float32)
    for start, end, shape in [(0, 6, (2, 3)), (6, 12, (2, 3)), (6, 12, (3, 2)), (2, 8, (-1, 1)), (0, 6, (2, 3))]:
        (z,) = s.run(None, {"x": x, "s": _i64(start), "e": _i64(end), "shape": _i64(*shape)})
        np.testing.assert_array_equal(z, x[start:end].reshape(shape))


@pytest.mark.parametrize(
    "shape,wshape,group,pads,strides",
    [
        ((1, 6, 2, 20), (6, 1, 5, 5), 6, [2, 2, 2, 2], [1, 1]),  # depthwise over a 2-row plane
        ((1, 4, 1, 9), (5, 4, 3, 3), 1, [1, 1, 1, 1], [1, 1]),  # one row: only the middle kernel row
        ((2, 3, 3, 7), (4, 3, 5, 3), 1, [2, 1, 2, 1], [2, 1]),
        ((1, 2, 1, 1), (3, 2, 3, 3), 1, [1, 1, 1, 1], [1, 1]),  # a 1x1 plane: the centre tap only
    ],
)
def test_conv_padding_only_taps_dropped(shape, wshape, group, pads, strides) -> None:
    """Taps that see only padding are dropped from the plan; outputs match onnxruntime."""
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(wshape).astype(np.float32)
    b = RNG.standard_normal(wshape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, pads=pads, strides=strides)
    _vs_onnxruntime(node, {"x": x}, {"w": w, "b": b})


def test_if_output_computed_from_constants_is_writable() -> None:
    """A branch output memoised from constants (read-only, shared) leaves the If as a copy."""
    import ep_core

    w = RNG.standard_normal((4, 3)).astype(np.float32)
    branch = helper.make_graph(
        [helper.make_node("Slice", ["w", "s", "e"], ["y"])],
        "b",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=branch)],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(_i64(1), "s"),
            numpy_helper.from_array(_i64(3), "e"),
        ],
    )
    s = ep_core.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString(),
        providers=["CpuReferenceExecutionProvider"],
    )
    for _ in range(2):
        (y,) = s.run(None, {"c": np.array(True)})
        np.testing.assert_array_equal(y, w[1:3])
        y[...] = 0  # the caller owns it; the next run is unaffected


@pytest.mark.parametrize(
    "shape,wshape,attrs",
    [
        ((1, 16, 70, 60), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),  # dense: row blocks, a short last block
        ((2, 8, 101, 50), (12, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # batch 2, strided
        ((1, 12, 64, 64), (12, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 3}),  # grouped: row blocks per group
        ((1, 8, 9000), (6, 8, 5), {"pads": [2, 2]}),  # 1-D: blocks along the only axis
        ((1, 32, 120, 120), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 32}),  # depthwise, s2
        ((2, 8, 40, 30), (16, 1, 3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1], "group": 8}),  # whole rows
        ((1, 4, 200, 190), (4, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 4}),  # whole rows, in row blocks
        ((1, 96, 7, 9), (96, 1, 5, 5), {"pads": [2, 1, 2, 3], "group": 96}),  # whole rows, uneven pads
    ],
)
def test_conv_blocked_and_whole_row_paths(shape, wshape, attrs) -> None:
    """Large im2col matrices made in cache-sized blocks, and stride-1 depthwise convs over whole
    padded rows, match onnxruntime (bias added per block, the spare columns dropped). Weights
    scaled by 1/sqrt(fan-in): outputs of order 1, where float32 rounding stays under 1e-5."""
    x = RNG.standard_normal(shape).astype(np.float32)
    w = (RNG.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))).astype(np.float32)
    b = RNG.standard_normal(wshape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    _vs_onnxruntime(node, {"x": x}, {"w": w, "b": b})


def _int_conv_reference(x, xzp, w, wzp, b, group, pad):
    """conv(x - x_zp, w - w_zp) + b in int64, from a sliding-window view (stride 1, 2-D)."""
    xi = np.pad(x.astype(np.int64) - xzp, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    wi = w.astype(np.int64) - wzp.astype(np.int64).reshape(-1, 1, 1, 1)
    win = np.lib.stride_tricks.sliding_window_view(xi, wi.shape[2:], axis=(2, 3))  # (N, C, H, W, kh, kw)
    n, c, h, wd = win.shape[:4]
    cg, mg = c // group, wi.shape[0] // group
    win = win.reshape(n, group, cg, h, wd, *wi.shape[2:])
    wg = wi.reshape(group, mg, cg, *wi.shape[2:])
    y = np.einsum("ngchwij,gmcij->ngmhw", win, wg).reshape(n, group * mg, h, wd)
    return y + b.astype(np.int64).reshape(1, -1, 1, 1)


@pytest.mark.parametrize(
    "c,m,group,wmax,dtype,halves",
    [
        (16, 8, 1, 40, np.float32, False),  # small sums: one float32 GEMM
        (64, 8, 1, 127, np.float64, True),  # 64*9*127*255 > 2^24, each half under it: two float32 halves
        (256, 8, 1, 127, np.float64, False),  # even the halves could reach 2^24: float64
        (256, 256, 256, 127, np.float32, False),  # depthwise: 9 taps stay small
    ],
)
def test_qlinear_conv_integer_sum_is_exact(c, m, group, wmax, dtype, halves) -> None:
    """QLinearConv's integer sum is exact on every path (float32, float32 halves, float64)."""
    from ep_cpu_reference.kernels.nn_conv import _ConvGeom, _IntConv

    x = RNG.integers(0, 256, (1, c, 6, 5)).astype(np.uint8)
    w = RNG.integers(-wmax, wmax + 1, (m, c // group, 3, 3)).astype(np.int8)
    w[...] = np.where(RNG.random(w.shape) < 0.9, wmax, w)  # near the bound: sums this large
    wzp = RNG.integers(-3, 3, m).astype(np.int8) if wmax < 127 else np.zeros(m, np.int8)
    b = RNG.integers(-5000, 5000, m).astype(np.int32)
    node = helper.make_node("QLinearConv", list("abcdefghi"), ["y"], group=group, pads=[1, 1, 1, 1])

    class _Node:  # the attributes _ConvGeom reads
        def attr(self, name, default=None):
            return {a.name: helper.get_attribute_value(a) for a in node.attribute}.get(name, default)

    conv = _IntConv(_ConvGeom(_Node(), None), True)
    for _ in range(2):  # the second run reuses the cached weights and plans
        acc, _ = conv(x, np.uint8(7), w, wzp, b)
        assert acc.dtype == dtype
        np.testing.assert_array_equal(acc.astype(np.int64), _int_conv_reference(x, 7, w, wzp, b, group, 1))
    assert ((x.shape, "half", 0) in conv.plans) == halves  # the halves were run

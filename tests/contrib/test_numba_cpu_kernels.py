"""The Numba CPU EP's fused kernels against onnxruntime on small graphs that exercise
broadcasting, exported intermediate values, contractions with tails, and convexity."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _support.numba_runners import graph_runners
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
ort = pytest.importorskip("onnxruntime")

from ep_core import InferenceSession  # noqa: E402
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _check(model, feed, *, fused_at_least=1, rtol=1e-5, atol=1e-6):
    data = model.SerializeToString()
    so = SessionOptions()  # the graph as written reaches the kernels (the optimizer would fold BatchNormalization)
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(data, so, providers=[NUMBA])
    got = sess.run(None, feed)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    fused = [n for n, a in sess.get_node_assignment().items() if a["ep"] == NUMBA]
    assert len(fused) >= fused_at_least, sess.get_node_assignment()
    return sess


rng = np.random.default_rng(0)


def test_elementwise_chain_with_broadcasting_and_smaller_exported_values():
    nodes = [
        helper.make_node("Mul", ["s", "t"], ["st"], name="small"),  # (1, 4, 1) exported: smaller than the cluster
        helper.make_node("Add", ["x", "st"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["b"], name="tanh"),
        helper.make_node("Sigmoid", ["b"], ["c"], name="sig"),
        helper.make_node("Mul", ["c", "two"], ["y"], name="scale"),
    ]
    m = _model(
        nodes,
        [("x", F, [2, 4, 5]), ("s", F, [1, 4, 1]), ("t", F, [4, 1])],
        [("y", F, [2, 4, 5]), ("st", F, [1, 4, 1])],
        [("two", np.array(2.0, np.float32))],
    )
    feed = {
        "x": rng.standard_normal((2, 4, 5), np.float32),
        "s": rng.standard_normal((1, 4, 1), np.float32),
        "t": rng.standard_normal((4, 1), np.float32),
    }
    sess = _check(m, feed, fused_at_least=5)
    assert len({a["fused_node"] for a in sess.get_node_assignment().values()}) == 1


@pytest.mark.parametrize(
    "op,attrs,extra",
    [
        ("Relu", {}, []),
        ("LeakyRelu", {"alpha": 0.2}, []),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
        ("HardSwish", {}, []),
        ("Exp", {}, []),
        ("Sqrt", {}, []),
        ("Reciprocal", {}, []),
        ("Erf", {}, []),
        ("Clip", {}, ["lo", "hi"]),
        ("Neg", {}, []),
        ("Abs", {}, []),
        ("Softplus", {}, []),
    ],
)
def test_unary_ops(op, attrs, extra):
    x = np.abs(rng.standard_normal((3, 7), np.float32)) + (0.1 if op in ("Sqrt", "Reciprocal") else -0.5)
    nodes = [helper.make_node(op, ["x"] + extra, ["u"], **attrs), helper.make_node("Add", ["u", "x"], ["y"])]
    inits = [("lo", np.array(-0.2, np.float32)), ("hi", np.array(0.3, np.float32))] if extra else []
    _check(_model(nodes, [("x", F, [3, 7])], [("y", F, [3, 7])], inits), {"x": x}, fused_at_least=2, rtol=1e-5)


def test_compare_where_cast_and_double():
    nodes = [
        helper.make_node("Greater", ["a", "b"], ["g"]),
        helper.make_node("Where", ["g", "a", "b"], ["w"]),
        helper.make_node("Cast", ["w"], ["y"], to=TensorProto.DOUBLE),
        helper.make_node("Max", ["y", "y2"], ["z"]),
    ]
    m = _model(
        nodes,
        [("a", F, [4, 3]), ("b", F, [4, 3]), ("y2", TensorProto.DOUBLE, [3])],
        [("z", TensorProto.DOUBLE, [4, 3])],
    )
    _check(
        m,
        {
            "a": rng.standard_normal((4, 3), np.float32),
            "b": rng.standard_normal((4, 3), np.float32),
            "y2": rng.standard_normal(3),
        },
        fused_at_least=4,
    )


@pytest.mark.parametrize(
    "shape,w_shape,attrs",
    [
        ((1, 3, 9, 11), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((2, 4, 9, 10), (6, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
        ((1, 8, 10, 10), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2]}),
        ((1, 8, 12, 12), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 5, 7, 7), (3, 5, 1, 1), {}),
        ((1, 3, 12, 12), (2, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
        ((1, 3, 11, 12), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((1, 3, 11, 12), (2, 3, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        ((2, 3, 20), (4, 3, 5), {"strides": [2], "pads": [2, 1]}),
        # few output channels (4*M <= C): one GEMM of all taps, then shifted adds
        ((1, 32, 9, 10), (8, 32, 3, 3), {"pads": [1, 0, 2, 1]}),
        ((2, 32, 11, 9), (8, 32, 3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
        # depthwise kernels with the geometry compiled in: dilation, asymmetric pads, stride 2 and 3
        ((1, 6, 11, 9), (6, 1, 3, 3), {"group": 6, "dilations": [2, 1], "pads": [0, 1, 2, 1]}),
        ((2, 5, 13, 14), (5, 1, 5, 3), {"group": 5, "strides": [2, 3], "pads": [2, 0, 1, 1]}),
        ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        # stride 1 runs over the plane's flat rows in blocks of ~1024 values: 3 rows a block here,
        # 1 row a block (wider than a block) next
        ((1, 2, 9, 300), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
        ((1, 3, 4, 1500), (3, 1, 3, 5), {"group": 3, "pads": [0, 2, 2, 1], "dilations": [1, 2]}),
        # one output column (FSMN memory blocks: a (k, 1) filter over (T, 1)): the loop runs over rows
        ((1, 6, 30, 1), (6, 1, 20, 1), {"group": 6}),
        ((2, 4, 17, 1), (4, 1, 5, 1), {"group": 4, "strides": [2, 1], "pads": [2, 0, 3, 0]}),
        ((1, 3, 9, 3), (3, 1, 3, 3), {"group": 3, "dilations": [2, 1]}),
        ((1, 3, 9, 2), (3, 1, 4, 1), {"group": 3, "strides": [1, 2]}),  # one output column of two input columns
        ((1, 3, 9, 1), (3, 1, 4, 1), {"group": 3, "pads": [1, 1, 2, 0]}),  # ... of a width-padded input
    ],
)
def test_conv_with_bias_batchnorm_and_hardswish_tail(shape, w_shape, attrs):
    m_out = w_shape[0]
    inits = [
        ("w", rng.standard_normal(w_shape, np.float32)),
        ("bias", rng.standard_normal(m_out, np.float32)),
        ("sc", rng.uniform(0.5, 1.5, m_out).astype(np.float32)),
        ("bb", rng.standard_normal(m_out, np.float32)),
        ("mu", rng.standard_normal(m_out, np.float32)),
        ("var", rng.uniform(0.5, 1.5, m_out).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], **attrs),
        helper.make_node("BatchNormalization", ["c", "sc", "bb", "mu", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("HardSwish", ["bn"], ["y"]),
    ]
    m = _model(nodes, [("x", F, list(shape))], [("y", F, [None] * len(shape))], inits)
    _check(m, {"x": rng.standard_normal(shape, np.float32)}, fused_at_least=3, rtol=1e-4, atol=1e-4)


def test_matmul_and_gemm_tails():
    inits = [
        ("w", rng.standard_normal((6, 5), np.float32)),
        ("b", rng.standard_normal(5, np.float32)),
        ("g", rng.standard_normal((4, 5), np.float32)),
        ("c", rng.standard_normal(4, np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["mb"]),
        helper.make_node("Tanh", ["mb"], ["t"]),
        helper.make_node("Gemm", ["t", "g", "c"], ["gm"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["gm"], ["y"]),
    ]
    m = _model(nodes, [("x", F, [3, 6])], [("y", F, [3, 4])], inits)
    sess = _check(m, {"x": rng.standard_normal((3, 6), np.float32)}, fused_at_least=5, rtol=1e-5, atol=1e-5)
    assert len({a["fused_node"] for a in sess.get_node_assignment().values()}) == 1


def _not_taken(x: str, out: str, n: int = 16) -> tuple:
    """A node the EP does not take (control flow stays outside its groups): ``out`` = x (n x n)
    transposed, inside both branches of an If on a constant condition."""
    branches = {
        f"{b}_branch": helper.make_graph(
            [helper.make_node("Transpose", [x], [f"{out}_{b}"], perm=[1, 0])],
            b,
            [],
            [helper.make_tensor_value_info(f"{out}_{b}", F, [n, n])],
        )
        for b in ("then", "else")
    }
    return helper.make_node("If", ["cond"], [out], name=out, **branches), ("cond", np.array(True))


def test_groups_stay_convex_around_a_node_the_ep_does_not_take():
    # a -> If (not fused) -> c, and a -> c directly: fusing a and c together would be non-convex
    outside, cond = _not_taken("a", "t")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        outside,
        helper.make_node("Add", ["a", "t"], ["y"], name="c"),
    ]
    # 16 x 16 float outputs: groups that are not the whole graph are claimed when they compute
    m = _model(nodes, [("x", F, [16, 16])], [("y", F, [16, 16])], [cond])
    sess = _check(m, {"x": rng.standard_normal((16, 16), np.float32)}, fused_at_least=2)
    a = sess.get_node_assignment()
    assert a["a"]["fused_node"] != a["c"]["fused_node"]


@pytest.mark.parametrize("two_as_constant_node", [False, True])
def test_a_group_beside_control_flow_is_claimed_only_when_it_computes_floats(two_as_constant_node):
    # beside an If a group is not the whole graph: it pays a runner's call on every run, so it is
    # claimed only when a compiled node in it computes floats (or it holds LSTM/GRU); integer shape
    # logic and bool compares are left to the next EP. A Constant node the group absorbs does not
    # count towards "the whole graph"
    outside, _ = _not_taken("x", "t", 4)  # its condition computed here, from x's shape
    two = helper.make_node("Constant", [], ["two"], name="const_two", value=numpy_helper.from_array(np.array(2)))
    nodes = [
        *([two] if two_as_constant_node else []),
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["rows"], name="gather"),
        helper.make_node("Greater", ["rows", "two"], ["cond"], name="int_greater"),
        outside,
        helper.make_node("Relu", ["t"], ["r"], name="float_relu"),
    ]
    inits = [("zero", np.array(0, np.int64))] + ([] if two_as_constant_node else [("two", np.array(2, np.int64))])
    m = _model(nodes, [("x", F, [4, 4])], [("r", F, [4, 4])], inits)
    sess = _check(m, {"x": rng.standard_normal((4, 4), np.float32)}, fused_at_least=1)
    eps = {k: v["ep"] for k, v in sess.get_node_assignment().items()}
    assert eps["float_relu"] == NUMBA, eps
    assert {eps[k] for k in ("shape", "gather", "int_greater")} == {"CpuReferenceExecutionProvider"}, eps


def test_a_tiny_graph_the_ep_takes_whole_is_still_claimed():
    # the whole graph in one group costs one runner call instead of a call per node: claimed
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", F, [2, 2])], [("y", F, [2, 2])])
    sess = _check(m, {"x": rng.standard_normal((2, 2), np.float32)}, fused_at_least=1)
    assert sess.get_node_assignment()["r"]["ep"] == NUMBA


def test_dynamic_shapes_run_with_one_compiled_kernel():
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]), helper.make_node("Add", ["a", "one"], ["y"])]
    m = _model(nodes, [("x", F, ["n", 4])], [("y", F, ["n", 4])], [("one", np.array([1.0], np.float32))])
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA])
    for n in (1, 5, 0):
        x = rng.standard_normal((n, 4), np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x * x + 1, rtol=1e-6)


def test_parallel_option_is_validated():
    from ep_core.sdk.errors import ConfigError

    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(ConfigError, match="parallel"):
        InferenceSession(m.SerializeToString(), providers=[(NUMBA, {"parallel": "maybe"})])
    with pytest.raises(ConfigError, match="no option"):
        InferenceSession(m.SerializeToString(), providers=[(NUMBA, {"threads": "2"})])


def test_parallel_kernels_compile_and_match():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Tanh", ["a"], ["y"])]
    m = _model(nodes, [("x", F, [64, 33])], [("y", F, [64, 33])], [("k", np.array(1.7, np.float32))])
    x = rng.standard_normal((64, 33), np.float32)
    sess = InferenceSession(m.SerializeToString(), providers=[(NUMBA, {"parallel": "1"})])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.tanh(x * np.float32(1.7)), rtol=1e-6)


def test_parallel_depthwise_conv_matches_the_reference_ep():
    """A depthwise convolution compiled with ``parallel=1``: each thread builds its zero-bordered
    planes in its own row of the scratch buffer (``get_thread_id``), 16 channels over the pool."""
    w = rng.standard_normal((16, 1, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=16, pads=[1, 1, 1, 1])]
    m = _model(nodes, [("x", F, [2, 16, 13, 17])], [("y", F, [2, 16, 13, 17])], [("w", w)]).SerializeToString()
    x = rng.standard_normal((2, 16, 13, 17), np.float32)
    want = InferenceSession(m, providers=["CpuReferenceExecutionProvider"]).run(None, {"x": x})[0]
    sess = InferenceSession(m, providers=[(NUMBA, {"parallel": "1"})])
    for _ in range(3):  # the scratch rows are reused: every run starts from zeroed borders
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert sess.get_node_assignment()[next(iter(sess.get_node_assignment()))]["ep"] == NUMBA


def test_float32_erf_is_the_reference_erff_within_an_ulp():
    """The float32 Erf kernel is a vectorisable erff (MLAS's, as the reference EP computes it,
    with an exp of its own), not libm's float64 erf called per element: within 1 ulp of the
    reference EP over [-6, 6] and at the edges (signed zeros, tiny values, the branch point,
    infinities, NaN), the sign of -0.0 kept."""
    from ep_cpu_reference.kernels.special import erf

    x = np.concatenate(
        [
            np.linspace(-6, 6, 400001, dtype=np.float32),
            np.array([0.0, -0.0, 1e-30, -1e-30, 0.921875, -0.921875, 3.925, np.inf, -np.inf, np.nan], np.float32),
        ]
    ).reshape(1, -1)
    m = _model([helper.make_node("Erf", ["x"], ["y"])], [("x", F, list(x.shape))], [("y", F, list(x.shape))])
    (got,) = InferenceSession(m.SerializeToString(), providers=[NUMBA]).run(None, {"x": x})
    want = erf(x)
    fin = np.isfinite(want)
    ulps = np.abs(got[fin].view(np.int32).astype(np.int64) - want[fin].view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, ulps.max()
    assert np.isnan(got[~fin]).all()
    assert np.signbit(got[0, -9]) and got[0, -3] == 1 and got[0, -2] == -1


@pytest.mark.parametrize("form", ["erf pattern", "bias erf pattern", "ai.onnx", "ai.onnx tanh"])
def test_gelu_compiles_into_the_cluster_and_matches_the_reference(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """Gelu with erf (the com.microsoft::Gelu and BiasGelu the graph optimizer fuses from x * 0.5 *
    (1 + erf(x / sqrt 2)), and ai.onnx's opset 20 approximate="none") is compiled into the elementwise
    cluster around it: one kernel with the bias add before it, matching the reference EP's Gelu
    to an ulp of erf (near x = -4 Gelu cancels, so the bound is absolute there); the tanh form stays
    a delegated reference step."""
    from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

    x = np.concatenate([np.linspace(-8, 8, 4001, dtype=np.float32), [np.nan, np.inf, 0.0]]).astype(np.float32)
    x = x.reshape(1, -1)
    add = helper.make_node("Add", ["x", "b"], ["a"])
    bias = np.linspace(-0.5, 0.5, x.shape[1], dtype=np.float32) if form.startswith("bias") else np.float32(0.25)
    inits = [numpy_helper.from_array(bias, "b")]
    if form.endswith("erf pattern"):
        nodes = [
            add,
            helper.make_node("Div", ["a", "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]),
            helper.make_node("Mul", ["a", "e1"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"]),
        ]
        inits += [numpy_helper.from_array(np.float32(v), n) for n, v in (("sqrt2", 2**0.5), ("one", 1), ("half", 0.5))]
    else:
        attrs = {"approximate": "tanh"} if form.endswith("tanh") else {}
        nodes = [add, helper.make_node("Gelu", ["a"], ["y"], **attrs)]
    g = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, list(x.shape))],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    made = graph_runners(monkeypatch)
    sess = InferenceSession(m.SerializeToString(), so, providers=[NUMBA, REF])
    (got,) = sess.run(None, {"x": x})
    (want,) = InferenceSession(m.SerializeToString(), so, providers=[REF]).run(None, {"x": x})
    (runner,) = made
    kinds = [kind for kind, _, _ in runner.steps]
    assert kinds == (["kernel", "node"] if form.endswith("tanh") else ["kernel"]), kinds
    made_ops = [(n.domain, n.op_type) for n in sess._built.model.graph.node]
    if form == "erf pattern":  # the optimizer made com.microsoft::Gelu, which the kernel computes
        assert made_ops == [("", "Add"), ("com.microsoft", "Gelu")]
    if form == "bias erf pattern":  # ... and BiasGelu from a bias over the last axis
        assert made_ops == [("com.microsoft", "BiasGelu")]
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=3e-7)
    assert np.isnan(got[0, -3]) and got[0, -2] == np.inf


def test_float32_tanh_and_sigmoid_over_their_whole_range():
    # the float32 kernels use a vectorisable rational tanh (sigmoid through it), not libm's
    x = np.concatenate(
        [
            np.linspace(-30, 30, 60001, dtype=np.float32),
            np.array([0.0, -0.0, 1e-30, -1e-8, np.inf, -np.inf], np.float32),
        ]
    ).reshape(1, -1)
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["t", "s"], ["y"]),
    ]
    m = _model(
        nodes, [("x", F, list(x.shape))], [("t", F, list(x.shape)), ("s", F, list(x.shape)), ("y", F, list(x.shape))]
    )
    t, sg, _ = InferenceSession(m.SerializeToString(), providers=[NUMBA]).run(None, {"x": x})
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(t, np.tanh(x64), rtol=0, atol=5e-7)
    np.testing.assert_allclose(sg, 1 / (1 + np.exp(-x64)), rtol=0, atol=5e-7)
    assert t[0, -2] == 1 and t[0, -1] == -1 and sg[0, -2] == 1 and sg[0, -1] == 0
    nan = InferenceSession(m.SerializeToString(), providers=[NUMBA]).run(
        None, {"x": np.full((1, x.shape[1]), np.nan, np.float32)}
    )
    assert np.isnan(nan[0]).all() and np.isnan(nan[1]).all()


@pytest.mark.parametrize(
    "x_shape,b_shape,feed_b",
    [
        ([2, 6, 5, 7], [1, 6, 1, 1], (1, 6, 1, 1)),  # per-channel bias: index arithmetic, no modulo per element
        ([2, 6, 5, 7], [6, 1, 7], (6, 1, 7)),  # broadcast in the middle
        ([4, 5], ["m", 5], (1, 5)),  # static pattern says full, the run broadcasts: the general kernel serves it
        ([4, 5], [1], (1,)),
        (["n", 3, 4], [3, 4], (3, 4)),
    ],
)
def test_broadcast_patterns_specialised_and_general(x_shape, b_shape, feed_b):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Mul", ["t", "a"], ["y"]),
    ]
    m = _model(nodes, [("x", F, x_shape), ("b", F, b_shape)], [("y", F, [None] * len(x_shape))])
    xs = tuple(d if isinstance(d, int) else 2 for d in x_shape)
    _check(
        m,
        {"x": rng.standard_normal(xs, np.float32), "b": rng.standard_normal(feed_b, np.float32)},
        fused_at_least=3,
        rtol=1e-5,
        atol=1e-6,
    )


def test_values_of_different_shapes_sharing_a_scalar_are_not_one_kernel():
    # q*s and k*s both read the scalar s computed in the group: one kernel over both shapes cannot
    # exist (the shapes do not broadcast together)
    nodes = [
        helper.make_node("Sqrt", ["c"], ["s"]),
        helper.make_node("Mul", ["q", "s"], ["a"]),
        helper.make_node("Mul", ["k", "s"], ["b"]),
        helper.make_node("Relu", ["a"], ["y1"]),
        helper.make_node("Relu", ["b"], ["y2"]),
    ]
    m = _model(
        nodes, [("q", F, [2, 3, 4]), ("k", F, [2, 4, 5]), ("c", F, [])], [("y1", F, [2, 3, 4]), ("y2", F, [2, 4, 5])]
    )
    _check(
        m,
        {
            "q": rng.standard_normal((2, 3, 4), np.float32),
            "k": rng.standard_normal((2, 4, 5), np.float32),
            "c": np.array(2.5, np.float32),
        },
        fused_at_least=5,
    )


def test_buffers_kept_between_runs_never_reach_the_caller():
    # conv -> relu -> conv -> tanh: the internal values live in buffers reused by the next run;
    # what a run returned must not change when the session runs again
    inits = [
        ("w1", rng.standard_normal((8, 3, 3, 3), np.float32)),
        ("w2", rng.standard_normal((4, 8, 1, 1), np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["c2"]),
        helper.make_node("Tanh", ["c2"], ["y"]),
    ]
    m = _model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, 4, 8, 8]), ("r", F, [1, 8, 8, 8])], inits)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA])
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x1, x2 = rng.standard_normal((1, 3, 8, 8), np.float32), rng.standard_normal((1, 3, 8, 8), np.float32)
    first = sess.run(None, {"x": x1})
    kept = [a.copy() for a in first]
    second = sess.run(None, {"x": x2})
    for a, k, want in zip(first, kept, ref.run(None, {"x": x1}), strict=True):
        np.testing.assert_array_equal(a, k)
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)
    for a, want in zip(second, ref.run(None, {"x": x2}), strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)
    assert not any(np.shares_memory(a, b) for a in first for b in second)


def test_two_groups_never_feed_each_other():
    # A = {ax, aw} and B = {bu, bz, by} are each convex, but A -> If -> B (by) and B (bz) -> A
    # (aw) would make the fused nodes a cycle; aw must not join A
    outside, cond = _not_taken("ax", "t")
    nodes = [
        helper.make_node("Relu", ["x"], ["ax"], name="ax"),
        helper.make_node("Relu", ["y"], ["bu"], name="bu"),
        helper.make_node("Neg", ["bu"], ["bz"], name="bz"),
        helper.make_node("Add", ["ax", "bz"], ["aw"], name="aw"),
        outside,
        helper.make_node("Add", ["t", "bu"], ["by"], name="by"),
    ]
    m = _model(nodes, [("x", F, [16, 16]), ("y", F, [16, 16])], [("aw", F, [16, 16]), ("by", F, [16, 16])], [cond])
    sess = _check(
        m,
        {"x": rng.standard_normal((16, 16), np.float32), "y": rng.standard_normal((16, 16), np.float32)},
        fused_at_least=4,
    )
    a = sess.get_node_assignment()
    assert a["aw"]["fused_node"] != a["ax"]["fused_node"] or a["by"]["fused_node"] != a["bu"]["fused_node"]


def _kernel_steps(monkeypatch: pytest.MonkeyPatch, model: Any, feed: dict[str, np.ndarray]) -> list[Any]:
    """The compiled elementwise steps of the one runner ``model`` builds (checked against onnxruntime)."""
    made = graph_runners(monkeypatch)
    _check(model, feed, fused_at_least=1, rtol=1e-4, atol=1e-5)
    (runner,) = made
    return [step for kind, step, _ in runner.steps if kind == "kernel"]


def test_elementwise_chains_over_dynamic_dims_are_one_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """With dynamic H and W static shapes say nothing, yet Conv -> bias -> HardSwish written out
    (x * Clip(x + 3, 0, 6) / 6) -> times a per-channel scale keeps the shape of the conv output at
    every step (only constants that broadcast into it): one kernel, one pass over memory."""
    inits = [
        ("w", rng.standard_normal((8, 4, 1, 1), np.float32)),
        ("b", rng.standard_normal(8, np.float32)),
        ("three", np.array(3.0, np.float32)),
        ("zero", np.array(0.0, np.float32)),
        ("six", np.array(6.0, np.float32)),
        ("scale", rng.standard_normal((8, 1, 1), np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"]),
        helper.make_node("Add", ["c", "three"], ["c3"]),
        helper.make_node("Clip", ["c3", "zero", "six"], ["cl"]),
        helper.make_node("Mul", ["c", "cl"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["hs"]),
        helper.make_node("Mul", ["hs", "scale"], ["y"]),
    ]
    m = _model(nodes, [("x", F, [1, 4, "h", "w"])], [("y", F, [1, 8, "h", "w"])], inits)
    kernels = _kernel_steps(monkeypatch, m, {"x": rng.standard_normal((1, 4, 7, 9), np.float32)})
    assert len(kernels) == 1, [[o["name"] for o in k["outputs"]] for k in kernels]


def test_a_scale_of_ones_over_an_unknown_map_is_not_computed_over_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A (1, C, 1, 1) squeeze-excitation chain times a (1, C, H, W) map: the map could be larger
    along dims the chain has as 1, so the chain keeps its own kernel (else it would run H x W times)."""
    nodes = [
        helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Sigmoid", ["sr"], ["sg"]),
        helper.make_node("Mul", ["sg", "x"], ["y"]),
    ]
    # 32 channels: a chain of at most planner.TINY elements runs as reference nodes, no kernel at all
    m = _model(nodes, [("s", F, [1, 32, 1, 1]), ("x", F, [1, 32, "h", "w"])], [("y", F, [1, 32, "h", "w"])])
    feed = {"s": rng.standard_normal((1, 32, 1, 1), np.float32), "x": rng.standard_normal((1, 32, 5, 7), np.float32)}
    kernels = _kernel_steps(monkeypatch, m, feed)
    assert len(kernels) == 2


def test_tiny_shape_logic_runs_as_reference_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster of shape logic of a few elements (an Equal on dims, a Cast of them to float)
    runs as the reference EP's NumPy calls inside the group, not as a compiled kernel (a kernel
    call from the runner costs 3-5 us, NumPy's ~1 us); float work stays compiled; the outputs
    match."""
    from ep_numba_cpu import planner

    nodes = [
        helper.make_node("Equal", ["d", "three"], ["eq"]),
        helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["y"]),
    ]
    m = _model(
        nodes,
        [("d", TensorProto.INT64, [4]), ("x", F, [32])],
        [("y", F, [32]), ("eq", TensorProto.BOOL, [4]), ("df", F, [4])],
        [("three", np.array(3, np.int64))],
    )
    feed = {"d": np.array([1, 3, 5, 3], np.int64), "x": rng.standard_normal(32).astype(np.float32)}
    kernels = _kernel_steps(monkeypatch, m, feed)
    assert [k["inputs"] for k in kernels] == [["x"]]  # Equal and Cast: reference steps
    monkeypatch.setattr(planner, "TINY", 0)
    assert len(_kernel_steps(monkeypatch, m, feed)) == 2


def test_an_empty_constant_in_a_cluster_is_an_array_argument_not_a_literal():
    """A zero-size constant (0, 1) broadcast against (0, 4) or (1, 4): no element to spell as a
    literal; it is passed as an array and the empty result matches onnxruntime."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "kz"], ["y"])]
    m = _model(nodes, [("x", F, ["n", 4])], [("y", F, None)], [("kz", np.zeros((0, 1), np.float32))])
    for n in (0, 1):
        _check(m, {"x": rng.standard_normal((n, 4), np.float32)}, fused_at_least=1)


@pytest.mark.parametrize("parallel", [False, True])
def test_depthwise_kernel_refuses_a_scratch_smaller_than_its_planes(parallel: bool) -> None:
    """The compiled depthwise kernel writes its planes into a caller's scratch without bounds
    checks: one value short of ``depthwise_plane`` per row returns 1 for the caller to raise,
    without writing; the exact size computes and returns 0."""
    import numba

    from ep_numba_cpu import codegen, generate

    geometry = (3, 3, 1, 1, 1, 1, 1, 1)
    src = generate._depthwise_source("float32", *geometry, parallel)
    sig = "float32:4:C:w,float32:4:C:r,float32:3:C:r,float32:1:C:r,float32:2:C:w"
    fn = codegen.compile_kernel(src, sig, parallel).dispatcher
    x = rng.standard_normal((1, 4, 6, 7), np.float32)
    w = rng.standard_normal((4, 3, 3), np.float32)
    args = (np.empty((1, 4, 6, 7), np.float32), x, w, np.zeros(4, np.float32))
    plane = generate.depthwise_plane(geometry, (6, 7), (6, 7))
    rows = numba.get_num_threads() if parallel else 1
    short = np.zeros((rows, plane - 1), np.float32)
    assert fn(*args, short) == 1 and not short.any()
    assert fn(*args, np.zeros((rows, plane), np.float32)) == 0
    assert np.isfinite(args[0]).all()

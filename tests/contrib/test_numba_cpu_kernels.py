"""The Numba CPU EP's fused kernels against onnxruntime on small graphs that exercise
broadcasting, exported intermediate values, contractions with tails, and convexity."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
ort = pytest.importorskip("onnxruntime")

from ep_core import InferenceSession  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _check(model, feed, *, fused_at_least=1, rtol=1e-5, atol=1e-6):
    data = model.SerializeToString()
    sess = InferenceSession(data, providers=[NUMBA])
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
    m = _model(nodes, [("x", F, [2, 4, 5]), ("s", F, [1, 4, 1]), ("t", F, [4, 1])],
               [("y", F, [2, 4, 5]), ("st", F, [1, 4, 1])], [("two", np.array(2.0, np.float32))])
    feed = {"x": rng.standard_normal((2, 4, 5), np.float32), "s": rng.standard_normal((1, 4, 1), np.float32),
            "t": rng.standard_normal((4, 1), np.float32)}
    sess = _check(m, feed, fused_at_least=5)
    assert len({a["fused_node"] for a in sess.get_node_assignment().values()}) == 1


@pytest.mark.parametrize("op,attrs,extra", [
    ("Relu", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
    ("HardSwish", {}, []), ("Exp", {}, []), ("Sqrt", {}, []), ("Reciprocal", {}, []), ("Erf", {}, []),
    ("Clip", {}, ["lo", "hi"]), ("Neg", {}, []), ("Abs", {}, []), ("Softplus", {}, []),
])
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
    m = _model(nodes, [("a", F, [4, 3]), ("b", F, [4, 3]), ("y2", TensorProto.DOUBLE, [3])],
               [("z", TensorProto.DOUBLE, [4, 3])])
    _check(m, {"a": rng.standard_normal((4, 3), np.float32), "b": rng.standard_normal((4, 3), np.float32),
               "y2": rng.standard_normal(3)}, fused_at_least=4)


@pytest.mark.parametrize("shape,w_shape,attrs", [
    ((1, 3, 9, 11), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 10), (6, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
    ((1, 8, 10, 10), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2]}),
    ((1, 8, 12, 12), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 5, 7, 7), (3, 5, 1, 1), {}),
    ((1, 3, 12, 12), (2, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 3, 11, 12), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 11, 12), (2, 3, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 20), (4, 3, 5), {"strides": [2], "pads": [2, 1]}),
])
def test_conv_with_bias_batchnorm_and_hardswish_tail(shape, w_shape, attrs):
    m_out = w_shape[0]
    inits = [("w", rng.standard_normal(w_shape, np.float32)), ("bias", rng.standard_normal(m_out, np.float32)),
             ("sc", rng.uniform(0.5, 1.5, m_out).astype(np.float32)), ("bb", rng.standard_normal(m_out, np.float32)),
             ("mu", rng.standard_normal(m_out, np.float32)), ("var", rng.uniform(0.5, 1.5, m_out).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], **attrs),
             helper.make_node("BatchNormalization", ["c", "sc", "bb", "mu", "var"], ["bn"], epsilon=1e-3),
             helper.make_node("HardSwish", ["bn"], ["y"])]
    m = _model(nodes, [("x", F, list(shape))], [("y", F, [None] * len(shape))], inits)
    _check(m, {"x": rng.standard_normal(shape, np.float32)}, fused_at_least=3, rtol=1e-4, atol=1e-4)


def test_matmul_and_gemm_tails():
    inits = [("w", rng.standard_normal((6, 5), np.float32)), ("b", rng.standard_normal(5, np.float32)),
             ("g", rng.standard_normal((4, 5), np.float32)), ("c", rng.standard_normal(4, np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Tanh", ["mb"], ["t"]),
             helper.make_node("Gemm", ["t", "g", "c"], ["gm"], transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Relu", ["gm"], ["y"])]
    m = _model(nodes, [("x", F, [3, 6])], [("y", F, [3, 4])], inits)
    sess = _check(m, {"x": rng.standard_normal((3, 6), np.float32)}, fused_at_least=5, rtol=1e-5, atol=1e-5)
    assert len({a["fused_node"] for a in sess.get_node_assignment().values()}) == 1


def test_groups_stay_convex_around_a_node_the_ep_does_not_take():
    # a -> Transpose (not fused) -> c, and a -> c directly: fusing a and c together would be non-convex
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Transpose", ["a"], ["t"], name="t", perm=[1, 0]),
             helper.make_node("Add", ["a", "t"], ["y"], name="c")]
    m = _model(nodes, [("x", F, [3, 3])], [("y", F, [3, 3])])
    sess = _check(m, {"x": rng.standard_normal((3, 3), np.float32)}, fused_at_least=2)
    a = sess.get_node_assignment()
    assert a["a"]["fused_node"] != a["c"]["fused_node"]


def test_dynamic_shapes_run_with_one_compiled_kernel():
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]), helper.make_node("Add", ["a", "one"], ["y"])]
    m = _model(nodes, [("x", F, ["n", 4])], [("y", F, ["n", 4])], [("one", np.array([1.0], np.float32))])
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA])
    for n in (1, 5, 0):
        x = rng.standard_normal((n, 4), np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x * x + 1, rtol=1e-6)


def test_parallel_option_is_validated():
    from ep_core.errors import ConfigError

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

"""The Numba CPU EP at the edges, against onnxruntime (and the reference EP where the two agree):
element-wise kernels on NaN, infinities and large magnitudes, and nodes beyond the bounds of the
EP's stored record, which it must leave to the next EP instead of failing the session."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
ort = pytest.importorskip("onnxruntime")

from ep_core import InferenceSession  # noqa: E402
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions  # noqa: E402
from ep_numba_cpu.ops import HELPERS, SIGMOID_TAIL  # noqa: E402
from ep_numba_cpu.spec import MAX_ATTR_VALUES  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"
EDGES = [-1e30, -1000, -100, -89, -30, -20, -17, -16, -12, -8, -1, -1e-30, 0, -0.0, 1e-30, 0.5, 8, 20, 50, 88, 89]
EDGES += [100, 1000, 1e30, math.nan, math.inf, -math.inf]


def _model(nodes: list[Any], inputs: list[str], outputs: list[str], dtype: int, inits: list[Any]) -> bytes:
    """A model of 1-D values of one type (opset 17, ai.onnx.ml 2)."""
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, dtype, ["n"]) for n in inputs],
        [helper.make_tensor_value_info(n, dtype, ["n"]) for n in outputs],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    return helper.make_model(g, opset_imports=opsets, ir_version=8).SerializeToString()


def _ort(model: bytes, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return list(ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed))


def _ours(model: bytes, feed: dict[str, np.ndarray], providers: list[str]) -> tuple[list[np.ndarray], Any]:
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model, so, providers=providers)
    return list(sess.run(None, feed)), sess


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


UNARY = [
    ("Softplus", {}),
    ("HardSigmoid", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}),
    ("Relu", {}),
    ("LeakyRelu", {"alpha": 0.1}),
    ("Sigmoid", {}),
    ("Tanh", {}),
]


def _activations(dtype: int) -> tuple[bytes, dict[str, np.ndarray], list[np.ndarray]]:
    """The model of every ``UNARY`` activation over ``EDGES``, its feed, and what the EP makes."""
    nodes = [helper.make_node(op, ["x"], [f"y{i}"], **at) for i, (op, at) in enumerate(UNARY)]
    model = _model(nodes, ["x"], [f"y{i}" for i in range(len(UNARY))], dtype, [])
    feed = {"x": np.array(EDGES, helper.tensor_dtype_to_np_dtype(dtype))}
    got, sess = _ours(model, feed, [NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    assert np.all(np.isfinite(got[0][np.isfinite(feed["x"])]))  # Softplus
    return model, feed, got


def test_float32_activations_on_edge_values_match_onnxruntime_and_the_reference() -> None:
    """Softplus stays finite past exp's overflow (x >= 89 was inf); NaN goes through the clamping
    activations (HardSigmoid(NaN) was 1)."""
    model, feed, got = _activations(TensorProto.FLOAT)
    with np.errstate(all="ignore"):
        ref, _ = _ours(model, feed, [REF])
    for (op, _), g, w, r in zip(UNARY, got, _ort(model, feed), ref, strict=True):
        _close(g, w, rtol=1e-5, atol=1e-6)
        if op != "Sigmoid":  # the reference's exact 1/(1+exp(-x)) is not onnxruntime's MLAS tail
            _close(g, r, rtol=1e-5, atol=1e-6)


def test_float64_activations_on_edge_values_match_the_reference() -> None:
    """onnxruntime's CPU EP has no double Softplus, HardSigmoid, HardSwish...: the reference decides."""
    model, feed, got = _activations(TensorProto.DOUBLE)
    with np.errstate(all="ignore"):
        ref, _ = _ours(model, feed, [REF])
    for g, r in zip(got, ref, strict=True):
        _close(g, r, rtol=1e-12, atol=1e-300)


def test_softplus_over_a_range_is_as_close_to_onnxruntime_as_exact_rounding() -> None:
    x = np.concatenate([np.linspace(-100, 100, 40001, dtype=np.float32), np.float32([1e4, 3e38, -3e38])])
    model = _model([helper.make_node("Softplus", ["x"], ["y"])], ["x"], ["y"], TensorProto.FLOAT, [])
    (got,), _ = _ours(model, {"x": x}, [NUMBA])
    (want,) = _ort(model, {"x": x})
    exact = np.logaddexp(0, x.astype(np.float64))
    # onnxruntime's own error against the exact value bounds ours (its form differs by an ulp or so)
    bound = np.abs(want - exact) + np.spacing(np.abs(exact).astype(np.float32))
    assert np.all(np.abs(got - exact) <= bound * 1.01)


@pytest.mark.parametrize("order", ["x first", "x second", "three"])
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_and_min_propagate_nan_from_any_argument(op: str, order: str) -> None:
    ins = {"x first": ["x", "w"], "x second": ["w", "x"], "three": ["w", "w", "x"]}[order]
    model = _model([helper.make_node(op, ins, ["y"])], ["x", "w"], ["y"], TensorProto.FLOAT, [])
    x = np.array([np.nan, -np.inf, np.inf, -2, 0, 2, np.nan], np.float32)
    w = np.array([0, np.nan, np.nan, np.nan, 1, -1, np.nan], np.float32)
    feed = {"x": x, "w": w}
    (got,), _ = _ours(model, feed, [NUMBA])
    (want,) = _ort(model, feed)
    (ref,), _ = _ours(model, feed, [REF])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ref)
    assert np.isnan(got[[0, 1, 2, 3, 6]]).all()


def _sigmoid_log_model() -> bytes:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Log", ["s"], ["l"])]
    return _model(nodes, ["x"], ["s", "l"], TensorProto.FLOAT, [])


def test_float32_sigmoid_tail_is_onnxruntimes_bit_for_bit() -> None:
    """Below SIGMOID_TAIL the result is onnxruntime's MLAS logistic: positive down to x = -18
    (the tanh form was 0 below -15.8, so Log(Sigmoid(-16)) was -inf where onnxruntime has -16.6)."""
    x = np.concatenate([np.linspace(-100, SIGMOID_TAIL, 100001, dtype=np.float32), np.float32([-16, -17, -1e30])])
    x = x[x < SIGMOID_TAIL]
    (s, lg), _ = _ours(_sigmoid_log_model(), {"x": x}, [NUMBA])
    want_s, want_l = _ort(_sigmoid_log_model(), {"x": x})
    np.testing.assert_array_equal(s.view(np.uint32), want_s.view(np.uint32))
    np.testing.assert_allclose(lg, want_l, rtol=2e-7)  # the Log's own rounding may differ by an ulp
    assert s[-3] > 0 and s[-2] > 0 and np.isfinite(lg[-3]) and abs(lg[-3] - -16.6355) < 1e-3


def test_float32_sigmoid_above_the_tail_keeps_the_fast_form() -> None:
    """x >= SIGMOID_TAIL: bit for bit 0.5 + 0.5 * tanh32(x / 2), what the kernels computed before."""
    from numba import njit

    ns: dict[str, Any] = {"np": np, "njit": njit}
    exec(HELPERS["_tanh32"], ns)  # noqa: S102 - the EP's own helper source
    tanh32 = ns["_tanh32"]

    @njit
    def fast(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = np.float32(0.5) + np.float32(0.5) * tanh32(np.float32(0.5) * x[i])
        return out

    x = np.concatenate([np.linspace(SIGMOID_TAIL, 30, 100001, dtype=np.float32), np.float32([np.inf, 0.0, -0.0])])
    (s, _), _ = _ours(_sigmoid_log_model(), {"x": x}, [NUMBA])
    np.testing.assert_array_equal(s.view(np.uint32), fast(x).view(np.uint32))


def test_sigmoid_rows_with_and_without_the_tail_match_the_one_pass_form() -> None:
    """A kernel computes each block of a row without the sigmoid's tail first and again with it
    when any of the block's arguments is below SIGMOID_TAIL: blocks of both kinds (and NaN) give exactly what
    ``_sigmoid32`` gives, value by value, through a broadcast bias and a SiLU's product."""
    from numba import njit

    from ep_numba_cpu import generate

    ns: dict[str, Any] = {"np": np, "njit": njit}
    for name in ("_logistic_mlas32", "_tanh32", "_sigmoid32"):
        exec(HELPERS[name], ns)  # noqa: S102 - the EP's own helper source
    sigmoid32 = ns["_sigmoid32"]

    @njit
    def silu(v: np.ndarray) -> np.ndarray:
        out = np.empty_like(v)
        for i in range(v.size):
            out.flat[i] = v.flat[i] * sigmoid32(v.flat[i])
        return out

    x = np.random.default_rng(7).uniform(-6, 6, (5, 1300)).astype(np.float32)
    x[1, 17] = -9.5  # rows 1 and 3 reach the tail in one block of 512 each, row 4 holds a NaN
    x[3, 1299] = -40.0
    x[4, 600] = np.nan
    bias = np.float32([[0.25], [-0.5], [1.0], [0.0], [-1.5]])
    nodes = [
        helper.make_node("Add", ["x", "b"], ["v"]),
        helper.make_node("Sigmoid", ["v"], ["s"]),
        helper.make_node("Mul", ["v", "s"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1300])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1300])],
        [numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    (y,), sess = _ours(model, {"x": x}, [NUMBA])
    assert all(a["ep"] == NUMBA for a in sess.get_node_assignment().values())
    np.testing.assert_array_equal(y.view(np.uint32), silu(x + bias).view(np.uint32))
    head = generate._sigmoid_head(["v0 = (x0 + x1)", "v1 = (v0 * _sigmoid32(v0))"])
    assert head is not None and head[1] == ["v0"] and "_sigmoid32" not in "".join(head[0])
    assert generate._sigmoid_head(["v1 = _sigmoid32((x0 + x1))"]) is None  # a compound argument: one pass


# ---------------------------------------------------------------- nodes beyond the record's bounds
def _label_encoder(n: int) -> bytes:
    """A LabelEncoder whose key and value lists hold ``n`` entries each (a big lookup table)."""
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", default_int64=-1)
    for name, values in (("keys_int64s", np.arange(n)), ("values_int64s", np.arange(n) * 3)):
        attr = helper.make_attribute(name, [0])
        del attr.ints[:]
        attr.ints.extend(values.astype(np.int64))
        node.attribute.append(attr)
    return _model([node], ["x"], ["y"], TensorProto.INT64, [])


def _strided_conv() -> bytes:
    """A Conv with a stride over the compiled Conv's bound (4096): valid ONNX all the same."""
    w = numpy_helper.from_array(np.full((2, 1, 1, 1), 0.5, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[5000, 5000])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])],
        [w],
    )
    m: ModelProto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return m.SerializeToString()


def test_a_node_over_the_attribute_bound_runs_on_the_next_ep(caplog: pytest.LogCaptureFixture) -> None:
    model = _label_encoder(MAX_ATTR_VALUES + 1)
    feed = {"x": np.array([0, 5, MAX_ATTR_VALUES, MAX_ATTR_VALUES + 7], np.int64)}
    with caplog.at_level(logging.WARNING, logger="ep_core"):
        got, sess = _ours(model, feed, [NUMBA, REF])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {REF}
    np.testing.assert_array_equal(got[0], _ort(model, feed)[0])
    assert any("keys_int64s" in r.getMessage() and "next EP" in r.getMessage() for r in caplog.records)


def test_a_node_within_the_bound_is_still_taken() -> None:
    model = _label_encoder(1000)
    feed = {"x": np.array([0, 5, 999, 1007], np.int64)}
    got, sess = _ours(model, feed, [NUMBA, REF])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    np.testing.assert_array_equal(got[0], _ort(model, feed)[0])


def test_a_conv_over_the_compiled_bounds_is_delegated_not_refused() -> None:
    model = _strided_conv()
    feed = {"x": np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)}
    got, sess = _ours(model, feed, [NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    np.testing.assert_allclose(got[0], _ort(model, feed)[0], rtol=1e-6)


CLIP_CASES = {  # (min, max) as initializers, None for absent, at opset 17; "attrs" cases at opset 9
    "absent": (None, None),
    "min only": (0.0, None),
    "max only": (None, 0.0),
    "NaN min": (math.nan, 1.0),
    "NaN max": (0.0, math.nan),
    "both NaN": (math.nan, math.nan),
    "min above max": (2.0, 1.0),
}


@pytest.mark.parametrize("case", sorted(CLIP_CASES))
@pytest.mark.parametrize("provider", [NUMBA, REF])
def test_clip_bounds_as_onnxruntime(provider: str, case: str) -> None:
    """An absent bound is the type's lowest or largest value (an infinity clips to 3.4e38, as the
    spec says); a NaN bound does not bound (both EPs gave all NaN); min above max gives max."""
    lo, hi = CLIP_CASES[case]
    names = ["x", "" if lo is None else "lo", "" if hi is None else "hi"]
    while names[-1] == "":
        names.pop()
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", lo), ("hi", hi)) if v is not None]
    model = _model([helper.make_node("Clip", names, ["y"])], ["x"], ["y"], TensorProto.FLOAT, inits)
    x = np.array(EDGES, np.float32)
    (got,), _ = _ours(model, {"x": x}, [provider])
    (want,) = _ort(model, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.5])
@pytest.mark.parametrize("provider", [NUMBA, REF])
def test_pow_by_a_constant_as_onnxruntime(provider: str, exponent: float) -> None:
    """2 and 3 multiply as onnxruntime's Pow does (the cube was a float64 power: 1e-6 off and
    100x slower on GPT-2's gelu_new); other exponents stay powers."""
    e = numpy_helper.from_array(np.array(exponent, np.float32), "e")
    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])], ["x"], ["y"], TensorProto.FLOAT, [e])
    x = np.array([v for v in EDGES if abs(v) < 1e12], np.float32) * np.float32(1.37)
    (got,), _ = _ours(model, {"x": x}, [provider])
    (want,) = _ort(model, {"x": x})
    if exponent in (2.0, 3.0):
        np.testing.assert_array_equal(got, want)
    else:
        _close(got, want, rtol=2e-7, atol=0)

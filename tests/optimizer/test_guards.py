"""Valid models on which onnxscript's rules (as onnxscript ships them) changed results, failed at run
time or made the optimizer give up, each run at every level against onnxruntime with its
optimizations off (the model's meaning): ep_core/optimizer/guards.py adds the conditions they
lack, own_rules._Clamps merges Relu/Clip chains, and initializers a feed may replace are never
taken for constants (by rewrites, folding, inference or kernels)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from ep_core import InferenceSession
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

F = np.float32
vi = h.make_tensor_value_info
PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]


def _model(nodes: list[Any], ins: list[Any], outs: list[Any], inits: tuple[Any, ...] = (), opset: int = 17) -> bytes:
    graph = h.make_graph(nodes, "g", ins, outs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=9).SerializeToString()


def _c(name: str, value: Any, dtype: Any = F) -> onnx.TensorProto:
    return nh.from_array(np.array(value, dtype), name)


def _hard_swish(bias: float, shape: tuple[int, ...]) -> bytes:
    out = [1] * (len(shape) - 2) + [2, 3] if len(shape) > 2 else [2, 3]
    nodes = [
        h.make_node("Add", ["x", "b"], ["a"]),
        h.make_node("Clip", ["a", "lo", "hi"], ["c"]),
        h.make_node("Mul", ["c", "x"], ["m"]),
        h.make_node("Div", ["m", "d"], ["y"]),
    ]
    inits = (
        nh.from_array(np.full(shape, bias, F), "b"),
        _c("lo", 0),
        _c("hi", 6),
        nh.from_array(np.full(shape, 6, F), "d"),
    )
    return _model(nodes, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, out)], inits, opset=14)


X3 = {"x": np.array([-1, 3, 9], F)}
XHS = {"x": np.array([[-4, -1, 0.5], [2, 3.2, 9]], F)}
ONE = np.ones((1, 1, 2, 2), F)
CASES: dict[str, tuple[Callable[[], bytes], dict[str, np.ndarray]]] = {
    "ScatterND with reduction add is not its updates": (
        lambda: _model(
            [h.make_node("ScatterND", ["x", "idx", "u"], ["y"], reduction="add")],
            [vi("x", TP.FLOAT, [2, 3]), vi("u", TP.FLOAT, [2, 3])],
            [vi("y", TP.FLOAT, [2, 3])],
            (_c("idx", [[0], [1]], np.int64),),
            opset=18,
        ),
        {"x": np.arange(6, dtype=F).reshape(2, 3), "u": np.full((2, 3), 10, F)},
    ),
    "double to float to float16 rounds twice": (
        lambda: _model(
            [h.make_node("Cast", ["x"], ["a"], to=TP.FLOAT), h.make_node("Cast", ["a"], ["y"], to=TP.FLOAT16)],
            [vi("x", TP.DOUBLE, [3])],
            [vi("y", TP.FLOAT16, [3])],
        ),
        {"x": np.array([1 + 2**-11 + 2**-40, 65519.999999, 3.0])},
    ),
    "Min/Max with a NaN bound is not a Clip": (
        lambda: _model(
            [h.make_node("Max", ["x", "lo"], ["a"]), h.make_node("Min", ["a", "hi"], ["y"])],
            [vi("x", TP.FLOAT, [3])],
            [vi("y", TP.FLOAT, [3])],
            (_c("lo", np.nan), _c("hi", 1.0)),
        ),
        X3,
    ),
    "Min/Max with a [1, 1] bound keeps its broadcast": (
        lambda: _model(
            [h.make_node("Max", ["x", "lo"], ["a"]), h.make_node("Min", ["a", "hi"], ["y"])],
            [vi("x", TP.FLOAT, [3])],
            [vi("y", TP.FLOAT, [1, 3])],
            (_c("lo", [[0.0]]), _c("hi", 6.0)),
        ),
        X3,
    ),
    "Min/Max at opset 10": (
        lambda: _model(
            [h.make_node("Max", ["x", "lo"], ["a"]), h.make_node("Min", ["a", "hi"], ["y"])],
            [vi("x", TP.FLOAT, [3])],
            [vi("y", TP.FLOAT, [3])],
            (_c("lo", 0), _c("hi", 6)),
            opset=10,
        ),
        X3,
    ),
    "one-input Max of a one-input Max": (
        lambda: _model(
            [h.make_node("Max", ["x"], ["a"]), h.make_node("Max", ["a"], ["y"])],
            [vi("x", TP.FLOAT, [3])],
            [vi("y", TP.FLOAT, [3])],
        ),
        X3,
    ),
    "HardSwish with a bias of 3.0003 is not HardSwish": (lambda: _hard_swish(3.0003, ()), XHS),
    "HardSwish with [1, 1, 1] constants keeps their broadcast": (lambda: _hard_swish(3.0, (1, 1, 1)), XHS),
    "Flatten of a zero-sized dim": (
        lambda: _model(
            [h.make_node("Flatten", ["x"], ["y"], axis=2)], [vi("x", TP.FLOAT, [2, 0, 3])], [vi("y", TP.FLOAT, [0, 3])]
        ),
        {"x": np.zeros((2, 0, 3), F)},
    ),
    "Flatten of an empty batch (no Reshape [0, -1])": (
        lambda: _model(
            [h.make_node("Flatten", ["x"], ["y"], axis=1)],
            [vi("x", TP.FLOAT, ["N", "K", 4])],
            [vi("y", TP.FLOAT, None)],
        ),
        {"x": np.zeros((0, 1, 4), F)},
    ),
    "two Flattens of one value": (
        lambda: _model(
            [
                h.make_node("Flatten", ["x"], ["a"], axis=1),
                h.make_node("Flatten", ["x"], ["b"], axis=1),
                h.make_node("Add", ["a", "b"], ["y"]),
            ],
            [vi("x", TP.FLOAT, ["N", "K", 4])],
            [vi("y", TP.FLOAT, None)],
        ),
        {"x": np.ones((2, 3, 4), F)},
    ),
    "Dropout in training mode (a train-mode export), its mask unused": (
        lambda: _model(
            [
                h.make_node("Add", ["x", "x"], ["a"]),
                h.make_node("Dropout", ["a", "r", "t"], ["d"], seed=1),
                h.make_node("Relu", ["d"], ["y"]),
            ],
            [vi("x", TP.FLOAT, [3])],
            [vi("y", TP.FLOAT, [3])],
            (_c("r", 0.5), h.make_tensor("t", TP.BOOL, [], [True])),
        ),
        X3,
    ),
    "ConstantOfShape of 2**40 cast to int32": (
        lambda: _model(
            [
                h.make_node("Shape", ["x"], ["s"]),
                h.make_node("ConstantOfShape", ["s"], ["c"], value=nh.from_array(np.array([2**40], np.int64))),
                h.make_node("Cast", ["c"], ["y"], to=TP.INT32),
            ],
            [vi("x", TP.FLOAT, ["N"])],
            [vi("y", TP.INT32, ["N"])],
        ),
        X3,
    ),
    "BatchNormalization spatial=0 after a Conv": (
        lambda: _model(
            [
                h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                h.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["y"], spatial=0),
            ],
            [vi("x", TP.FLOAT, [1, 1, 2, 2])],
            [vi("y", TP.FLOAT, [1, 1, 2, 2])],
            (_c("w", np.ones((1, 1, 3, 3))),)
            + tuple(_c(n, np.full((1, 2, 2), v)) for n, v in (("g", 2), ("b", 1), ("mu", 0.5), ("var", 1))),
            opset=8,
        ),
        {"x": ONE},
    ),
    "Pad with attribute pads before a Conv": (
        lambda: _model(
            [h.make_node("Pad", ["x"], ["p"], pads=[0, 0, 1, 1, 0, 0, 1, 1]), h.make_node("Conv", ["p", "w"], ["y"])],
            [vi("x", TP.FLOAT, [1, 1, 2, 2])],
            [vi("y", TP.FLOAT, [1, 1, 2, 2])],
            (_c("w", np.ones((1, 1, 3, 3))),),
            opset=10,
        ),
        {"x": ONE},
    ),
    "Relu of a double Clip without max": (
        lambda: _model(
            [h.make_node("Clip", ["x", "lo"], ["a"]), h.make_node("Relu", ["a"], ["y"])],
            [vi("x", TP.DOUBLE, [4])],
            [vi("y", TP.DOUBLE, [4])],
            (_c("lo", -1.0, np.float64),),
        ),
        {"x": np.array([-2, 1e300, 5e38, np.inf])},
    ),
    "float16 Clip without max after a Relu": (
        lambda: _model(
            [h.make_node("Relu", ["x"], ["a"]), h.make_node("Clip", ["a", "lo"], ["y"])],
            [vi("x", TP.FLOAT16, [3])],
            [vi("y", TP.FLOAT16, [3])],
            (_c("lo", -1.0, np.float16),),
        ),
        {"x": np.array([-np.inf, np.inf, 9], np.float16)},
    ),
}


def _onnxruntime(model: bytes, feed: dict[str, np.ndarray], level: Any = None) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = level or ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)


def _ours(model: bytes, feed: dict[str, np.ndarray], level: int, provider: str) -> list[np.ndarray]:
    so = SessionOptions(graph_optimization_level=GraphOptimizationLevel(level))
    so.add_session_config_entry("session.optimizer_cache", "0")
    return InferenceSession(model, so, providers=[provider]).run(None, feed)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrites_keep_the_model_s_results(name: str, provider: str, caplog: pytest.LogCaptureFixture) -> None:
    make, feed = CASES[name]
    model = make()
    # onnxruntime's level 1 removes a Dropout whatever its training_mode (unoptimized, it drops at random)
    want = _onnxruntime(model, feed, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if "Dropout" in name else None)
    for level in (1, 99):
        with caplog.at_level(logging.WARNING, logger="ep_core"):
            got = _ours(model, feed, level, provider)
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        assert "unoptimized" not in caplog.text  # no rule failed on it
        caplog.clear()


def _overridable(nodes: list[Any], ins: list[Any], inits: tuple[Any, ...], out: Any) -> bytes:
    """A model whose initializers are also graph inputs (a feed may replace them)."""
    ins = ins + [vi(t.name, t.data_type, list(t.dims)) for t in inits]
    return _model(nodes, ins, [out], inits)


OVERRIDES: dict[str, tuple[bytes, dict[str, np.ndarray]]] = {
    "Min of Min (folded bounds)": (
        _overridable(
            [h.make_node("Min", ["x", "c1"], ["a"]), h.make_node("Min", ["a", "c2"], ["y"])],
            [vi("x", TP.FLOAT, [3])],
            (_c("c1", 5), _c("c2", 6)),
            vi("y", TP.FLOAT, [3]),
        ),
        {"x": np.array([1, 7, 9], F), "c1": np.array(0, F)},
    ),
    "Mul by a fed 1": (
        _overridable(
            [h.make_node("Mul", ["x", "k"], ["y"])], [vi("x", TP.FLOAT, [3])], (_c("k", 1),), vi("y", TP.FLOAT, [3])
        ),
        {"x": np.array([1, 2, 3], F), "k": np.array(3, F)},
    ),
    "Pad's pads before a Conv (inferred shape)": (
        _overridable(
            [h.make_node("Pad", ["x", "p"], ["a"]), h.make_node("Conv", ["a", "w"], ["y"])],
            [vi("x", TP.FLOAT, [1, 1, 4, 4])],
            (_c("p", [0, 0, 1, 1, 0, 0, 1, 1], np.int64), _c("w", np.ones((1, 1, 3, 3)))),
            vi("y", TP.FLOAT, None),
        ),
        {"x": np.arange(16, dtype=F).reshape(1, 1, 4, 4), "p": np.zeros(8, np.int64)},
    ),
    "Clip's bound": (
        _overridable(
            [h.make_node("Clip", ["x", "lo"], ["y"])], [vi("x", TP.FLOAT, [3])], (_c("lo", 0),), vi("y", TP.FLOAT, [3])
        ),
        {"x": X3["x"], "lo": np.array(5, F)},
    ),
    "Reshape's shape": (
        _overridable(
            [h.make_node("Reshape", ["x", "s"], ["y"])],
            [vi("x", TP.FLOAT, [2, 3])],
            (_c("s", [3, 2], np.int64),),
            vi("y", TP.FLOAT, None),
        ),
        {"x": np.arange(6, dtype=F).reshape(2, 3), "s": np.array([6, 1], np.int64)},
    ),
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_a_fed_initializer_is_never_taken_for_a_constant(name: str, provider: str) -> None:
    """ep-core's rewrites, shape inference and both EPs' kernels used the initializer's value
    where the feed replaced it (the Numba EP even with the optimizer off)."""
    model, feed = OVERRIDES[name]
    want = _onnxruntime(model, feed)
    default = {k: v for k, v in feed.items() if k == "x"}
    for level in (0, 1, 99):
        got = _ours(model, feed, level, provider)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)
        for w, g in zip(_onnxruntime(model, default), _ours(model, default, level, provider), strict=True):
            np.testing.assert_array_equal(g, w)  # the initializer's own value when not fed


def test_before_ir_4_initializers_listed_as_inputs_are_constants_and_the_model_given_is_kept() -> None:
    nodes = [h.make_node("Mul", ["x", "k"], ["a"]), h.make_node("Mul", ["a", "one"], ["y"])]
    m = h.make_model(
        h.make_graph(
            nodes,
            "g",
            [vi("x", TP.FLOAT, [3]), vi("k", TP.FLOAT, []), vi("one", TP.FLOAT, [])],
            [vi("y", TP.FLOAT, [3])],
            [_c("k", 2), _c("one", 1)],
        ),
        opset_imports=[h.make_opsetid("", 8)],
        ir_version=3,
    )
    before = m.SerializeToString()
    sess = InferenceSession(m, providers=["CpuReferenceExecutionProvider"])
    assert m.SerializeToString() == before  # the caller's ModelProto is not edited
    assert [i.name for i in sess.get_inputs()] == ["x"] and sess.get_overridable_initializers() == []
    np.testing.assert_array_equal(sess.run(None, X3)[0], 2 * X3["x"])
    assert [n.op_type for n in sess._built.model.graph.node].count("Mul") == 1  # the Mul by 1 went: a constant


def test_a_double_clip_chain_at_opset_10_keeps_the_type_s_own_limit() -> None:
    """Attribute bounds are float32: the merged Clip leaves out a bound at the type's extreme (a
    double's largest value would become inf and clamp nothing). onnxruntime has no double Clip-6
    kernel: the unoptimized model is the reference."""
    nodes = [h.make_node("Clip", ["x"], ["a"], min=-1.0), h.make_node("Relu", ["a"], ["y"])]
    model = _model(nodes, [vi("x", TP.DOUBLE, [4])], [vi("y", TP.DOUBLE, [4])], opset=10)
    feed = {"x": np.array([-2, 1e300, 5e38, np.inf])}
    big = np.finfo(np.float64).max
    for provider in PROVIDERS:
        np.testing.assert_array_equal(_ours(model, feed, 0, provider)[0], [0, 1e300, 5e38, big])
        np.testing.assert_array_equal(_ours(model, feed, 1, provider)[0], [0, 1e300, 5e38, big])


def _with_function(body_op: str, function_opset: int, model_opset: int) -> bytes:
    f = h.make_function(
        "local", "act", ["x"], ["y"], [h.make_node(body_op, ["x"], ["y"])], [h.make_opsetid("", function_opset)]
    )
    g = h.make_graph(
        [h.make_node("act", ["x"], ["y"], domain="local")], "g", [vi("x", TP.FLOAT, [3])], [vi("y", TP.FLOAT, [3])]
    )
    opsets = [h.make_opsetid("", model_opset), h.make_opsetid("local", 1)]
    return h.make_model(g, opset_imports=opsets, functions=[f], ir_version=10).SerializeToString()


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("function_opset", [22, 21])
def test_model_local_functions_are_inlined(provider: str, function_opset: int) -> None:
    """skl2onnx's KNNImputer calls nine local functions at ai.onnx 21 in an opset 22 model: onnx's
    inliner refuses the mismatch, so no EP could run the calls; Relu is the same at both."""
    model = _with_function("Relu", function_opset, 22)
    want = _onnxruntime(model, X3)
    np.testing.assert_array_equal(_ours(model, X3, 0, provider)[0], want[0])


def test_a_local_function_whose_op_changed_between_its_opset_and_the_model_s_is_refused() -> None:
    from ep_core.sdk.errors import InvalidGraph

    with pytest.raises(
        InvalidGraph, match=r"function op Relu.*FunctionOp imports version 11 whereas model imports version 13"
    ):
        InferenceSession(_with_function("Relu", 11, 13))

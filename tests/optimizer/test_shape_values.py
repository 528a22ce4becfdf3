"""Reshapes whose targets are computed from shapes get output shapes (``shape_values``).

The pattern is tf2onnx's Dense layer on a dynamic batch: ``Shape -> Cast -> Gather -> Concat ->
Cast -> Reshape``. onnx's inference leaves the Reshape's output without a rank, and everything
after it; the session's optimized model now has the shape, at every optimization level, and the
Numba EP compiles the element-wise ops after it instead of delegating them one by one."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core.optimizer.shape_values import resolve_reshapes, with_computed_reshapes

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _dense_model(target: str = "tf") -> onnx.ModelProto:
    """x [batch, 6, 4] -> Reshape [-1, 4] -> MatMul [4, 8] -> Reshape back to [batch, 6, 8] with a
    computed target -> Erf -> Mul (a Gelu-like tail)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Cast", ["shape"], ["shape32"], to=TensorProto.INT32),
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("MatMul", ["x2", "w"], ["y2"]),
    ]
    if target == "tf":
        nodes += [
            helper.make_node("Gather", ["shape32", "free"], ["kept"], axis=0),
            helper.make_node("Concat", ["kept", "units"], ["target32"], axis=0),
        ]
    elif target == "slice":
        nodes += [
            helper.make_node("Slice", ["shape32", "starts", "ends"], ["kept"]),
            helper.make_node("Concat", ["kept", "units"], ["target32"], axis=0),
        ]
    else:  # scalars: batch and 6 gathered one by one, unsqueezed, and -1 for the last dim
        nodes += [
            helper.make_node("Gather", ["shape32", "zero"], ["b"], axis=0),
            helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
            helper.make_node("Concat", ["b1", "six_minus1"], ["target32"], axis=0),
        ]
    nodes += [
        helper.make_node("Cast", ["target32"], ["target"], to=I64),
        helper.make_node("Reshape", ["y2", "target"], ["y"]),
        helper.make_node("Erf", ["y"], ["e"]),
        helper.make_node("Mul", ["e", "y"], ["out"]),
    ]
    inits = {
        "flat": np.array([-1, 4], np.int64),
        "w": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32),
        "free": np.array([0, 1], np.int32),
        "units": np.array([8], np.int32),
        "starts": np.array([0], np.int64),
        "ends": np.array([2], np.int64),
        "zero": np.array(0, np.int64),
        "axes0": np.array([0], np.int64),
        "six_minus1": np.array([6, -1], np.int32),
    }
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", F, ["batch", 6, 4])],
        [helper.make_tensor_value_info("out", F, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def _dims(model: onnx.ModelProto, name: str) -> list[Any] | None:
    for v in model.graph.value_info:
        if v.name == name:
            t = v.type.tensor_type
            if not t.HasField("shape"):
                return None
            return [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in t.shape.dim]
    return None


@pytest.mark.parametrize(
    "target,want", [("tf", ["batch", 6, 8]), ("slice", ["batch", 6, 8]), ("scalars", ["batch", 6, None])]
)
def test_computed_targets_give_the_reshape_and_what_follows_a_shape(target: str, want: list[Any]) -> None:
    model = _dense_model(target)
    assert _dims(model, "y") is None and _dims(model, "e") is None  # onnx alone: no rank
    out = with_computed_reshapes(model)
    after = _dims(out, "e")
    assert _dims(out, "y") == want and after is not None and len(after) == 3 and after[:2] == want[:2]
    assert _dims(model, "y") is None  # the model given is not changed


def test_nothing_to_resolve_returns_the_same_object() -> None:
    model = _dense_model("tf")
    resolved = with_computed_reshapes(model)
    assert with_computed_reshapes(resolved) is resolved


def test_a_target_of_unknown_value_or_a_graph_output_is_left_alone() -> None:
    model = _dense_model("tf")
    for n in model.graph.node:
        if n.op_type == "Gather":
            n.input[1] = "x_free"  # indices fed at run time: the target's value is unknown
    model.graph.input.append(helper.make_tensor_value_info("x_free", TensorProto.INT32, [2]))
    assert not resolve_reshapes(model.graph)
    model = _dense_model("tf")
    model.graph.output[0].name = "y"  # the Reshape's output is a graph output: its declared type stands
    del model.graph.node[-2:]
    assert not resolve_reshapes(model.graph)


def test_zero_copies_the_input_dim_and_minus_one_divides_known_numbers() -> None:
    nodes = [helper.make_node("Reshape", ["x", "t"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    for target, want in (([0, -1], [3, 20]), ([-1, 5], [12, 5]), ([0, 0, 2, 2], [3, 4, 2, 2])):
        graph = helper.make_graph(
            [helper.make_node("Concat", ["t_a", "t_b"], ["t"], axis=0), *nodes],
            "g",
            [helper.make_tensor_value_info("x", F, [3, 4, 5])],
            [helper.make_tensor_value_info("z", F, None)],
            [
                numpy_helper.from_array(np.array(target[:1], np.int64), "t_a"),
                numpy_helper.from_array(np.array(target[1:], np.int64), "t_b"),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
        model = onnx.shape_inference.infer_shapes(model)
        assert _dims(with_computed_reshapes(model), "y") == want


def test_sessions_match_onnxruntime_and_the_numba_ep_compiles_the_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """At both ends of the levels the session's answer is onnxruntime's, and the Numba EP runs
    Erf and Mul in a compiled kernel (no delegated step for them: they had no rank before)."""
    import ep_core

    pytest.importorskip("ep_numba_cpu")
    from _support.numba_runners import graph_runners

    ort = pytest.importorskip("onnxruntime")
    model = _dense_model("tf")
    x = np.random.default_rng(1).standard_normal((3, 6, 4)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for level in (ep_core.GraphOptimizationLevel.ORT_DISABLE_ALL, ep_core.GraphOptimizationLevel.ORT_ENABLE_ALL):
        runners = graph_runners(monkeypatch)
        so = ep_core.SessionOptions()
        so.graph_optimization_level = level
        sess = ep_core.InferenceSession(
            model.SerializeToString(), so, providers=["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]
        )
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
        delegated = {step["node"]["op"] for r in runners for kind, step, _ in r.steps if kind == "node"}
        assert runners and not {"Erf", "Mul"} & delegated, delegated


def test_targets_in_external_data_are_left_alone(tmp_path: Any) -> None:
    """A model whose every tensor lives in an external file (``size_threshold=0``): the pass reads
    no file, so the target's value is unknown and the model comes back as it was."""
    model = _dense_model("tf")
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, size_threshold=0, location="m.data")
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert with_computed_reshapes(loaded) is loaded


def test_a_cast_that_could_wrap_a_dim_stops_the_tracking() -> None:
    """A Cast to a narrow integer type (int16 here) may wrap a dim of 1536: its value is unknown."""
    model = _dense_model("tf")
    for n in model.graph.node:
        if n.op_type == "Cast" and n.output[0] == "shape32":
            n.attribute[0].i = TensorProto.INT16
    assert not resolve_reshapes(model.graph)

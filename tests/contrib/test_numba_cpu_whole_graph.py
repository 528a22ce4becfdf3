"""The Numba CPU EP claims whole graphs (issue 15): nodes it does not compile join its groups as
delegated steps run by the reference EP's kernels, so zoo models without control flow run (almost)
entirely on it and match the reference EP; delegated steps survive an EPContext round trip without
compiling anything; tampered delegated records are refused naming the field; buffers the runner
keeps between runs never reach the caller through a delegated view."""

from __future__ import annotations

import json
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support.numba_runners import graph_runners
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions  # noqa: E402
from ep_core.sdk.errors import InvalidGraph  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"
F = TensorProto.FLOAT
# fast zoo models without control flow (a few seconds each)
ZOO = [
    "magika",
    "magika_v1",
    "plcmos",
    "smart_turn",
    "swift_f0",
    "ppocr_cls",
    "minilm_l6",
    "romanizer_encoder",
    "romanizer_decoder",
    "captcha_crnn",
    "orinet_qdq",
    "svc_digits",
    "forest_digits",
    "eeg_seizure_lstm",
]


def _model_feed(name: str) -> dict[str, np.ndarray]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu_reference"))
    try:
        from test_real_models import model_feed
    finally:
        sys.path.pop(0)
    return model_feed(name)


def _close(got: Any, want: Any) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "fc":
        scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_models_run_on_the_ep_and_match_the_reference(name: str) -> None:
    import onnx

    from ep_core.tools import zoo

    path = str(zoo.fetch_model(name))
    assert not {n.op_type for n in onnx.load(path).graph.node} & {"If", "Loop", "Scan"}
    feed = _model_feed(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(path, providers=[NUMBA, REF])
    assignment = sess.get_node_assignment()
    on = [k for k, a in assignment.items() if a["ep"] == NUMBA]
    assert len(on) >= 0.95 * len(assignment), {k: a["ep"] for k, a in assignment.items() if a["ep"] != NUMBA}
    got = sess.run(None, feed)
    want = InferenceSession(path, providers=[REF]).run(None, feed)
    for g, w in zip(got, want, strict=True):
        _close(g, w)


def test_tf2onnx_dense_layers_compile_after_their_computed_reshapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """magika 0.5's Dense+Gelu blocks follow Reshapes whose targets tf2onnx computes from shapes:
    with their shapes known (``ep_core.optimizer.shape_values``) the Erf, Mul and Add after them are
    compiled, not delegated one by one (22.7 ms, 2x the reference EP, before)."""
    from ep_core.tools import zoo

    runners = graph_runners(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        InferenceSession(str(zoo.fetch_model("magika_v1")), providers=[NUMBA, REF])
    delegated = [step["node"]["op"] for r in runners for kind, step, _ in r.steps if kind == "node"]
    assert runners and not {"Erf", "Mul", "Add", "Sub"} & set(delegated), delegated


# ------------------------------------------------------------------------ a small model
def _model() -> Any:
    """Compiled steps (Conv, elementwise tails, MatMul) around delegated ones: MaxPool, Reshape
    with a stored shape, Concat, Transpose, Softmax, ConstantOfShape (a TENSOR attribute), Shape,
    Gather with a scalar index (a 0-d weight), Unsqueeze and ReduceMean."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"),
        numpy_helper.from_array(np.array([1, 4, 16], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32), "Wm"),
        numpy_helper.from_array(np.array(1, np.int64), "idx"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "Wm"], ["mm"]),
        helper.make_node("Tanh", ["mm"], ["t"]),
        helper.make_node("Shape", ["t"], ["tshape"]),
        helper.make_node(
            "ConstantOfShape", ["tshape"], ["ones"], value=numpy_helper.from_array(np.array([0.5], np.float32))
        ),
        helper.make_node("Concat", ["t", "ones"], ["cat"], axis=1),
        helper.make_node("Transpose", ["cat"], ["tr"], perm=[0, 2, 1]),
        helper.make_node("Softmax", ["tr"], ["y"], axis=-1),
        helper.make_node("Gather", ["tshape", "idx"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("ReduceMean", ["y"], ["m"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes,
        "whole",
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", F, [1, 5, 8]),
            helper.make_tensor_value_info("n1", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("m", F, []),
        ],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feed() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def _options(**entries: Any) -> SessionOptions:
    so = SessionOptions()
    for k, v in entries.items():
        so.add_session_config_entry(k.replace("__", "."), str(v))
    return so


def test_small_model_is_one_group_with_delegated_steps_and_matches() -> None:
    src = _model().SerializeToString()
    sess = InferenceSession(src, providers=[NUMBA, REF])
    a = sess.get_node_assignment()
    assert {v["ep"] for v in a.values()} == {NUMBA} and len({v["fused_node"] for v in a.values()}) == 1
    want = InferenceSession(src, providers=[REF]).run(None, _feed())
    for g, w in zip(sess.run(None, _feed()), want, strict=True):
        _close(g, w)


@pytest.fixture(scope="module")
def ctx_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    import onnx

    folder = tmp_path_factory.mktemp("whole_ctx")
    onnx.save(_model(), str(folder / "m.onnx"))
    so = _options(ep__context_enable=1, ep__context_embed_mode=1, ep__context_file_path=folder / "m_ctx.onnx")
    sess = InferenceSession(str(folder / "m.onnx"), so, providers=[NUMBA])
    expected = sess.run(None, _feed())
    return Path(sess.context_model_path), expected


def _record(path: Path) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    """The context model, its (one) graph record's header metadata, and the blob's tensors."""
    import onnx
    from safetensors.numpy import load

    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type == "EPContext")
    blob = next(a.s for a in node.attribute if a.name == "ep_cache_context")
    (n,) = struct.unpack("<Q", blob[:8])
    meta = json.loads(json.loads(blob[8 : 8 + n])["__metadata__"]["ep_numba_cpu"])
    return model, meta, load(blob)


def test_context_round_trip_runs_delegated_steps_and_compiles_nothing(
    ctx_model: tuple[Path, list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import numba.core.compiler as nbc

    path, expected = ctx_model
    _, meta, _ = _record(path)
    (rec,) = meta["graphs"].values()
    kinds = [s["kind"] for s in rec["plan"]["steps"]]
    ops = {s["op"] for s in rec["plan"]["steps"] if s["kind"] == "node"}
    assert {"conv", "matmul", "kernel", "node"} <= set(kinds)
    assert {"MaxPool", "Reshape", "ConstantOfShape", "Concat", "Softmax", "Transpose"} <= ops
    cos = next(s for s in rec["plan"]["steps"] if s.get("op") == "ConstantOfShape")
    assert cos["attrs"]["value"][0] == "tensor" and cos["attrs"]["value"][1] in rec["weights"]
    calls: list[Any] = []
    orig = nbc.compile_extra
    monkeypatch.setattr(nbc, "compile_extra", lambda *a, **k: calls.append(a) or orig(*a, **k))
    sess = InferenceSession(str(path), providers=[NUMBA])
    got = sess.run(None, _feed())
    assert calls == []
    for g, w in zip(got, expected, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _tampered(path: Path, tmp: Path, edit: Any) -> Path:
    """The context model with its record edited by ``edit(step_of_op)`` and the blob's sha256 fixed."""
    import hashlib

    import onnx
    from safetensors.numpy import save

    model, meta, tensors = _record(path)
    (rec,) = meta["graphs"].values()
    edit(rec)
    blob = save(tensors, metadata={"ep_numba_cpu": json.dumps(meta)})
    node = next(n for n in model.graph.node if n.op_type == "EPContext")
    for a in node.attribute:
        if a.name == "ep_cache_context":
            a.s = blob
        if a.name == "notes":
            notes = json.loads(a.s)
            notes["blob_sha256"] = hashlib.sha256(blob).hexdigest()
            a.s = json.dumps(notes).encode()
    out = tmp / "tampered.onnx"
    onnx.save(model, str(out))
    return out


def _step(rec: dict[str, Any], op: str) -> dict[str, Any]:
    return next(s for s in rec["plan"]["steps"] if s.get("op") == op)


TAMPERING = {
    "unknown op": (lambda r: _step(r, "Softmax").__setitem__("op", "NoSuchOp"), r"\.op: .*NoSuchOp"),
    "control flow op": (lambda r: _step(r, "Softmax").__setitem__("op", "If"), r"\.op: .*If"),
    "graph attribute": (
        lambda r: _step(r, "Softmax")["attrs"].__setitem__("axis", ["graph", "g"]),
        r"\.attrs\.axis\[0\]: 'graph'",
    ),
    "attribute value of the wrong type": (
        lambda r: _step(r, "Softmax")["attrs"].__setitem__("axis", ["int", "1; import os"]),
        r"\.attrs\.axis\[1\]",
    ),
    "attribute the op does not have": (
        lambda r: _step(r, "Softmax")["attrs"].__setitem__("source", ["string", "x"]),
        r"\.attrs\.source: Softmax has no such attribute",
    ),
    "oversize attribute": (
        lambda r: _step(r, "Transpose")["attrs"].__setitem__("perm", ["ints", [0] * ((1 << 20) + 1)]),
        r"\.attrs\.perm\[1\]: has 1048577 entries",
    ),
    "oversize name": (
        lambda r: _step(r, "Softmax").__setitem__("op", "S" * 200),
        r"\.op: .* is not an op name",
    ),
    "unknown key": (lambda r: _step(r, "Softmax").__setitem__("source", "x"), r": unexpected keys \['source'\]"),
    "opset the reference EP does not serve": (
        lambda r: _step(r, "Softmax").__setitem__("opset", 999),
        r"\.op: ai.onnx::Softmax at opset 999",
    ),
    "tensor attribute that is no weight": (
        lambda r: _step(r, "ConstantOfShape")["attrs"].__setitem__("value", ["tensor", "x"]),
        r"\.attrs\.value\[1\]: 'x' is not a stored weight",
    ),
    "weight type that disagrees": (
        lambda r: _step(r, "Reshape")["in_types"].__setitem__(1, ["int32", [3]]),
        r"\.in_types\[1\]: is \['int32', \[3\]\], but weight 'shape'",
    ),
    "type of a value an earlier step makes": (  # Transpose reads the Reshape's output
        lambda r: _step(r, "Transpose")["in_types"][0].__setitem__(0, "float64"),
        r"\.in_types\[0\]: is float64, but '.*' is float32",
    ),
    "8-bit kernels on an op that has none": (
        lambda r: _step(r, "Softmax").__setitem__("int8", "vnni"),
        r"\.int8: 'Softmax' has no 8-bit kernels",
    ),
    "8-bit kernels beside malformed types": (  # the node's own fields are checked first
        lambda r: _step(r, "Softmax").update({"int8": "vnni", "in_types": []}),
        r"\.in_types: has 0 entries",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampered_delegated_records_are_refused_naming_the_field(
    case: str, ctx_model: tuple[Path, list[np.ndarray]], tmp_path: Path
) -> None:
    edit, field = TAMPERING[case]
    path = _tampered(ctx_model[0], tmp_path, edit)
    with warnings.catch_warnings(), pytest.raises(InvalidGraph, match=r"plan\.steps\[\d+\]" + field):
        warnings.simplefilter("ignore")
        InferenceSession(str(path), providers=[NUMBA])


def test_lstm_step_runs_compiled_loops_and_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delegated LSTM node is served by the compiled recurrent loop (``generate.node_sources``):
    its kernel is in the context, so a session from the context model compiles nothing."""
    import numba.core.compiler as nbc
    import onnx

    rng = np.random.default_rng(6)
    hidden, size = 4, 3
    inits = [
        numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, size)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R"),
    ]
    g = helper.make_graph(
        [
            helper.make_node("LSTM", ["x", "W", "R"], ["y", "yh"], hidden_size=hidden),
            helper.make_node("Squeeze", ["yh"], ["h"]),
            helper.make_node("Softmax", ["h"], ["p"], axis=-1),
        ],
        "lstm",
        [helper.make_tensor_value_info("x", F, [5, 2, size])],
        [helper.make_tensor_value_info("p", F, [2, hidden]), helper.make_tensor_value_info("y", F, [5, 1, 2, hidden])],
        inits,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(tmp_path / "m.onnx"))
    x = {"x": rng.standard_normal((5, 2, size)).astype(np.float32)}
    so = _options(ep__context_enable=1, ep__context_embed_mode=1, ep__context_file_path=tmp_path / "m_ctx.onnx")
    sess = InferenceSession(str(tmp_path / "m.onnx"), so, providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    expected = sess.run(None, x)
    want = InferenceSession(str(tmp_path / "m.onnx"), providers=[REF]).run(None, x)
    for got, w in zip(expected, want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    _, meta, _ = _record(Path(sess.context_model_path))
    (rec,) = meta["graphs"].values()
    from ep_numba_cpu.generate import node_sources

    assert node_sources(_step(rec, "LSTM"))  # the compiled loop serves it
    calls: list[Any] = []
    orig = nbc.compile_extra
    monkeypatch.setattr(nbc, "compile_extra", lambda *a, **k: calls.append(a) or orig(*a, **k))
    again = InferenceSession(sess.context_model_path, providers=[NUMBA]).run(None, x)
    assert calls == []
    for got, w in zip(again, expected, strict=True):
        np.testing.assert_array_equal(got, w)


# --------------------------------------------------------------------- aliasing and shapes
def test_kept_buffers_never_reach_the_caller_through_delegated_views() -> None:
    """A compiled cluster's output reshaped (a view) into a fused output, Identity of a stored weight
    as an output: each run's outputs stay as they were after later runs, and writing into an output
    never changes what the next run computes."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Mul", ["r", "r"], ["sq"]),
            helper.make_node("Reshape", ["sq", "shape"], ["y"]),
            helper.make_node("Identity", ["W"], ["wi"]),
            helper.make_node("Squeeze", ["wi"], ["w_out"]),
        ],
        "alias",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [6]), helper.make_tensor_value_info("w_out", F, [2, 3])],
        [numpy_helper.from_array(np.array([6], np.int64), "shape"), numpy_helper.from_array(w, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    x1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    y1, w1 = sess.run(None, {"x": x1})
    keep = y1.copy()
    y1[...] = -1
    w1[...] = -1  # the caller owns its outputs: writing into them changes nothing the EP keeps
    y2, w2 = sess.run(None, {"x": 2 * x1})
    np.testing.assert_array_equal(y2, (4 * x1 * x1).reshape(6))
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(y1, -1)
    assert not np.shares_memory(y2, y1) and keep[1] == 1


def test_runner_outputs_through_delegated_views_are_fresh_every_run() -> None:
    """The fused node's compute itself (no session copying its outputs): a compiled cluster's
    output reaches a fused output through Reshape and Unsqueeze (views of the cluster's buffer),
    another is a view of a stored weight (Unsqueeze); no output of one run shares memory with the next run's, with
    a buffer the runner keeps, or with the weight."""
    import onnx

    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu import codegen, generate
    from ep_numba_cpu.planner import build_plan
    from ep_numba_cpu.runtime import GraphRunner

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Mul", ["r", "r"], ["sq"]),
            helper.make_node("Reshape", ["sq", "shape"], ["flat"]),
            helper.make_node("Unsqueeze", ["flat", "ax"], ["y"]),
            helper.make_node("Unsqueeze", ["W", "ax"], ["w_out"]),
        ],
        "alias",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [
            helper.make_tensor_value_info("y", F, [1, 6]),
            helper.make_tensor_value_info("w_out", F, [1, 2, 3]),
        ],
        [
            numpy_helper.from_array(np.array([6], np.int64), "shape"),
            numpy_helper.from_array(np.array([0], np.int64), "ax"),
            numpy_helper.from_array(w, "W"),
        ],
    )
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    view = GraphView(m.graph, opset_map(m))
    gp = build_plan(view, ["x"], ["y", "w_out"], lambda n: False)
    assert [s["kind"] for s in gp.plan["steps"]] == ["kernel", "node", "node", "node"]
    plan, sources = generate.expand(json.loads(json.dumps(gp.plan)), gp.weights)
    kernels = {k: codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher for k, ks in sources.items()}
    runner = GraphRunner(plan, kernels, gp.weights)
    x1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = runner(x1)
    kept = [a.copy() for a in first]
    second = runner(2 * x1)
    for a, b in zip(first, kept, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not any(np.shares_memory(a, b) for a in first for b in second)
    assert not any(np.shares_memory(a, v) for a in first + second for v in gp.weights.values())
    np.testing.assert_array_equal(second[0], (4 * x1 * x1).reshape(1, 6))


def test_steps_of_constants_run_once_when_the_runner_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """An int8 weight cast (delegated: int8) and scaled (a compiled kernel) to float is folded: the
    runner keeps the float weight and runs only the MatMul per call."""
    from ep_numba_cpu.runtime import GraphRunner

    runners: list[GraphRunner] = []
    orig = GraphRunner.__init__

    def keep(self: GraphRunner, *a: Any, **k: Any) -> None:
        orig(self, *a, **k)
        runners.append(self)

    monkeypatch.setattr(GraphRunner, "__init__", keep)
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["Q"], ["qf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["qf", "scale"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "fold",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 4])],
        [numpy_helper.from_array(q, "Q"), numpy_helper.from_array(np.array(0.37, np.float32), "scale")],
    )
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL  # the optimizer would fold it first
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), so, providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    x = np.random.default_rng(7).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ (q.astype(np.float32) * np.float32(0.37)), rtol=1e-6)
    (runner,) = runners
    assert [runner.steps[k][0] for k in runner._live] == ["matmul"]
    assert set(runner.weights) == {"w"}  # the int8 weight and the cast are not kept for runs


def test_values_of_unknown_shape_from_delegated_nodes_feed_compiled_steps() -> None:
    """A Reshape to a shape computed at run time makes a value of unknown shape; the elementwise
    ops after it (typed, rank known) must still broadcast it right, for every runtime shape."""
    g = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "s"], ["xr"]),
            helper.make_node("Add", ["xr", "b"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["y"]),
        ],
        "dyn",
        [helper.make_tensor_value_info("x", F, [None]), helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", F, [None, None])],
        [numpy_helper.from_array(np.array([[0.5], [-0.5]], np.float32), "b")],
        value_info=[helper.make_tensor_value_info("xr", F, [None, None])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    for shape in ((2, 6), (2, 1), (2, 3)):
        x = np.random.default_rng(5).standard_normal(int(np.prod(shape))).astype(np.float32)
        (y,) = sess.run(None, {"x": x, "s": np.array(shape, np.int64)})
        want = 1 / (1 + np.exp(-(x.reshape(shape) + np.array([[0.5], [-0.5]], np.float32))))
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_control_flow_stays_outside_and_its_bodies_are_claimed_apart_when_they_compile() -> None:
    then_g = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["t"], axis=-1)], "then", [], [helper.make_tensor_value_info("t", F, None)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)]
    )
    g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        "cf",
        [helper.make_tensor_value_info("x", F, [16, 32])],
        [helper.make_tensor_value_info("y", F, [16, 32])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA, REF])
    eps = {k: a["ep"] for k, a in sess.get_node_assignment().items()}
    # a group that is not the whole graph must compute to pay its runner's call: the else body's
    # Neg (a float output of unknown size) compiles: claimed; the then body holds only a delegated
    # Softmax, and the main graph's scalar ReduceSum -> Greater beside the If is shape-size logic:
    # both left to the reference EP
    then_nodes = [k for k in eps if "then_branch" in k]
    else_nodes = [k for k in eps if "else_branch" in k]
    assert then_nodes and else_nodes, eps
    assert eps["If_2"] == REF and {eps[k] for k in then_nodes} == {REF} and {eps[k] for k in else_nodes} == {NUMBA}
    assert {v for k, v in eps.items() if k not in ("If_2", *then_nodes, *else_nodes)} == {REF}, eps
    for x in (np.ones((16, 32), np.float32), -np.ones((16, 32), np.float32)):
        want = InferenceSession(m.SerializeToString(), providers=[REF]).run(None, {"x": x})[0]
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6)


def test_random_ops_are_not_folded_and_differ_between_runs() -> None:
    """A RandomNormal has no inputs (all of them 'constant'): folding it would freeze one draw."""
    g = helper.make_graph(
        [
            helper.make_node("RandomNormal", [], ["r"], shape=[2, 3], dtype=TensorProto.FLOAT),
            helper.make_node("Add", ["x", "r"], ["y"]),
        ],
        "rand",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA, REF])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    x = np.zeros((2, 3), np.float32)
    assert not np.array_equal(sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0])


def test_a_workspace_keeps_prepared_calls_for_a_few_shapes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each input shape's prepared kernel call holds its buffers: with dynamic shapes a workspace
    keeps at most SHAPES_KEPT of them per step, not one per shape ever seen."""
    from ep_numba_cpu import runtime

    made = graph_runners(monkeypatch)
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Exp", ["r"], ["e"]),
            helper.make_node("MatMul", ["e", "w"], ["y"]),  # e is read only inside the group: kept buffers
        ],
        "dyn",
        [helper.make_tensor_value_info("x", F, ["n", 8])],
        [helper.make_tensor_value_info("y", F, ["n", 2])],
        [numpy_helper.from_array(np.ones((8, 2), np.float32), "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = InferenceSession(m.SerializeToString(), providers=[NUMBA, REF])
    for n in range(1, 12):
        x = np.full((n, 8), -1.0, np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.full((n, 2), 8.0, np.float32), rtol=1e-6)
    (runner,) = made
    (ws,) = runner._pool
    kept = [v for key, v in ws.items() if isinstance(key, tuple) and key[1:] == ("calls",)]
    assert kept and all(0 < len(calls) <= runtime.SHAPES_KEPT for calls in kept)


def _dequantized_matmul() -> Any:
    """y = x @ ((Wq as float) * s * s2): an int8 weight dequantized by constant steps (MiniLM's form)."""
    q = np.random.default_rng(3).integers(-127, 128, (64, 64)).astype(np.int8)
    nodes = [
        helper.make_node("Cast", ["wq"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["wf", "s"], ["w1"]),
        helper.make_node("Mul", ["w1", "s2"], ["w2"]),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(q, "wq"),
        numpy_helper.from_array(np.array(0.02, np.float32), "s"),
        numpy_helper.from_array(np.array(0.5, np.float32), "s2"),
    ]
    g = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", F, [8, 64])], [helper.make_tensor_value_info("y", F, [8, 64])]
    )
    g.initializer.extend(inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_folding_gives_back_the_bytes_of_values_no_later_step_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget of 4x the stored bytes (the floor set to 0), the float copy of a 4 KiB int8
    weight (16 KiB) uses it all; each folded Mul by a scale makes another 16 KiB and frees the one
    it read, so the whole dequantization folds and only the MatMul runs."""
    from ep_numba_cpu import runtime

    monkeypatch.setattr(runtime, "FOLD_FLOOR", 0)
    runners = graph_runners(monkeypatch)
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    model = _dequantized_matmul().SerializeToString()
    sess = InferenceSession(model, so, providers=[NUMBA])
    (runner,) = runners
    live = [runner.steps[k][1] for k in runner._live]
    assert len(live) == 1 and live[0]["kind"] == "matmul", live
    assert "wf" not in runner.weights and "w1" not in runner.weights
    assert all(not w.flags.writeable for w in runner.weights.values())
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    want = InferenceSession(model, so, providers=[REF]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_an_output_that_is_a_folded_weight_comes_back_writable_and_apart() -> None:
    """A graph output computed from weights only is a folded value of the runner: the caller gets a
    writable copy, and writing into it changes nothing the next run returns."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["w", "s"], ["y"]), helper.make_node("Add", ["x", "y"], ["z"])],
        "fw",
        [helper.make_tensor_value_info("x", F, [4, 64])],
        [helper.make_tensor_value_info("y", F, [4, 64]), helper.make_tensor_value_info("z", F, [4, 64])],
        [
            numpy_helper.from_array(np.arange(256, dtype=np.float32).reshape(4, 64), "w"),
            numpy_helper.from_array(np.array(2.0, np.float32), "s"),
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model.SerializeToString(), so, providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    x = np.ones((4, 64), np.float32)
    y, _ = sess.run(None, {"x": x})
    want = np.arange(256, dtype=np.float32).reshape(4, 64) * 2
    np.testing.assert_array_equal(y, want)
    y[:] = -1  # the caller's array
    y2, z2 = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y2, want)
    np.testing.assert_array_equal(z2, want + 1)


def test_a_folded_value_a_live_step_reads_is_kept_when_a_later_folded_step_reads_it_last() -> None:
    """n is folded (Reshape of a weight), read by a live MatMul, then read last by another folded
    Reshape: dropping n at its last reader would leave the live step without it."""
    nodes = [
        helper.make_node("Reshape", ["w", "shp"], ["n"], name="p_folded"),
        helper.make_node("MatMul", ["x", "n"], ["y1"], name="j_live"),
        helper.make_node("Reshape", ["n", "shp"], ["m"], name="k_folded"),
        helper.make_node("MatMul", ["x", "m"], ["y2"], name="l_live"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y1", F, [2, 4]), helper.make_tensor_value_info("y2", F, [2, 4])],
        [
            numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w"),
            numpy_helper.from_array(np.array([4, 4], np.int64), "shp"),
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model, so, providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    x = np.ones((2, 4), np.float32)
    want = InferenceSession(model, so, providers=[REF]).run(None, {"x": x})
    for got, w in zip(sess.run(None, {"x": x}), want, strict=True):
        np.testing.assert_array_equal(got, w)


def test_folding_charges_memory_once_per_array_that_owns_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A folded Slice keeps a view of the big Tile it read: dropping the Tile's name gives nothing
    back while the view holds its memory, so folding stops within its budget."""
    from ep_numba_cpu import runtime

    monkeypatch.setattr(runtime, "FOLD_FLOOR", 3 << 20)
    runners = graph_runners(monkeypatch)
    nodes, outs = [], []
    for k in range(6):  # each: 1 MiB of Tile, of which a 64-float view is kept
        nodes += [
            helper.make_node("Tile", ["w", "reps"], [f"t{k}"]),
            helper.make_node("Slice", [f"t{k}", "starts", "ends"], [f"v{k}"]),
            helper.make_node("Add", ["x", f"v{k}"], [f"y{k}"]),
        ]
        outs.append(helper.make_tensor_value_info(f"y{k}", F, [1, 64]))
    inits_arrays = [np.full((1, 64), 0.5, np.float32), np.array([4096, 1], np.int64), np.array([0]), np.array([1])]
    inits = [numpy_helper.from_array(a, n) for a, n in zip(inits_arrays, ("w", "reps", "starts", "ends"), strict=True)]
    g = helper.make_graph(nodes, "tiles", [helper.make_tensor_value_info("x", F, [1, 64])], outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model.SerializeToString(), so, providers=[NUMBA])
    (runner,) = runners
    owners = {id(runtime._owner(w)): runtime._owner(w) for w in runner.weights.values()}
    held = sum(o.nbytes for o in owners.values())
    budget = 4 * sum(i.nbytes for i in inits_arrays) + (3 << 20)
    assert held <= budget + (1 << 20), (held, budget)  # at most one fold past the budget, as the core's
    x = np.zeros((1, 64), np.float32)
    for y in sess.run(None, {"x": x}):
        np.testing.assert_array_equal(y, np.full((1, 64), 0.5, np.float32))


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "broadcast"])
def test_a_step_is_folded_only_when_its_size_is_known_to_fit_before_it_runs(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few bytes of model (or of a context record) can ask a fold for gigabytes: ConstantOfShape,
    Expand and Tile read their output's shape from a constant, a broadcast Add of (n, 1) by (1, n)
    makes n x n. The bytes are known before the step runs (fold_size) and over the budget (here 1 MiB)
    it is left to run with the graph; the same graph with a small n folds it. Results match."""
    from ep_numba_cpu import runtime

    monkeypatch.setattr(runtime, "FOLD_FLOOR", 1 << 20)

    def model(n: int) -> bytes:
        one = numpy_helper.from_array(np.array([1.5], np.float32), "one")
        shp = numpy_helper.from_array(np.array([n, n], np.int64), "shp")
        make = {
            "ConstantOfShape": ([helper.make_node("ConstantOfShape", ["shp"], ["big"], value=one)], [shp]),
            "Expand": ([helper.make_node("Expand", ["one", "shp"], ["big"])], [one, shp]),
            "Tile": (
                [helper.make_node("Tile", ["one2", "shp"], ["big"])],
                [numpy_helper.from_array(np.full((1, 1), 1.5, np.float32), "one2"), shp],
            ),
            "broadcast": (
                [helper.make_node("Add", ["col", "row"], ["big"])],
                [
                    numpy_helper.from_array(np.full((n, 1), 0.5, np.float32), "col"),
                    numpy_helper.from_array(np.ones((1, n), np.float32), "row"),
                ],
            ),
        }[op]
        nodes = make[0] + [
            helper.make_node("ReduceMean", ["big"], ["s"], keepdims=0),
            helper.make_node("Add", ["x", "s"], ["y"]),
        ]
        g = helper.make_graph(
            nodes, "h", [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])]
        )
        g.initializer.extend(make[1])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()

    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.arange(4, dtype=np.float32)
    for n, folded in ((16, True), (1024, False)):  # 1024 x 1024 x 8 bytes: 8 MiB > 1 MiB
        runners = graph_runners(monkeypatch)
        sess = InferenceSession(model(n), so, providers=[NUMBA])
        (runner,) = runners
        big_live = any("big" in runtime._names(runner.steps[k][1]) for k in runner._live)
        assert big_live is not folded, (n, [runner.steps[k][1].get("kind") for k in runner._live])
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x + 1.5, rtol=1e-6)


@pytest.mark.parametrize("batch", [2, "batch"])
def test_chains_from_separate_slices_join_one_kernel(batch: Any) -> None:
    """A GRU cell's gates each come from their own Slice (delegated steps that run before any
    kernel): the chains join the cluster before them when their outputs have its static shape
    (also with a symbolic batch dim), so the cell is one kernel, one pass, and matches NumPy."""
    import onnx

    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu import codegen, generate
    from ep_numba_cpu.planner import build_plan
    from ep_numba_cpu.runtime import GraphRunner

    bounds = {n: np.array([v], np.int64) for n, v in (("s0", 0), ("s6", 6), ("s12", 12), ("s18", 18), ("ax", 1))}
    g = helper.make_graph(
        [
            helper.make_node("Slice", ["x", "s0", "s6", "ax"], ["r"]),
            helper.make_node("Slice", ["x", "s6", "s12", "ax"], ["z"]),
            helper.make_node("Slice", ["x", "s12", "s18", "ax"], ["n"]),
            helper.make_node("Sigmoid", ["r"], ["rs"]),
            helper.make_node("Sigmoid", ["z"], ["zs"]),
            helper.make_node("Mul", ["rs", "n"], ["rn"]),
            helper.make_node("Tanh", ["rn"], ["nt"]),
            helper.make_node("Sub", ["one", "zs"], ["keep"]),
            helper.make_node("Mul", ["keep", "nt"], ["a"]),
            helper.make_node("Mul", ["zs", "h"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        "cell",
        [helper.make_tensor_value_info("x", F, [batch, 18]), helper.make_tensor_value_info("h", F, [batch, 6])],
        [helper.make_tensor_value_info("y", F, [batch, 6])],
        [numpy_helper.from_array(v, k) for k, v in bounds.items()] + [numpy_helper.from_array(np.float32(1), "one")],
    )
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    gp = build_plan(GraphView(m.graph, opset_map(m)), ["x", "h"], ["y"], lambda n: False)
    assert [s["kind"] for s in gp.plan["steps"]] == ["node", "node", "node", "kernel"]
    plan, sources = generate.expand(json.loads(json.dumps(gp.plan)), gp.weights)
    kernels = {k: codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher for k, ks in sources.items()}
    rng = np.random.default_rng(3)
    x, h = rng.standard_normal((2, 18)).astype(np.float32), rng.standard_normal((2, 6)).astype(np.float32)
    (got,) = GraphRunner(plan, kernels, gp.weights)(x, h)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    zs = sig(x[:, 6:12])
    np.testing.assert_allclose(got, (1 - zs) * np.tanh(sig(x[:, :6]) * x[:, 12:]) + zs * h, rtol=1e-5, atol=1e-6)


def test_a_chain_of_constants_does_not_join_a_live_cluster() -> None:
    """A chain computed from weights only (Sigmoid of a Slice of W) keeps its own cluster even when
    its shape matches the latest live cluster's: the runner folds it once when it is built,
    instead of every run computing it inside the live kernel."""
    import onnx

    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu import codegen, generate
    from ep_numba_cpu.planner import build_plan
    from ep_numba_cpu.runtime import GraphRunner

    w = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 12)
    consts = {n: np.array([v], np.int64) for n, v in (("s0", 0), ("s6", 6), ("ax", 1))}
    g = helper.make_graph(
        [
            helper.make_node("Slice", ["W", "s0", "s6", "ax"], ["wsl"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Sigmoid", ["wsl"], ["sg"]),
            helper.make_node("Concat", ["r", "sg"], ["y"], axis=0),
        ],
        "folded",
        [helper.make_tensor_value_info("x", F, [2, 6])],
        [helper.make_tensor_value_info("y", F, [4, 6])],
        [numpy_helper.from_array(w, "W")] + [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    gp = build_plan(GraphView(m.graph, opset_map(m)), ["x"], ["y"], lambda n: False)
    assert [s["kind"] for s in gp.plan["steps"]] == ["node", "kernel", "kernel", "node"]
    plan, sources = generate.expand(json.loads(json.dumps(gp.plan)), gp.weights)
    kernels = {k: codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher for k, ks in sources.items()}
    runner = GraphRunner(plan, kernels, gp.weights)
    assert [runner.steps[k][0] for k in runner._live] == ["kernel", "node"]  # the Sigmoid chain was folded
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    (got,) = runner(x)
    np.testing.assert_allclose(got, np.concatenate([np.maximum(x, 0), 1 / (1 + np.exp(-w[:, :6]))]), rtol=1e-6)


def test_long_attribute_lists_are_checked_element_by_element_on_failure() -> None:
    """A delegated step's list attributes (a forest's 10^5 node ids) are checked in bulk, and
    an element of the wrong type or range is still named by its index."""
    from ep_numba_cpu.spec import SpecError, _check_attr_value

    n = 100_000
    _check_attr_value("ints", list(range(n)), "attrs.x[1]", {})
    _check_attr_value("floats", [0.5] * n, "attrs.x[1]", {})
    _check_attr_value("strings", ["BRANCH_LEQ"] * n, "attrs.x[1]", {})
    for kind, bad, at in (
        ("ints", [*range(10), True, 11], 10),
        ("ints", [*range(10), 2**63], 10),
        ("floats", [0.5, 1, 2.5], 1),
        ("strings", ["LEAF", "x" * 100_000], 1),
    ):
        with pytest.raises(SpecError, match=rf"attrs\.x\[1\]\[{at}\]"):
            _check_attr_value(kind, bad, "attrs.x[1]", {})


def test_identity_is_a_delegated_step_that_copies_nothing() -> None:
    """A Scan body's ``next_out = Identity(next_in)`` and ``scan_out = Identity(reduced)`` (what
    skl2onnx's k-nearest-neighbours writes) are delegated steps handing their input on, not kernels
    copying it on every iteration; the Sub between them still compiles."""
    import onnx

    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu.planner import build_plan

    F = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["x_out"]),
            helper.make_node("Sub", ["x", "row"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["d2"]),
            helper.make_node("Identity", ["d2"], ["y"]),
        ],
        "body",
        [helper.make_tensor_value_info("x", F, ["n", 4]), helper.make_tensor_value_info("row", F, [4])],
        [helper.make_tensor_value_info("x_out", F, ["n", 4]), helper.make_tensor_value_info("y", F, ["n", 4])],
    )
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    gp = build_plan(GraphView(m.graph, opset_map(m)), ["x", "row"], ["x_out", "y"], lambda n: False)
    steps = gp.plan["steps"]
    assert [(s["kind"], s.get("op")) for s in steps] == [
        ("node", "Identity"),
        ("kernel", None),
        ("node", "Identity"),
    ]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    row = np.array([1, 2, 3, 4], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = InferenceSession(m.SerializeToString(), providers=[NUMBA, "CpuReferenceExecutionProvider"]).run(
            None, {"x": x, "row": row}
        )
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], (x - row) ** 2)

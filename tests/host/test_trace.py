"""Profiling writes onnxruntime's trace format (ep_core/host/trace.py): compared with a trace the
real onnxruntime writes for the same model, and read by onnxruntime's own trace reader."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import onnx
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core

ort = pytest.importorskip("onnxruntime")

ORT_NODE_ARGS = {
    "op_name",
    "provider",
    "input_type_shape",
    "output_type_shape",
    "activation_size",
    "parameter_size",
    "output_size",
}


def _model() -> onnx.ModelProto:
    """x, y -> Add -> Relu -> Cast(int64): no constants, so onnxruntime reports every input."""
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Cast", ["r"], ["out"], name="cast", to=TensorProto.INT64),
    ]
    f = TensorProto.FLOAT
    model = make_model(
        nodes, [("x", f, ["N", 3]), ("y", f, ["N", 3])], [("out", TensorProto.INT64, ["N", 3])], opset=17
    )
    model.ir_version = 8  # onnxruntime 1.31 reads IR <= 13
    return model


def _traces(tmp_path: Path) -> tuple[list[dict], list[dict], int, str]:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    feed = {"x": np.ones((2, 3), np.float32), "y": -np.ones((2, 3), np.float32)}
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ort")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    opts = ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "ours"))
    ours = ep_core.InferenceSession(str(path), opts)
    for sess in (theirs, ours):
        sess.run(None, feed)
        sess.run(None, feed)
    start = ours.get_profiling_start_time_ns()
    ours_path = ours.end_profiling()
    with open(theirs.end_profiling()) as fh:
        ort_events = json.load(fh)
    with open(ours_path) as fh:
        our_events = json.load(fh)
    return ort_events, our_events, start, ours_path


def _session_names(events: list[dict]) -> list[str]:
    return [e["name"] for e in events if e["cat"] == "Session"]


def test_the_trace_has_onnxruntimes_events_and_args(tmp_path):
    theirs, ours, _, _ = _traces(tmp_path)
    assert isinstance(ours, list)
    for e in ours:
        assert {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"} <= set(e)
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int)  # microseconds, as onnxruntime
    ort_session = _session_names(theirs)
    assert set(ort_session) <= set(_session_names(ours))
    for name in ("model_run", "SequentialExecutor::Execute"):
        assert _session_names(ours).count(name) == ort_session.count(name) == 2
    assert _session_names(ours).index("session_initialization") < _session_names(ours).index("model_run")

    def nodes(events: list[dict]) -> list[tuple[str, str, list, list]]:
        return [
            (e["name"], e["args"]["op_name"], e["args"]["input_type_shape"], e["args"]["output_type_shape"])
            for e in events
            if e["cat"] == "Node"
        ]

    assert nodes(ours) == nodes(theirs)
    assert nodes(ours)[0] == ("add_kernel_time", "Add", [{"float": [2, 3]}, {"float": [2, 3]}], [{"float": [2, 3]}])
    assert nodes(ours)[2][3] == [{"int64": [2, 3]}]
    for ort_event, our_event in zip(
        (e for e in theirs if e["cat"] == "Node"), (e for e in ours if e["cat"] == "Node"), strict=True
    ):
        assert ORT_NODE_ARGS <= set(our_event["args"])
        for key in ("activation_size", "parameter_size", "output_size"):
            assert our_event["args"][key] == ort_event["args"][key], key
        assert our_event["args"]["provider"] == "CpuReferenceExecutionProvider"


def test_each_run_nests_its_nodes_in_the_executor_span_in_model_run(tmp_path):
    _, ours, _, _ = _traces(tmp_path)
    runs = [e for e in ours if e["name"] == "model_run"]
    executes = [e for e in ours if e["name"] == "SequentialExecutor::Execute"]
    for run, execute in zip(runs, executes, strict=True):
        assert run["ts"] <= execute["ts"] and execute["ts"] + execute["dur"] <= run["ts"] + run["dur"]
        inside = [e for e in ours if e["cat"] == "Node" and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        assert [e["name"] for e in inside] == ["add_kernel_time", "relu_kernel_time", "cast_kernel_time"]


def test_the_file_is_named_and_timed_as_onnxruntimes(tmp_path):
    _, _, start_ns, path = _traces(tmp_path)
    started = datetime.fromtimestamp(start_ns / 1e9)
    assert abs(started - datetime.now()).total_seconds() < 60
    assert Path(path).name == f"ours_{started:%Y-%m-%d_%H-%M-%S}_{started.microsecond // 1000:03d}.json"
    assert re.fullmatch(r"ort_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json", next(tmp_path.glob("ort_*.json")).name)


def test_profiling_ends_once_and_is_off_by_default(tmp_path):
    sess = ep_core.InferenceSession(
        _model().SerializeToString(),
        ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p")),
    )
    first = sess.end_profiling()
    assert Path(first).is_file() and sess.end_profiling() == ""
    plain = ep_core.InferenceSession(_model().SerializeToString())
    assert plain.end_profiling() == "" and plain.get_profiling_start_time_ns() == 0
    names = _session_names(json.loads(Path(first).read_text()))
    assert names[0] == "model_loading_array"  # loaded from bytes, as onnxruntime names it


def test_constants_count_as_parameters(tmp_path):
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    model = make_model(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="mul")],
        [("x", TensorProto.FLOAT, [2, 3])],
        [("y", TensorProto.FLOAT, [2, 3])],
        initializers=[w],
    )
    opts = ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = ep_core.InferenceSession(model.SerializeToString(), opts)
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    (mul,) = [e for e in json.loads(Path(sess.end_profiling()).read_text()) if e["cat"] == "Node"]
    assert (mul["args"]["activation_size"], mul["args"]["parameter_size"], mul["args"]["output_size"]) == (
        "24",
        "12",
        "24",
    )


def test_onnxruntimes_trace_reader_reads_it(tmp_path):
    from onnxruntime.transformers import profile_result_processor as reader

    _, _, _, path = _traces(tmp_path)
    records = reader.load_profile_json(path)
    lines = reader.group_node_results(records)
    by_op = [line.split("\t") for line in lines if line.rstrip().endswith(("\tAdd", "\tRelu", "\tCast"))]
    assert {row[-1] for row in by_op} == {"Add", "Relu", "Cast"}
    assert {int(row[4]) for row in by_op if len(row) == 8} == {2}  # calls per operator: two runs

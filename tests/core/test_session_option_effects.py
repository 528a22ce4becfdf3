"""Session and run options with their real effect in the engine (issue 13), checked beside the real
onnxruntime where it has the same option: graph optimization level, optimized_model_filepath,
free dimension overrides, user initializers (also external, also from files in memory), load
cancellation, refused execution modes and custom-op libraries, only_execute_path_to_fetches."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.runtime.build import build, resolve_request
from ep_core.runtime.discover import get_registry
from ep_core.runtime.options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from ep_core.sdk.errors import InvalidArgument, ModelLoadCanceled, NotImplementedByAnyEp

F = TensorProto.FLOAT
W = np.arange(4, dtype=np.float32)


def _model(batch: str | int = "N") -> onnx.ModelProto:
    """y = x + w*w (w*w folds), z = x - w; a node whose output nothing reads (dead)."""
    nodes = [
        helper.make_node("Mul", ["w", "w"], ["w2"], name="square"),
        helper.make_node("Add", ["x", "w2"], ["y"], name="add"),
        helper.make_node("Neg", ["w"], ["unused"], name="dead"),
        helper.make_node("Sub", ["x", "w"], ["z"], name="sub"),
    ]
    model = make_model(
        nodes, [("x", F, [batch, 4])], [("y", F, [batch, 4]), ("z", F, [batch, 4])], [numpy_helper.from_array(W, "w")]
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    model.ir_version = 10  # what the onnxruntime installed reads
    return model


def _ort(model: onnx.ModelProto | str, so: ort.SessionOptions | None = None) -> ort.InferenceSession:
    path_or_bytes = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


X = {"x": np.ones((2, 4), np.float32)}


# --------------------------------------------------------------------------- optimization level
def test_disable_all_turns_constant_folding_off_and_basic_keeps_it() -> None:
    off = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_DISABLE_ALL)
    basic = SessionOptions(graph_optimization_level=GraphOptimizationLevel.ORT_ENABLE_BASIC)
    plain = ep_core.InferenceSession(_model(), off)
    folding = ep_core.InferenceSession(_model(), basic)
    assert plain.program.plan().folded == []
    assert "square" in " ".join(plain.get_plan())
    # at BASIC the graph optimizer folds square into an initializer and drops dead before planning
    assert [n.name for n in folding._built.model.graph.node] == ["add", "sub"]
    assert "square" not in " ".join(folding.get_plan())
    for a, b in zip(plain.run(None, X), folding.run(None, X)):
        np.testing.assert_array_equal(a, b)


def test_an_initializer_that_is_also_an_input_is_never_folded() -> None:
    """A feed overrides its default, so nothing computed from the default may be kept."""
    model = make_model([helper.make_node("Neg", ["w"], ["y"])], [("w", F, [4])], [("y", F, [4])])
    model.graph.initializer.append(numpy_helper.from_array(W, "w"))
    model.ir_version = 10
    feed = {"w": np.full(4, 5, np.float32)}
    got = ep_core.InferenceSession(model).run(None, feed)[0]
    np.testing.assert_array_equal(got, _ort(model).run(None, feed)[0])
    np.testing.assert_array_equal(ep_core.InferenceSession(model).run(None, {})[0], -W)


# ----------------------------------------------------------------------- optimized model file
def test_optimized_model_is_written_folded_and_pruned_and_onnxruntime_runs_it(tmp_path) -> None:
    path = str(tmp_path / "opt.onnx")
    so = SessionOptions(optimized_model_filepath=path)
    so.add_free_dimension_override_by_name("N", 2)
    sess = ep_core.InferenceSession(_model(), so)
    written = onnx.load(path)
    onnx.checker.check_model(written)
    assert [n.name for n in written.graph.node] == ["add", "sub"]  # square folded, dead dropped
    assert sorted(t.name for t in written.graph.initializer) == ["w", "w2"]
    np.testing.assert_array_equal(numpy_helper.to_array(written.graph.initializer[1]), W * W)
    assert [d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    for a, b in zip(_ort(path).run(None, X), sess.run(None, X)):
        np.testing.assert_array_equal(a, b)


def test_optimized_model_keeps_a_folded_graph_output_as_its_node(tmp_path) -> None:
    path = str(tmp_path / "opt.onnx")
    model = make_model(
        [helper.make_node("Mul", ["w", "w"], ["k"], name="square"), helper.make_node("Add", ["x", "k"], ["y"])],
        [("x", F, [4])],
        [("y", F, [4]), ("k", F, [4])],
        [numpy_helper.from_array(W, "w")],
    )
    model.ir_version = 10
    sess = ep_core.InferenceSession(model, SessionOptions(optimized_model_filepath=path))
    assert sess.program.plan().folded == ["square"]
    feed = {"x": np.ones(4, np.float32)}
    for a, b in zip(_ort(path).run(None, feed), _ort(model).run(None, feed)):
        np.testing.assert_array_equal(a, b)


def test_optimized_model_path_refuses_ort_format_and_names_an_unwritable_path(tmp_path) -> None:
    with pytest.raises(InvalidArgument, match="ORT format"):
        ep_core.InferenceSession(_model(), SessionOptions(optimized_model_filepath=str(tmp_path / "m.ort")))
    with pytest.raises(ep_core.sdk.errors.Fail, match="optimized_model_filepath"):
        ep_core.InferenceSession(_model(), SessionOptions(optimized_model_filepath=str(tmp_path / "no/dir/m.onnx")))


# -------------------------------------------------------------------- free dimension overrides
@pytest.mark.parametrize(
    ("method", "key"),
    [("add_free_dimension_override_by_name", "N"), ("add_free_dimension_override_by_denotation", "data_batch")],
)
def test_free_dimension_override_fixes_the_input_as_onnxruntime_does(method: str, key: str) -> None:
    ours, theirs = SessionOptions(), ort.SessionOptions()
    getattr(ours, method)(key, 3)
    getattr(theirs, method)(key, 3)
    sess, ref = ep_core.InferenceSession(_model(), ours), _ort(_model(), theirs)
    assert sess.get_inputs()[0].shape == ref.get_inputs()[0].shape == [3, 4]
    feed = {"x": np.ones((3, 4), np.float32)}
    np.testing.assert_array_equal(sess.run(["y"], feed)[0], ref.run(["y"], feed)[0])
    with pytest.raises(InvalidArgument, match=r"input 'x' has dim 2 on axis 0.*expected 3"):
        sess.run(None, X)


def test_free_dimension_overrides_first_wins_and_unmatched_names_change_nothing() -> None:
    so = SessionOptions()
    so.add_free_dimension_override_by_name("N", 3)
    so.add_free_dimension_override_by_name("N", 5)  # onnxruntime keeps the first
    so.add_free_dimension_override_by_name("n", 7)  # names match case-sensitively
    assert ep_core.InferenceSession(_model(), so).get_inputs()[0].shape == [3, 4]


def test_free_dimension_overrides_that_conflict_are_refused_naming_the_input() -> None:
    so = SessionOptions()
    so.add_free_dimension_override_by_name("N", 3)
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    with pytest.raises(InvalidArgument, match=r"input 'x' axis 0: free dimension override\(s\) \[2, 3\]"):
        ep_core.InferenceSession(_model(), so)
    fixed = SessionOptions()
    fixed.add_free_dimension_override_by_denotation("DATA_BATCH", 5)
    with pytest.raises(InvalidArgument, match=r"fixed size \[2\]"):
        ep_core.InferenceSession(_model(batch=2), fixed)
    negative = SessionOptions()
    negative.add_free_dimension_override_by_name("N", -1)
    with pytest.raises(InvalidArgument, match="negative"):
        ep_core.InferenceSession(_model(), negative)


def test_overrides_do_not_change_a_model_proto_the_caller_gave() -> None:
    model = _model()
    so = SessionOptions()
    so.add_free_dimension_override_by_name("N", 3)
    ep_core.InferenceSession(model, so)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


# ----------------------------------------------------------------------------- initializers
def test_add_initializer_replaces_the_models_as_onnxruntime_does() -> None:
    value = np.full(4, 2, np.float32)
    so, theirs, held = SessionOptions(), ort.SessionOptions(), ort.OrtValue.ortvalue_from_numpy(value)
    so.add_initializer("w", value)
    theirs.add_initializer("w", held)  # onnxruntime does not own it: the caller keeps it alive
    # onnxruntime's constant folding reads the model's own w (it swaps initializers in after its
    # optimizers); ep-core swaps at load, so w*w folds from the value given: compare unoptimized
    theirs.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ep_core.InferenceSession(_model(), so)
    assert sess.options.initializers["w"] is value  # the caller's array is kept, not copied
    for a, b in zip(sess.run(None, X), _ort(_model(), theirs).run(None, X)):
        np.testing.assert_array_equal(a, b)


def test_add_initializer_takes_anything_with_numpy() -> None:
    so = SessionOptions()
    so.add_initializer("w", ort.OrtValue.ortvalue_from_numpy(np.full(4, 2, np.float32)))
    np.testing.assert_array_equal(ep_core.InferenceSession(_model(), so).run(["z"], X)[0], np.full((2, 4), -1))


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("w", np.ones(5, np.float32), r"initializer 'w' given is float32\[5\], not float32\[4\]"),
        ("w", np.ones(4, np.float64), r"initializer 'w' given is float64\[4\], not float32\[4\]"),
        ("nope", np.ones(4, np.float32), r"initializer\(s\) \['nope'\] the model lacks"),
    ],
)
def test_add_initializer_of_other_type_or_unknown_name_is_refused(name: str, value: np.ndarray, match: str) -> None:
    so = SessionOptions()
    so.add_initializer(name, value)
    with pytest.raises(InvalidArgument, match=match):
        ep_core.InferenceSession(_model(), so)


def _external_model(tmp_path) -> tuple[str, bytes]:
    """The model with w in external data (w.bin), which is then moved away."""
    path = str(tmp_path / "m.onnx")
    onnx.save(_model(), path, save_as_external_data=True, location="w.bin", size_threshold=0)
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").unlink()
    return path, data


def test_add_external_initializers_supplies_data_whose_file_is_gone(tmp_path) -> None:
    path, _ = _external_model(tmp_path)
    value = np.full(4, 7, np.float32)
    so, theirs, held = SessionOptions(), ort.SessionOptions(), ort.OrtValue.ortvalue_from_numpy(value)
    so.add_external_initializers(["w"], [value])
    theirs.add_external_initializers(["w"], [held])
    for a, b in zip(ep_core.InferenceSession(path, so).run(None, X), _ort(path, theirs).run(None, X)):
        np.testing.assert_array_equal(a, b)


def test_external_data_files_given_in_memory(tmp_path) -> None:
    path, data = _external_model(tmp_path)
    with pytest.raises(ep_core.sdk.errors.NoSuchFile):
        ep_core.InferenceSession(path)
    so, theirs = SessionOptions(), ort.SessionOptions()
    so.add_external_initializers_from_files_in_memory(["w.bin"], [data], [len(data)])
    theirs.add_external_initializers_from_files_in_memory(["w.bin"], [data], [len(data)])
    for a, b in zip(ep_core.InferenceSession(path, so).run(None, X), _ort(path, theirs).run(None, X)):
        np.testing.assert_array_equal(a, b)
    short = SessionOptions()
    short.add_external_initializers_from_files_in_memory(["w.bin"], [data], [8])
    with pytest.raises(InvalidArgument, match=r"tensor 'w': 16 bytes at offset 0 overrun in-memory file 'w.bin'"):
        ep_core.InferenceSession(path, short)


# ------------------------------------------------------------------------- cancellation, refusals
def test_load_cancellation_flag_stops_creation() -> None:
    so = SessionOptions()
    so.set_load_cancellation_flag(True)
    with pytest.raises(ModelLoadCanceled, match="set_load_cancellation_flag"):
        ep_core.InferenceSession(_model(), so)


def test_load_cancellation_flag_set_on_the_callers_options_after_creation_began() -> None:
    """The session works on a copy of the options; the flag is read on the caller's own object."""
    so = SessionOptions()
    request = resolve_request(_model(), so, None, None, None, get_registry())
    so.set_load_cancellation_flag(True)  # as another thread would, while creation runs
    with pytest.raises(ModelLoadCanceled):
        build(request)


@pytest.mark.parametrize(
    ("field", "value"),
    [("execution_mode", ExecutionMode.ORT_PARALLEL), ("execution_order", ExecutionOrder.PRIORITY_BASED)],
)
def test_parallel_execution_and_other_orders_are_refused_saying_what_to_set(field: str, value: object) -> None:
    so = SessionOptions(**{field: value})
    with pytest.raises(InvalidArgument, match=f"{value.name}.*one at a time in topological order.*ORT_SEQUENTIAL"):  # type: ignore[attr-defined]
        ep_core.InferenceSession(_model(), so)


def test_a_native_custom_op_library_is_refused_saying_why() -> None:
    with pytest.raises(NotImplementedByAnyEp, match=r"libcustom\.so.*EP plugin.*writing-an-ep\.md"):
        SessionOptions().register_custom_ops_library("libcustom.so")


# ---------------------------------------------------------------- only_execute_path_to_fetches
def _branching_model() -> onnx.ModelProto:
    """y = x + 1, and a branch r = Reshape(x, s) that fails for the shape fed."""
    one = numpy_helper.from_array(np.ones(4, np.float32), "one")
    nodes = [helper.make_node("Add", ["x", "one"], ["y"], name="add"), helper.make_node("Reshape", ["x", "s"], ["r"])]
    model = make_model(nodes, [("x", F, [4]), ("s", TensorProto.INT64, [1])], [("y", F, [4]), ("r", F, None)], [one])
    model.ir_version = 10
    return model


def test_only_execute_path_to_fetches_runs_only_the_nodes_the_outputs_need() -> None:
    sess = ep_core.InferenceSession(_branching_model())
    feed = {"x": np.zeros(4, np.float32), "s": np.array([5], np.int64)}  # Reshape of 4 values to 5 fails
    with pytest.raises(ep_core.sdk.errors.EpCoreError, match="Reshape"):
        sess.run(["y"], feed)  # default: every node runs, as in onnxruntime
    only = RunOptions(only_execute_path_to_fetches=True)
    np.testing.assert_array_equal(sess.run(["y"], feed, only)[0], np.ones(4))
    assert [line.split()[2] for line in sess.program.plan(fetches=("y",)).describe()] == ["add"]
    with pytest.raises(InvalidArgument, match="unknown output 'nope'"):
        sess.run(["nope"], feed, only)
    feed["s"] = np.array([4], np.int64)
    y, r = sess.run(["y", "r"], feed, only)
    np.testing.assert_array_equal(r, np.zeros(4))

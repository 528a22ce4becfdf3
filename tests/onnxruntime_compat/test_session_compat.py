"""The compat ``InferenceSession`` beside the real onnxruntime on small onnx.helper models: the same
NodeArgs, metadata, outputs and exception classes, onnxruntime's provider handling, async runs,
OrtValue runs, re-selection of providers and the EP-failure fallback."""

from __future__ import annotations

import builtins
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as real
import pytest
from onnx import TensorProto, helper

import ep_core
import ep_core.onnxruntime as ort
from ep_core.onnxruntime.capi import onnxruntime_pybind11_state as C
from ep_core.sdk.ep_base import HostEpFactory
from ep_core.sdk.errors import EpFail

CPU = ["CPUExecutionProvider"]


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 18, **graph: Any) -> bytes:
    m = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, **graph), opset_imports=[helper.make_opsetid("", opset)]
    )
    m.ir_version = 8
    return m.SerializeToString()


def _sessions(model: bytes) -> tuple[Any, ort.InferenceSession]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxruntime's warning about an initializer that is also an input
        return real.InferenceSession(model, providers=CPU), ort.InferenceSession(model, providers=CPU)


def _args(args: Sequence[Any]) -> list[tuple[str, Any, str]]:
    return [(a.name, a.shape, a.type) for a in args]


def _dims_model() -> bytes:
    vi = helper.make_tensor_value_info
    inputs = [
        vi("sym", TensorProto.FLOAT, ["N", 3]),
        vi("unk", TensorProto.FLOAT, [None, 3]),
        vi("norank", TensorProto.FLOAT, None),
        vi("neg", TensorProto.FLOAT, [-1, 3]),
        vi("scalar", TensorProto.FLOAT, []),
        vi("odd", TensorProto.FLOAT, [0, "", "K"]),
        vi("b", TensorProto.FLOAT, [3]),
    ]
    outputs = [
        vi("o1", TensorProto.FLOAT, None),  # inferred: [N broadcast with unknown, 3] -> [None, 3]
        vi("o2", TensorProto.FLOAT, ["M", None]),  # declared M kept, the unknown filled with 3
        vi("o3", TensorProto.FLOAT, None),
        vi("o4", TensorProto.FLOAT, []),
        vi("o5", TensorProto.FLOAT, None),
    ]
    nodes = [
        helper.make_node("Add", ["sym", "unk"], ["o1"]),
        helper.make_node("Add", ["sym", "b"], ["o2"]),
        helper.make_node("Relu", ["norank"], ["o3"]),
        helper.make_node("Identity", ["scalar"], ["o4"]),
        helper.make_node("Neg", ["odd"], ["o5"]),
    ]
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [1, 2, 3])
    return _model(nodes, inputs, outputs, initializer=[b])


def test_node_args_report_dims_and_types_as_onnxruntime() -> None:
    want, got = _sessions(_dims_model())
    assert _args(got.get_inputs()) == _args(want.get_inputs())
    assert _args(got.get_outputs()) == _args(want.get_outputs())
    assert _args(got.get_overridable_initializers()) == _args(want.get_overridable_initializers())
    # ep-core's own session reports the same dims (never -1 or inferred unk__N names)
    own = ep_core.InferenceSession(_dims_model())
    assert _args(own.get_outputs()) == _args(want.get_outputs())
    assert [None, 3] == own.get_outputs()[0].shape


def test_sequence_and_optional_types_are_spelled_as_onnxruntime() -> None:
    opt = helper.make_value_info(
        "o", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    )
    model = _model(
        [helper.make_node("SequenceLength", ["s"], ["n"]), helper.make_node("OptionalHasElement", ["o"], ["h"])],
        [helper.make_tensor_sequence_value_info("s", TensorProto.INT64, None), opt],
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, None),
            helper.make_tensor_value_info("h", TensorProto.BOOL, None),
        ],
    )
    want, got = _sessions(model)
    assert (
        _args(got.get_inputs())
        == _args(want.get_inputs())
        == [
            ("s", [], "seq(tensor(int64))"),
            ("o", [2], "optional(tensor(float))"),
        ]
    )
    assert _args(got.get_outputs()) == _args(want.get_outputs())


def test_model_metadata_as_onnxruntime() -> None:
    m = onnx.load_from_string(_dims_model())
    for version in (None, 7):
        if version is not None:
            m.model_version = version
        m.producer_name, m.doc_string = "tests", "a model"
        helper.set_model_props(m, {"author": "ep-core"})
        want, got = _sessions(m.SerializeToString())
        fields = ("producer_name", "graph_name", "domain", "description", "graph_description", "version")
        w, g = want.get_modelmeta(), got.get_modelmeta()
        assert [getattr(g, f) for f in fields] == [getattr(w, f) for f in fields]
        assert g.custom_metadata_map == w.custom_metadata_map == {"author": "ep-core"}


def test_a_graph_output_of_no_type_is_inferred_as_onnxruntime() -> None:
    """``graph.output.append(ValueInfoProto(name=...))``, the usual way to expose an intermediate
    value, leaves it without a type: onnxruntime infers it; onnx's checker refused it."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    g.output.append(onnx.ValueInfoProto(name="r"))
    blob = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    want, got = _sessions(blob)
    x = {"x": np.array([-1.0, 2.0], np.float32)}
    for w, o in zip(want.run(None, x), got.run(None, x), strict=True):
        np.testing.assert_array_equal(o, w)
    assert _args(got.get_outputs()) == _args(want.get_outputs())


@pytest.mark.parametrize(
    "level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]
)
def test_a_model_version_of_zero_is_a_version(level: Any) -> None:
    """skl2onnx writes model_version 0: onnxruntime reports 0, not its no-version value, also when the
    graph optimizer rewrote the model (onnx-ir kept the value but not that it was set)."""
    c = onnx.numpy_helper.from_array(np.array([2.0], np.float32), "c")
    g = helper.make_graph(
        [helper.make_node("Mul", ["c", "c"], ["cc"]), helper.make_node("Add", ["x", "cc"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [c],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m.model_version = 0
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    got = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).get_modelmeta()
    assert got.version == real.InferenceSession(m.SerializeToString()).get_modelmeta().version == 0


def _add_model() -> bytes:
    vi = helper.make_tensor_value_info
    return _model(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add"), helper.make_node("Relu", ["y"], ["z"], name="relu")],
        [vi("x", TensorProto.FLOAT, ["N", 2]), vi("b", TensorProto.FLOAT, [2])],
        [vi("y", TensorProto.FLOAT, ["N", 2]), vi("z", TensorProto.FLOAT, ["N", 2])],
    )


X = np.array([[1.0, -2.0], [3.0, -4.0], [-5.0, 6.0]], np.float32)
B = np.array([0.5, 1.0], np.float32)


@pytest.mark.parametrize("outputs", [None, [], ["z"], ["z", "y"], ["y", "y"]])
def test_run_gives_onnxruntime_s_outputs(outputs: list[str] | None) -> None:
    want, got = _sessions(_add_model())
    for w, g in zip(want.run(outputs, {"x": X, "b": B}), got.run(outputs, {"x": X, "b": B}), strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype
    # a list is converted to the input's type, as onnxruntime does
    np.testing.assert_array_equal(
        got.run(["y"], {"x": [[1, 2]], "b": B})[0], want.run(["y"], {"x": [[1, 2]], "b": B})[0]
    )


@pytest.mark.parametrize(
    "feed, outputs, error",
    [
        ({"x": X}, None, ValueError),  # onnxruntime's Python check: required inputs missing
        ({"x": X.astype(np.float64), "b": B}, None, C.InvalidArgument),
        ({"x": X.ravel(), "b": B}, None, C.InvalidArgument),
        ({"x": np.ones((3, 3), np.float32), "b": B}, None, C.InvalidArgument),
        ({"x": X, "b": B, "nope": B}, None, C.InvalidArgument),
        ({"x": X, "b": B}, ["nope"], C.InvalidArgument),
        ({"x": X, "b": B}, "y", TypeError),  # a bare string is no list of names
        ({"x": [[1.0, 2.0], [1.0]], "b": B}, None, RuntimeError),  # a ragged list
    ],
)
def test_bad_runs_raise_onnxruntime_s_exception_classes(feed: dict[str, Any], outputs: Any, error: type) -> None:
    want, got = _sessions(_add_model())
    real_error = {C.InvalidArgument: real.capi.onnxruntime_pybind11_state.InvalidArgument}.get(error, error)
    with pytest.raises(real_error):
        want.run(outputs, feed)
    with pytest.raises(error) as info:
        got.run(outputs, feed)
    if error is ValueError:
        assert str(info.value) == "Required inputs (['b']) are missing from input feed (['x'])."


def test_run_async_calls_back_with_results_or_the_error() -> None:
    _, got = _sessions(_add_model())
    done: list[tuple[Any, Any, str]] = []
    event = threading.Event()

    def callback(results: list[Any], user_data: Any, err: str) -> None:
        done.append((results, user_data, err))
        event.set()

    got.run_async(["z"], {"x": X, "b": B}, callback, "data")
    assert event.wait(30)
    ((results, user_data, err),) = done
    np.testing.assert_array_equal(results[0], np.maximum(X + B, 0))
    assert (user_data, err) == ("data", "")
    event.clear()
    got.run_async(None, {"x": X.astype(np.float64), "b": B}, callback, "bad")
    assert event.wait(30)
    assert done[1][0] == [] and done[1][1] == "bad" and "dtype float64" in done[1][2]
    with pytest.raises(ValueError):  # checked before the thread starts, as onnxruntime
        got.run_async(None, {"x": X}, callback, None)


def test_run_with_ort_values_and_io_binding() -> None:
    want, got = _sessions(_add_model())
    feed = {"x": ort.OrtValue.ortvalue_from_numpy(X), "b": ort.OrtValue.ortvalue_from_numpy(B)}
    real_feed = {k: real.OrtValue.ortvalue_from_numpy(v.numpy()) for k, v in feed.items()}
    outs = got.run_with_ort_values(["z"], feed)
    assert isinstance(outs[0], ort.OrtValue)
    np.testing.assert_array_equal(outs[0].numpy(), want.run_with_ort_values(["z"], real_feed)[0].numpy())
    np.testing.assert_array_equal(got.run(["z"], feed)[0], outs[0].numpy())  # OrtValues in run() too
    binding = got.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_cpu_input("b", B)
    binding.bind_output("z")
    got.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], outs[0].numpy())
    other = ort.InferenceSession(_add_model())
    with pytest.raises(ValueError, match="IOBinding must be used with the session that created it"):
        other.run_with_iobinding(binding)


def test_providers_as_onnxruntime_handles_them() -> None:
    model = _add_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ort.InferenceSession(model, providers=["NoSuchExecutionProvider", *CPU, *CPU])
    messages = [str(w.message) for w in caught]
    assert any(
        m.startswith("Specified provider 'NoSuchExecutionProvider' is not in available provider names")
        for m in messages
    )
    assert "Duplicate provider 'CPUExecutionProvider' encountered, ignoring." in messages
    assert got.get_providers() == CPU == real.InferenceSession(model, providers=CPU).get_providers()
    assert got.get_provider_options() == {"CPUExecutionProvider": {}}
    # providers=None: ep-core's default, reported under onnxruntime's name for the CPU fallback EP
    assert ort.InferenceSession(model).get_providers() == CPU
    for bad, kwargs in [
        ("'providers' values must be either strings or (string, dict) tuples.", {"providers": [1]}),
        ("'provider_options' values must be dicts.", {"providers": CPU, "provider_options": [[]]}),
        ("should be the same length", {"providers": CPU, "provider_options": [{}, {}]}),
    ]:
        with pytest.raises(ValueError, match=bad.replace("(", r"\(").replace(")", r"\)")):
            ort.InferenceSession(model, enable_fallback=0, **kwargs)
    # with the fallback on (onnxruntime's default), a bad argument is printed and the CPU EP used
    with pytest.MonkeyPatch.context() as mp:
        printed: list[str] = []
        mp.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
        assert ort.InferenceSession(model, providers=[1]).get_providers() == CPU
    assert printed[0] == "*************** EP Error ***************"
    assert "'providers' values must be either strings or (string, dict) tuples. when using [1]" in printed[1]
    # ep-core's own API keeps its strict error for an unknown provider
    with pytest.raises(ep_core.sdk.errors.UnknownProviderError):
        ep_core.InferenceSession(model, providers=["NoSuchExecutionProvider"])


def test_onnxruntime_s_cpu_provider_is_available_and_selected_without_a_warning() -> None:
    listed = ort.get_available_providers()
    assert listed[-1] == "CPUExecutionProvider"  # as onnxruntime: accelerators first, CPU last
    assert "CpuReferenceExecutionProvider" not in listed  # listed once, under its onnxruntime name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ort.InferenceSession(_add_model(), providers=listed)  # no EP twice, no warning
        ort.InferenceSession(_add_model(), providers=["CpuReferenceExecutionProvider"])  # its own name works
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ort.InferenceSession(_add_model(), providers=CPU)
    assert got.get_providers() == CPU
    assert ep_core.InferenceSession(_add_model(), providers=CPU).get_providers() == ["CpuReferenceExecutionProvider"]


def test_set_providers_rebuilds_the_session() -> None:
    got = ort.InferenceSession(_add_model(), providers=CPU)
    before = got.run(["z"], {"x": X, "b": B})[0]
    numba = "NumbaCpuExecutionProvider"
    if numba not in ort.get_available_providers():
        pytest.skip("the Numba CPU EP is not installed here")
    got.set_providers([numba])
    assert got.get_providers() == [numba, "CPUExecutionProvider"]
    np.testing.assert_allclose(got.run(["z"], {"x": X, "b": B})[0], before)
    got.set_providers(CPU)
    assert got.get_providers() == CPU


class _FlakyFactory(HostEpFactory):
    """An EP whose Add kernel breaks its promise at run time (EPFail)."""

    ep_name = "FlakyTestExecutionProvider"
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
        from ep_core.sdk.compute import NodeComputeInfo

        class Ep:
            def ep_get_capability(self, graph: Any, support: Any) -> None:
                for n in graph.nodes:
                    if n.op_type == "Add":
                        support.add_nodes_to_fuse([n])

            def ep_compile(self, graphs: Any, fused_nodes: Any) -> list[Any]:
                def compute(state: Any, *inputs: Any) -> Any:
                    raise EpFail("FlakyTestExecutionProvider: the device went away")

                return [NodeComputeInfo(compute=compute) for _ in fused_nodes]

        return Ep()


@pytest.fixture
def flaky() -> Any:
    ep_core.register_execution_provider_library(_FlakyFactory.ep_name, _FlakyFactory())
    yield _FlakyFactory.ep_name
    ep_core.unregister_execution_provider_library(_FlakyFactory.ep_name)


def test_an_ep_failure_in_a_run_falls_back_to_the_cpu_once(flaky: str, capsys: Any) -> None:
    got = ort.InferenceSession(_add_model(), providers=[flaky])
    assert got.get_providers() == [flaky, "CPUExecutionProvider"]
    np.testing.assert_array_equal(got.run(["z"], {"x": X, "b": B})[0], np.maximum(X + B, 0))
    out = capsys.readouterr().out
    assert "EP Error: " in out and "Falling back to ['CPUExecutionProvider'] and retrying." in out
    assert got.get_providers() == CPU
    strict = ort.InferenceSession(_add_model(), providers=[flaky])
    strict.disable_fallback()
    with pytest.raises(C.EPFail):
        strict.run(None, {"x": X, "b": B})


def test_session_options_and_profiling_start() -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    got = ort.InferenceSession(_add_model(), options, providers=CPU)
    copy = got.get_session_options()
    assert isinstance(copy, ort.SessionOptions) and copy.intra_op_num_threads == 1
    assert (
        got.get_profiling_start_time_ns()
        == 0
        == real.InferenceSession(_add_model(), providers=CPU).get_profiling_start_time_ns()
    )
    assert [m.device_mem_type for m in got.get_input_memory_infos()] == [ort.OrtDeviceMemoryType.DEFAULT] * 2
    assert [d.ep_name for d in got.get_input_epdevices()] == ["CpuReferenceExecutionProvider"] * 2
    info = got.get_provider_graph_assignment_info()
    assert [(s.ep_name, [(n.name, n.op_type) for n in s.get_nodes()]) for s in info] == [
        ("CPUExecutionProvider", [("add", "Add")]),
        ("CPUExecutionProvider", [("relu", "Relu")]),
    ]


def test_graph_assignment_info_names_each_node_s_op_as_onnxruntime() -> None:
    """torch.onnx names nodes '/block/act/Relu': the op type and domain were looked up by the name's
    last segment and came back empty (red-team of real apps)."""
    vi = helper.make_tensor_value_info
    model = _model(
        [
            helper.make_node("Add", ["x", "b"], ["y"], name="/block/conv/Add"),
            helper.make_node("Relu", ["y"], ["z"], name="/block/act/Relu"),
        ],
        [vi("x", TensorProto.FLOAT, ["N", 2]), vi("b", TensorProto.FLOAT, [2])],
        [vi("z", TensorProto.FLOAT, ["N", 2])],
    )
    options = real.SessionOptions()
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    options.graph_optimization_level = real.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = real.InferenceSession(model, options, providers=CPU).get_provider_graph_assignment_info()
    got = ort.InferenceSession(model, providers=CPU).get_provider_graph_assignment_info()

    def nodes(info: Any) -> list[tuple[str, str, str]]:
        return sorted((n.name, n.domain, n.op_type) for s in info for n in s.get_nodes())

    assert nodes(got) == nodes(want) == [("/block/act/Relu", "", "Relu"), ("/block/conv/Add", "", "Add")]


def test_kwargs_onnxruntime_reads_are_honoured_or_refused() -> None:
    with pytest.raises(C.InvalidArgument, match="unknown optimizer 'ConstantFoldnig'"):  # a typo is refused
        ort.InferenceSession(_add_model(), disabled_optimizers=["ConstantFoldnig"])
    with pytest.raises(C.NotImplemented, match="read_config_from_model"):
        ort.InferenceSession(_add_model(), read_config_from_model=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ort.InferenceSession(_add_model(), providrs=CPU)
    with pytest.raises(TypeError, match="Unable to load from type"):
        ort.InferenceSession(3)


def test_model_loading_errors_are_onnxruntime_s_classes(tmp_path: Any) -> None:
    with pytest.raises(real.capi.onnxruntime_pybind11_state.NoSuchFile):
        real.InferenceSession(str(tmp_path / "missing.onnx"), providers=CPU)
    with pytest.raises(C.NoSuchFile):
        ort.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(real.capi.onnxruntime_pybind11_state.InvalidProtobuf):
        real.InferenceSession(b"not a model", providers=CPU)
    with pytest.raises(C.InvalidProtobuf):
        ort.InferenceSession(b"not a model")
    (tmp_path / "empty.onnx").write_bytes(b"")
    for empty in (b"", str(tmp_path / "empty.onnx")):  # parses as a ModelProto without a graph
        with pytest.raises(real.capi.onnxruntime_pybind11_state.InvalidArgument, match="No graph was found"):
            real.InferenceSession(empty, providers=CPU)
        with pytest.raises(C.InvalidArgument, match="no graph was found"):
            ort.InferenceSession(empty)
    with pytest.raises(real.capi.onnxruntime_pybind11_state.InvalidProtobuf):
        real.InferenceSession(str(tmp_path), providers=CPU)
    with pytest.raises(C.InvalidProtobuf, match="is a directory"):
        ort.InferenceSession(str(tmp_path))


def test_a_string_input_takes_any_object_as_its_str_as_onnxruntime() -> None:
    vi = helper.make_tensor_value_info
    model = _model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [vi("x", TensorProto.STRING, ["N"])],
        [vi("y", TensorProto.STRING, ["N"])],
    )
    want, got = _sessions(model)
    for feed in (["a", 1], np.array([b"ab", 1.5, None, True], dtype=object), np.array(["a", "b"])):
        expected = want.run(None, {"x": feed})[0]
        assert expected.dtype == object
        assert got.run(None, {"x": feed})[0].tolist() == expected.tolist()


def test_a_classifier_s_sequence_of_maps_comes_back_as_onnxruntime_s() -> None:
    """Classic ML (ZipMap): labels and a list of {class: probability} dicts, the same types."""
    ml = "ai.onnx.ml"
    classifier = helper.make_node(
        "LinearClassifier",
        ["x"],
        ["label", "probs"],
        domain=ml,
        classlabels_ints=[0, 1],
        coefficients=[1.0, -1.0, -1.0, 1.0],
        intercepts=[0.0, 0.0],
        post_transform="SOFTMAX",
    )
    zipmap = helper.make_node("ZipMap", ["probs"], ["probabilities"], domain=ml, classlabels_int64s=[0, 1])
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    graph = helper.make_graph(
        [classifier, zipmap],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_value_info("probabilities", seq),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ml, 3)])
    model.ir_version = 8
    want, got = _sessions(model.SerializeToString())
    assert _args(got.get_outputs()) == _args(want.get_outputs())
    assert got.get_outputs()[1].type == "seq(map(int64,tensor(float)))"
    x = np.array([[1.0, 2.0], [3.0, 0.5]], np.float32)
    (wl, wp), (gl, gp) = want.run(None, {"x": x}), got.run(None, {"x": x})
    np.testing.assert_array_equal(gl, wl)
    assert isinstance(gp, list) and [sorted(d) for d in gp] == [sorted(d) for d in wp]
    for g, w in zip(gp, wp):
        assert all(abs(g[k] - w[k]) < 1e-6 for k in w)
    ort_values = got.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(x)})
    assert [v.data_type() for v in ort_values] == ["tensor(int64)", "seq(map(int64,tensor(float)))"]


def test_options_for_cpu_execution_provider_are_dropped_as_onnxruntime_does(caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime's CPU EP reads no provider options (rapidocr passes ``arena_extend_strategy``);
    the compat session drops them as it does, and says so on the session's logger. Under the EP's
    own name the same option is refused: ep-core's EPs reject options they do not have."""
    opts = [{"arena_extend_strategy": "kSameAsRequested"}]
    with caplog.at_level("WARNING", logger="ep_core"):
        got = ort.InferenceSession(_add_model(), providers=CPU, provider_options=opts)
    assert any("arena_extend_strategy" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(got.run(["z"], {"x": X, "b": B})[0], np.maximum(X + B, 0))
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="arena_extend_strategy"):
        ort.InferenceSession(_add_model(), providers=["CpuReferenceExecutionProvider"], provider_options=opts)


def test_onnxruntime_s_session_config_keys_are_known_with_their_reasons() -> None:
    """Keys programs set on onnxruntime (``session.intra_op.allow_spinning`` ...) are accepted where
    ep-core's behaviour is what they ask, refused with the reason where it cannot be; a key neither
    runtime knows is refused (onnxruntime stores it silently)."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.disable_prepacking", "1")
    got = ort.InferenceSession(_add_model(), so, providers=CPU)
    np.testing.assert_allclose(got.run(["z"], {"x": X, "b": B})[0], np.maximum(X + B, 0))
    with pytest.raises(C.InvalidArgument, match="not onnxruntime's ORT format"):
        so.add_session_config_entry("session.load_model_format", "ORT")
    with pytest.raises(C.InvalidArgument, match="unknown session config entry 'session.no_such_key'"):
        so.add_session_config_entry("session.no_such_key", "1")


def _conv_bn_relu() -> bytes:
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [2, 3, 1, 1], np.linspace(-1, 1, 6, dtype=np.float32))]
    inits += [helper.make_tensor(n, TensorProto.FLOAT, [2], [v, v + 0.5]) for n, v in zip("sbmv", (2.0, 1.0, 0.1, 1.0))]
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["d"], name="bn"),
        helper.make_node("Relu", ["d"], ["Y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 4, 4])
    return _model(nodes, [x], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], 17, initializer=inits)


@pytest.mark.parametrize("how", ["keyword", "config entry"])
def test_disabled_optimizers_turn_off_onnxruntime_s_named_rewrites(tmp_path: Any, how: str) -> None:
    """onnxruntime's names (and separators) as applications pass them: ConvBNFusion keeps the
    BatchNormalization in both runtimes' optimized models; a name ep-core has no rewrite for
    (NchwcTransformer) asks for nothing; the outputs stay the same."""
    x = {"X": np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)}
    ops, outs = [], []
    for module, providers in ((real, CPU), (ort, CPU)):
        so = module.SessionOptions()
        so.graph_optimization_level = module.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(tmp_path / f"{module.__name__}.onnx")
        kwargs: dict[str, Any] = {}
        if how == "keyword":
            kwargs["disabled_optimizers"] = ["ConvBNFusion", "NchwcTransformer"]
        else:
            so.add_session_config_entry("optimization.disable_specified_optimizers", "ConvBNFusion;NchwcTransformer")
        outs.append(module.InferenceSession(_conv_bn_relu(), so, providers=providers, **kwargs).run(None, x)[0])
        ops.append([n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node])
        if how == "keyword" and module is ort:  # the caller's options are left as they were
            assert not so.has_session_config_entry("optimization.disable_specified_optimizers")
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    assert "BatchNormalization" in ops[0] and "BatchNormalization" in ops[1], ops
    default = ort.InferenceSession(_conv_bn_relu(), providers=CPU)._sess._built.model
    assert [n.op_type for n in default.graph.node] == ["FusedConv"]  # folded and fused when not turned off


def test_an_unknown_provider_name_is_onnxruntime_s_unknown_provider_type() -> None:
    """A name onnxruntime does not know: the constructor prints its EP Error and falls back to the
    CPU EP, set_providers raises RuntimeError; one it knows but lacks here (CUDA) is skipped."""
    model = _add_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.MonkeyPatch.context() as mp:
            printed: list[str] = []
            mp.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
            got = ort.InferenceSession(model, providers=["NoSuchExecutionProvider"])
        assert got.get_providers() == CPU and "Unknown Provider Type: NoSuchExecutionProvider" in printed[1]
        for sess in (got, real.InferenceSession(model, providers=CPU)):
            with pytest.raises(RuntimeError, match="Unknown Provider Type: NoSuchExecutionProvider"):
                sess.set_providers(["NoSuchExecutionProvider"])
        assert got.get_providers() == CPU  # the session as it was (onnxruntime's has no providers left)
        assert ort.InferenceSession(model, providers=["TensorrtExecutionProvider", *CPU]).get_providers() == CPU


def test_unknown_run_options_attributes_are_attribute_errors() -> None:
    for module in (real, ort):
        with pytest.raises(AttributeError):
            module.RunOptions().no_such_option = 1
        with pytest.raises(AttributeError):
            module.SessionOptions().no_such_option = 1


def _both_raise(model: bytes, feed: dict[str, Any], error: str) -> None:
    """Both raise ``error``: onnxruntime's exception class of that name, or a builtin's."""
    for module in (real, ort):
        cls = getattr(module.capi.onnxruntime_pybind11_state, error, None) or getattr(builtins, error)
        with pytest.raises(cls):
            module.InferenceSession(model, providers=CPU).run(None, feed)


@pytest.mark.parametrize("shape", [(4,), (1,), (2, 3)])
def test_a_fed_initializer_is_checked_against_its_input_s_shape(shape: tuple[int, ...]) -> None:
    """ep-core ran a (1,) or (2, 3) override of a [3] initializer, broadcasting it."""
    vi = helper.make_tensor_value_info
    init = onnx.numpy_helper.from_array(np.zeros(3, np.float32), "B")
    model = _model(
        [helper.make_node("Add", ["X", "B"], ["Y"])],
        [vi("X", TensorProto.FLOAT, [2, 3]), vi("B", TensorProto.FLOAT, [3])],
        [vi("Y", TensorProto.FLOAT, [2, 3])],
        initializer=[init],
    )
    feed = {"X": np.ones((2, 3), np.float32), "B": np.ones(shape, np.float32)}
    _both_raise(model, feed, "InvalidArgument")
    with pytest.raises(ep_core.sdk.errors.InvalidArgument, match="input 'B' has"):
        ep_core.InferenceSession(model).run(None, feed)
    right = {"X": feed["X"], "B": np.arange(3, dtype=np.float32)}
    np.testing.assert_array_equal(
        ort.InferenceSession(model, providers=CPU).run(None, right)[0], 1 + right["B"] + 0 * feed["X"]
    )


def test_an_optional_input_may_be_left_out_or_fed_none() -> None:
    opt = helper.make_value_info(
        "O", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    )
    model = _model(
        [helper.make_node("OptionalHasElement", ["O"], ["H"])],
        [opt],
        [helper.make_tensor_value_info("H", TensorProto.BOOL, [])],
    )
    for feed in ({}, {"O": None}):
        assert real.InferenceSession(model, providers=CPU).run(None, feed)[0] == np.array(False)
        assert ort.InferenceSession(model, providers=CPU).run(None, feed)[0] == np.array(False)
    assert ep_core.InferenceSession(model).run(None, {})[0] == np.array(False)


@pytest.mark.parametrize(
    "value, error",
    [({"1": 1.5}, "InvalidArgument"), ({1.0: 1.5}, "RuntimeError"), (np.ones(3, np.float32), "InvalidArgument")],
)
def test_a_map_input_takes_a_dict_with_keys_of_its_key_type(value: Any, error: str) -> None:
    """A str key of an int64 map matched no entry: ep-core gave zeros where onnxruntime refuses."""
    mt = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    g = helper.make_graph(
        [helper.make_node("DictVectorizer", ["M"], ["Y"], domain="ai.onnx.ml", int64_vocabulary=[1, 2, 3])],
        "g",
        [helper.make_value_info("M", mt)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(g, opset_imports=opsets, ir_version=8).SerializeToString()
    np.testing.assert_array_equal(
        ort.InferenceSession(model, providers=CPU).run(None, {"M": {2: 1.5}})[0], [[0, 1.5, 0]]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _both_raise(model, {"M": value}, error)


@pytest.mark.parametrize(
    "name, value",
    [
        ("intra_op_num_threads", "2"),
        ("intra_op_num_threads", 2.0),
        ("inter_op_num_threads", 2**40),
        ("enable_profiling", "yes"),
        ("graph_optimization_level", 99),
        ("execution_mode", 1),
        ("log_severity_level", "1"),
        ("logid", 5),
        ("optimized_model_filepath", 5),
    ],
)
def test_option_values_onnxruntime_s_binding_refuses_are_type_errors(name: str, value: Any) -> None:
    """pydantic converted these ("2" -> 2, 99 -> the enum); onnxruntime's binding raises TypeError."""
    for module in (real, ort):
        with pytest.raises(TypeError):
            setattr(module.SessionOptions(), name, value)


@pytest.mark.parametrize(
    "name, value, want",
    [("intra_op_num_threads", True, 1), ("intra_op_num_threads", np.int64(3), 3), ("enable_profiling", 1, True)],
)
def test_option_values_onnxruntime_s_binding_converts_are_taken(name: str, value: Any, want: Any) -> None:
    for module in (real, ort):
        so = module.SessionOptions()
        setattr(so, name, value)
        assert getattr(so, name) == want

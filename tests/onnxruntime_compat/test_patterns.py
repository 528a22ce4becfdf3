"""How real applications use onnxruntime, each pattern beside the real onnxruntime on a small
onnx.helper model. The patterns come from PyPI packages' own code: insightface's
PickableInferenceSession, kokoro-onnx and optimum reading ``session._model_path``, ultralytics'
``except onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf``, onnxtr's
``intra_op_num_threads = -1``, code setting ``ExecutionMode.ORT_PARALLEL``, tf2onnx models whose
dims are named ``unk__N``, text and classic-ML models fed NumPy ``str`` arrays, lists and dicts,
Hugging Face optimum's ``onnxruntime.transformers.io_binding_helper`` import and its
``importlib.metadata`` check, onnx-asr's STFT preprocessors."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as real
import pytest
from onnx import TensorProto, helper

import ep_core.onnxruntime as ort
from ep_core.onnxruntime.capi import onnxruntime_pybind11_state as C

CPU = ["CPUExecutionProvider"]
EP_CORE = str(Path(sys.executable).with_name("ep-core"))
vi = helper.make_tensor_value_info


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 17, **graph: Any) -> bytes:
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, **graph), opset_imports=imports)
    m.ir_version = 8
    return m.SerializeToString()


def _add_mul(path: Path | None = None) -> bytes:
    """Y = X + W, Z = Y * Y over X [N, 3]."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [helper.make_node("Add", ["X", "W"], ["Y"]), helper.make_node("Mul", ["Y", "Y"], ["Z"])]
    out = [vi("Y", TensorProto.FLOAT, ["N", 3]), vi("Z", TensorProto.FLOAT, ["N", 3])]
    model = _model(nodes, [vi("X", TensorProto.FLOAT, ["N", 3])], out, initializer=[w])
    if path is not None:
        path.write_bytes(model)
    return model


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _both(model: Any, **kwargs: Any) -> tuple[Any, ort.InferenceSession]:
    kwargs.setdefault("providers", CPU)
    return real.InferenceSession(model, **kwargs), ort.InferenceSession(model, **kwargs)


def _raised(call: Any) -> tuple[type, ...]:
    """The builtin exception classes what ``call`` raises derives from (RuntimeError, ValueError...)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return tuple(c for c in type(exc).__mro__ if c.__module__ == "builtins")
    raise AssertionError("nothing was raised")


def _equal(want: list[Any], got: list[Any]) -> None:
    assert len(want) == len(got)
    for w, g in zip(want, got):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(
                g, w, rtol=1e-5, atol=1e-5
            ) if w.dtype.kind == "f" else np.testing.assert_array_equal(g, w)
        else:
            assert g == w


# ----------------------------------------------------------------------------- the session object
def test_private_attributes_applications_read(tmp_path: Path) -> None:
    """kokoro-onnx (``session._model_path``), optimum (``_model_path``), insightface (logs
    ``_providers``/``_provider_options``) read onnxruntime's private attributes."""
    path = tmp_path / "m.onnx"
    _add_mul(path)
    want, got = _both(str(path))
    for name in ("_model_path", "_model_bytes", "_providers", "_provider_options", "_enable_fallback"):
        assert getattr(got, name) == getattr(want, name), name
    assert got._fallback_providers == want._fallback_providers and got._read_config_from_model is False
    assert [a.name for a in got._inputs_meta] == [a.name for a in want._inputs_meta]
    assert [a.name for a in got._outputs_meta] == [a.name for a in want._outputs_meta]
    assert got._model_meta.producer_name == want._model_meta.producer_name
    assert isinstance(got._sess_options, ort.SessionOptions) and got._profiling_start_time_ns == 0
    model = path.read_bytes()
    want, got = _both(model)
    assert (got._model_path, got._model_bytes) == (want._model_path, want._model_bytes) == (None, model)
    # onnxruntime keeps its C session in _sess: here the engine's, which SessionIOBinding takes
    assert ort.SessionIOBinding(got._sess) is not None


class _Pickable:
    """insightface's PickableInferenceSession (model_zoo.py), over either onnxruntime."""

    @staticmethod
    def of(module: Any) -> type:
        class Pickable(module.InferenceSession):  # type: ignore[misc, name-defined]
            def __init__(self, model_path: str, **kwargs: Any) -> None:
                super().__init__(model_path, **kwargs)
                self.model_path = model_path  # ep-core's own session has a read-only property of this name

            def __getstate__(self) -> dict[str, Any]:
                return {"model_path": self.model_path, "providers": self.get_providers()}

            def __setstate__(self, values: dict[str, Any]) -> None:
                self.__init__(values["model_path"], providers=values["providers"])  # type: ignore[misc]

        return Pickable


def test_a_subclass_sets_its_own_attributes_and_pickles(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    _add_mul(path)
    results = []
    for module in (real, ort):
        cls = _Pickable.of(module)
        globals()["Pickable"] = cls  # pickle finds the class by its module-level name
        cls.__qualname__ = "Pickable"
        session = pickle.loads(pickle.dumps(cls(str(path), providers=CPU)))
        results.append((session.model_path, session.get_providers(), session.run(["Z"], {"X": X})[0].tolist()))
    assert results[0] == results[1]


def test_capi_modules_are_attributes_once_onnxruntime_is_imported() -> None:
    """ultralytics: ``except onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf``, with
    nothing but ``import onnxruntime`` before (a fresh interpreter, so no test imported them)."""
    code = "import {m} as o; print(o.capi.onnxruntime_pybind11_state.InvalidProtobuf.__name__, o.capi._pybind_state.Fail.__name__)"
    for module in ("onnxruntime", "ep_core.onnxruntime"):
        done = subprocess.run([sys.executable, "-c", code.format(m=module)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["InvalidProtobuf", "Fail"]


def test_a_corrupt_model_file_is_invalid_protobuf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 not a model" * 8)
    for module in (real, ort):
        with pytest.raises(module.capi.onnxruntime_pybind11_state.InvalidProtobuf):
            module.InferenceSession(str(bad))


# ------------------------------------------------------------------------------ session options
def test_negative_thread_counts_are_the_default() -> None:
    """onnxtr sets intra_op_num_threads = inter_op_num_threads = -1."""
    results = []
    for module in (real, ort):
        so = module.SessionOptions()
        so.intra_op_num_threads = -1
        so.inter_op_num_threads = -1
        session = module.InferenceSession(_add_mul(), so, providers=CPU)
        results.append((so.intra_op_num_threads, session.run(["Z"], {"X": X})[0].tolist()))
    assert results[0] == results[1]


def test_parallel_execution_mode_runs_sequentially_saying_so(caplog: pytest.LogCaptureFixture) -> None:
    want_so, got_so = real.SessionOptions(), ort.SessionOptions()
    for so, module in ((want_so, real), (got_so, ort)):
        so.execution_mode = module.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = 2
    want = real.InferenceSession(_add_mul(), want_so, providers=CPU)
    with caplog.at_level(logging.WARNING, logger="ep_core"):
        got = ort.InferenceSession(_add_mul(), got_so, providers=CPU)
    _equal(want.run(None, {"X": X}), got.run(None, {"X": X}))
    assert any("making the execution mode sequential" in r.getMessage() for r in caplog.records)
    assert got.get_session_options().execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert got_so.execution_mode == ort.ExecutionMode.ORT_PARALLEL  # the caller's options are left as set


def test_session_options_attributes_as_onnxruntime() -> None:
    want, got = real.SessionOptions(), ort.SessionOptions()
    assert got.profile_file_prefix == want.profile_file_prefix == "onnxruntime_profile_"
    for so in (want, got):
        with pytest.raises(AttributeError):
            so.no_such_option = 1  # type: ignore[union-attr]
    # copy_session_options (insightface) copies attribute by attribute, skipping what fails
    for name in ("intra_op_num_threads", "graph_optimization_level", "log_severity_level", "enable_cpu_mem_arena"):
        setattr(got, name, getattr(got, name))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("session.dynamic_block_base", "4"),
        ("session.intra_op.spin_duration_us", "0"),
        ("session.force_spinning_stop", "1"),
        ("session.graph_optimizations_loop_level", "1"),
        ("session.record_ep_graph_assignment_info", "1"),
        ("optimization.enable_gelu_approximation", "0"),
        ("mlas.disable_kleidiai", "1"),
    ],
)
def test_onnxruntime_config_keys_that_tune_what_ep_core_lacks_are_accepted(key: str, value: str) -> None:
    results = []
    for module in (real, ort):
        so = module.SessionOptions()
        so.add_session_config_entry(key, value)
        assert so.get_session_config_entry(key) == value
        results.append(module.InferenceSession(_add_mul(), so, providers=CPU).run(["Z"], {"X": X})[0].tolist())
    assert results[0] == results[1]


def test_onnxruntime_config_keys_asking_what_ep_core_cannot_do_are_refused_with_the_reason() -> None:
    so = ort.SessionOptions()
    with pytest.raises(C.InvalidArgument, match="no Gelu approximation"):
        so.add_session_config_entry("optimization.enable_gelu_approximation", "1")
    so.add_session_config_entry("session.disable_model_compile", "1")  # onnxruntime's name of ep-core's key
    assert so.get_session_config_entry("session.disable_compile") == "1"


def test_a_run_config_key_not_set_is_a_runtime_error() -> None:
    for module in (real, ort):
        assert _raised(lambda m=module: m.RunOptions().get_run_config_entry("nope"))[0] is RuntimeError


# ----------------------------------------------------------------------------------------- feeds
def test_scalar_feeds_are_runtime_errors() -> None:
    want, got = _both(_add_mul())
    for value in (1.0, np.float32(1.0)):
        assert (
            _raised(lambda s=want, v=value: s.run(None, {"X": v}))
            == _raised(lambda v=value: got.run(None, {"X": v}))[-4:]
        )
    with pytest.raises(C.InvalidArgument):  # ep-core's class as well
        got.run(None, {"X": 1.0})


def test_rank0_inputs_take_one_element_arrays_and_lists() -> None:
    """silero-vad's callers feed the sample rate as ``np.array([16000])`` and an If condition as
    ``np.array([False])``: onnxruntime runs a one-element array (or list) where the input is a
    scalar; a larger array stays an error."""
    model = _model(
        [helper.make_node("Mul", ["x", "s"], ["y"])],
        [vi("x", TensorProto.FLOAT, [2, 3]), vi("s", TensorProto.FLOAT, [])],
        [vi("y", TensorProto.FLOAT, None)],
    )
    want, got = _both(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for s in (np.array(2, np.float32), np.array([2], np.float32), np.array([[2]], np.float32), [2.0]):
        _equal(want.run(None, {"x": x, "s": s}), got.run(None, {"x": x, "s": s}))
    with pytest.raises(C.InvalidArgument):
        got.run(None, {"x": x, "s": np.array([2, 3], np.float32)})


def test_string_inputs_take_numpy_str_and_bytes_arrays() -> None:
    model = _model(
        [
            helper.make_node(
                "LabelEncoder",
                ["x"],
                ["y"],
                domain="ai.onnx.ml",
                keys_strings=["a", "bc"],
                values_int64s=[1, 2],
                default_int64=-1,
            )
        ],
        [vi("x", TensorProto.STRING, [None])],
        [vi("y", TensorProto.INT64, [None])],
    )
    want, got = _both(model)
    for feed in (np.array(["a", "bc", "z"]), np.array(["a", "bc", "z"], dtype=object), ["a", "bc", "z"]):
        _equal(want.run(None, {"x": feed}), got.run(None, {"x": feed}))
    assert got.run(None, {"x": np.array([b"a", b"bc"])})[0].tolist() == [1, 2]  # UTF-8 bytes, decoded


def test_sequence_inputs_take_lists_and_map_inputs_take_dicts() -> None:
    seq = _model(
        [helper.make_node("ConcatFromSequence", ["x"], ["y"], axis=0)],
        [helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, None)],
        [vi("y", TensorProto.FLOAT, None)],
    )
    want, got = _both(seq)
    feed = {"x": [np.ones((1, 2), np.float32), np.zeros((1, 2), np.float32)]}
    _equal(want.run(None, feed), got.run(None, feed))
    mapping = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    cast = _model(
        [helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", map_form="DENSE", cast_to="TO_FLOAT")],
        [helper.make_value_info("x", mapping)],
        [vi("y", TensorProto.FLOAT, None)],
    )
    want, got = _both(cast)
    assert got.get_inputs()[0].type == want.get_inputs()[0].type == "map(int64,tensor(float))"
    feed = {"x": {0: 1.5, 1: 2.5, 2: -1.0}}
    _equal(want.run(None, feed), got.run(None, feed))


def test_a_dict_vectorizer_gives_a_row_and_drops_unknown_keys() -> None:
    """scikit-learn's DictVectorizer as skl2onnx exports it (output [None, N]): onnxruntime gives
    [1, N] and drops keys outside the vocabulary, as scikit-learn's transform does."""
    mapping = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    for shape in ([None, 3], None):
        model = _model(
            [helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a", "b", "c"])],
            [helper.make_value_info("x", mapping)],
            [vi("y", TensorProto.FLOAT, shape)],
        )
        want, got = _both(model)
        feed = {"x": {"a": 1.0, "c": 2.0, "unseen": 5.0}}
        _equal(want.run(None, feed), got.run(None, feed))


# --------------------------------------------------------------------------------- introspection
def test_dims_the_model_names_unk_are_reported_as_onnxruntime() -> None:
    """tf2onnx names unknown dims ``unk__N`` in the model itself: onnxruntime shows them (only
    names onnx's shape inference makes up are None); an override's size replaces a declared name."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])]
    model = _model(
        nodes,
        [vi("x", TensorProto.FLOAT, ["unk__7", None])],
        [vi("y", TensorProto.FLOAT, ["unk__9", None]), vi("t", TensorProto.FLOAT, None)],
    )
    want, got = _both(model)
    for method in ("get_inputs", "get_outputs"):
        assert [a.shape for a in getattr(got, method)()] == [a.shape for a in getattr(want, method)()]
    so = {m: m.SessionOptions() for m in (real, ort)}
    for options in so.values():
        options.add_free_dimension_override_by_name("N", 2)
    want = real.InferenceSession(_add_mul(), so[real], providers=CPU)
    got = ort.InferenceSession(_add_mul(), so[ort], providers=CPU)
    assert [a.shape for a in got.get_outputs()] == [a.shape for a in want.get_outputs()] == [[2, 3], [2, 3]]


def test_profile_node_events_name_the_provider_the_application_selected(tmp_path: Path) -> None:
    providers = {}
    for module in (real, ort):
        so = module.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / module.__name__)
        session = module.InferenceSession(_add_mul(), so, providers=CPU)
        session.run(None, {"X": X})
        events = json.loads(Path(session.end_profiling()).read_text())
        providers[module] = {e["args"].get("provider") for e in events if e["cat"] == "Node"}
    assert providers[ort] == providers[real] == {"CPUExecutionProvider"}


# ----------------------------------------------------------------------------------- IO binding
def test_io_binding_failures_are_runtime_errors() -> None:
    want, got = _both(_add_mul())
    for session in (want, got):
        binding = session.io_binding()
        binding.bind_cpu_input("X", X)
        assert _raised(lambda b=binding, s=session: (b.bind_output("nope"), s.run_with_iobinding(b)))[0] is RuntimeError
        unbound = session.io_binding()
        unbound.bind_output("Y")
        assert _raised(lambda b=unbound, s=session: s.run_with_iobinding(b))[0] is RuntimeError
    with pytest.raises(C.InvalidArgument):
        binding = got.io_binding()
        binding.bind_output("Y")
        got.run_with_iobinding(binding)


# ---------------------------------------------------------------------------- package and modules
def test_optimum_s_type_helper_is_importable() -> None:
    """optimum's ORTModel imports ``onnxruntime.transformers.io_binding_helper.TypeHelper``."""
    from ep_core.onnxruntime.transformers.io_binding_helper import TypeHelper

    names = {t: TensorProto.DataType.Name(t).lower() for t in (1, 6, 7, 9, 10, 11)}
    for onnx_type, name in names.items():
        ort_type = f"tensor({name})"
        assert TypeHelper.ort_type_to_onnx_type(ort_type) == onnx_type
        want = bool if onnx_type == TensorProto.BOOL else helper.tensor_dtype_to_np_dtype(onnx_type).type
        assert TypeHelper.ort_type_to_numpy_type(ort_type) is want
    assert TypeHelper.ort_type_to_onnx_type("tensor(string)") == TensorProto.STRING
    with pytest.raises(ValueError, match="not found in map"):
        TypeHelper.ort_type_to_numpy_type("tensor(string)")
    session = ort.InferenceSession(_add_mul(), providers=CPU)
    assert TypeHelper.get_io_numpy_type_map(session) == {"X": np.float32, "Y": np.float32, "Z": np.float32}
    assert TypeHelper.get_input_type(session, "X") == "tensor(float)"


def test_the_onnxruntime_distribution_is_found_under_the_drop_in(tmp_path: Path) -> None:
    """optimum and transformers check ``importlib.metadata.version("onnxruntime")`` before they
    import it: under ``ep-core exec`` the distribution found is the drop-in's, as the module is."""
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            """
            import importlib.metadata as md
            before = md.distribution("onnxruntime").metadata["Summary"]
            import onnxruntime
            print(md.version("onnxruntime") == onnxruntime.__version__, "ep-core" in before)
            """
        )
    )
    done = subprocess.run([EP_CORE, "exec", "--", "python", str(app)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    code = "from ep_core.onnxruntime import dropin; dropin.install(); import importlib.metadata as m; print(m.version('onnxruntime'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert done.stdout.strip() == ort.__version__


# ------------------------------------------------------------------------------------- the EPs
def test_stft_takes_a_two_dimensional_real_signal() -> None:
    """onnx-asr's mel preprocessors (whisper, nemo, kaldi, gigaam) feed STFT a [batch, length]
    signal, which onnxruntime takes as real."""
    window = helper.make_tensor("w", TensorProto.FLOAT, [16], np.hanning(16).astype(np.float32).tolist())
    step = helper.make_tensor("s", TensorProto.INT64, [], [4])
    model = _model(
        [helper.make_node("STFT", ["x", "s", "w"], ["y"], onesided=1)],
        [vi("x", TensorProto.FLOAT, [1, 64])],
        [vi("y", TensorProto.FLOAT, None)],
        initializer=[window, step],
    )
    want, got = _both(model)
    signal = {"x": np.sin(np.arange(64, dtype=np.float32) / 3)[None]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _equal(want.run(None, signal), got.run(None, signal))

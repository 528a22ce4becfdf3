"""The onnxruntime-shaped session API: inputs/outputs, metadata, bad feeds, external data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.errors import InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile, StatusCode


def _matmul_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    m = make_model([node], [("x", TensorProto.FLOAT, ["batch", 4])], [("y", TensorProto.FLOAT, ["batch", 3])], [w])
    m.producer_name = "tests"
    m.doc_string = "a matmul"
    m.model_version = 7
    helper.set_model_props(m, {"author": "ep-core"})
    return m


def test_inputs_outputs_and_metadata() -> None:
    sess = ep_core.InferenceSession(_matmul_model())
    (i,) = sess.get_inputs()
    (o,) = sess.get_outputs()
    assert (i.name, i.shape, i.type) == ("x", ["batch", 4], "tensor(float)")
    assert (o.name, o.shape, o.type) == ("y", ["batch", 3], "tensor(float)")
    meta = sess.get_modelmeta()
    assert (meta.producer_name, meta.description, meta.version) == ("tests", "a matmul", 7)
    assert meta.custom_metadata_map == {"author": "ep-core"}
    x = np.ones((5, 4), np.float32)
    np.testing.assert_allclose(sess.run(["y"], {"x": x})[0], x @ np.arange(12, dtype=np.float32).reshape(4, 3))


@pytest.mark.parametrize(
    "feed, message",
    [
        ({}, "missing input 'x' (a tensor(float) of shape [batch, 4])"),
        ({"x": np.ones((1, 4), np.float32), "z": np.ones(1)}, "unknown input 'z'; the model's inputs are ['x']"),
        ({"x": np.ones((1, 4), np.float64)}, "input 'x' has dtype float64, expected float32 (tensor(float))"),
        ({"x": np.ones((4,), np.float32)}, "input 'x' has rank 1 (shape [4]), expected rank 2 (shape [batch, 4])"),
        (
            {"x": np.ones((2, 5), np.float32)},
            "input 'x' has dim 5 on axis 1 (shape [2, 5]), expected 4 (shape [batch, 4])",
        ),
        (
            {"x": [[1.0, 2.0, 3.0, 4.0]]},
            "input 'x' must be a numpy.ndarray (ep_core.onnxruntime converts lists), got list",
        ),
    ],
)
def test_bad_feeds_are_invalid_argument_naming_the_input(feed: dict, message: str) -> None:
    sess = ep_core.InferenceSession(_matmul_model())
    with pytest.raises(InvalidArgument) as info:
        sess.run(None, feed)
    assert info.value.code is StatusCode.INVALID_ARGUMENT
    assert message in info.value.message


def test_unknown_output_name() -> None:
    sess = ep_core.InferenceSession(_matmul_model())
    with pytest.raises(InvalidArgument, match="unknown output 'q'; the model's outputs are \\['y'\\]"):
        sess.run(["q"], {"x": np.ones((1, 4), np.float32)})


def _save_external(tmp_path: Path) -> Path:
    model = _matmul_model()
    path = tmp_path / "model" / "mm.onnx"
    path.parent.mkdir()
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mm.weights",
        size_threshold=0,
    )
    assert (path.parent / "mm.weights").is_file()
    return path


def test_external_data_beside_the_model_file(tmp_path: Path) -> None:
    path = _save_external(tmp_path)
    sess = ep_core.InferenceSession(str(path))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ np.arange(12, dtype=np.float32).reshape(4, 3))


def test_external_data_for_bytes_needs_the_folder_option(tmp_path: Path) -> None:
    path = _save_external(tmp_path)
    data = path.read_bytes()
    with pytest.raises(InvalidArgument, match="session.model_external_initializers_file_folder_path"):
        ep_core.InferenceSession(data)
    opts = ep_core.SessionOptions()
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
    sess = ep_core.InferenceSession(data, opts)
    assert sess.run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 3)
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(tmp_path))
    with pytest.raises(NoSuchFile, match="mm.weights"):
        ep_core.InferenceSession(data, opts)


def test_missing_file_and_invalid_models(tmp_path: Path) -> None:
    with pytest.raises(NoSuchFile, match="nope.onnx"):
        ep_core.InferenceSession(str(tmp_path / "nope.onnx"))
    with pytest.raises(InvalidProtobuf):  # onnxruntime's class for bytes that do not parse
        ep_core.InferenceSession(b"not a model at all")
    broken = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", 1, [1])], [("z", 1, [1])])
    with pytest.raises(InvalidGraph, match="the model is invalid"):
        ep_core.InferenceSession(broken)


def test_import_ep_core_is_light() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import ep_core"], capture_output=True, text=True)
    assert proc.returncode == 0
    modules = [line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "ep_core" in modules
    for heavy in ("numba", "onnxruntime", "onnx", "numpy", "pluggy", "pydantic", "llvmlite"):
        assert heavy not in modules, f"import ep_core imported {heavy}"


def test_hookspecs_are_documented_and_versioned() -> None:
    from ep_core.sdk import hookspecs

    specs = [n for n in dir(hookspecs) if n.startswith("ep_")]
    assert len(specs) >= 29
    for name in specs:
        fn = getattr(hookspecs, name)
        assert fn.__doc__ and len(fn.__doc__) > 20, f"{name} needs a docstring"
        assert hookspecs.HOOK_API_VERSIONS[name] <= hookspecs.API_VERSION
    for required in (
        "ep_factory_get_supported_devices",
        "ep_factory_create_ep",
        "ep_get_capability",
        "ep_compile",
        "ep_factory_create_data_transfer",
        "ep_factory_create_sync_stream_for_device",
        "ep_sync",
        "ep_on_run_start",
        "ep_on_run_end",
        "ep_factory_validate_compiled_model_compatibility",
        "ep_get_compiled_model_compatibility_info",
        "ep_create_profiler",
        "ep_get_ep_context_nodes",
        "ep_get_preferred_data_layout",
        "ep_should_convert_data_layout_for_op",
        "ep_factory_get_hardware_device_incompatibility_details",
        "ep_factory_get_custom_op_domains",
        "ep_factory_is_stream_aware",
        "ep_factory_release_allocator",
        "ep_factory_release_ep",
    ):
        assert required in specs


def test_public_api_exports_resolve_and_leak_no_private_names() -> None:
    for name in ep_core.__all__:
        assert not name.startswith("_") or name == "__version__"
        if name != "__version__":
            assert getattr(ep_core, name) is not None
    with pytest.raises(AttributeError):
        ep_core.does_not_exist  # noqa: B018


def test_factory_declaring_a_newer_api_is_refused() -> None:
    from ep_core.sdk.ep_base import HostEpFactory
    from ep_core.sdk.errors import PluginError

    class Future(HostEpFactory):
        ep_name = "FutureTestExecutionProvider"
        ep_vendor = "tests"
        ep_version = "1.0.0"

        def ep_factory_api_version(self) -> int:
            return 99

        def ep_factory_create_ep(self, devices, ep_options, session_options):  # noqa: ANN001
            return None

    with pytest.raises(PluginError, match="needs ep_core API version 99.*upgrade ep-core"):
        ep_core.register_execution_provider_library("FutureTestExecutionProvider", Future())
    assert "FutureTestExecutionProvider" not in ep_core.get_all_providers()


def test_manual_registration_by_module_path() -> None:
    name = "FusingTestExecutionProvider"
    ep_core.register_execution_provider_library(name, "_support.eps:FusingFactory")
    try:
        assert name in ep_core.get_all_providers()
        model = make_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [("x", 1, [2])], [("y", 1, [2])])
        sess = ep_core.InferenceSession(model, providers=[name])
        assert sess.get_node_assignment()["add"]["ep"] == name
        with pytest.raises(ep_core.sdk.errors.PluginError, match="already registered"):
            ep_core.register_execution_provider_library(name, "_support.eps:FusingFactory")
    finally:
        ep_core.unregister_execution_provider_library(name)
    assert name not in ep_core.get_all_providers()
    with pytest.raises(ep_core.sdk.errors.PluginError, match="must look like 'package.module:attribute'"):
        ep_core.register_execution_provider_library(name, "no_colon_here")


@pytest.mark.parametrize("providers", [["CpuReferenceExecutionProvider"], ["NumbaCpuExecutionProvider"]])
def test_outputs_that_pass_an_input_on_are_their_own_arrays(providers: list[str]) -> None:
    """Identity and Reshape hand their input on inside the graph, but what a run returns never
    shares memory with a feed (onnxruntime's outputs are their own buffers): writing into an output
    must not change the caller's input. Outputs computed afresh are not copied."""
    if providers[0] not in ep_core.get_available_providers():
        pytest.skip(f"{providers[0]} is not installed")
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [12])
    nodes = [
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Neg", ["x"], ["neg"]),
    ]
    outs = [("same", 1, [3, 4]), ("flat", 1, [12]), ("neg", 1, [3, 4])]
    model = make_model(nodes, [("x", 1, [3, 4])], outs, [shape])
    x = np.arange(24, dtype=np.float32).reshape(6, 4)[::2]  # a view of a larger array
    before = x.copy()
    providers = list(dict.fromkeys(providers + ["CpuReferenceExecutionProvider"]))
    same, flat, neg = ep_core.InferenceSession(model, providers=providers).run(None, {"x": x})
    assert not np.shares_memory(same, x) and not np.shares_memory(flat, x)
    same += 1
    flat += 1
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(neg, -before)

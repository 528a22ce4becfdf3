"""The compat module's functions, enums, exceptions, device types, ModelCompiler and ``capi``
modules beside the real onnxruntime."""

from __future__ import annotations

import importlib
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as real
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as RC

import ep_core
import ep_core.onnxruntime as ort
import ep_core.sdk.errors as errors
from ep_core.onnxruntime.capi import onnxruntime_pybind11_state as C
from ep_core.sdk.ep_base import HostEpFactory

EXCEPTIONS = {
    "Fail": errors.Fail,
    "InvalidArgument": errors.InvalidArgument,
    "NoSuchFile": errors.NoSuchFile,
    "NoModel": errors.NoModel,
    "EngineError": errors.EngineError,
    "RuntimeException": errors.RuntimeException,
    "InvalidProtobuf": errors.InvalidProtobuf,
    "ModelLoaded": errors.ModelLoaded,
    "NotImplemented": errors.NotImplementedByAnyEp,
    "InvalidGraph": errors.InvalidGraph,
    "EPFail": errors.EpFail,
    "ModelLoadCanceled": errors.ModelLoadCanceled,
    "ModelRequiresCompilation": errors.ModelRequiresCompilation,
    "NotFound": errors.NotFound,
    "DeviceReset": errors.DeviceReset,
}


def test_the_exceptions_are_ep_core_s_typed_errors() -> None:
    assert {n for n in dir(RC) if isinstance(getattr(RC, n), type) and issubclass(getattr(RC, n), Exception)} == set(
        EXCEPTIONS
    )
    for name, cls in EXCEPTIONS.items():
        assert getattr(C, name) is cls
        assert getattr(importlib.import_module("ep_core.onnxruntime.capi._pybind_state"), name) is cls
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
    )
    with pytest.raises(C.InvalidArgument):  # what ep-core raises is caught as onnxruntime's class
        ort.InferenceSession(model.SerializeToString()).run(None, {"x": np.ones(2, np.int64)})


ENUMS = [
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "OrtAllocatorType",
    "OrtMemType",
    "OrtMemoryInfoDeviceType",
    "OrtDeviceMemoryType",
    "OrtCompileApiFlags",
    "OrtSparseFormat",
    "OrtDeviceVendorId",
]


@pytest.mark.parametrize("name", ENUMS)
def test_enums_have_onnxruntime_s_members_and_numbers(name: str) -> None:
    theirs, ours = getattr(real, name), getattr(ort, name)
    assert {k: int(v) for k, v in theirs.__members__.items()} == {k: int(v) for k, v in ours.__members__.items()}


@pytest.mark.parametrize(
    "name", ["ArenaExtendStrategy", "OrtCompiledModelCompatibility", "OrtDeviceEpIncompatibilityReason"]
)
def test_capi_enums_have_onnxruntime_s_members_and_numbers(name: str) -> None:
    theirs, ours = getattr(RC, name), getattr(C, name)
    assert {k: int(v) for k, v in theirs.__members__.items()} == {k: int(v) for k, v in ours.__members__.items()}
    assert C.kSameAsRequested == RC.kSameAsRequested.value


@pytest.mark.parametrize("name", ["OrtExecutionProviderDevicePolicy", "OrtHardwareDeviceType"])
def test_ep_core_s_own_enums_have_onnxruntime_s_members(name: str) -> None:
    ours: type[Enum] = getattr(ort, name)
    assert set(getattr(real, name).__members__) == set(ours.__members__)


def test_versions_build_info_and_device() -> None:
    assert ort.__version__ == ort.version == ort.get_version_string() == "1.31.0"
    assert ort.ep_core_version == ep_core.__version__
    assert ep_core.__version__ in ort.get_build_info() and "1.31.0" in ort.get_build_info()
    # the walk's machines have no real GPU: NUMBA_ENABLE_CUDASIM's simulated device does not count
    assert ort.get_device() == real.get_device() == "CPU"
    assert ort.has_collective_ops() is False is real.has_collective_ops()
    assert ort.cuda_version == real.cuda_version == ""
    assert ort.package_name == "ep-core" and ort.import_capi_exception is None


def test_providers_and_ep_devices() -> None:
    for theirs, ours in (
        (ort.get_available_providers, ep_core.get_available_providers),
        (ort.get_all_providers, ep_core.get_all_providers),
    ):
        # ep-core's EPs under onnxruntime's names: the CPU fallback as CPUExecutionProvider, listed last
        renamed = [n for n in ours() if n != "CpuReferenceExecutionProvider"] + ["CPUExecutionProvider"]
        assert theirs() == renamed
    devices = ort.get_ep_devices()
    assert [d.ep_name for d in devices] == [d.ep_name for d in ep_core.get_ep_devices()]
    cpu = next(d for d in devices if d.ep_name == "CpuReferenceExecutionProvider")
    theirs = real.get_ep_devices()[0]
    assert cpu.device.type == ort.OrtHardwareDeviceType.CPU and theirs.device.type == real.OrtHardwareDeviceType.CPU
    assert cpu.device.vendor_id == theirs.device.vendor_id  # the same host CPU
    assert isinstance(cpu.ep_metadata, dict) and isinstance(cpu.ep_options, dict) and cpu.ep_vendor == "ep-core"
    memory = cpu.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    assert memory is not None and memory.device_mem_type == ort.OrtDeviceMemoryType.DEFAULT
    assert cpu.memory_info(ort.OrtDeviceMemoryType.HOST_ACCESSIBLE) is None
    details = C.get_hardware_device_ep_incompatibility_details("CpuReferenceExecutionProvider", cpu.device)
    want = RC.get_hardware_device_ep_incompatibility_details("CPUExecutionProvider", theirs.device)
    assert details == want == {"reasons_bitmask": 0, "notes": None, "error_code": 0}


def test_a_policy_and_devices_select_eps_through_session_options() -> None:
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
    ).SerializeToString()
    options = ort.SessionOptions()
    cpu = next(d for d in ort.get_ep_devices() if d.ep_name == "CpuReferenceExecutionProvider")
    options.add_provider_for_devices([cpu], {})
    assert options.has_providers()
    assert ort.InferenceSession(model, options).get_providers() == ["CPUExecutionProvider"]
    options = ort.SessionOptions()
    options.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    assert not options.has_providers()
    seen: list[Any] = []

    def delegate(eps: list[Any], model_meta: Any, runtime_meta: Any, max_selections: int) -> list[Any]:
        seen.extend(eps)
        return [d for d in eps if d.ep_name == "CpuReferenceExecutionProvider"]

    options.set_provider_selection_policy_delegate(delegate)
    sess = ort.InferenceSession(model, options)
    assert all(isinstance(d, ort.OrtEpDevice) for d in seen) and sess.get_providers() == ["CPUExecutionProvider"]


def test_ort_device_both_apis_as_onnxruntime() -> None:
    for args in [("cpu", 0), ("cuda", 1), ("gpu", 1, 0x10DE), ("npu", 0), ("dml", 0), ("cann", 2)]:
        theirs, ours = real.OrtDevice.make(*args), ort.OrtDevice.make(*args)
        assert (ours.device_type(), ours.device_id(), ours.device_vendor_id(), ours.device_mem_type()) == (
            theirs.device_type(),
            theirs.device_id(),
            theirs.device_vendor_id(),
            theirs.device_mem_type(),
        )
    for f in ["cpu", "cuda", "gpu", "npu", "dml", "cann", "webgpu", "fpga", "default_memory"]:
        assert getattr(C.OrtDevice, f)() == getattr(RC.OrtDevice, f)()
    theirs, ours = RC.OrtDevice(RC.OrtDevice.cuda(), 0, 0x10DE, 1), C.OrtDevice(C.OrtDevice.cuda(), 0, 0x10DE, 1)
    assert (ours.device_type(), ours.vendor_id(), ours.device_id()) == (
        theirs.device_type(),
        theirs.vendor_id(),
        theirs.device_id(),
    )
    assert C.OrtDevice(0, 0, 3).device_id() == RC.OrtDevice(0, 0, 3).device_id() == 3
    assert ort.OrtDevice.make("cuda", 1).key == "gpu:1" and ort.OrtDevice.make("cpu", 0).key == "cpu"
    with pytest.raises(Exception, match="Unsupported device type: tpu"):
        real.OrtDevice.make("tpu", 0)
    with pytest.raises(C.InvalidArgument, match="Unsupported device type: tpu"):
        ort.OrtDevice.make("tpu", 0)


def test_memory_info_and_arena_cfg_as_onnxruntime() -> None:
    fields = ("name", "allocator_type", "device_id", "mem_type", "device_mem_type", "device_vendor_id")
    for name in ["Cpu", "Cuda", "CudaPinned", "Hip", "DML", "QnnHtpShared"]:
        theirs = RC.OrtMemoryInfo(name, RC.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 1, RC.OrtMemType.DEFAULT)
        ours = C.OrtMemoryInfo(name, C.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 1, C.OrtMemType.DEFAULT)
        assert [int(getattr(ours, f)) if f != "name" else ours.name for f in fields] == [
            int(getattr(theirs, f)) if f != "name" else theirs.name for f in fields
        ]
    with pytest.raises(RuntimeError, match="Specified device is not supported"):
        RC.OrtMemoryInfo("Foo", RC.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, RC.OrtMemType.DEFAULT)
    with pytest.raises(RuntimeError, match="Specified device is not supported"):
        C.OrtMemoryInfo("Foo", C.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, C.OrtMemType.DEFAULT)
    theirs = RC.OrtMemoryInfo.create_v2(
        "Gpu",
        RC.OrtMemoryInfoDeviceType.GPU,
        0x10DE,
        0,
        RC.OrtDeviceMemoryType.HOST_ACCESSIBLE,
        0,
        RC.OrtAllocatorType.ORT_DEVICE_ALLOCATOR,
    )
    ours = C.OrtMemoryInfo.create_v2(
        "Gpu",
        C.OrtMemoryInfoDeviceType.GPU,
        0x10DE,
        0,
        C.OrtDeviceMemoryType.HOST_ACCESSIBLE,
        0,
        C.OrtAllocatorType.ORT_DEVICE_ALLOCATOR,
    )
    assert [int(getattr(ours, f)) if f != "name" else ours.name for f in fields] == [
        int(getattr(theirs, f)) if f != "name" else theirs.name for f in fields
    ]
    keys = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk")
    for args in [(0, -1, -1, -1), (1 << 20, 1, 4096, 128)]:
        theirs, ours = RC.OrtArenaCfg(*args), C.OrtArenaCfg(*args)
        assert [getattr(ours, k) for k in keys] == [getattr(theirs, k) for k in keys]
    cfg = {"max_mem": 1024, "initial_growth_chunk_size_bytes": 256}
    assert C.OrtArenaCfg(cfg).initial_growth_chunk_size_bytes == RC.OrtArenaCfg(cfg).initial_growth_chunk_size_bytes


def _random_model() -> bytes:
    node = helper.make_node("RandomNormal", [], ["y"], shape=[4], dtype=TensorProto.FLOAT)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.fixture
def unseeded() -> Any:
    """set_seed is process-wide (as in onnxruntime): put the reference EP back to OS seeding after."""
    from ep_cpu_reference.kernels import misc

    yield
    misc.SEED[0] = None


def test_set_seed_makes_unseeded_random_ops_repeatable(unseeded: Any) -> None:
    ort.set_seed(1234)
    first = ort.InferenceSession(_random_model()).run(None, {})[0]
    second = ort.InferenceSession(_random_model()).run(None, {})[0]
    np.testing.assert_array_equal(first, second)
    ort.set_seed(99)
    assert not np.array_equal(ort.InferenceSession(_random_model()).run(None, {})[0], first)
    with pytest.raises(C.InvalidArgument):
        ort.set_seed("1")


def test_process_functions() -> None:
    assert ort.disable_telemetry_events() is None and ort.enable_telemetry_events() is None
    assert ort.preload_dlls() is None and ort.preload_dlls(cuda=False, cudnn=False) is None
    with pytest.raises(RuntimeError, match="does not exist"):
        ort.preload_dlls(directory="/no/such/folder")
    ort.set_default_logger_severity(3)
    ort.set_default_logger_severity(2)
    ort.set_global_thread_pool_sizes(1, 1)


def test_print_debug_info(capsys: Any) -> None:
    ort.print_debug_info()
    out = capsys.readouterr().out
    assert f"ep-core version: {ep_core.__version__}" in out
    assert "CpuReferenceExecutionProvider" in out and "CPUExecutionProvider -> CpuReferenceExecutionProvider" in out


def test_register_execution_provider_library_refuses_a_native_library(tmp_path: Path) -> None:
    lib = tmp_path / "libonnxruntime_providers_acme.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(C.NotImplemented, match="native library"):
        ort.register_execution_provider_library("AcmeExecutionProvider", str(lib))
    ort.register_execution_provider_library("EchoTestExecutionProvider", f"{__name__}:ECHO")
    try:
        assert "EchoTestExecutionProvider" in ort.get_all_providers()
    finally:
        ort.unregister_execution_provider_library("EchoTestExecutionProvider")
    assert "EchoTestExecutionProvider" not in ort.get_all_providers()


class _EchoFactory(HostEpFactory):
    ep_name = "EchoTestExecutionProvider"
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def ep_factory_create_ep(self, devices: Any, ep_options: Any, session_options: Any) -> Any:
        raise AssertionError("only registered, never used")


ECHO = _EchoFactory()


def test_capi_modules_apps_import() -> None:
    from ep_core.onnxruntime.capi import _pybind_state, build_and_package_info, onnxruntime_validation
    from ep_core.onnxruntime.capi.onnxruntime_inference_collection import IOBinding, OrtValue, Session

    assert _pybind_state.RunOptions is ort.RunOptions and _pybind_state.SessionOptions is ort.SessionOptions
    assert _pybind_state.get_available_providers() == ort.get_available_providers()
    assert issubclass(ort.InferenceSession, Session) and OrtValue is ort.OrtValue and IOBinding is ort.IOBinding
    assert onnxruntime_validation.get_package_name_and_version_info() == ("ep-core", "1.31.0", "")
    assert build_and_package_info.__version__ == ort.__version__
    onnxruntime_validation.check_distro_info()
    assert isinstance(C.get_default_session_options(), ort.SessionOptions)
    assert [d.key for d in C.get_hardware_devices()][0] == "cpu:0"


def _compile_model() -> onnx.ModelProto:
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )


def test_model_compiler_arguments_as_onnxruntime(tmp_path: Path) -> None:
    for bad, error in [("", ValueError), (b"", ValueError), (3, TypeError)]:
        with pytest.raises(error):
            real.ModelCompiler(real.SessionOptions(), bad)
        with pytest.raises(error):
            ort.ModelCompiler(ort.SessionOptions(), bad)
    path = tmp_path / "model.onnx"
    onnx.save(_compile_model(), path)
    compiler = ort.ModelCompiler(ort.SessionOptions(), str(path))
    assert compiler.flags == ort.OrtCompileApiFlags.NONE  # onnxruntime's default: nothing compiled is no error
    out = compiler.compile_to_file()
    assert out == str(tmp_path / "model_ctx.onnx") and Path(out).is_file()
    with pytest.raises(C.InvalidArgument, match="needs an output path"):
        ort.ModelCompiler(ort.SessionOptions(), path.read_bytes()).compile_to_file()
    chunks: list[bytes] = []
    ort.ModelCompiler(ort.SessionOptions(), path.read_bytes(), embed_compiled_data_into_model=True).compile_to_stream(
        chunks.append
    )
    assert onnx.load_from_string(b"".join(chunks)).graph.node


def test_compiled_model_compatibility_queries(tmp_path: Path) -> None:
    m = _compile_model()
    helper.set_model_props(m, {"ep_compatibility_info.CpuReferenceExecutionProvider": "v1"})
    path = tmp_path / "compiled.onnx"
    onnx.save(m, path)
    assert C.get_compatibility_info_from_model(str(path), "CpuReferenceExecutionProvider") == "v1"
    assert C.get_compatibility_info_from_model(str(path), "CPUExecutionProvider") == "v1"  # the alias
    assert C.get_compatibility_info_from_model_bytes(path.read_bytes(), "OtherExecutionProvider") is None
    onnx.save(_compile_model(), tmp_path / "plain.onnx")
    assert (
        C.get_compatibility_info_from_model(str(tmp_path / "plain.onnx"), "CPUExecutionProvider")
        is RC.get_compatibility_info_from_model(str(tmp_path / "plain.onnx"), "CPUExecutionProvider")
        is None
    )
    cpu = [d for d in ort.get_ep_devices() if d.ep_name == "CpuReferenceExecutionProvider"]
    assert C.get_model_compatibility_for_ep_devices(cpu, "") == C.OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
    assert (
        RC.get_model_compatibility_for_ep_devices(real.get_ep_devices(), "")
        == RC.OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
    )
    with pytest.raises(C.NoSuchFile):
        C.get_compatibility_info_from_model(str(tmp_path / "none.onnx"), "CPUExecutionProvider")


def test_a_memory_info_maps_to_the_memory_an_ep_offers() -> None:
    cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    assert cpu.memory_info.is_host
    gpus = [d for d in ep_core.get_ep_devices() if not d.memory_info.is_host and d.memory_info.vendor_id == 0x10DE]
    cuda = ort.OrtMemoryInfo("Cuda", ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    if not gpus:
        with pytest.raises(RuntimeError, match="no installed execution provider offers device"):
            cuda.memory_info  # noqa: B018
        return
    assert cuda.memory_info == gpus[0].memory_info
    ep_device = next(d for d in ort.get_ep_devices() if d.ep_name == gpus[0].ep_name)
    assert ep_device.memory_info(ort.OrtDeviceMemoryType.DEFAULT).memory_info == gpus[0].memory_info

"""Where a value made on one EP's sync stream is read on another stream (or on the host), the core
orders the two with a notification (created on the producer's stream, activated after the producer,
waited on by the consumer's stream or the host), never a full synchronize; on one stream, nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from _support.eps import DeviceBuffer
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.ep_base import RegistryEp
from ep_core.sdk.errors import EpFail
from ep_core.sdk.kernels import FLOATS, KernelRegistry
from ep_core.sdk.memory import DeviceType, MemoryInfo

DEVICE = HardwareDevice(DeviceType.NPU, "tests", 0xFFFE, 0, {"kind": "fake streamed accelerator"})
MEMORY = MemoryInfo("FakeStreamed", DeviceType.NPU, 0, 0xFFFE)
A, B = "StreamATestExecutionProvider", "StreamBTestExecutionProvider"


class Note:
    def __init__(self, stream: "Stream") -> None:
        self.stream, self.log = stream, stream.log

    def activate(self) -> None:
        self.log.append(f"{self.stream.name}:activate")

    def wait_on_device(self, stream: "Stream") -> None:
        self.log.append(f"{stream.name}:wait_on_device({self.stream.name})")

    def wait_on_host(self) -> None:
        self.log.append(f"host:wait_on_host({self.stream.name})")


class Stream:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1

    def create_notification(self) -> Note:
        self.log.append(f"{self.name}:create_notification")
        return Note(self)


class Transfer:
    def can_copy(self, src: MemoryInfo, dst: MemoryInfo) -> bool:
        return MEMORY in (src, dst)

    def copy(self, value: Any, src: MemoryInfo, dst: MemoryInfo, stream: Any) -> Any:
        if dst == MEMORY:
            return DeviceBuffer(np.array(getattr(value, "payload", value)))
        return np.array(value.payload)


def _registry(name: str, op: str, fn: Any, log: list[str]) -> KernelRegistry:
    reg = KernelRegistry(name)

    @reg.register(op, since=6, types={"T": FLOATS})
    def build(node: Any, ctx: Any) -> Any:
        def compute(*xs: DeviceBuffer) -> tuple[DeviceBuffer]:
            assert all(isinstance(x, DeviceBuffer) for x in xs), f"{name} got host data"
            log.append(f"{name[:7]}:{op}")
            return (DeviceBuffer(fn(*(x.payload for x in xs))),)

        return compute

    return reg


class StreamedFactory:
    """A stream-aware factory on the fake device, one kernel; every call lands in ``log``."""

    def __init__(self, name: str, op: str, fn: Any, log: list[str]) -> None:
        self.name, self.log = name, log
        self.registry = _registry(name, op, fn, log)
        self.streams: list[Stream] = []

    def ep_factory_name(self) -> str:
        return self.name

    def ep_factory_vendor(self) -> str:
        return "tests"

    def ep_factory_version(self) -> str:
        return "1.0.0"

    def ep_factory_probe_hardware_devices(self) -> list[HardwareDevice]:
        return [DEVICE]

    def ep_factory_get_supported_devices(self, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
        return [EpDevice(self.name, "tests", d, MEMORY) for d in devices if d == DEVICE]

    def ep_factory_create_ep(self, devices: Any, ep_options: Any, session_options: Any) -> RegistryEp:
        return RegistryEp(self.name, self.registry)

    def ep_factory_create_allocator(self, memory_info: MemoryInfo, allocator_options: Any) -> object:
        return object()

    def ep_factory_create_data_transfer(self) -> Transfer:
        return Transfer()

    def ep_factory_is_stream_aware(self) -> bool:
        return True

    def ep_factory_create_sync_stream_for_device(self, memory_info: MemoryInfo, stream_options: Any) -> Stream:
        self.streams.append(Stream(self.name[:7], self.log))
        return self.streams[-1]


@pytest.fixture
def log() -> Iterator[list[str]]:
    calls: list[str] = []
    ep_core.register_execution_provider_library(A, StreamedFactory(A, "Mul", np.multiply, calls))
    ep_core.register_execution_provider_library(B, StreamedFactory(B, "Relu", lambda x: np.maximum(x, 0), calls))
    yield calls
    ep_core.unregister_execution_provider_library(A)
    ep_core.unregister_execution_provider_library(B)


def _model(*ops: str) -> Any:
    """x -> op_1 -> ... -> out, each Mul by w = [2, -1, 0.5]."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [2.0, -1.0, 0.5])
    names = ["x"] + [f"v{i}" for i in range(len(ops) - 1)] + ["out"]
    nodes = [
        helper.make_node(op, [names[i], "w"] if op == "Mul" else [names[i]], [names[i + 1]], name=f"{op.lower()}_{i}")
        for i, op in enumerate(ops)
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [3])], [("out", TensorProto.FLOAT, [3])], [w])


X = np.array([1.0, 2.0, -3.0], np.float32)
W = np.array([2.0, -1.0, 0.5], np.float32)


def test_a_value_crossing_to_another_eps_stream_is_waited_on_by_that_stream(log: list[str]) -> None:
    sess = ep_core.InferenceSession(_model("Mul", "Relu", "Mul").SerializeToString(), providers=[A, B])
    assert [sess.get_node_assignment()[n]["ep"] for n in ("mul_0", "relu_1", "mul_2")] == [A, B, A]
    log.clear()
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], np.maximum(X * W, 0) * W)
    # both EPs share the device memory: no copies, two stream crossings, each ordered by a notification
    assert log == [
        "StreamA:Mul",
        "StreamA:create_notification",
        "StreamA:activate",
        "StreamB:wait_on_device(StreamA)",
        "StreamB:Relu",
        "StreamB:create_notification",
        "StreamB:activate",
        "StreamA:wait_on_device(StreamB)",
        "StreamA:Mul",
    ]
    ep_streams = [ep.stream for ep in sess.execution_providers[:2]]
    assert [s.synchronized for s in ep_streams] == [0, 0], "no full synchronize at the crossings"


def test_a_value_read_on_the_host_is_waited_on_by_the_host(log: list[str]) -> None:
    # Sign has no kernel on either fake EP: it runs on the CPU fallback, which has no stream
    sess = ep_core.InferenceSession(_model("Mul", "Sign", "Mul").SerializeToString(), providers=[A])
    assert sess.get_node_assignment()["sign_1"]["ep"] == "CpuReferenceExecutionProvider"
    log.clear()
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], np.sign(X * W) * W)
    # the copy to the host runs on A's stream; the CPU node waits for it on the host; the copy back
    # to the device reads a host value (made on no stream): nothing to wait for
    assert log == [
        "StreamA:Mul",
        "StreamA:create_notification",
        "StreamA:activate",
        "host:wait_on_host(StreamA)",
        "StreamA:Mul",
    ]


def test_one_stream_needs_no_notification(log: list[str]) -> None:
    sess = ep_core.InferenceSession(_model("Mul", "Mul", "Mul").SerializeToString(), providers=[A])
    log.clear()
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], X * W * W * W)
    assert log == ["StreamA:Mul"] * 3


def test_a_host_output_of_a_device_node_needs_no_wait(log: list[str]) -> None:
    """Shape on A writes a host output (KernelDef.host_outputs), complete when compute returns: the
    CPU node reading it waits on nothing (a host wait there would also break graph capture)."""
    factory = StreamedFactory(A, "Mul", np.multiply, log)

    @factory.registry.register("Shape", since=1, host_outputs=(0,))
    def build_shape(node: Any, ctx: Any) -> Any:
        def compute(x: DeviceBuffer) -> tuple[np.ndarray]:
            log.append("StreamA:Shape")
            return (np.array(x.payload.shape, np.int64),)

        return compute

    ep_core.unregister_execution_provider_library(A)
    ep_core.register_execution_provider_library(A, factory)
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
        helper.make_node("Shape", ["m"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["out"], name="cast", to=TensorProto.FLOAT),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [2.0, -1.0, 0.5])
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3])], [("out", TensorProto.FLOAT, [1])], [w])
    opts = ep_core.SessionOptions()
    opts.graph_optimization_level = ep_core.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep Shape unfolded
    sess = ep_core.InferenceSession(model.SerializeToString(), opts, providers=[A])
    assert [sess.get_node_assignment()[n]["ep"] for n in ("shape", "cast")] == [A, "CpuReferenceExecutionProvider"]
    log.clear()
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], [3.0])
    assert log == ["StreamA:Mul", "StreamA:Shape"]


def test_a_stream_without_the_protocol_is_refused_at_session_creation(log: list[str]) -> None:
    class NoNotifications:
        def synchronize(self) -> None: ...

    factory = StreamedFactory(A, "Mul", np.multiply, log)
    factory.ep_factory_create_sync_stream_for_device = lambda memory_info, stream_options: NoNotifications()  # type: ignore[method-assign]
    ep_core.unregister_execution_provider_library(A)
    ep_core.register_execution_provider_library(A, factory)
    with pytest.raises(EpFail, match=f"{A}: its sync stream must implement ep_core.sdk.protocols.SyncStream"):
        ep_core.InferenceSession(_model("Mul").SerializeToString(), providers=[A])

"""What ``ep_factory_create_ep`` gets: the selected EpDevice's own ``ep_options`` under the user's
(the user's win), the device those options name when the user names one, and a ``logging`` child
of the session's logger named after the EP (its logid, its severity); a factory that does not name
``logger`` keeps working."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from _support.eps import DEVICE_REGISTRY, FAKE_MEMORY, DeviceFactory
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.ep_base import RegistryEp
from ep_core.sdk.memory import DeviceType, MemoryInfo

NAME = "RecordingTestExecutionProvider"
DEVICES = [HardwareDevice(DeviceType.NPU, "tests", 0xFFFD, i, {"kind": f"fake #{i}"}) for i in (0, 1)]


class RecordingFactory(DeviceFactory):
    """Two devices, each EpDevice carrying its own options; records what ``create_ep`` got."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[dict[str, Any]] = []

    def ep_factory_name(self) -> str:
        return NAME

    def ep_factory_probe_hardware_devices(self) -> list[HardwareDevice]:
        return DEVICES

    def ep_factory_get_supported_devices(self, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
        return [
            EpDevice(
                NAME,
                "tests",
                d,
                MemoryInfo("FakeNpu", DeviceType.NPU, d.device_id, 0xFFFF),
                ep_options={"device_id": str(d.device_id), "mode": "fast"},
            )
            for d in devices
            if d in DEVICES
        ]

    def ep_factory_create_ep(  # type: ignore[override]
        self, devices: Any, ep_options: Any, session_options: Any, logger: logging.Logger
    ) -> RegistryEp:
        self.got.append({"devices": list(devices), "ep_options": dict(ep_options), "logger": logger})
        logger.info("created on %s", devices[0].device.key)
        logger.debug("options %s", dict(ep_options))
        return RegistryEp(NAME, DEVICE_REGISTRY)


@pytest.fixture
def factory() -> Iterator[RecordingFactory]:
    f = RecordingFactory()
    ep_core.register_execution_provider_library(NAME, f)
    yield f
    ep_core.unregister_execution_provider_library(NAME)


def _model() -> bytes:
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [2.0, -1.0, 0.5])
    node = helper.make_node("Mul", ["x", "w"], ["y"], name="mul")
    model = make_model([node], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])], [w])
    return model.SerializeToString()


def test_device_options_reach_create_ep_under_the_users(factory: RecordingFactory) -> None:
    ep_core.InferenceSession(_model(), providers=[(NAME, {"mode": "exact"})])
    (got,) = factory.got
    assert got["ep_options"] == {"device_id": "0", "mode": "exact"}, "the EpDevice's device_id, the user's mode"
    assert [d.device.device_id for d in got["devices"]] == [0]


def test_an_option_naming_a_device_selects_that_device(factory: RecordingFactory) -> None:
    sess = ep_core.InferenceSession(_model(), providers=[(NAME, {"device_id": "1"})])
    (got,) = factory.got
    assert [d.device.device_id for d in got["devices"]] == [1] and got["ep_options"]["device_id"] == "1"
    assert sess.execution_providers[0].memory_info.device_id == 1
    x = np.array([1.0, 2.0, -3.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x * np.array([2.0, -1.0, 0.5], np.float32))


def test_devices_added_to_the_session_bring_their_options(factory: RecordingFactory) -> None:
    opts = ep_core.SessionOptions()
    second = next(d for d in ep_core.get_ep_devices() if d.ep_name == NAME and d.device.device_id == 1)
    opts.add_provider_for_devices([second], {"mode": "slow"})
    ep_core.InferenceSession(_model(), opts)
    assert factory.got[0]["ep_options"] == {"device_id": "1", "mode": "slow"}


def test_several_devices_bring_only_the_options_they_agree_on(factory: RecordingFactory) -> None:
    """Two devices whose device_id differ: neither id is passed (no last-device-wins), the shared
    mode is; the EP sees both devices and decides."""
    opts = ep_core.SessionOptions()
    opts.add_provider_for_devices([d for d in ep_core.get_ep_devices() if d.ep_name == NAME], {})
    ep_core.InferenceSession(_model(), opts)
    got = factory.got[0]
    assert got["ep_options"] == {"mode": "fast"}
    assert [d.device.device_id for d in got["devices"]] == [0, 1]


def test_the_ep_logs_through_the_sessions_logger(factory: RecordingFactory, caplog: pytest.LogCaptureFixture) -> None:
    opts = ep_core.SessionOptions()
    opts.logid, opts.log_severity_level = "recorder_session", 1  # info
    with caplog.at_level(logging.DEBUG):
        ep_core.InferenceSession(_model(), opts, providers=[NAME])
    logger = factory.got[0]["logger"]
    assert isinstance(logger, logging.Logger) and logger.name == f"ep_core.recorder_session.{NAME}"
    mine = [r for r in caplog.records if r.name == logger.name]
    assert [r.getMessage() for r in mine] == ["created on npu:0"], "info passes, debug does not at severity 1"
    # no severity of its own: the default logger's (warning) decides
    factory.got.clear()
    caplog.clear()
    opts = ep_core.SessionOptions()
    opts.logid = "quiet_session"
    ep_core.InferenceSession(_model(), opts, providers=[NAME])
    assert not [r for r in caplog.records if r.name.endswith(NAME)]
    assert factory.got[0]["logger"].getEffectiveLevel() == logging.WARNING


def test_a_factory_that_does_not_name_the_logger_keeps_working() -> None:
    name = "FakeNpuTestExecutionProvider"
    # DeviceFactory.ep_factory_create_ep(devices, ep_options, session_options): no logger
    ep_core.register_execution_provider_library(name, DeviceFactory())
    try:
        sess = ep_core.InferenceSession(_model(), providers=[name])
        assert sess.execution_providers[0].memory_info == FAKE_MEMORY
    finally:
        ep_core.unregister_execution_provider_library(name)

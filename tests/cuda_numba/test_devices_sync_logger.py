"""Several GPUs (a fake second device where no GPU exists: the probe is monkeypatched to report
devices 0 and 1, the simulator runs both), ``ep_sync`` entering the EP's device and restoring the
caller's, the session's logger reaching the EP, and notifications where a CUDA value is read on
the host."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from ep_core.sdk.errors import ConfigError

from .conftest import EP, REF, SIM, session, skip_unless_cudasim
from .test_memory_streams_iobinding import chain_model

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10


def _expected(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The probe reports devices 0 and 1; yields the device ids each device context entered."""
    from ep_cuda_numba import device
    from ep_cuda_numba.factory import factory

    (gpu0,) = device.probe().devices
    gpu1 = dataclasses.replace(gpu0, device_id=1)
    monkeypatch.setattr(device, "probe", lambda: device.ProbeResult(devices=(gpu0, gpu1)))
    entered: list[int] = []
    real = device.device_context

    class Spy:
        def __init__(self, device_id: int) -> None:
            self.inner, self.device_id = real(device_id), device_id

        def __enter__(self) -> None:
            entered.append(self.device_id)
            self.inner.__enter__()

        def __exit__(self, *exc: Any) -> None:
            self.inner.__exit__(*exc)

    monkeypatch.setattr(device, "device_context", Spy)
    yield entered
    factory._arenas.pop(1, None)


def _on_device_1(sess: Any, entered: list[int]) -> None:
    inst = sess.execution_providers[0]
    assert inst.name == EP and inst.memory_info.device_id == 1
    assert inst.ep.options.device_id == 1 and inst.ep.arena.device_id == 1
    assert inst.allocator.device_id == 1 and inst.stream.device_id == 1
    entered.clear()
    before = inst.ep.arena.stats()["num_allocs"]
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-5)
    assert inst.ep.arena.stats()["num_allocs"] > before, "the run allocated from device 1's arena"
    assert entered and set(entered) == {1}, f"every launch entered device 1, got {entered}"


@skip_unless_cudasim("the second device is a simulated one")
@pytest.mark.parametrize("options", [{"device": "gpu:1"}, {"device_id": "1"}])
def test_selecting_the_second_gpu_creates_the_ep_there(two_gpus: list[int], options: dict[str, str]) -> None:
    _on_device_1(session(chain_model(), [(EP, options)]), two_gpus)


@skip_unless_cudasim("the second device is a simulated one")
def test_a_selection_delegate_picking_the_second_gpu(two_gpus: list[int]) -> None:
    from ep_core import InferenceSession, SessionOptions

    opts = SessionOptions()
    opts.set_provider_selection_policy_delegate(
        lambda devices, *_: [d for d in devices if d.ep_name == EP and d.device.device_id == 1]
    )
    _on_device_1(InferenceSession(chain_model().SerializeToString(), opts), two_gpus)


@skip_unless_cudasim("the second device is a simulated one")
def test_a_device_id_nobody_probed_is_refused_naming_the_available_ids(two_gpus: list[int]) -> None:
    with pytest.raises(ConfigError, match=r"device_id=5 names no usable CUDA device; available device ids: \[0, 1\]"):
        session(chain_model(), [(EP, {"device_id": "5"})])
    with pytest.raises(ConfigError, match=r"device_id=1 disagrees with the selected device gpu:0"):
        session(chain_model(), [(EP, {"device": "gpu:0", "device_id": "1"})])


@skip_unless_cudasim("the second device is a simulated one")
@pytest.mark.parametrize(("ep_device", "caller"), [(1, 0), (0, 1)])
def test_ep_sync_enters_the_eps_device_and_restores_the_callers(
    two_gpus: list[int], monkeypatch: pytest.MonkeyPatch, ep_device: int, caller: int
) -> None:
    from numba import cuda

    from ep_cuda_numba import device

    sess = session(chain_model(), [(EP, {"device_id": str(ep_device)})])
    synced_on: list[int] = []
    monkeypatch.setattr(cuda, "synchronize", lambda: synced_on.append(device.current_device_id()))
    with device.device_context(caller):
        assert device.current_device_id() == caller
        sess.execution_providers[0].call("ep_sync")
        assert device.current_device_id() == caller, "the caller's device is restored"
    assert synced_on == [ep_device], "one device-wide synchronize, on the EP's device"


def test_ep_sync_is_a_device_wide_synchronize(monkeypatch: pytest.MonkeyPatch) -> None:
    from numba import cuda

    sess = session(chain_model())
    sess.run(None, {"x": X})
    calls: list[str] = []
    monkeypatch.setattr(cuda, "synchronize", lambda: calls.append("device"))
    sess.execution_providers[0].call("ep_sync")
    assert calls == ["device"]


def test_the_ep_logs_through_the_sessions_logger(caplog: pytest.LogCaptureFixture) -> None:
    from ep_core import InferenceSession, SessionOptions

    opts = SessionOptions()
    opts.logid, opts.log_severity_level = "cuda_logged", 1
    with caplog.at_level(logging.DEBUG):
        sess = InferenceSession(chain_model().SerializeToString(), opts, providers=[EP])
    ep = sess.execution_providers[0].ep
    assert ep.logger.name == f"ep_core.cuda_logged.{EP}"
    lines = [r.getMessage() for r in caplog.records if r.name == ep.logger.name]
    assert any(line.startswith(f"{EP} on gpu:0 (") and "arena DeviceArena(gpu:0" in line for line in lines), lines
    assert any(line.startswith(f"{EP} layout NCHW: prefer_nhwc=0") for line in lines), lines
    caplog.clear()
    quiet = SessionOptions()
    quiet.logid = "cuda_quiet"  # the default severity (warning): no info lines
    InferenceSession(chain_model().SerializeToString(), quiet, providers=[EP])
    assert not [r for r in caplog.records if r.name.startswith("ep_core.cuda_quiet")]


def test_a_cuda_value_read_on_the_host_is_ordered_by_a_notification(monkeypatch: pytest.MonkeyPatch) -> None:
    from ep_cuda_numba.stream import CudaNotification

    # Sign has no kernel on this EP: it runs on the reference EP, between two CUDA nodes
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Sign", ["a"], ["b"], name="sign"),
        helper.make_node("Mul", ["a", "b"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model, [EP, REF])
    where = {n: a["ep"] for n, a in sess.get_node_assignment().items()}
    assert where == {"relu": EP, "sign": REF, "mul": EP}
    waits: list[str] = []
    monkeypatch.setattr(CudaNotification, "wait_on_host", lambda self: waits.append(repr(self.stream)))
    stream = sess.execution_providers[0].stream
    x = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12) / 4
    for run in (1, 2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) * np.sign(np.maximum(x, 0)))
        # one crossing per run (a, read by Sign on the host); b goes back to the device: no wait
        assert stream.notifications_created == run and waits == ["CudaSyncStream(gpu:0)"] * run
    assert SIM or stream is not None

"""An EP whose memory is not host memory: copies in the plan and trace, IO binding, run hooks,
profiling, observer plugins, and concurrent runs."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from _support.eps import FAKE_MEMORY, DeviceBuffer, DeviceFactory
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.runtime.discover import get_registry
from ep_core.sdk.hookspecs import hookimpl

NAME = "FakeNpuTestExecutionProvider"


@pytest.fixture
def device_ep():
    factory = DeviceFactory()
    ep_core.register_execution_provider_library(NAME, factory)
    yield factory
    ep_core.unregister_execution_provider_library(NAME)


def _model():
    """x -> Mul(w) [device] -> Relu [cpu] -> Mul(w) [device] -> out"""
    w = numpy_helper.from_array(np.array([2.0, -1.0, 0.5], np.float32), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"], name="mul_dev_1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu_cpu"),
        helper.make_node("Mul", ["b", "w"], ["out"], name="mul_dev_2"),
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [3])], [("out", TensorProto.FLOAT, [3])], [w])


def _expected(x):
    w = np.array([2.0, -1.0, 0.5], np.float32)
    return np.maximum(x * w, 0) * w


def test_copies_are_planned_where_edges_cross_devices(device_ep):
    sess = ep_core.InferenceSession(_model().SerializeToString(), providers=[NAME])
    assignment = sess.get_node_assignment()
    assert assignment["mul_dev_1"]["ep"] == NAME and assignment["mul_dev_2"]["ep"] == NAME
    assert assignment["relu_cpu"]["ep"] == "CpuReferenceExecutionProvider"
    plan = sess.get_plan()
    kinds = [line.split()[1] for line in plan]
    # x to device, a back to host, b to device, out back to host; w copied once at creation
    assert kinds == ["copy", "node", "copy", "node", "copy", "node", "copy"], plan
    assert sum("Cpu:CPU:0 -> FakeNpu:NPU:0" in line for line in plan) == 2
    x = np.array([1.0, 2.0, -3.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x))
    ep = device_ep.last_ep
    assert (ep.run_starts, ep.run_ends) == (1, 1)


def test_trace_shows_nodes_copies_phases_and_ep_profiler_events(device_ep, tmp_path):
    opts = ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "trace"))
    sess = ep_core.InferenceSession(_model().SerializeToString(), opts, providers=[NAME])
    x = np.ones(3, np.float32)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    path = sess.end_profiling()
    with open(path) as fh:
        events = json.load(fh)  # onnxruntime's format: a list of events
    assert all({"name", "ph", "ts", "pid", "tid"} <= set(e) for e in events)
    names = [e["name"] for e in events]
    assert "session_initialization" in names and "model_loading_array" in names and "plan" in names
    assert names.count("model_run") == 2
    copies = [e for e in events if e["cat"] == "Copy"]
    assert len(copies) == 8 and all("->" in e["args"]["detail"] for e in copies)
    nodes = [e for e in events if e["cat"] == "Node"]
    assert {(e["name"], e["args"]["provider"]) for e in nodes} == {
        ("mul_dev_1_kernel_time", NAME),
        ("relu_cpu_kernel_time", "CpuReferenceExecutionProvider"),
        ("mul_dev_2_kernel_time", NAME),
    }
    assert any(e["name"] == "fake_npu_queue" and e["cat"] == NAME for e in events)


def test_io_binding_keeps_outputs_on_the_device(device_ep):
    sess = ep_core.InferenceSession(_model().SerializeToString(), providers=[NAME])
    binding = sess.io_binding()
    x = np.array([1.0, 2.0, 3.0], np.float32)
    binding.bind_input("x", DeviceBuffer(x.copy()), FAKE_MEMORY)
    binding.bind_output("out", FAKE_MEMORY)
    copies_before = len(device_ep.transfer.copies)
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    (out,) = binding.get_outputs()
    assert isinstance(out.data, DeviceBuffer) and out.memory_info == FAKE_MEMORY
    np.testing.assert_allclose(out.numpy(), _expected(x))
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], _expected(x))
    # input bound on the device: no host->device copy for x; only a and b cross
    new = device_ep.transfer.copies[copies_before:]
    assert new[:2] == [("FakeNpu:NPU:0", "Cpu:CPU:0"), ("Cpu:CPU:0", "FakeNpu:NPU:0")]
    assert device_ep.last_ep.syncs >= 1
    with pytest.raises(
        ep_core.sdk.errors.InvalidArgument, match="no execution provider of this session owns device 'gpu:3'"
    ):
        binding.bind_output("out", "gpu:3")


def test_observer_plugin_wraps_hooks_of_every_ep(device_ep):
    seen: list[tuple[str, int]] = []

    class Tracer:
        @hookimpl(wrapper=True)
        def ep_get_capability(self, ep, graph, support):
            result = yield
            seen.append((type(ep).__name__, len(support.singles) + len(support.fused)))
            return result

    tracer = Tracer()
    get_registry().register_observer(tracer)
    try:
        ep_core.InferenceSession(_model().SerializeToString(), providers=[NAME])
    finally:
        get_registry().unregister_observer(tracer)
    assert seen == [("DeviceEp", 2), ("CpuReferenceEp", 1)]


def test_concurrent_runs_give_identical_results(device_ep):
    sess = ep_core.InferenceSession(_model().SerializeToString(), providers=[NAME])
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(3).astype(np.float32) for _ in range(8)]
    expected = [_expected(x) for x in inputs]
    errors: list[BaseException] = []
    results: dict[tuple[int, int], np.ndarray] = {}

    def worker(t: int) -> None:
        try:
            for k in range(50):
                i = (t + k) % len(inputs)
                results[(t, k)] = (i, sess.run(None, {"x": inputs[i]})[0])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 300
    for i, out in results.values():
        np.testing.assert_array_equal(out, expected[i])

"""Device memory, copies, streams and IO binding: copies between the EP and the CPU fallback show
in the plan and the profiling trace; the arena reuses chunks, is shared across sessions and is
thread-safe; outputs can stay on the device (tests/cuda_numba/test_bfc_arena.py covers the arena)."""

from __future__ import annotations

import gc
import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper

from .conftest import EP, REF, session

SHAPE = [2, 3, 4]


def cross_device_model():
    """Relu and Sigmoid run here; Round has no kernel here, so it runs on the CPU fallback."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Round", ["a"], ["b"], name="round"),
        helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "cross",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def chain_model():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Softmax", ["m"], ["y"], name="sm", axis=-1),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel().tolist())
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, SHAPE).astype(np.float32)


def test_copies_between_devices_show_in_the_plan_and_the_profile(tmp_path) -> None:
    from ep_core import SessionOptions

    opts = SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    sess = session(cross_device_model(), sess_options=opts)
    assignment = sess.get_node_assignment()
    assert assignment["relu"]["ep"] == EP and assignment["sigmoid"]["ep"] == EP
    assert assignment["round"]["ep"] == REF
    plan = sess.get_plan()
    copies = [line for line in plan if " copy " in line]
    # x up, a down (for Round), b up (for Sigmoid), y down
    assert len(copies) == 4, plan
    assert any("Cpu:CPU:0 -> Cuda:GPU:0" in c for c in copies) and any("Cuda:GPU:0 -> Cpu:CPU:0" in c for c in copies)
    x = _x()
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.round(np.maximum(x, 0)))), rtol=1e-6)
    path = sess.end_profiling()
    events = json.load(open(path))  # onnxruntime's format: a list of events
    copy_events = [e for e in events if e.get("cat") == "Copy"]
    assert len(copy_events) == 4
    assert {e["args"]["detail"] for e in copy_events} == {"Cpu:CPU:0 -> Cuda:GPU:0", "Cuda:GPU:0 -> Cpu:CPU:0"}
    assert {e["args"]["provider"] for e in events if e.get("cat") == "Node"} == {EP, REF}
    counters = {e["name"]: e["args"] for e in events if e.get("cat") == EP}
    assert counters["arena"]["num_allocs"] > 0 and "generated_elementwise" in counters["kernels"]


def test_the_arena_reuses_chunks_across_runs_and_is_shared_by_sessions() -> None:
    sess = session(chain_model())
    arena = sess.execution_providers[0].allocator
    assert arena is session(chain_model()).execution_providers[0].allocator
    sess.run(None, {"x": _x()})
    gc.collect()
    before = arena.stats()
    for i in range(3):
        sess.run(None, {"x": _x(i)})
    gc.collect()
    after = arena.stats()
    assert after["num_arena_extensions"] == before["num_arena_extensions"], "steady-state runs must not extend"
    assert after["num_allocs"] > before["num_allocs"]
    assert after["bytes_in_use"] == before["bytes_in_use"], "every intermediate went back to the arena"
    assert after["max_bytes_in_use"] >= after["bytes_in_use"]
    assert after["total_allocated_bytes"] >= after["bytes_in_use"]


def test_arena_rounds_reuses_limits_and_frees_raw_buffers() -> None:
    from ep_core.sdk.errors import Fail
    from ep_cuda_numba.allocator import DeviceArena
    from ep_cuda_numba.arena_config import ArenaConfig

    arena = DeviceArena(0, ArenaConfig(max_mem=4096))
    a = arena.empty((100,), np.float32)  # 400 B -> 512 B chunk of the first (4096 B) region
    assert arena.stats()["bytes_in_use"] == 512 and arena.stats()["total_allocated_bytes"] == 4096
    del a
    gc.collect()
    b = arena.empty((120,), np.float32)  # the same chunk again, no new region
    assert arena.chunk_layout()[0][0] == (0, 512, True) and arena.stats()["num_arena_extensions"] == 1
    with pytest.raises(Fail, match="gpu_mem_limit"):
        arena.empty((2048,), np.float32)
    del b
    gc.collect()
    raw = arena.alloc(1000)
    assert arena.stats()["bytes_in_use"] == 1024 and raw.shape == (1000,)
    arena.free(raw)
    with pytest.raises(Fail, match="not allocated by this arena"):
        arena.free(raw)
    exact = DeviceArena(0, ArenaConfig(extend_strategy="kSameAsRequested"))
    exact.empty((100,), np.float32)
    assert exact.stats()["total_allocated_bytes"] == 512  # 400 rounded to 256 bytes, nothing more


def test_arena_is_thread_safe() -> None:
    from ep_cuda_numba.allocator import DeviceArena

    arena = DeviceArena(0)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            arr = arena.empty((int(rng.integers(1, 500)),), np.float32)
            del arr

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    stats = arena.stats()
    assert stats["bytes_in_use"] == 0 and stats["num_allocs"] == 800
    assert arena.chunk_layout() == [[(0, stats["total_allocated_bytes"], False)]], "all merged back"


def test_io_binding_keeps_outputs_on_the_device() -> None:
    from numba import cuda

    from ep_core.sdk.memory import DeviceType

    sess = session(chain_model())
    x = _x(3)
    (expected,) = sess.run(None, {"x": x})
    binding = sess.io_binding()
    binding.bind_input("x", cuda.to_device(x), "gpu:0")
    binding.bind_output("y", "gpu:0")
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    (out,) = binding.get_outputs()
    assert out.memory_info.device_type is DeviceType.GPU
    assert hasattr(out.data, "copy_to_host") and not isinstance(out.data, np.ndarray)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    plan = sess.get_plan({"x": sess.execution_providers[0].memory_info}, outputs_to_host=False)
    assert not [line for line in plan if " copy " in line], "device input and output: nothing to copy"


def test_reshape_family_returns_views_of_device_arrays() -> None:
    from numba import cuda

    from ep_cuda_numba.registry import registry

    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
        helper.make_node("Unsqueeze", ["r", "a"], ["u"], name="unsqueeze"),
        helper.make_node("Squeeze", ["u", "a"], ["q"], name="squeeze"),
        helper.make_node("Flatten", ["q"], ["y"], name="flatten", axis=1),
    ]
    inits = [
        helper.make_tensor("s", TensorProto.INT64, [2], [4, 6]),
        helper.make_tensor("a", TensorProto.INT64, [1], [0]),
    ]
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
        initializer=inits,
    )
    sess = session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = _x()
    dx = cuda.to_device(x)
    values = [dx]
    inst = sess.execution_providers[0]
    for n in sess.graph.all_nodes:
        ctx = SimpleNamespace(
            node=n,
            ep=inst.ep,
            memory_info=inst.memory_info,
            stream=None,
            allocator=None,
            constant=sess.graph.constant_value,
        )
        kdef, compute = registry().build(n, ctx)
        extra = [sess.graph.initializer(i) for i in n.inputs[1:]]
        values.append(compute(values[-1], *extra)[0])

    def address(a: object) -> int:
        host = getattr(a, "_ary", None)  # the simulator's device arrays wrap NumPy arrays
        return (host.__array_interface__ if host is not None else a.__cuda_array_interface__)["data"][0]

    assert [address(v) for v in values] == [address(dx)] * 5, "no copies, only views"
    assert values[-1].shape == (4, 6)
    np.testing.assert_array_equal(values[-1].copy_to_host(), x.reshape(4, 6))


def test_streams_notifications_and_sync() -> None:
    from ep_cuda_numba.device import device_memory_info
    from ep_cuda_numba.factory import factory

    s1 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    s2 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    assert s1.cuda_stream is not s2.cuda_stream
    note = s1.create_notification()
    note.activate()
    note.wait_on_device(s2)
    note.wait_on_host()
    s2.synchronize()
    assert note.activated and s1.notifications_created == 1
    sess = session(chain_model())
    sess.run(None, {"x": _x()})
    ep = sess.execution_providers[0]
    assert ep.stream is not None and ep.has_sync
    ep.call("ep_sync")

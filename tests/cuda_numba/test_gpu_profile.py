"""GPU-timed profiles: with profiling on, every kernel launch and every copy on the session's
stream is one event on the trace's GPU track, named after its kernel or copy, with the node (or
copy step) that enqueued it, and a duration >= 0. Under the simulator the events are host-clock
stand-ins (numba's simulated events record no time); on a GPU they are CUDA event times."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper

from .conftest import EP, session


def _model():
    """mm, relu, sm on this EP (three launches); Round on the CPU fallback (two copies around it)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Round", ["r"], ["q"], name="round"),
        helper.make_node("Softmax", ["q"], ["y"], name="sm", axis=-1),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], (np.arange(16, dtype=np.float32) / 8).tolist())
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _profiled(tmp_path):
    from ep_core import SessionOptions

    opts = SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    return session(_model(), [EP], sess_options=opts)


def test_every_launch_and_copy_is_a_gpu_event_naming_its_node(tmp_path, monkeypatch) -> None:
    from ep_cuda_numba.launch import Runtime
    from ep_cuda_numba.profiling import GPU_TID_BASE

    sess = _profiled(tmp_path)
    launches: list[str] = []
    go = Runtime._go

    def counted(self, kernel, *a):
        launches.append(kernel)
        return go(self, kernel, *a)

    monkeypatch.setattr(Runtime, "_go", counted)
    copy_steps = [line.split()[2] for line in sess.get_plan() if " copy " in line]
    assert len(copy_steps) == 4  # x up, r down, q up, y down
    for _ in range(2):
        sess.run(None, {"x": np.ones((2, 4), np.float32)})
    events = json.load(open(sess.end_profiling()))

    gpu = [e for e in events if e.get("tid") == GPU_TID_BASE and e.get("ph") == "X"]
    kernels = [e for e in gpu if e["cat"] == "Kernel"]
    copies = [e for e in gpu if e["cat"] == "Memcpy" and "node" in e["args"]]
    assert len(kernels) == len(launches) == 6
    assert sorted(e["args"]["node"] for e in kernels) == ["mm", "mm", "relu", "relu", "sm", "sm"]
    assert {e["args"]["op_name"] for e in kernels} == {"MatMul", "Relu", "Softmax"}
    assert sorted(e["args"]["node"] for e in copies) == sorted(copy_steps * 2)
    assert all(e["args"]["op_name"] == "MemcpyTransfer" and e["args"]["bytes"] == 32 for e in copies)
    assert {e["args"]["direction"] for e in copies} == {"HtoD", "DtoH"}
    # the weight's upload at session creation is a copy too, inside a creation phase
    setup = [e for e in gpu if e["cat"] == "Memcpy" and "node" not in e["args"]]
    assert setup and all(e["args"]["parent_name"] != "" for e in setup)
    for e in gpu:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] == events[0]["pid"]
    for e in kernels:
        assert e["args"]["grid"] and e["args"]["block"] and e["name"] and e["name"] != "Kernel"
    node_events = {e["name"]: e for e in events if e.get("cat") == "Node"}
    assert {"mm_kernel_time", "sm_kernel_time"} <= set(node_events)
    (track,) = [e for e in events if e.get("ph") == "M" and e.get("tid") == GPU_TID_BASE]
    assert track["name"] == "thread_name" and track["args"]["name"].startswith("GPU 0")


def test_no_timing_without_profiling() -> None:
    sess = session(_model(), [EP])
    ep = sess.execution_providers[0].ep
    sess.run(None, {"x": np.ones((2, 4), np.float32)})
    assert ep.tap is None and ep.timeline is None


def test_a_graph_replay_is_one_gpu_event(tmp_path) -> None:
    from numba import cuda

    from ep_core import SessionOptions
    from ep_cuda_numba.profiling import GPU_TID_BASE

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    opts = SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model, [(EP, {"enable_cuda_graph": "1"})], sess_options=opts)
    binding = sess.io_binding()
    binding.bind_input("x", cuda.to_device(np.ones((2, 4), np.float32)), "cuda:0")
    binding.bind_output("y", "cuda:0")
    for _ in range(3):
        sess.run_with_iobinding(binding)
    events = json.load(open(sess.end_profiling()))
    gpu = [e for e in events if e.get("tid") == GPU_TID_BASE and e.get("ph") == "X"]
    kernels = [e for e in gpu if e["cat"] == "Kernel"]
    # two warm-up launches (timed), none while capturing, then the capture's replay and two more
    assert [e["name"] for e in kernels].count("cuda_graph_replay") == 3
    assert len(kernels) == 2 + 3 and all(e["dur"] >= 0 for e in kernels)

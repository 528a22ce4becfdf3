"""CUDA graphs (``enable_cuda_graph=1``) with onnxruntime's semantics: one IOBinding run warms up
twice and captures, later runs replay without the core running a node, ``gpu_graph_id`` picks
one of several graphs, in-place input updates show in replays, and what cannot be captured is
refused with typed errors. Under the simulator the capture records launches and replays them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ep_core.sdk.errors import EpFail, InvalidArgument, InvalidGraph

from .conftest import EP, REF, session

GRAPH = [(EP, {"enable_cuda_graph": "1"})]


def _model(with_round: bool = False):
    """MatMul -> Relu -> Softmax (three launches); ``with_round`` puts Round (no kernel here) between."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
    ]
    if with_round:
        nodes.append(helper.make_node("Round", ["r"], ["q"], name="round"))
    nodes.append(helper.make_node("Softmax", ["q" if with_round else "r"], ["y"], name="sm", axis=-1))
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], (np.arange(16, dtype=np.float32) / 8).tolist())
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (rows, 4)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return session(_model(), [REF]).run(None, {"x": x})[0]


def _run_options(gid: str):
    from ep_core import RunOptions

    ro = RunOptions()
    ro.add_run_config_entry("gpu_graph_id", gid)
    return ro


@pytest.fixture
def counters(monkeypatch):
    """How often the core executes a plan and how often a kernel is launched through a Runtime."""
    import ep_core.runtime.run as run_mod
    from ep_cuda_numba.launch import Runtime

    seen = {"plans": 0, "launches": 0}
    run_plan, go = run_mod.run_plan, Runtime._go

    def counted_plan(*a, **k):
        seen["plans"] += 1
        return run_plan(*a, **k)

    def counted_go(self, *a, **k):
        seen["launches"] += 1
        return go(self, *a, **k)

    monkeypatch.setattr(run_mod, "run_plan", counted_plan)
    monkeypatch.setattr(Runtime, "_go", counted_go)
    return seen


def _bound(sess, x):
    from numba import cuda

    dx = cuda.to_device(x)
    binding = sess.io_binding()
    binding.bind_input("x", dx, "cuda:0")
    binding.bind_output("y", "cuda:0")
    return binding, dx


def test_one_run_warms_up_and_captures_later_runs_replay(counters) -> None:
    sess = session(_model(), GRAPH)
    graphs = sess.execution_providers[0].ep.graphs
    x = _x(2)
    want = _expected(x)
    counters.update(plans=0, launches=0)
    binding, dx = _bound(sess, x)
    sess.run_with_iobinding(binding)
    # onnxruntime: two regular runs, then the captured one, inside one run call
    assert counters == {"plans": 3, "launches": 3 * 3}
    stats = graphs.stats()
    assert stats["regular_runs"] == {0: 2} and stats["captured"] == [0]
    assert stats["recorded_launches"] == {0: 3} and stats["replays"] == {0: 1}
    (first,) = binding.get_outputs()
    np.testing.assert_allclose(first.numpy(), want, rtol=1e-5, atol=1e-6)

    for _ in range(2):
        sess.run_with_iobinding(binding)
    assert counters == {"plans": 3, "launches": 9}, "a replay runs no node through the core"
    assert graphs.stats()["replays"] == {0: 3}
    (out,) = binding.get_outputs()
    assert out.data is first.data, "outputs live at the graph's fixed addresses"
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    # every array the capture made is owned by the graph: the output and two intermediates
    assert graphs.stats()["owned_arrays"] == {0: 3}
    assert any(a is out.data for a in graphs.graphs[0].owned)


def test_profiling_stopped_or_started_during_a_capture_leaves_the_right_launch_tap() -> None:
    """A capture ends by installing the tap of the timeline recording *then*: not a timeline
    stopped during the capture (later launches would be timed into it), and a timeline started
    during the capture takes over only at its end (the capture keeps recording)."""
    from ep_cuda_numba.graph_capture import MIN_RUNS_BEFORE_CAPTURE
    from ep_cuda_numba.profiling import GpuTimeline

    sess = session(_model(), GRAPH)
    ep = sess.execution_providers[0].ep
    graphs = ep.graphs
    sess.run(None, {"x": _x(2)}, _run_options("-1"))  # the session's one stream exists
    for gid in (5, 6):
        graphs.regular_runs[gid] = MIN_RUNS_BEFORE_CAPTURE
    timeline = GpuTimeline(ep)
    timeline.start(0)
    graphs.on_run_start(_run_options("5"))
    assert graphs.capturing is not None and ep.tap != timeline.launch
    timeline.stop()
    graphs.on_run_end(_run_options("5"))
    assert ep.tap is None and ep.timeline is None, "no launch is timed into the stopped timeline"
    graphs.on_run_start(_run_options("6"))
    recording = ep.tap
    later = GpuTimeline(ep)
    later.start(0)
    assert ep.tap == recording, "the capture keeps recording"
    graphs.on_run_end(_run_options("6"))
    assert ep.tap == later.launch
    later.stop()
    assert ep.tap is None
    sess.close()


def test_updating_the_bound_input_in_place_changes_the_replayed_output() -> None:
    sess = session(_model(), GRAPH)
    x = _x(2)
    binding, dx = _bound(sess, x)
    sess.run_with_iobinding(binding)
    x2 = _x(2, seed=5) * 3
    dx.copy_to_device(x2)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], _expected(x2), rtol=1e-5, atol=1e-6)


def test_graph_ids_select_graphs_and_minus_one_skips_capture(counters) -> None:
    sess = session(_model(), GRAPH)
    graphs = sess.execution_providers[0].ep.graphs
    small, big = _x(2), _x(3, seed=1)
    want_small, want_big = _expected(small), _expected(big)
    counters.update(plans=0, launches=0)
    b0, _ = _bound(sess, small)
    b1, _ = _bound(sess, big)
    sess.run_with_iobinding(b0)
    sess.run_with_iobinding(b1, _run_options("1"))
    assert graphs.stats()["captured"] == [0, 1] and counters["plans"] == 6
    sess.run_with_iobinding(b0, _run_options("0"))
    sess.run_with_iobinding(b1, _run_options("1"))
    assert counters["plans"] == 6 and graphs.stats()["replays"] == {0: 2, 1: 2}
    np.testing.assert_allclose(b0.copy_outputs_to_cpu()[0], want_small, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1.copy_outputs_to_cpu()[0], want_big, rtol=1e-5, atol=1e-6)

    # -1: a plain run, no capture, and host inputs are fine
    (y,) = sess.run(None, {"x": small}, _run_options("-1"))
    np.testing.assert_allclose(y, want_small, rtol=1e-5, atol=1e-6)
    assert counters["plans"] == 7 and graphs.stats()["regular_runs"] == {0: 2, 1: 2}


def test_a_captured_id_refuses_other_buffers_and_shapes() -> None:
    sess = session(_model(), GRAPH)
    binding, _ = _bound(sess, _x(2))
    sess.run_with_iobinding(binding)
    other, _ = _bound(sess, _x(3))
    with pytest.raises(InvalidArgument, match=r"gpu_graph_id=<unused id>"):
        sess.run_with_iobinding(other)
    same_shape, _ = _bound(sess, _x(2))
    with pytest.raises(InvalidArgument, match=r"'x' is not the buffer graph 0 was captured with"):
        sess.run_with_iobinding(same_shape)


def test_inputs_must_be_bound_on_the_device() -> None:
    sess = session(_model(), GRAPH)
    with pytest.raises(InvalidArgument, match=r"bound on .*IOBinding.*\['x'\].*gpu_graph_id=-1"):
        sess.run(None, {"x": _x(2)})
    binding = sess.io_binding()
    binding.bind_cpu_input("x", _x(2))
    binding.bind_output("y", "cuda:0")
    with pytest.raises(InvalidArgument, match=r"\['x'\] are not"):
        sess.run_with_iobinding(binding)
    with pytest.raises(InvalidArgument, match=r"gpu_graph_id='x' must be an integer >= -1"):
        sess.run(None, {"x": _x(2)}, _run_options("x"))


def test_a_node_on_another_ep_is_refused_at_session_creation() -> None:
    with pytest.raises(
        InvalidGraph, match=r"this session has: node round on CpuReferenceExecutionProvider\. Turn graph capture off"
    ):
        session(_model(with_round=True), GRAPH)
    session(_model(with_round=True), [EP])  # without capture the same model is fine


def test_shape_computations_on_the_cpu_are_allowed() -> None:
    """ALLOW_CPU_FOR_SHAPES: Shape -> Gather -> Concat feeding Reshape's shape stay on the host."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="gather", axis=0),
        helper.make_node("Concat", ["n", "m1"], ["t"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "t"], ["y"], name="reshape"),
    ]
    inits = [
        helper.make_tensor("i0", TensorProto.INT64, [1], [0]),
        helper.make_tensor("m1", TensorProto.INT64, [1], [-1]),
    ]
    graph = helper.make_graph(
        nodes,
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model, GRAPH)
    on = {n: a["ep"] for n, a in sess.get_node_assignment().items()}
    assert on["relu"] == EP and on["gather"] != EP, on
    from numba import cuda

    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2) - 4
    binding = sess.io_binding()
    binding.bind_input("x", cuda.to_device(x), "cuda:0")
    binding.bind_output("y", "cpu")
    sess.run_with_iobinding(binding)
    sess.run_with_iobinding(binding)
    assert sess.execution_providers[0].ep.graphs.stats()["replays"] == {0: 2}
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(x, 0).reshape(2, 4))


def test_the_driver_path_calls_stream_capture_in_order() -> None:
    """The real-GPU backend against a recording stand-in for cuda-bindings' driver module."""
    from types import SimpleNamespace

    from ep_cuda_numba.graph_capture import DriverGraph

    calls: list[str] = []
    ok = "SUCCESS"

    def call(name: str, *result):
        def f(*args):
            calls.append(name)
            return (ok, *result)

        return f

    cu = SimpleNamespace(
        CUresult=SimpleNamespace(CUDA_SUCCESS=ok),
        CUstreamCaptureMode=SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED="relaxed"),
        cuStreamBeginCapture=call("begin"),
        cuStreamEndCapture=call("end", "graph"),
        cuGraphInstantiate=call("instantiate", "exec"),
        cuGraphLaunch=call("launch"),
        cuGraphExecDestroy=call("exec_destroy"),
        cuGraphDestroy=call("graph_destroy"),
    )
    g = DriverGraph.__new__(DriverGraph)
    g.cu, g.handle, g.graph, g.exec = cu, "stream", None, None
    g.begin()
    g.end()
    g.launch()
    g.launch()
    g.destroy()
    assert calls == ["begin", "end", "instantiate", "launch", "launch", "exec_destroy", "graph_destroy"]
    cu.cuGraphLaunch = lambda *a: ("CUDA_ERROR_INVALID_VALUE",)
    with pytest.raises(EpFail, match="cuGraphLaunch failed"):
        g.launch()

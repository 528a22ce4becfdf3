"""``RunOptions.terminate`` stops a run between steps and inside Loop/Scan iterations; closing or
dropping a session releases everything (EP objects die), and a release hook that raises is
reported, typed and naming the EP and hook, while the other releases still run."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from _support.eps import FusingEp
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.compute import NodeComputeInfo
from ep_core.sdk.ep_base import HostEpFactory
from ep_core.sdk.errors import EpFail, RunTerminated, StatusCode
from ep_core.sdk.grouping import convex_groups

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _endless_loop_model() -> bytes:
    """y = x + 1 repeated 10^12 times: a Loop nobody waits out."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            helper.make_tensor_value_info("v_in", F, [2]),
        ],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, [2])],
        [helper.make_tensor("one", F, [], [1.0])],
    )
    nodes = [
        helper.make_node("Constant", [], ["trips"], value=helper.make_tensor("t", I64, [], [10**12])),
        helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", B, [], [True])),
        helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="endless", body=body),
    ]
    return make_model(nodes, [("x", F, [2])], [("y", F, [2])]).SerializeToString()


def _run_until_terminated(
    sess: ep_core.InferenceSession, opts: ep_core.RunOptions
) -> tuple[BaseException | None, float]:
    """Start the run, set terminate after it has looped a while, return (error, seconds to stop)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            sess.run(None, {"x": np.zeros(2, np.float32)}, opts)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc
        outcome["end"] = time.perf_counter()

    worker = threading.Thread(target=target)
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive(), "the endless loop finished on its own"
    t_set = time.perf_counter()
    opts.terminate = True
    worker.join(timeout=30)
    assert not worker.is_alive(), "terminate did not stop the run"
    return outcome.get("error"), outcome["end"] - t_set


def test_terminate_stops_an_endless_loop_and_the_session_runs_again() -> None:
    sess = ep_core.InferenceSession(_endless_loop_model())
    opts = ep_core.RunOptions()
    error, seconds = _run_until_terminated(sess, opts)
    assert isinstance(error, RunTerminated) and error.code is StatusCode.FAIL
    assert "terminate flag" in str(error) and "endless" in str(error)  # names the Loop node it stopped in
    assert seconds < 5  # the latency itself is measured in benchmarks/bench_terminate.py
    with pytest.raises(RunTerminated):  # still set: every run with these options stops at once
        sess.run(None, {"x": np.zeros(2, np.float32)}, opts)


def test_terminate_set_before_the_run_stops_it_before_any_step() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", F, [2])], [("y", F, [2])])
    sess = ep_core.InferenceSession(model.SerializeToString())
    opts = ep_core.RunOptions(terminate=True)
    with pytest.raises(RunTerminated):
        sess.run(None, {"x": np.ones(2, np.float32)}, opts)
    opts.terminate = False
    (y,) = sess.run(None, {"x": np.ones(2, np.float32)}, opts)
    np.testing.assert_array_equal(y, [1.0, 1.0])


# ------------------------------------------------------------------------------------ release
NAME = "ReleasingTestExecutionProvider"


class ReleasingEp(FusingEp):
    """Fuses Add/Mul; its fused nodes' release_state raises when asked to."""

    def __init__(self, log: list[str], fail_state: bool) -> None:
        super().__init__()
        self.log, self.fail_state = log, fail_state

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        for group in convex_groups(graph, lambda n: n.op_type in self.FUSABLE):
            support.add_nodes_to_fuse(group)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
        infos = super().ep_compile(graphs, fused_nodes)
        for info, fused in zip(infos, fused_nodes):
            info.create_state = lambda ctx: {"held": np.zeros(1 << 16)}
            info.release_state = lambda state, name=fused.name: self._release(name)
        return infos

    def _release(self, name: str) -> None:
        self.log.append(f"release_state {name}")
        if self.fail_state:
            raise RuntimeError("the device went away")


class ReleasingFactory(HostEpFactory):
    ep_name = NAME
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, fail_state: bool = False, fail_release_ep: bool = False) -> None:
        self.log: list[str] = []
        self.fail_state, self.fail_release_ep = fail_state, fail_release_ep

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> ReleasingEp:
        return ReleasingEp(self.log, self.fail_state)

    def ep_factory_release_ep(self, ep: Any) -> None:
        self.log.append("release_ep")
        if self.fail_release_ep:
            raise ValueError("cannot release")


@contextmanager
def registered(factory: ReleasingFactory) -> Iterator[ReleasingFactory]:
    ep_core.register_execution_provider_library(NAME, factory)
    try:
        yield factory
    finally:
        ep_core.unregister_execution_provider_library(NAME)


def _two_group_model() -> bytes:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),  # on the CPU fallback: two fused groups
        helper.make_node("Mul", ["r", "r"], ["y"], name="mul"),
    ]
    return make_model(nodes, [("x", F, [2])], [("y", F, [2])]).SerializeToString()


def test_a_raising_release_is_reported_and_every_other_release_still_runs() -> None:
    with registered(ReleasingFactory(fail_state=True, fail_release_ep=True)) as factory:
        sess = ep_core.InferenceSession(_two_group_model(), providers=[NAME])
        ep_ref = weakref.ref(sess.execution_providers[0].ep)
        with pytest.raises(EpFail) as err:
            sess.close()
        message = str(err.value)
        assert f"{NAME}.release_state of " in message and "RuntimeError: the device went away" in message
        assert f"also {NAME}.ep_factory_release_ep failed: ValueError: cannot release" in message
        # both fused nodes' states and the EP itself were released despite the failures
        assert sum(e.startswith("release_state") for e in factory.log) == 2 and "release_ep" in factory.log
        del sess, err  # the traceback's frames hold the EP: drop them as a caller would
        gc.collect()
        assert ep_ref() is None  # unregistered and unreferenced
        factory.fail_state = factory.fail_release_ep = False  # the registry is healthy afterwards
        sess2 = ep_core.InferenceSession(_two_group_model(), providers=[NAME])
        sess2.run(None, {"x": np.ones(2, np.float32)})
        sess2.close()


@pytest.mark.parametrize("how", ["close", "drop"])
def test_closed_or_dropped_sessions_free_their_eps_and_state(how: str) -> None:
    with registered(ReleasingFactory()) as factory:
        refs = []
        for _ in range(5):
            sess = ep_core.InferenceSession(_two_group_model(), providers=[NAME])
            sess.run(None, {"x": np.ones(2, np.float32)})
            refs += [weakref.ref(e.ep) for e in sess.execution_providers]
            refs.append(weakref.ref(sess.program))
            if how == "close":
                sess.close()
            del sess
        gc.collect()
        assert [r for r in refs if r() is not None] == []
        assert sum(e.startswith("release_state") for e in factory.log) == 10


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc (Linux)")
def test_300_create_close_cycles_do_not_grow_rss() -> None:
    weights = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        [("x", F, [4, 256])],
        [("y", F, [4, 256])],
        initializers=[numpy_helper.from_array(weights, "w")],
    ).SerializeToString()
    x = np.ones((4, 256), np.float32)
    for _ in range(20):  # warm-up: caches and allocator pools settle
        ep_core.InferenceSession(model).run(None, {"x": x})
    gc.collect()
    before = _rss_mb()
    for _ in range(300):
        sess = ep_core.InferenceSession(model)
        sess.run(None, {"x": x})
        sess.close()
    gc.collect()
    assert _rss_mb() - before <= 50


def test_a_raising_create_state_is_typed_and_earlier_states_are_released() -> None:
    class FailingSecondState(ReleasingEp):
        def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
            infos = super().ep_compile(graphs, fused_nodes)

            def refuse(ctx: Any) -> None:
                raise OSError("out of device memory")

            infos[-1].create_state = refuse
            return infos

    class Factory(ReleasingFactory):
        def ep_factory_create_ep(
            self, devices: Any, ep_options: Mapping[str, str], session_options: Any
        ) -> ReleasingEp:
            return FailingSecondState(self.log, False)

    with registered(Factory()) as factory, pytest.raises(EpFail) as err:
        ep_core.InferenceSession(_two_group_model(), providers=[NAME])
    assert f"{NAME}.create_state of " in str(err.value) and "OSError: out of device memory" in str(err.value)
    assert isinstance(err.value.__cause__, OSError)
    assert sum(e.startswith("release_state") for e in factory.log) == 1  # the first group's state

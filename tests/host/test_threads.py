"""intra_op_num_threads has its real effect: a kernel computing inside a run sees the BLAS/OpenMP
libraries and Numba's threading layer at the session's size (ep_core/host/threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import ep_core
from ep_core.host import threads
from ep_core.sdk.errors import InvalidArgument

CPUS = threads.available_cpus()


def _run(probe, **options) -> dict:
    sess = ep_core.InferenceSession(probe.model(), ep_core.SessionOptions(**options), providers=[probe.ep])
    probe.seen.clear()
    (y,) = sess.run(None, {"x": np.ones((4, 64), np.float32)})
    assert y.shape == (4, 64)
    assert len(probe.seen) == 1
    return probe.seen[0]


def _blas() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_the_default_is_the_cpus_this_process_may_use_that_others_leave_free(tmp_path, monkeypatch):
    assert 1 <= CPUS <= len(os.sched_getaffinity(0))
    assert threads.resolve(3) == 3 and 1 <= threads.resolve(0) <= CPUS
    mine = sorted(os.sched_getaffinity(0))
    stat = tmp_path / "stat"

    def write(busy: int, idle: int) -> None:  # per CPU of this process: user ticks, idle ticks
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i in mine]
        stat.write_text("\n".join(lines) + "\nintr 1 2 3\n")

    monkeypatch.setattr(threads, "_SAMPLE_S", 0.05)
    monkeypatch.setattr(threads, "_load", [-1.0, 0.0, 0.0, 0.0, 0.0])
    write(1000, 1000)
    threads.free_cpus(str(stat))  # the first sample: a baseline
    time.sleep(0.1)
    write(1100, 1000)  # every CPU busy since, not with this process (it slept)
    assert threads.free_cpus(str(stat)) < 0.5 and threads.default_size(len(mine)) == 1
    time.sleep(0.1)
    write(1100, 1100)  # every CPU idle since
    assert threads.free_cpus(str(stat)) > len(mine) - 0.5 and threads.default_size(len(mine)) == len(mine)
    time.sleep(0.1)
    write(1150, 1150)  # half busy: half of the CPUs are free
    assert abs(threads.free_cpus(str(stat)) - len(mine) / 2) < 0.5


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")
def test_a_default_session_computes_at_one_thread_beside_cpu_bound_processes(probe):
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CPUS)]
    try:
        time.sleep(1.0)
        sess = ep_core.InferenceSession(probe.model(), providers=[probe.ep])
        x = np.ones((2, 64), np.float32)
        for _ in range(3):  # samples 0.25 s apart: the later runs see the others' load
            sess.run(None, {"x": x})
            time.sleep(0.3)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert set(probe.seen[-1]["blas"]) == {1}


def test_a_one_thread_session_computes_with_one_blas_thread(probe):
    assert _blas(), "numpy's BLAS should be visible to threadpoolctl"
    with threadpool_limits(limits=2, user_api="blas"):  # the process starts wide
        seen = _run(probe, intra_op_num_threads=1)
    assert seen["blas"] and set(seen["blas"]) == {1}
    assert set(seen["openmp"]) <= {1}


def test_more_threads_than_cpus_compute_at_the_cpus_and_say_so(probe, caplog):
    """atspm-detector asks for 4 threads: on 2 CPUs its dilated convolutions ran 100x slower than at
    2 (OpenBLAS's workers without a core spin and stall each product). Runs are capped at the CPUs
    the process may use; the session's log says so at info."""
    import logging

    with caplog.at_level(logging.INFO, logger="ep_core"):
        seen = _run(probe, intra_op_num_threads=CPUS + 2, log_severity_level=1)
    assert seen["blas"] and set(seen["blas"]) == {CPUS}
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("ep_core")]
    assert any(f"intra_op_num_threads={CPUS + 2} is more than the {CPUS} CPU(s)" in m for m in messages), messages
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ep_core"):
        _run(probe, intra_op_num_threads=CPUS, log_severity_level=1)
    assert not any("is more than the" in r.getMessage() for r in caplog.records)


def test_sessions_of_different_sizes_each_compute_at_their_own(probe):
    one = ep_core.InferenceSession(probe.model(), ep_core.SessionOptions(intra_op_num_threads=1), providers=[probe.ep])
    two = ep_core.InferenceSession(probe.model(), ep_core.SessionOptions(intra_op_num_threads=2), providers=[probe.ep])
    x = np.ones((2, 64), np.float32)
    probe.seen.clear()
    for _ in range(2):
        one.run(None, {"x": x})
        two.run(None, {"x": x})
    assert [set(s["blas"]) for s in probe.seen] == [{1}, {2}, {1}, {2}]


def test_a_session_run_from_another_python_thread_gets_its_size(probe):
    """threadpoolctl lets only the first thread that sized OpenBLAS size it again: the host must
    still size it for a run made on another thread."""
    with threadpool_limits(limits=2, user_api="blas"):  # this thread takes control of OpenBLAS
        sess = ep_core.InferenceSession(
            probe.model(), ep_core.SessionOptions(intra_op_num_threads=1), providers=[probe.ep]
        )
        probe.seen.clear()
        worker = threading.Thread(target=lambda: sess.run(None, {"x": np.ones((2, 64), np.float32)}))
        worker.start()
        worker.join()
    assert len(probe.seen) == 1 and set(probe.seen[0]["blas"]) == {1}


def test_use_per_session_threads_false_takes_the_global_size_at_each_run(probe):
    threads.set_global_thread_pool_sizes(1, 1)
    opts = ep_core.SessionOptions(use_per_session_threads=False, intra_op_num_threads=2)
    sess = ep_core.InferenceSession(probe.model(), opts, providers=[probe.ep])
    x = np.ones((2, 64), np.float32)
    sess.run(None, {"x": x})
    threads.set_global_thread_pool_sizes(2, 0)
    sess.run(None, {"x": x})
    assert [set(s["blas"]) for s in probe.seen] == [{1}, {2}]
    assert threads.global_thread_pool_sizes() == (2, 0)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_global_sizes_are_refused(bad):
    with pytest.raises(InvalidArgument, match="intra_op_num_threads must be an int >= 0"):
        threads.set_global_thread_pool_sizes(bad)


def test_numba_threads_follow_the_session_on_the_computing_thread(probe):
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread here")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert _run(probe, intra_op_num_threads=1)["numba"] == 1
    # clamped to numba's maximum
    assert _run(probe, intra_op_num_threads=64)["numba"] == numba.config.NUMBA_NUM_THREADS


def test_limit_threads_writes_only_what_differs():
    threads.scan_libraries()
    threads.limit_threads(1)
    calls: list[int] = []
    original = list(threads._controls or [])
    threads._controls = [(get, lambda n, s=set_: (calls.append(n), s(n))) for get, set_ in original]
    try:
        threads.limit_threads(1)
        assert calls == []  # already 1: nothing written
        threads.limit_threads(2)
        assert calls == [2] * len(original)
    finally:
        threads._controls = original


def test_under_the_numba_cpu_ep_numbas_threads_are_the_sessions():
    pytest.importorskip("ep_numba_cpu")
    numba = pytest.importorskip("numba")
    from _support.models import add_mul_chain

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread here")
    numba.set_num_threads(2)
    model = add_mul_chain(4, [64, 64]).SerializeToString()
    opts = ep_core.SessionOptions(intra_op_num_threads=1)
    sess = ep_core.InferenceSession(
        model, opts, providers=["NumbaCpuExecutionProvider"], provider_options=[{"parallel": "1"}]
    )
    x = np.ones((64, 64), np.float32)
    (out,) = sess.run(None, {"x": x, "y": x})
    np.testing.assert_allclose(out, ((x + x) * x + x) * x)
    assert numba.get_num_threads() == 1  # set for the run, on this thread; left so (nothing restored)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_numba_half_imported_by_another_thread_is_left_alone(monkeypatch):
    """A reference-EP session run while another thread is still importing numba (a Numba EP
    session being created beside it) sized numba through a module without its ``config`` yet and
    failed with AttributeError; the half-made module is skipped (nothing of it runs on this thread)."""
    import importlib.machinery
    import types

    half = types.ModuleType("numba")
    half.__spec__ = importlib.machinery.ModuleSpec("numba", None)
    half.__spec__._initializing = True
    monkeypatch.setitem(sys.modules, "numba", half)
    threads.limit_threads(1)  # raised AttributeError: module 'numba' has no attribute 'config'

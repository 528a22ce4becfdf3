"""``enable_cpu_mem_arena`` has its effect (issue 13's rule: no option accepted and ignored): while a
session with the arena lives, a run reuses the pages the last run freed, where without it every
large output is a fresh mapping and costs a page fault per 4 KiB; the last arena session to close
gives the memory back. Each case runs in a process of its own, so the allocator starts untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena tunes glibc's malloc")

# A 1 -> 32 channel 3x3 convolution over a 200 x 257 plane, then c * c + c: three 6.5 MB arrays a run
# (1,600 pages each), two alive at once.
_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    from onnx import helper, numpy_helper
    import ep_core
    from ep_core.host import memory

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 1, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "c"], ["c2"]),
        helper.make_node("Add", ["c2", "c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 1, 200, 257])],
        [helper.make_tensor_value_info("y", 1, None)], [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    feed = {"x": rng.standard_normal((1, 1, 200, 257)).astype(np.float32)}

    def session(arena):
        so = ep_core.SessionOptions()
        so.enable_cpu_mem_arena = arena
        return ep_core.InferenceSession(model, so, providers=["CpuReferenceExecutionProvider"])

    def faults_per_run(sess):
        for _ in range(3):
            sess.run(None, feed)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            sess.run(None, feed)
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

    report = {}
    off = session(False)
    report["off"] = faults_per_run(off)
    report["state_off"] = memory.arena_state()
    on = session(True)
    second = session(True)
    report["on"] = faults_per_run(on)
    report["state_two"] = memory.arena_state()
    on.close()
    on.close()  # a second close gives nothing back twice
    report["state_one"] = memory.arena_state()
    report["on_with_one_left"] = faults_per_run(second)
    del second
    report["state_none"] = memory.arena_state()
    report["off_after"] = faults_per_run(off)
    print(json.dumps(report))
    """
)


def _run(env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_arena_sessions_reuse_freed_pages_and_the_last_one_out_gives_them_back() -> None:
    got = _run()
    # without the arena each run maps its 6.5 MB output afresh: a fault per page
    assert got["off"] > 1000, got
    assert got["state_off"].endswith("held by 0 session(s)"), got
    # with it the pages freed by the last run are reused: (almost) no faults
    assert got["on"] < 100, got
    assert got["state_two"].endswith("held by 2 session(s)"), got
    assert got["state_one"].endswith("held by 1 session(s)"), got
    assert got["on_with_one_left"] < 100, got  # one session closing keeps the other's arena
    assert got["state_none"].endswith("held by 0 session(s)"), got
    # glibc's defaults are back once no arena session lives: fresh mappings again
    assert got["off_after"] > 1000, got


def test_malloc_tuned_by_the_environment_wins() -> None:
    got = _run({"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert "tuned by the environment" in got["state_two"], got
    assert got["on"] > 1000, got  # the arena left glibc as the environment set it


def test_a_session_logs_why_it_has_no_arena() -> None:
    """The option is not dropped silently: a session that asks for the arena and cannot have it
    says why in its log at info level."""
    script = textwrap.dedent(
        """
        import logging
        from onnx import helper
        import ep_core
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "g",
            [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        so = ep_core.SessionOptions()
        so.log_severity_level = 1
        logging.basicConfig(level=logging.DEBUG)
        ep_core.InferenceSession(model.SerializeToString(), so, providers=["CpuReferenceExecutionProvider"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "enable_cpu_mem_arena: no CPU memory arena: malloc is tuned by the environment" in done.stderr, done.stderr

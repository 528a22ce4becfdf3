"""The Numba CPU EP compiles a cold session's kernels on worker processes as well as its own
(``ep_numba_cpu.compile_pool``, option ``compile_workers``): the kernels, the outputs and what the
kernel cache holds are those of an in-process compile; a failed worker is retired with a warning and
its kernel compiled in-process; workers never re-run the user's script; bad values are refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("ep_numba_cpu")

from ep_core import InferenceSession  # noqa: E402
from ep_core.sdk.errors import ConfigError  # noqa: E402
from ep_numba_cpu import compile_pool  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
KERNELS = 8  # one elementwise cluster between each pair of MatMuls: eight distinct kernels to compile


def _model(path: Path, salt: float) -> Path:
    """x -> (LeakyRelu_i -> MatMul W_i) eight times; each alpha (a literal in its kernel's source)
    differs, and ``salt`` shifts them all, so no kernel compiled for another salt serves them."""
    rng = np.random.default_rng(3)
    nodes, inits, cur = [], [], "x"
    for i in range(KERNELS):
        alpha = 0.01 * (i + 1) + salt
        nodes.append(helper.make_node("LeakyRelu", [cur], [f"a{i}"], name=f"act{i}", alpha=alpha))
        w = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [8, 8], w.ravel().tolist()))
        nodes.append(helper.make_node("MatMul", [f"a{i}", f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        cur = f"m{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [4, 8])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


SCRIPT = """
import json, sys, warnings
import numpy as np
with open(sys.argv[4], "a") as ran:
    print("script ran", file=ran)
from ep_core import InferenceSession
model, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sess = InferenceSession(model, providers=[("NumbaCpuExecutionProvider", options)])
x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
np.save(out, sess.run(None, {"x": x})[0])
from ep_numba_cpu import codegen, compile_pool
print(json.dumps({"stats": codegen.STATS, "workers": len(compile_pool._workers)}))
"""


def _run(tmp_path: Path, model: Path, tag: str, options: dict[str, str], cache: str = "") -> tuple[np.ndarray, dict]:
    """A fresh process (no main guard in its script, on purpose) creating one session."""
    script = tmp_path / "make_session.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"{tag}.npy"
    marker = tmp_path / f"{tag}.ran"
    env_dir = {"EP_NUMBA_CPU_KERNEL_CACHE_DIR": str(tmp_path / f"cache_{cache or tag}")}
    import os

    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "always::ResourceWarning",
            str(script),
            str(model),
            str(out),
            json.dumps(options),
            str(marker),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env_dir},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ResourceWarning" not in proc.stderr, proc.stderr[-3000:]  # the workers' pipes are closed
    # the workers are `python -m ep_numba_cpu.compile_worker`: the user's script ran once
    assert marker.read_text().count("script ran") == 1
    return np.load(out), json.loads(proc.stdout.strip().splitlines()[-1])


def test_workers_compile_the_same_kernels_as_the_session_process(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx", 0.0)
    alone, s0 = _run(tmp_path, model, "alone", {"compile_workers": "0"})
    shared, s1 = _run(tmp_path, model, "shared", {"compile_workers": "1"})
    assert s0["workers"] == 0 and s1["workers"] == 1
    assert s0["stats"]["compiled"] == s1["stats"]["compiled"] == KERNELS
    np.testing.assert_array_equal(alone, shared)
    # what the worker compiled went into the kernel cache like the rest: a new process compiles nothing
    again, s2 = _run(tmp_path, model, "again", {"compile_workers": "1"}, cache="shared")
    assert s2["stats"]["compiled"] == 0 and s2["stats"]["cached"] == KERNELS and s2["workers"] == 0
    np.testing.assert_array_equal(again, alone)


def test_a_failed_worker_is_retired_with_a_warning_and_its_kernels_compile_here(tmp_path: Path) -> None:
    opts = {"compile_workers": "1", "kernel_cache": "0"}
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = InferenceSession(str(_model(tmp_path / "r.onnx", 0.5)), providers=["CpuReferenceExecutionProvider"])
        InferenceSession(str(_model(tmp_path / "a.onnx", 0.25)), providers=[(NUMBA, opts)])
    assert compile_pool._workers, "the first session started a worker"
    compile_pool._workers[0].proc.kill()
    compile_pool._workers[0].proc.wait()
    with pytest.warns(RuntimeWarning, match="compile worker failed.*compile_workers=0"):
        sess = InferenceSession(str(_model(tmp_path / "b.onnx", 0.5)), providers=[(NUMBA, opts)])
    assert not compile_pool._workers
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("value", ["-1", "two", "65", "", "1.5"])
def test_bad_compile_workers_values_are_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=f"compile_workers={value!r}"):
        InferenceSession(str(_model(tmp_path / "m.onnx", 0.0)), providers=[(NUMBA, {"compile_workers": value})])


def test_auto_is_one_worker_per_spare_core() -> None:
    import os

    spare = len(os.sched_getaffinity(0)) - 1
    assert compile_pool.workers_option({}) == min(compile_pool.MAX_AUTO_WORKERS, max(0, spare))
    assert compile_pool.workers_option({"compile_workers": "3"}) == 3


def test_the_worker_protocol_reports_a_kernel_that_does_not_compile() -> None:
    worker = compile_pool._Worker()
    try:
        bad = type("KS", (), {"source": "def kernel(x):\n    return undefined_name\n", "signature": "float32:1:C:r"})
        bad.parallel = False
        with pytest.raises(RuntimeError, match="could not compile it"):
            worker.compile(bad)
        good = type("KS", (), {})()
        good.source = textwrap.dedent(
            """
            def kernel(x, out):
                for i in range(x.shape[0]):
                    out[i] = x[i] + 1.0
            """
        )
        good.signature, good.parallel = "float32:1:C:r,float32:1:C:w", False
        assert len(worker.compile(good)) > 1000  # the worker serves on after a failure
    finally:
        worker.close()


def test_a_worker_never_imports_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m` puts the current directory first on sys.path: a booby-trapped numba.py or json.py
    in it (a downloaded model's folder) must not run in a worker, whose kernels this process trusts."""
    trap = tmp_path / "trap"
    trap.mkdir()
    marker = tmp_path / "trapped"
    for name in ("numba.py", "json.py", "struct.py"):
        (trap / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\nraise SystemExit(3)\n")
    monkeypatch.chdir(trap)
    worker = compile_pool._Worker()
    try:
        good = type("KS", (), {})()
        good.source = "def kernel(x, out):\n    for i in range(x.shape[0]):\n        out[i] = x[i] * 3.0\n"
        good.signature, good.parallel = "float32:1:C:r,float32:1:C:w", False
        assert len(worker.compile(good)) > 1000
    finally:
        worker.close()
    assert not marker.exists()


IDLE_SCRIPT = """
import json, sys, time
import numpy as np
from ep_numba_cpu import compile_pool
compile_pool.IDLE_SECONDS = 0.5
from ep_core import InferenceSession
sess = InferenceSession(sys.argv[1], providers=[("NumbaCpuExecutionProvider", {"compile_workers": "1"})])
procs = [w.proc for w in compile_pool._workers]
busy = len(procs)
time.sleep(3)
x = np.ones((4, 8), np.float32)
sess.run(None, {"x": x})  # the session runs on: only the compile workers went
print(json.dumps({"busy": busy, "left": len(compile_pool._workers), "exited": [p.poll() for p in procs]}))
"""


def test_idle_workers_are_closed(tmp_path: Path) -> None:
    """A worker holds a Python process with Numba loaded (~200 MB): once no batch has used the
    workers for IDLE_SECONDS they are closed, not kept until the process exits."""
    import os

    model = _model(tmp_path / "m.onnx", 0.5)
    script = tmp_path / "idle.py"
    script.write_text(IDLE_SCRIPT)
    env = {**os.environ, "EP_NUMBA_CPU_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(script), str(model)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["busy"] == 1 and got["left"] == 0 and got["exited"] == [0], got

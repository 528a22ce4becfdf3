"""Session creation never allocates out of proportion to the model's declared tensors: no shape
inference data propagation (a 1-D int64 tensor of 10^8 elements would become a shape of 10^8
dims), and constant folding skips a node whose output would pass onnxruntime's 1 GiB cap or the
model's budget (4x its stored tensors, at least 64 MiB), or whose size nothing tells before
computing it. Such a node runs when the model runs instead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.runtime import load
from ep_core.sdk.errors import EpCoreError
from security.hostile_models import crafted_cases, model, tile_bomb

TESTS = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
import ep_core
from ep_core.sdk.errors import EpCoreError
import onnx_ir, onnxscript.optimizer, onnxscript.rewriter  # the graph optimizer's one-time import, not measured
data = open(sys.argv[1], "rb").read()
def mb():
    # VmHWM: this process's own peak RSS. ru_maxrss would not do: execve carries the parent's
    # high-water mark into it, so a child of a large pytest worker starts "at" the worker's size.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
out = {}
try:
    sess = ep_core.InferenceSession(data, providers=[sys.argv[3]])
    out["created"], out["created_mb"] = time.perf_counter() - t0, mb()
    if sys.argv[2] == "run":
        sess.run(None, {})
        out["result"] = "ran"
except EpCoreError as exc:
    out["result"] = exc.code.value + ": " + exc.message
out["seconds"], out["peak_mb"] = time.perf_counter() - t0, mb()
print(json.dumps(out))
"""


def _in_child(
    tmp_path: Path, data: bytes, run: bool, provider: str = "CpuReferenceExecutionProvider"
) -> dict[str, object]:
    """Creates a session of ``data`` (and runs it) in a fresh process: what happened, in how many
    seconds, and the process's peak RSS in MB."""
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    cmd = [sys.executable, "-c", _CHILD, str(path), "run" if run else "create", provider]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_tile_bomb_is_refused_in_under_a_second_below_300_mb(tmp_path):
    data = tile_bomb().SerializeToString()
    assert len(data) < 120
    out = _in_child(tmp_path, data, run=True)
    print(f"Tile bomb ({len(data)} bytes): {out}")
    assert str(out["result"]).startswith("FAIL: node 'tile' (op Tile)")  # refused when it runs, as onnxruntime does
    assert float(out["seconds"]) < 1.0
    assert float(out["peak_mb"]) < 300


def _string_bomb(kind: str) -> bytes:
    """Strings whose bytes no shape tells: 19 StringConcat(x, x) of a 1 KiB string (512 MiB if
    folded), or a Cast to string of 4 million zeros (each a Python str when folded)."""
    if kind == "concat":
        init = [helper.make_tensor("s0", TensorProto.STRING, [1], [b"A" * 1024])]
        nodes = [helper.make_node("StringConcat", [f"s{i}", f"s{i}"], [f"s{i + 1}"]) for i in range(19)]
        nodes.append(helper.make_node("Shape", ["s19"], ["y"]))
    else:
        init = [helper.make_tensor("n", TensorProto.INT64, [1], [4_000_000])]
        nodes = [helper.make_node("ConstantOfShape", ["n"], ["z"]), helper.make_node("Cast", ["z"], ["c"], to=8)]
        nodes.append(helper.make_node("Shape", ["c"], ["y"]))
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.INT64, [1])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString()


@pytest.mark.parametrize("provider", ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"])
@pytest.mark.parametrize("kind", ["concat", "cast"])
def test_strings_are_not_folded_at_session_creation(tmp_path, kind, provider):
    """A string element's bytes are its length: counted as 8 bytes, a 1.8 KB model folded a 1 GiB
    string at creation (red-team 12). Strings are never folded, by the graph optimizer, the plan or
    the Numba EP's runner; they are made when the model runs, as any value."""
    out = _in_child(tmp_path, _string_bomb(kind), run=False, provider=provider)
    print(f"string bomb {kind} on {provider}: {out}")
    assert "created" in out, out
    assert float(out["created_mb"]) < 300


@pytest.mark.parametrize("name", ["data_propagation_tile_cast_100000000", "data_propagation_declared_input"])
def test_shape_inference_propagates_no_data(tmp_path, name):
    (case,) = [c for c in crafted_cases() if c.name == name]
    out = _in_child(tmp_path, case.model, run=False)
    assert float(out["created"]) < 1.0 and float(out["peak_mb"]) < 300, out


def _plan(sess: ep_core.InferenceSession) -> object:
    return sess.program.plan()


def test_a_fold_past_the_budget_runs_at_run_time_and_small_folds_still_happen():
    const = numpy_helper.from_array(np.array([2.0], np.float32))
    nodes = [
        helper.make_node("Constant", [], ["c"], name="c", value=const),
        helper.make_node("Mul", ["c", "c"], ["small"], name="small_fold"),
        helper.make_node("Constant", [], ["r"], name="r", value=numpy_helper.from_array(np.array([2**25], np.int64))),
        helper.make_node("Tile", ["small", "r"], ["big"], name="big_tile"),  # 128 MiB: past the 64 MiB floor
        helper.make_node("ReduceSum", ["big"], ["y"], name="sum", keepdims=0),
    ]
    sess = ep_core.InferenceSession(
        model(nodes, outputs=[("y", TensorProto.FLOAT, None)]), providers=["CpuReferenceExecutionProvider"]
    )
    folded, kept = _plan(sess).folded, {n.name for n in sess._built.model.graph.node}
    # the small fold is made by the graph optimizer (ep_core.optimizer) before the plan; neither folds the tile
    assert "small_fold" not in kept and {"big_tile", "sum"} <= kept
    assert "big_tile" not in folded and "sum" not in folded
    assert sess.run(None, {})[0] == pytest.approx(4.0 * 2**25)


def test_a_fold_whose_size_only_its_inputs_tell_is_sized_from_them():
    """Tile's repeats come from a folded Concat: the model's inferred shapes do not know the
    output's size; shape inference of the Tile alone, with its constant inputs, does."""
    nodes = [
        helper.make_node("Constant", [], ["x"], name="x", value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Constant", [], ["a"], name="a", value=numpy_helper.from_array(np.array([3], np.int64))),
        helper.make_node("Concat", ["a"], ["r"], name="cat", axis=0),
        helper.make_node("Tile", ["x", "r"], ["y"], name="tile"),
    ]
    sess = ep_core.InferenceSession(model(nodes), providers=["CpuReferenceExecutionProvider"])
    assert "tile" in _plan(sess).folded
    np.testing.assert_array_equal(sess.run(None, {})[0], [1.0, 1.0, 1.0])
    bomb = nodes[:1] + [
        helper.make_node("Constant", [], ["a"], name="a", value=numpy_helper.from_array(np.array([10**12], np.int64)))
    ]
    sess = ep_core.InferenceSession(model(bomb + nodes[2:]), providers=["CpuReferenceExecutionProvider"])
    assert "tile" not in _plan(sess).folded
    with pytest.raises(EpCoreError, match="node 'tile'"):
        sess.run(None, {})


def test_the_budget_grows_with_the_stored_tensors():
    small = helper.make_graph([], "g", [], [], initializer=[numpy_helper.from_array(np.zeros(4, np.float32), "w")])
    big = helper.make_graph([], "g", [], [], initializer=[numpy_helper.from_array(np.zeros(2**25, np.uint8), "w")])
    assert load.materialise_budget(small) == load.BUDGET_FLOOR + 4 * 16  # four float32
    assert load.materialise_budget(big) == load.BUDGET_FLOOR + 4 * 2**25

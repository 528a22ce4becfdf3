"""A session of a Numba CPU EP context model loads none of the reference EP's kernel families
where its nodes are all compiled, though the reference EP is in the provider list (as it is in
``make run``), and only the families of the ops it delegates otherwise (``family_index``); where no
kernel allocates, it loads not Numba's array module either. Loading every family costs ~70 ms of
every fresh process's session creation, the array module ~40 ms, and neither serves anything there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core

PROVIDERS = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]

_LOAD = """
import json, sys
import numpy as np
import ep_core
sess = ep_core.InferenceSession(sys.argv[1], providers=sys.argv[3:])
x = np.load(sys.argv[2])
y = sess.run(None, {"x": x})[0]
print(json.dumps({"y": y.ravel().tolist(), "all": "ep_cpu_reference.families" in sys.modules,
                  "families": sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("ep_cpu_reference.kernels.")),
                  "arrayobj": "numba.np.arrayobj" in sys.modules,
                  "eps": sorted({a["ep"] for a in sess.get_node_assignment().values()})}))
"""


def _dense(path: Path) -> np.ndarray:
    w = numpy_helper.from_array(np.linspace(-1, 1, 12 * 8, dtype=np.float32).reshape(12, 8), "w")
    b = numpy_helper.from_array(np.linspace(0, 1, 8, dtype=np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Tanh", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [w, b],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 12)


def _depthwise(path: Path) -> np.ndarray:
    """A padded 3x3 depthwise convolution (the EP's compiled depthwise kernel) and a Relu."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 4 * 9, dtype=np.float32).reshape(4, 1, 3, 3), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 9, 11])],
        [w],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return np.linspace(-2, 2, 4 * 9 * 11, dtype=np.float32).reshape(1, 4, 9, 11)


def _dq_lstm(path: Path) -> np.ndarray:
    """com.microsoft DynamicQuantizeLSTM: a delegated step (so its reference family loads) with
    the EP's compiled product and cell (``int_loops``), which allocate nothing."""
    from _support.oracle import one_node_model

    rng = np.random.default_rng(2)
    ins = [("x", rng.standard_normal((5, 2, 6)).astype(np.float32))]
    ins += [("w", rng.integers(-128, 128, (2, 6, 32)).astype(np.int8))]
    ins += [("r", rng.integers(-128, 128, (2, 8, 32)).astype(np.int8)), ("b", None), ("sl", None)]
    ins += [("h0", None), ("c0", None), ("p", None), ("ws", np.float32([0.004, 0.003]))]
    ins += [("wz", np.int8([0, 0])), ("rs", np.float32([0.005, 0.002])), ("rz", np.int8([0, 0]))]
    consts = {"w", "r", "ws", "wz", "rs", "rz"}
    model, _ = one_node_model(
        "DynamicQuantizeLSTM", ins, [np.float32] * 3, consts, hidden_size=8, direction="bidirectional"
    )
    path.write_bytes(model)
    return ins[0][1]


# the kernel modules every Numba CPU EP session imports: helpers registering no kernel
HELPERS = ["conv_plan", "nn_common"]


@pytest.mark.parametrize(
    ("build", "families"), [(_dense, HELPERS), (_depthwise, HELPERS), (_dq_lstm, [*HELPERS, "quantize_ms"])]
)
def test_context_session_loads_only_delegated_families_and_no_numba_arrays(tmp_path: Path, build, families) -> None:  # type: ignore[no-untyped-def]
    source, ctx = tmp_path / "m.onnx", tmp_path / "m_ctx.onnx"
    x = build(source)
    np.save(tmp_path / "x.npy", x)
    so = ep_core.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx))
    want = ep_core.InferenceSession(str(source), so, providers=PROVIDERS).run(None, {"x": x})[0]
    env = dict(os.environ, EP_NUMBA_CPU_KERNEL_CACHE_DIR=str(tmp_path / "cache"))
    args = [sys.executable, "-c", _LOAD, str(ctx), str(tmp_path / "x.npy"), *PROVIDERS]
    got = json.loads(subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout.splitlines()[-1])
    assert got["eps"] == ["NumbaCpuExecutionProvider"]  # (a delegated step is the EP's too)
    np.testing.assert_array_equal(np.asarray(got["y"], np.float32), want.ravel())
    assert got["all"] is False
    if "quantize_ms" in families:  # it imports the families whose kernels it builds on, not all ~50
        assert set(families) < set(got["families"]) and len(got["families"]) < 20
    else:
        assert got["families"] == families
    assert got["arrayobj"] is False

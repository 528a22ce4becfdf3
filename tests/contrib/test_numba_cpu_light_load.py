"""A session of a Numba CPU EP context model whose nodes are all compiled loads none of the
reference EP's kernel families, though the reference EP is in the provider list (as it is in
``make run``): they cost ~50-80 ms of every fresh process's session creation and serve nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import ep_core

PROVIDERS = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]

_LOAD = """
import json, sys
import numpy as np
import ep_core
sess = ep_core.InferenceSession(sys.argv[1], providers=sys.argv[2:])
y = sess.run(None, {"x": np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 12)})[0]
print(json.dumps({"y": y.tolist(), "families": "ep_cpu_reference.families" in sys.modules,
                  "eps": sorted({a["ep"] for a in sess.get_node_assignment().values()})}))
"""


def _model(path: Path) -> None:
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


def test_context_session_loads_no_reference_kernel_family(tmp_path: Path) -> None:
    source, ctx = tmp_path / "m.onnx", tmp_path / "m_ctx.onnx"
    _model(source)
    so = ep_core.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx))
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 12)
    want = ep_core.InferenceSession(str(source), so, providers=PROVIDERS).run(None, {"x": x})[0]
    env = dict(os.environ, EP_NUMBA_CPU_KERNEL_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run(
        [sys.executable, "-c", _LOAD, str(ctx), *PROVIDERS], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["eps"] == ["NumbaCpuExecutionProvider"]
    np.testing.assert_array_equal(np.asarray(got["y"], np.float32), want)
    assert got["families"] is False

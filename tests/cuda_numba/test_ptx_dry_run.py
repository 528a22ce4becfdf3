"""What the simulator cannot check, checked without a GPU: real models flow end to end through
the EP in a *dry run* (launches recorded, not executed: every shape is known on the host), and
every recorded (kernel, argument types) compiles to PTX with NVVM, which type-checks the kernels
the simulator runs as plain Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .cases import Case, build_cases
from .conftest import session, skip_unless_cudasim
from .test_models import MODELS, _model_path

EXPECTED = {"magika": [(1, 214)], "ppocr_cls": [(1, 2)], "ppocr_det": [(1, 1, 64, 96)]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ep_cuda_numba.ptxcheck import record
    from ep_cuda_numba.registry import registry

    path = tmp_path_factory.mktemp("ptx") / "launches.json"
    shapes = {}
    with record(str(path), execute=False):
        for name, make in MODELS.items():
            out = session(_model_path(name)).run(None, make(np.random.default_rng(0)))
            shapes[name] = [o.shape for o in out]
        # every registered (op, opset, type) case: ~1,500 dry runs; a few hundred distinct launches in all
        for case in build_cases(registry().kernel_defs()):
            if isinstance(case, Case):
                session(case.model, case.providers).run(None, case.feeds)
    assert shapes == EXPECTED
    return path


@skip_unless_cudasim("on a GPU the models run for real (test_models.py)")
def test_real_models_flow_end_to_end_in_a_dry_run(recorded: Path) -> None:
    import json

    launches = json.loads(recorded.read_text())
    kinds = {e.get("name") or e["kind"] for e in launches}
    assert {"codegen", "matmul", "conv_direct", "im2col", "reduce_rows", "resize_kernel"} <= kinds


NVVM_PREAMBLE = """
import sys
from ep_cuda_numba.ptxcheck import NvvmUnavailable, _probe_nvvm
try:
    _probe_nvvm((8, 0))
except NvvmUnavailable as exc:
    print("NVVM unavailable", exc)
    sys.exit(2)
sys.path.insert(0, %r)
"""


def run_nvvm_script(body: str) -> subprocess.CompletedProcess:
    """``body`` in a process without the simulator, after a check that NVVM loads (exit 2 if not),
    with tests/ importable: what PTX compiles need, no GPU."""
    script = NVVM_PREAMBLE % str(Path(__file__).parents[1]) + body
    return _without_simulator(["-c", script])


@skip_unless_cudasim("on a GPU every launch compiles for real")
def test_the_dry_run_records_float16_variants(recorded: Path) -> None:
    import json

    launches = json.loads(recorded.read_text())
    half = {e.get("name") or e["kind"] for e in launches if ["array", "<f2", 1] in e["args"]}
    assert {"codegen", "matmul", "reduce_rows", "softmax_rows", "layernorm_rows", "strided_gather"} <= half


def _without_simulator(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=900)
    text = proc.stdout + proc.stderr
    nvvm_missing = proc.returncode == 2 and "NVVM unavailable" in text
    if (nvvm_missing or proc.returncode != 0 and "DynamicLibNotFoundError" in text) and not _nvvm_wheels():
        # with the wheels installed (ep-cuda-numba's dependencies, so `make test`) a missing NVVM is a failure
        pytest.skip(
            "libNVVM/NVRTC are not installed (pip install ./ep_cuda_numba, which pins nvidia-nvvm and "
            "nvidia-cuda-nvrtc; numba-cuda finds them in site-packages); the PTX check needs them, not a GPU"
        )
    return proc


def _nvvm_wheels() -> bool:
    """Whether the pip wheels carrying libNVVM and NVRTC (ep-cuda-numba's dependencies) are installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return bool(version("nvidia-nvvm") and version("nvidia-cuda-nvrtc"))
    except PackageNotFoundError:
        return False


@skip_unless_cudasim("on a GPU every launch compiles for real")
def test_every_recorded_launch_compiles_to_ptx(recorded: Path) -> None:
    proc = _without_simulator(["-m", "ep_cuda_numba.ptxcheck", str(recorded), "--cc", "8.0"])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


FUSED_PTX = """
from types import SimpleNamespace
import onnx
from cuda_numba.test_fusion_and_epcontext import chain_model
from ep_core.sdk.compute import FusedNode
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.runtime.partition import fused_inputs_outputs
from ep_cuda_numba.fusion import compile_group
m = onnx.shape_inference.infer_shapes(chain_model())
g = GraphView(m.graph, opset_map(m))
ins, outs = fused_inputs_outputs(g, tuple(g.all_nodes), False)
fused = FusedNode("group", ins, outs, tuple(n.name for n in g.all_nodes))
ep = SimpleNamespace(name="NumbaCudaExecutionProvider", options=SimpleNamespace(max_threads_per_block=256), simulated=False)
ptx = compile_group(g.subset(range(len(g.all_nodes))), fused, ep).compile_ptx((8, 0))
assert ".entry" in ptx, ptx[:500]
print("PTX OK", len(ptx))
"""


@skip_unless_cudasim("on a GPU the EPContext test checks the PTX for real")
def test_a_fused_group_compiles_to_the_ptx_its_context_records() -> None:
    proc = run_nvvm_script(FUSED_PTX)
    assert proc.returncode == 0 and "PTX OK" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]

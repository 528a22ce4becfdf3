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
        # one case per op keeps the suite fast; every op's kernels still get type-checked
        seen_ops: set[str] = set()
        for case in build_cases(registry().kernel_defs()):
            op = case.id.split("-")[0] if isinstance(case, Case) else ""
            if op and op not in seen_ops:
                seen_ops.add(op)
                session(case.model).run(None, case.feeds)
    assert shapes == EXPECTED
    return path


@skip_unless_cudasim("on a GPU the models run for real (test_models.py)")
def test_real_models_flow_end_to_end_in_a_dry_run(recorded: Path) -> None:
    import json

    launches = json.loads(recorded.read_text())
    kinds = {e.get("name") or e["kind"] for e in launches}
    assert {"codegen", "matmul", "conv_direct", "im2col", "reduce_rows", "resize_kernel"} <= kinds


@skip_unless_cudasim("on a GPU every launch compiles for real")
def test_every_recorded_launch_compiles_to_ptx(recorded: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-m", "ep_cuda_numba.ptxcheck", str(recorded), "--cc", "8.0"],
                          capture_output=True, text=True, env=env, timeout=900)
    text = proc.stdout + proc.stderr
    if "DynamicLibNotFoundError" in text or "libnvvm" in text.lower() and proc.returncode != 0 and "FAIL" not in proc.stdout:
        pytest.skip("libNVVM/NVRTC are not installed (pip install nvidia-cuda-nvcc-cu12 nvidia-cuda-nvrtc-cu12 "
                    "and put their lib folders on LD_LIBRARY_PATH); the PTX check needs them, not a GPU")
    assert proc.returncode == 0, text[-3000:]

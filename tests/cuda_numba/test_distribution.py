"""The Numba-CUDA EP is its own distribution (issue 16 item 1, the CUDA plugin EP design's first goal):
``ep-cuda-numba`` has its own pyproject and version, owns its entry point, ships only its package, and
upgrades alone: a newer build installed beside an untouched ep-core is what the next session runs.
Installs go to a private venv so the suite never changes the environment it runs in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest
from _support.venvs import child_venv

from ep_core.sdk import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]
DIST_ROOT = ROOT / "ep_cuda_numba"
EP = "NumbaCudaExecutionProvider"


def test_the_installed_ep_is_its_own_distribution() -> None:
    import ep_cuda_numba
    from ep_cuda_numba.factory import factory

    ours = distribution("ep-cuda-numba")
    assert ours.version == ep_cuda_numba.__version__ == factory.ep_factory_version()
    owners = {e.name: e.dist.name for e in entry_points(group=ENTRY_POINT_GROUP) if e.dist is not None}
    assert owners[EP] == "ep-cuda-numba"
    core = distribution("ep-core")
    assert not [e for e in core.entry_points if e.group == ENTRY_POINT_GROUP and e.name == EP]
    assert not [f for f in core.files or () if str(f).startswith("ep_cuda_numba")]
    assert "cuda" not in (core.metadata.get_all("Provides-Extra") or [])  # the CUDA stack is the EP's, not ep-core's
    requires = " ".join(ours.requires or ())
    for dep in ("ep-core", "numba-cuda", "cuda-bindings", "nvidia-nvvm"):
        assert dep in requires, requires


def _build_wheel(src: Path, out: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = out.glob("ep_cuda_numba-*.whl")
    return wheel


def _copy_with_version(dest: Path, version: str) -> Path:
    shutil.copytree(DIST_ROOT, dest, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    init = dest / "ep_cuda_numba" / "__init__.py"
    text = init.read_text()
    old = next(line for line in text.splitlines() if line.startswith("__version__ = "))
    init.write_text(text.replace(old, f'__version__ = "{version}"'))
    return dest


RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    from importlib.metadata import version
    from onnx import TensorProto, helper
    from ep_core import InferenceSession
    import ep_cuda_numba
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model.SerializeToString(), providers=["NumbaCudaExecutionProvider"])
    (out,) = sess.run(None, {"x": np.array([-1, 2, -3, 4], np.float32)})
    print(json.dumps({"file": ep_cuda_numba.__file__, "ep": version("ep-cuda-numba"), "core": version("ep-core"),
                      "out": out.tolist(), "providers": sess.get_providers()}))
""")


def _unmet_requirements(metadata: str) -> list[str]:
    """The wheel's Requires-Dist lines (extras aside) that the installed distributions do not satisfy."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    unmet = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                unmet.append(str(req))
        except PackageNotFoundError:
            unmet.append(str(req))
    return unmet


@pytest.mark.slow
@pytest.mark.xdist_group("epcontext")
def test_the_wheel_ships_only_the_ep_and_upgrades_without_touching_ep_core(tmp_path: Path) -> None:
    import ep_cuda_numba

    # built from copies: a wheel build leaves build/ and egg-info in its source folder
    wheel = _build_wheel(_copy_with_version(tmp_path / "src1", ep_cuda_numba.__version__), tmp_path / "w1")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("ep_cuda_numba/", "ep_cuda_numba-")) for n in names), names
    assert "ep_cuda_numba/factory.py" in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert f"{EP} = ep_cuda_numba.factory:factory" in meta

    unmet = _unmet_requirements(zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode())
    if unmet:  # the child installs offline, resolving from what is installed here
        pytest.skip(f"this environment does not satisfy the wheel's requirements {unmet} (pip install ./ep_cuda_numba)")
    py, child_site = child_venv(tmp_path / "venv")  # sees this venv's packages (ep-core, numba, ...) after its own
    core_record = distribution("ep-core").read_text("RECORD")

    def pip_install(whl: Path) -> str:
        # no index, dependencies resolved from what is installed: ep-core is satisfied, never reinstalled
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", py, "install", "--no-index"]
            + ["--upgrade", str(whl)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    def run_child() -> dict:
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": ""}
        proc = subprocess.run([py, "-c", RUN], capture_output=True, text=True, env=env, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    pip_install(wheel)
    first = run_child()
    assert Path(first["file"]).resolve().is_relative_to(child_site.resolve())  # the installed wheel, not the tree
    assert first["out"] == [0.0, 2.0, 0.0, 4.0] and first["providers"][0] == EP

    newer = _build_wheel(_copy_with_version(tmp_path / "src2", "99.0.1"), tmp_path / "w2")
    log = pip_install(newer)
    assert "ep-core" not in log.split("Successfully installed")[-1]  # pip installed the EP alone
    second = run_child()
    assert second["ep"] == "99.0.1" and second["core"] == first["core"]
    assert second["out"] == first["out"]
    assert distribution("ep-core").read_text("RECORD") == core_record  # ep-core's files untouched

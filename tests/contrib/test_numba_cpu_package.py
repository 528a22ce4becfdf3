"""``plugins_contrib/ep_numba_cpu`` installs with pip on its own, editable or not, and registers
its entry point. Installs go to a private target / a private venv so the suite never changes the
environment it runs in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _support.venvs import child_venv

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "plugins_contrib" / "ep_numba_cpu"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("epcontext")]

CHECK = textwrap.dedent("""
    import sys, json
    from importlib.metadata import distributions
    site = sys.argv[1]
    dist = next(d for d in distributions(path=[site]) if d.metadata["Name"] == "ep-numba-cpu")
    eps = [e for e in dist.entry_points if e.group == "ep_core.execution_providers"]
    assert [e.name for e in eps] == ["NumbaCpuExecutionProvider"], eps
    factory = eps[0].load()
    import ep_numba_cpu
    print(json.dumps({"file": ep_numba_cpu.__file__, "name": factory.ep_factory_name(),
                      "direct_url": dist.read_text("direct_url.json") or ""}))
""")


def _pip(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _check(python: str, site: Path, env_path: str | None = None) -> dict:
    import json
    import os

    env = dict(os.environ)
    if env_path:
        env["PYTHONPATH"] = env_path
    proc = subprocess.run([python, "-c", CHECK, str(site)], capture_output=True, text=True, env=env, cwd=str(site))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_non_editable_install(tmp_path):
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-build-isolation", "--target", str(site), str(PKG))
    info = _check(sys.executable, site, env_path=str(site))
    assert info["name"] == "NumbaCpuExecutionProvider"
    assert Path(info["file"]).resolve().is_relative_to(site.resolve())  # the installed copy, not the source tree
    assert (site / "ep_numba_cpu" / "planner.py").is_file()


def test_editable_install(tmp_path):
    py, child_site = child_venv(tmp_path / "venv")  # sees this venv's packages (ep-core, numba) after its own
    # compat mode: a .pth path entry that precedes zz_parent.pth, so the source tree wins over a
    # non-editable copy in the parent venv (the Makefile installs one); the default finder would
    # sit behind the parent's site-packages
    _pip(
        "--python",
        py,
        "install",
        "--no-deps",
        "--no-build-isolation",
        "-e",
        str(PKG),
        "--config-settings",
        "editable_mode=compat",
    )
    info = _check(py, child_site)
    assert info["name"] == "NumbaCpuExecutionProvider"
    assert '"editable": true' in info["direct_url"]
    assert Path(info["file"]).resolve().is_relative_to(PKG.resolve())  # served from the source tree

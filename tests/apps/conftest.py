"""The applications of requirements.txt, installed by the tests themselves into a virtual environment
of their own (.cache/apps-venv, ignored by git), rebuilt only when requirements.txt changes.

That environment has no pip and no packages of the project: a .pth file makes it see this
interpreter's site-packages (numpy, onnx, the real onnxruntime, ep_core) after its own, so the
applications' pinned dependencies never land in the project's .venv."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
CACHE = REPO / ".cache"
VENV = CACHE / "apps-venv"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = "ep-core-apps.stamp"
INSTALL_TIMEOUT_S = 900


def make_venv(path: Path) -> Path:
    """Create a pip-less virtual environment at ``path`` that also imports from this interpreter's
    site-packages; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(path)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = sysconfig.get_path("purelib")
    (Path(site) / "_ep_core_project.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def _stamp() -> str:
    """What the environment was built from: the requirements, this Python, the project's site-packages."""
    text = REQUIREMENTS.read_bytes() + sys.version.encode() + sysconfig.get_path("purelib").encode()
    return hashlib.sha256(text).hexdigest()


def _build() -> None:
    python = make_venv(VENV)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    install = [*pip, "install", "--quiet", "--no-deps", "--require-hashes", "--only-binary=:all:"]
    done = subprocess.run(
        [*install, "-r", str(REQUIREMENTS)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
    )
    if done.returncode != 0:
        shutil.rmtree(VENV, ignore_errors=True)
        pytest.fail(f"installing tests/apps/requirements.txt failed:\n{done.stdout}\n{done.stderr}")
    (VENV / STAMP).write_text(_stamp())


@pytest.fixture(scope="session")
def app_python() -> Iterator[Path]:
    """The python of the applications' environment, built (under a lock) when missing or stale."""
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "apps-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = VENV / STAMP
        if not (stamp.is_file() and stamp.read_text() == _stamp()):
            _build()
        fcntl.flock(lock, fcntl.LOCK_UN)
    yield VENV / "bin" / "python"

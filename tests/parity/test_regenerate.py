"""``python -m ep_core.tools.parity.regenerate``: every format per EP, and an index that names the EPs
it could not generate and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ep_core.tools.parity.regenerate import SIM_MODEL_SKIP, Target, main, regenerate


def test_regenerate_writes_all_formats_and_lists_missing_eps(
    exact_add_ep: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    targets = [
        Target(
            exact_add_ep,
            "exact",
            "Add node tests",
            ops=("Add",),
            include_expanded=False,
            models=("magika",),
            simulator=True,
        ),
        Target("NoSuchExecutionProvider", "nope", "not installed"),
    ]
    missing = regenerate(tmp_path, targets)
    assert [t.ep for t, _ in missing] == ["NoSuchExecutionProvider"]
    assert {p.name for p in tmp_path.iterdir()} == {"exact.md", "exact.json", "exact.html", "README.md"}
    data = json.loads((tmp_path / "exact.json").read_text())
    assert data["runtime"]["totals"]["pass"] > 0
    (model,) = data["runtime"]["models"]
    assert model["status"] == "skipped" and model["reason"] == SIM_MODEL_SKIP  # simulator target, CUDASIM=1
    index = (tmp_path / "README.md").read_text()
    assert "[html](exact.html)" in index
    assert (
        "`NoSuchExecutionProvider` | not generated: execution provider 'NoSuchExecutionProvider' could not be used"
        in index
    )


def test_unknown_only_target_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--only", "NoSuchExecutionProvider"])
    assert exc.value.code == 2

"""``python -m ep_core.tools.parity.regenerate``: every format per EP, an index that names the EPs it
could not generate and why, and targets read from a file (docs/parity/targets.toml), not named in code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ep_core.sdk.errors import ConfigError
from ep_core.tools.parity.regenerate import Target, load_targets, main, regenerate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "parity"


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
            skip_models_when=(("NUMBA_ENABLE_CUDASIM", "1"),),
            skip_models_reason="planted: models are too slow here",
        ),
        Target("NoSuchExecutionProvider", "nope", "not installed"),
    ]
    missing = regenerate(tmp_path, targets)
    assert [t.ep for t, _ in missing] == ["NoSuchExecutionProvider"]
    assert {p.name for p in tmp_path.iterdir()} == {"exact.md", "exact.json", "exact.html", "README.md"}
    data = json.loads((tmp_path / "exact.json").read_text())
    assert data["runtime"]["totals"]["pass"] > 0
    (model,) = data["runtime"]["models"]
    assert model["status"] == "skipped" and model["reason"] == "planted: models are too slow here"
    index = (tmp_path / "README.md").read_text()
    assert "[html](exact.html)" in index
    assert (
        "`NoSuchExecutionProvider` | not generated: execution provider 'NoSuchExecutionProvider' could not be used"
        in index
    )


def test_models_run_unless_every_skip_variable_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    t = Target("XExecutionProvider", "x", "x", skip_models_when=(("A", "1"), ("B", "2")), skip_models_reason="why")
    monkeypatch.setenv("A", "1")
    monkeypatch.delenv("B", raising=False)
    assert t.models_skipped() is None
    monkeypatch.setenv("B", "2")
    assert t.models_skipped() == "why"


def test_unknown_only_target_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "targets.toml").write_text('[[target]]\nep = "AExecutionProvider"\nslug = "a"\nwhy = "w"\n')
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--only", "NoSuchExecutionProvider"])
    assert exc.value.code == 2
    assert "--only names unknown targets ['NoSuchExecutionProvider']; targets: ['AExecutionProvider']" in (
        capsys.readouterr().err
    )


def test_the_docs_targets_file_matches_the_kept_reports() -> None:
    """Every target in docs/parity/targets.toml has its reports kept beside it and a row in the index."""
    config = load_targets(DOCS / "targets.toml")
    index = (DOCS / "README.md").read_text()
    for t in config.targets:
        assert all((DOCS / f"{t.slug}.{ext}").is_file() for ext in ("md", "json", "html")), t.slug
        assert f"`{t.ep}`" in index and f"[json]({t.slug}.json)" in index
    assert {p.stem for p in DOCS.glob("*.json")} == {t.slug for t in config.targets}


def test_a_missing_targets_file_is_a_usage_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2
    assert f"no parity targets file {tmp_path / 'targets.toml'}" in capsys.readouterr().err


_OK = '[[target]]\nep = "AExecutionProvider"\nslug = "a"\nwhy = "w"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_OK + "simulator = true\n", r"#1 has unknown keys \['simulator'\]"),
        ('[[target]]\nep = "AExecutionProvider"\n', r"#1 lacks \['slug', 'why'\]"),
        (_OK + "max_elements = true\n", r"max_elements = True should be of type int"),
        (_OK + 'models = "magika"\n', r"models = 'magika' should be of type list"),
        (_OK + 'skip_models_when = { X = "1" }\n', r"skip_models_when and skip_models_reason go together"),
        (_OK + _OK.replace("AExec", "BExec"), r"slug \['a'\] appears in more than one"),
        (_OK + "[other]\n", r"unknown tables \['other'\]"),
        ("[env]\nX = 1\n", r"\[env\] maps variable names to strings"),
        ("", r"names no \[\[target\]\]"),
        ("[[target]\n", r"is not valid TOML"),
    ],
)
def test_a_bad_targets_file_is_a_config_error_naming_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "targets.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as exc:
        load_targets(path)
    assert str(path) in str(exc.value)

"""The reports kept in docs/parity/ are complete and follow the current JSON schema (regenerate
them with `make parity` when this fails)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "parity"
REPORTS = sorted(DOCS.glob("*.json"))


def test_docs_hold_reports_and_an_index() -> None:
    assert REPORTS, f"no reports in {DOCS}; run `make parity`"
    index = (DOCS / "README.md").read_text()
    for r in REPORTS:
        assert r.with_suffix(".md").is_file() and r.with_suffix(".html").is_file()
        assert f"[json]({r.name})" in index


@pytest.mark.parametrize("path", REPORTS, ids=[p.stem for p in REPORTS])
def test_docs_report_follows_the_schema(path: Path) -> None:
    schema = json.loads(resources.files("ep_core.tools.parity").joinpath("report.schema.json").read_text())
    errors = [
        f"{e.json_path}: {e.message[:200]}"
        for e in jsonschema.Draft202012Validator(schema).iter_errors(json.loads(path.read_text()))
    ]
    assert errors == [], f"{path.name} does not follow the schema; regenerate with `make parity`"

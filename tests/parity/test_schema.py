"""The JSON report follows report.schema.json, and the schema is strict enough to catch drift."""

from __future__ import annotations

import copy
import json
from importlib import resources

import jsonschema
import pytest

from ep_core.tools.parity import SCHEMA_VERSION, build_report
from ep_core.tools.parity.render import render_json


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(resources.files("ep_core.tools.parity").joinpath("report.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert SCHEMA_VERSION in schema["properties"]["schema_version"]["enum"]  # 1.1 readers accept 1.0 reports
    return jsonschema.Draft202012Validator(schema)


def test_full_report_validates(validator: jsonschema.Draft202012Validator, wrong_add_ep: str) -> None:
    data = build_report(wrong_add_ep, static=True, runtime=True, ops=["Add"], models=["magika"]).data
    round_tripped = json.loads(render_json(data))
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(round_tripped)]
    assert errors == []
    model = round_tripped["runtime"]["models"][0]
    # wrong numbers outrank a partial fallback: the model fails, and still lists what fell back
    assert model["status"] == "fail" and model["fallback_nodes"] and model["vs_reference"]["ok"] is False


def test_static_only_report_validates(validator: jsonschema.Draft202012Validator) -> None:
    data = json.loads(render_json(build_report("CpuReferenceExecutionProvider").data))
    assert list(validator.iter_errors(data)) == []
    assert data["runtime"] is None and data["modes"] == ["static"]


def test_schema_rejects_a_drifted_report(validator: jsonschema.Draft202012Validator, exact_add_ep: str) -> None:
    data = json.loads(
        render_json(build_report(exact_add_ep, static=False, runtime=True, ops=["Add"], include_expanded=False).data)
    )
    bad = copy.deepcopy(data)
    bad["runtime"]["cases"][0]["status"] = "passed"
    assert list(validator.iter_errors(bad))
    bad = copy.deepcopy(data)
    del bad["schema_version"]
    assert list(validator.iter_errors(bad))
    bad = copy.deepcopy(data)
    bad["runtime"]["cases"][0]["max_abs_err"] = float("nan")
    with pytest.raises(ValueError):
        json.dumps(bad, allow_nan=False)  # why errors are written as "nan"/"inf" strings

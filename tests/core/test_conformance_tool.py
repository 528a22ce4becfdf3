"""``ep-core conformance`` (``ep_core.tools.conformance``): the EP under test is a parameter, it runs
alone (no CPU fallback), and what it cannot pass comes from its own exclusions file, never the core."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ep_core
from ep_core.runtime.discover import get_registry
from ep_core.sdk.errors import ConfigError
from ep_core.tools.cli import main as cli_main
from ep_core.tools.conformance import load_exclusions
from tests._support.eps import FusingFactory

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_EXCLUSIONS = ROOT / "docs/conformance/cpu_reference.toml"
FILTER = "^test_(abs|bernoulli)$"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exclusions.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('ep = "XExecutionProvider"\n[[exclude]]\ncases = "x"\n', "must have `cases` and `why`"),
        ('[[exclude]]\ncases = "x"\nwhy = "y"\n', "must hold `ep ="),
        ('ep = "X"\ncolour = 1\n', "unknown keys \\['colour'\\]"),
        ('ep = "X"\n[[exclude]]\ncases = "("\nwhy = "y"\n', "is not a regular expression"),
        ('ep = "X"\n[[exclude]]\ncases = "x"\nwhy = " "\n', "must be non-empty strings"),
        ('ep = "X"\n[[exclude]]\ncases = "x"\nwhy = "y"\nunless = "PIL"\n', "optionally `unless_importable`"),
        ("ep = \n", "is not valid TOML"),
    ],
)
def test_a_bad_exclusions_file_is_an_error_naming_it(tmp_path: Path, text: str, match: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=match) as info:
        load_exclusions(path)
    assert str(path) in str(info.value)


def test_a_missing_exclusions_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the conformance exclusions file"):
        load_exclusions(tmp_path / "none.toml")


def test_unless_importable_lifts_an_exclusion_when_the_module_imports(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'ep = "X"\n[[exclude]]\ncases = "^test_a"\nwhy = "needs json"\nunless_importable = "json"\n'
        '[[exclude]]\ncases = "^test_b"\nwhy = "needs a module"\nunless_importable = "no_such_module_here"\n',
    )
    excl = load_exclusions(path)
    assert excl.reason("test_a_case") is None
    assert excl.reason("test_b_case") == "needs a module"
    assert excl.reason("test_c") is None


def test_default_ep_is_the_cpu_fallback_with_its_exclusions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fallback = get_registry().cpu_fallback()
    assert fallback is not None
    out_json = tmp_path / "r.json"
    args = ["conformance", "--filter", FILTER, "--exclusions", str(REFERENCE_EXCLUSIONS), "--json", str(out_json)]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert f"EP under test: {fallback.name} (exclusions: {REFERENCE_EXCLUSIONS})" in out
    assert "test_bernoulli [excluded] Bernoulli samples are random" in out
    assert out.rstrip().endswith("conformance: 1 passed, 1 failed of 2 (50.00%)")
    results = json.loads(out_json.read_text())
    assert {k: v["status"] for k, v in results.items()} == {"test_abs": "passed", "test_bernoulli": "excluded"}
    assert cli_main([*args, "--min-percent", "60"]) == 1


def test_the_ep_under_test_runs_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """A node the EP declines fails the case: the CPU fallback does not quietly run it."""
    name = FusingFactory.ep_name
    ep_core.register_execution_provider_library(name, FusingFactory())
    try:
        assert cli_main(["conformance", "--ep", name, "--filter", "^test_(add|abs)$"]) == 0
    finally:
        ep_core.unregister_execution_provider_library(name)
    out = capsys.readouterr().out
    assert f"EP under test: {name}\n" in out
    assert "test_abs [FAILED] NotImplementedByAnyEp" in out
    assert "test_add [" not in out
    assert "conformance: 1 passed, 1 failed of 2 (50.00%)" in out


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--ep", "NoSuchExecutionProvider"], "unknown execution provider 'NoSuchExecutionProvider'"),
        (["--ep", FusingFactory.ep_name, "--exclusions", str(REFERENCE_EXCLUSIONS)], "lists the exclusions of"),
    ],
)
def test_a_wrong_ep_or_exclusions_file_is_an_error(
    extra: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ep_core.register_execution_provider_library(FusingFactory.ep_name, FusingFactory())
    try:
        assert cli_main(["conformance", "--filter", FILTER, *extra]) == 2  # a usage error
    finally:
        ep_core.unregister_execution_provider_library(FusingFactory.ep_name)
    captured = capsys.readouterr()
    assert match in captured.err
    assert "conformance:" not in captured.out


def test_python_dash_m_runs_the_same_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ep_core.tools.conformance", "--filter", "^test_abs$"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "conformance: 1 passed, 0 failed of 1 (100.00%)" in proc.stdout

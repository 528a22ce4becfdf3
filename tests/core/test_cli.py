"""The ep-core command: devices, run (text output), version, usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _support.models import add_mul_chain
from _support.sandbox import clean_env

from ep_core.tools.cli import main


def _cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ep_core.tools.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        cwd=cwd,
    )


def test_devices_lists_the_host_cpu_with_the_reference_ep() -> None:
    proc = _cli("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    cpu = [r for r in rows if r["key"] == "cpu:0"]
    assert len(cpu) == 1 and "CpuReferenceExecutionProvider" in cpu[0]["execution_providers"]
    assert cpu[0]["metadata"]["cores"] == str(os.cpu_count())
    text = _cli("devices")
    assert text.returncode == 0 and "cpu:0" in text.stdout and "CpuReferenceExecutionProvider" in text.stdout


def test_run_prints_what_ran_where(tmp_path: Path) -> None:
    model = tmp_path / "chain.onnx"
    model.write_bytes(add_mul_chain(4).SerializeToString())
    proc = _cli(
        "run",
        str(model),
        "--providers",
        "CpuReferenceExecutionProvider",
        "--show-assignment",
        "--profile",
        cwd=tmp_path,
        COLUMNS="100",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"model    {model}" in out
    assert "input    x [2, 3] float32: standard normal" in out
    assert "output   out [2, 3] float32  min " in out
    provider_rows = [line.split() for line in out.splitlines() if line.startswith("CpuReferenceExecutionProvider")]
    assert ["CpuReferenceExecutionProvider", "4", "0"] in provider_rows
    for node in ("add_0", "mul_1", "add_2", "mul_3"):
        assert node in out
    trace = out.split("profile: ")[1].strip()
    assert any(e["name"] == "model_run" for e in json.loads((tmp_path / trace).read_text()))  # onnxruntime's format


def test_full_assignment_only_on_request(tmp_path: Path) -> None:
    model = tmp_path / "chain.onnx"
    model.write_bytes(add_mul_chain(4).SerializeToString())
    proc = _cli("run", str(model))
    assert proc.returncode == 0, proc.stderr
    assert "add_0" not in proc.stdout and "--show-assignment" in proc.stdout


def test_version(capsys) -> None:  # noqa: ANN001
    from ep_core import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"ep-core {__version__} (Python ")


def test_usage_errors_exit_2(capsys) -> None:  # noqa: ANN001
    assert main([]) == 2
    assert main(["run"]) == 2
    assert "give either MODEL or --zoo NAME" in capsys.readouterr().err


def test_documented_usage_errors_exit_2_naming_their_command(capsys) -> None:  # noqa: ANN001
    """A bad --filter of conformance, a command exec cannot find: usage errors (2), prefixed with the
    subcommand (docs red-team: conformance called a bad regex an internal bug; exec printed its
    argument list as the command)."""
    assert main(["conformance", "--filter", "("]) == 2
    assert "ep-core conformance: error: --filter '(' is not a valid regular expression" in capsys.readouterr().err
    assert main(["exec", "--", "no-such-command-here"]) == 2
    assert "ep-core exec: error: command not found: 'no-such-command-here'" in capsys.readouterr().err


def test_compile_names_its_own_flags_as_remedies(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    model = tmp_path / "m.onnx"
    model.write_bytes(add_mul_chain().SerializeToString())
    assert main(["compile", str(model), "--providers", "CpuReferenceExecutionProvider"]) == 1
    err = capsys.readouterr().err
    assert "pass --allow-nothing-compiled" in err and "ERROR_IF_NO_NODES_COMPILED" not in err

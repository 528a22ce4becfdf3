"""The ep-core command: devices, run (text output), usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _support.models import add_mul_chain

from ep_core.tools.cli import main


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EP_CORE_")}
    return subprocess.run(
        [sys.executable, "-m", "ep_core.tools.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
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
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "providers  CpuReferenceExecutionProvider (priority order)" in out
    assert "CpuReferenceExecutionProvider" in out and "output out: shape [2, 3] float32" in out
    for node in ("add_0", "mul_1", "add_2", "mul_3"):
        assert node in out
    trace = out.split("profile: ")[1].strip()
    assert json.loads((tmp_path / trace).read_text())["traceEvents"]


def test_usage_errors_exit_nonzero(capsys) -> None:  # noqa: ANN001
    assert main([]) == 2
    assert main(["run"]) == 1
    assert "give either MODEL or --zoo NAME" in capsys.readouterr().err

"""``ep-core parity-report``: formats and the exit codes scripts rely on. The planted EPs of these
tests are factory objects registered in this process (closures a worker process cannot unpickle),
so their runtime runs stay in this process (``--case-timeout 0``); tests/scaleout covers workers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ep_core.tools.cli import main

REF = "CpuReferenceExecutionProvider"


def test_static_markdown_report_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ref.md"
    assert main(["parity-report", "--ep", REF, "--static", "--format", "md", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith(f"# Parity report: {REF}") and "## Static coverage" in text
    assert "| `ai.onnx::Softmax` |" in text
    assert "Static:" in capsys.readouterr().out


def test_wrong_kernel_exits_1(wrong_add_ep: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "parity-report",
                "--ep",
                wrong_add_ep,
                "--runtime",
                "--ops",
                "Add",
                "--no-expanded",
                "--case-timeout",
                "0",
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
        == 1
    )
    data = json.loads(out.read_text())
    assert data["summary"]["defects"] > 0 and data["runtime"]["totals"]["fail"] > 0


def test_fail_under_compares_the_pass_rate(
    claims_nothing_ep: str, exact_add_ep: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--runtime", "--ops", "Add", "--no-expanded", "--case-timeout", "0"]
    assert main(["parity-report", "--ep", claims_nothing_ep, *args]) == 0  # fallbacks are not defects ...
    assert main(["parity-report", "--ep", claims_nothing_ep, *args, "--fail-under", "50"]) == 1  # ... nor passes
    assert "under --fail-under 50%" in capsys.readouterr().err
    assert main(["parity-report", "--ep", exact_add_ep, *args, "--fail-under", "100"]) == 0


def test_fail_under_in_static_mode_uses_onnx_coverage(exact_add_ep: str) -> None:
    assert main(["parity-report", "--ep", exact_add_ep, "--static", "--fail-under", "0"]) == 0
    assert main(["parity-report", "--ep", exact_add_ep, "--static", "--fail-under", "5"]) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--filter", "("],
        ["--fail-under", "120"],
        ["--models", "no_such_model"],
        ["--static", "--node-tests"],
        ["--ops", "NoSuchOp"],
        ["--ops", "Add,Relux"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity-report", "--ep", REF, *argv]) == 2
    assert "error:" in capsys.readouterr().err


def test_argparse_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity-report", "--format", "pdf", "--ep", REF]) == 2
    assert "invalid choice: 'pdf'" in capsys.readouterr().err


def test_ep_that_fails_to_load_exits_3(broken_ep: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity-report", "--ep", broken_ep]) == 3
    assert "planted failure in create_ep" in capsys.readouterr().err
    assert main(["parity-report", "--ep", "NoSuchExecutionProvider"]) == 3
    assert "Available:" in capsys.readouterr().err


def test_progress_bar_only_on_a_terminal_or_when_asked(exact_add_ep: str, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from ep_core.tools.parity.progress import ProgressBar

    quiet = io.StringIO()  # not a TTY
    bar = ProgressBar(stream=quiet)
    bar(0, 2, "a")
    bar(2, 2, "done")
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    bar = ProgressBar(True, stream=loud)
    bar(2, 2, "done")
    assert "parity cases" in loud.getvalue() and "2/2" in loud.getvalue()

    args = ["parity-report", "--ep", exact_add_ep, "--runtime", "--ops", "Add", "--no-expanded", "--case-timeout", "0"]
    assert main(args) == 0
    assert "parity cases" not in capsys.readouterr().err  # captured stderr is no terminal
    assert main([*args, "--progress"]) == 0
    assert re.search(r"parity cases .*\d+/\d+", capsys.readouterr().err)


def test_saved_json_report_renders_again_with_its_exit_code(wrong_add_ep: str, tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    assert (
        main(
            [
                "parity-report",
                "--ep",
                wrong_add_ep,
                "--runtime",
                "--ops",
                "Add",
                "--no-expanded",
                "--case-timeout",
                "0",
                "--format",
                "json",
                "-o",
                str(saved),
            ]
        )
        == 1
    )
    html = tmp_path / "r.html"
    assert main(["parity-report", "--from-json", str(saved), "--format", "html", "-o", str(html)]) == 1  # defects
    assert 'id="coverage-table"' in html.read_text()
    data = json.loads(saved.read_text())
    data["schema_version"] = "2.0"
    saved.write_text(json.dumps(data))
    assert main(["parity-report", "--from-json", str(saved)]) == 2
    assert main(["parity-report", "--from-json", str(saved), "--ep", wrong_add_ep]) == 2
    assert main(["parity-report"]) == 2  # neither --ep nor --from-json

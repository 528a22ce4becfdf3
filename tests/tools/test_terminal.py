"""The CLI driven in a real terminal, as a person would: a tmux pane runs `make run`'s command
twice and the test reads the screen (the progress display while compiling, what magika said per
file, the session times), then a narrow pane checks that tables fit and errors are one line.

Needs tmux (``apt-get install tmux``); without it the test is skipped, saying so."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support.sandbox import clean_env

TMUX = shutil.which("tmux")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed (apt-get install tmux): this test drives the CLI in a tmux pane"
)


class Pane:
    """One tmux pane on a private server (its own socket: the user's tmux is never touched)."""

    def __init__(self, tmp: Path, width: int, height: int, env: dict[str, str]) -> None:
        self.base = [str(TMUX), "-S", str(tmp / "tmux.sock"), "-f", "/dev/null"]
        shell = "env PS1='$ ' bash --norc --noprofile"
        subprocess.run(
            [*self.base, "new-session", "-d", "-x", str(width), "-y", str(height), shell], env=env, check=True
        )
        subprocess.run([*self.base, "set-option", "-g", "history-limit", "5000"], check=True)
        self.runs = 0

    def type(self, line: str) -> None:
        subprocess.run([*self.base, "send-keys", "-l", line], check=True)
        subprocess.run([*self.base, "send-keys", "Enter"], check=True)

    def screen(self, joined: bool = True) -> str:
        """The pane's text, scrollback included; ``joined``: lines the terminal wrapped are one."""
        args = ["capture-pane", "-p", "-S", "-"] + (["-J"] if joined else [])
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True).stdout

    def run(self, command: str, timeout: float = 240) -> tuple[str, list[str]]:
        """Type ``command``; returns the screen once it ended and every distinct screen seen meanwhile."""
        self.runs += 1
        subprocess.run([*self.base, "clear-history"], check=True)
        self.type(f"clear; {command}; echo EXIT-{self.runs}:$?")
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.screen(joined=False)
            if not seen or seen[-1] != text:
                seen.append(text)
            if re.search(rf"^EXIT-{self.runs}:\d+", text, re.M):  # this command's end, not an earlier one's
                return self.screen().replace(f"EXIT-{self.runs}:", "EXIT:"), seen
            time.sleep(0.05)
        raise AssertionError(f"{command!r} did not end within {timeout} s; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in clean_env().items() if not k.startswith(("TMUX", "COLUMNS", "LINES"))}
    return {**keep, "EP_CORE_CTX_CACHE": str(tmp_path / "ctx"), "TERM": "xterm-256color"}


@pytest.fixture
def pane_factory(tmp_path: Path, env: dict[str, str]) -> Iterator:
    panes: list[Pane] = []

    def make(width: int, height: int = 60) -> Pane:
        pane = Pane(tmp_path, width, height, env)
        panes.append(pane)
        return pane

    yield make
    for p in panes:
        p.close()


def _make_run_command() -> str:
    """`make run`'s ep-core command as make would run it, on this interpreter."""
    dry = subprocess.run(["make", "-s", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(x for x in dry.splitlines() if "bin/ep-core run " in x)
    return line.replace(line.split(" run ")[0], f"{sys.executable} -m ep_core.tools.cli", 1)


def test_make_run_twice_in_a_terminal(pane_factory) -> None:  # noqa: ANN001
    pane = pane_factory(120)
    command = f"cd {ROOT} && {_make_run_command()}"
    screen, seen = pane.run(command)
    assert "EXIT:0" in screen, screen
    spinner = re.compile(
        r"creating the session: NumbaCpuExecutionProvider: compiling \d+ fused group\(s\) \d+:\d\d:\d\d"
    )
    assert any(spinner.search(s) for s in seen), "no progress display while compiling"
    said = {
        line.split()[0]: line.split()[1]
        for line in screen.splitlines()
        if re.match(r"^\S+\s+\S+\s+[01]\.\d{3}\s", line)
    }
    assert said["README.md"] == "markdown" and said["Makefile"] == "makefile" and said["pyproject.toml"] == "toml"
    assert said["ep_core/__init__.py"] == "python"
    assert "PROVIDER (priority order)" in screen and "add_0" not in screen
    first = next(line for line in screen.splitlines() if line.startswith("session"))
    assert "compiled; EPContext model cached in" in first, first

    # the second run loads the cached context and says how it compares (the figure itself is a
    # benchmark's business: docs/benchmarks.md, not a timed assertion here)
    screen, _ = pane.run(command)
    assert "EXIT:0" in screen, screen
    line = next(line for line in screen.splitlines() if line.startswith("session"))
    assert re.search(r"loaded the cached EPContext model, [\d.]+x faster than the first session", line), line


def test_tables_fit_a_narrow_terminal_and_errors_are_one_line(pane_factory) -> None:  # noqa: ANN001
    pane = pane_factory(64)
    cli = f"{sys.executable} -m ep_core.tools.cli"
    for command in ("providers", "devices"):
        screen, _ = pane.run(f"{cli} {command}")
        assert "EXIT:0" in screen, screen
        table = [x for x in screen.splitlines() if x and "is not usable" not in x and not x.startswith(("$", "EXIT"))]
        assert table and all(len(x) <= 64 for x in table), "\n".join(x for x in table if len(x) > 64)
        assert "CpuReferenceExecutionProvider" in screen
    screen, _ = pane.run(f"{cli} run --zoo magika --dim N=abc")
    lines = [x for x in screen.splitlines() if x.strip() and not x.startswith(("$", "EXIT", "clear;"))]
    assert lines == ["ep-core run: error: --dim 'N=abc': size 'abc' is not an integer"], screen
    assert "EXIT:2" in screen

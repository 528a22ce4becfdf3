"""Tools tests: the CLI run in-process (``cli``), with the EPContext cache in a folder of the test."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ep_core.tools.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(autouse=True)
def ctx_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never the user's ~/.cache/ep-core/ctx, never a provider config from the environment."""
    folder = tmp_path / "ctx-cache"
    monkeypatch.setenv("EP_CORE_CTX_CACHE", str(folder))
    monkeypatch.delenv("EP_CORE_CONFIG", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    return folder


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run

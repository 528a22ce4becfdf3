"""The Numba CPU EP's GraphRunners, captured as sessions build them (tests inspect their steps,
folded weights and workspaces)."""

from __future__ import annotations

from typing import Any

import pytest


def graph_runners(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A list that every ``ep_numba_cpu.runtime.GraphRunner`` built from now on is appended to."""
    from ep_numba_cpu import runtime

    made: list[Any] = []
    real = runtime.GraphRunner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(runtime.GraphRunner, "__init__", init)
    return made

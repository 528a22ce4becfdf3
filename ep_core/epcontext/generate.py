"""EPContext model generation (filled in by the EPContext work)."""

from __future__ import annotations

from typing import Any

from ep_core.errors import NotImplementedByAnyEp


def generate_context_model(session: Any) -> str:
    raise NotImplementedByAnyEp("EPContext generation is not built yet")

"""Module-level queries shaped like onnxruntime's."""

from __future__ import annotations

from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices


def get_all_providers() -> list[str]:
    """Every EP name installed (loadable or not)."""
    return get_registry().names()


def get_available_providers() -> list[str]:
    """EPs that load and support at least one device here."""
    names = []
    seen = set()
    for d in get_ep_devices():
        if d.ep_name not in seen:
            seen.add(d.ep_name)
            names.append(d.ep_name)
    return names

"""Module-level queries shaped like onnxruntime's."""

from __future__ import annotations

from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices


def get_all_providers() -> list[str]:
    """Every EP name installed (loadable or not)."""
    return get_registry().names()


def get_available_providers() -> list[str]:
    """EPs that load and support at least one device here."""
    return list(dict.fromkeys(d.ep_name for d in get_ep_devices()))

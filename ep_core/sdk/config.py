"""The read-only view of the session configuration an EP receives.

EPs read session config entries (``ep.context_*``, ``session.*``) through this protocol, never the
runtime's options model, so the SDK does not depend on the runtime and an EP cannot change the
session's options."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


def toml_loads(text: str) -> dict[str, Any]:
    """TOML text as data (ValueError if not TOML): the one reader of every layer's TOML files."""
    parser = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")  # tomli: 3.10's
    data: dict[str, Any] = parser.loads(text)
    return data


@runtime_checkable
class SessionConfig(Protocol):
    """What ``ep_factory_create_ep`` gets as ``session_options``."""

    def get_session_config_entry(self, key: str, default: str | None = None) -> str | None:
        """The string value of a session config entry, or ``default`` when it is not set."""
        ...

    def flag(self, key: str) -> bool:
        """A ``"0"``/``"1"`` session config entry as a bool (``False`` when unset)."""
        ...


@runtime_checkable
class RunConfig(Protocol):
    """What ``ep_on_run_start`` / ``ep_on_run_end`` get as ``run_options`` (None when the caller
    gave none): the run's tag, its config entries and its terminate flag, read-only."""

    @property
    def run_tag(self) -> str: ...

    @property
    def config_entries(self) -> Mapping[str, str]: ...

    @property
    def terminate(self) -> bool:
        """Set (from any thread) to stop the run: the core checks it between steps and Loop/Scan
        iterations; an EP running one long kernel may check it too."""
        ...

"""The progress bar of long parity runs (``ep_core.tools.progress.Bar``, drawn with rich on stderr);
silent unless stderr is a terminal or the caller forces it (``--progress``), so logs and CI output
stay clean."""

from __future__ import annotations

from typing import TextIO

from ep_core.tools.progress import Bar


class ProgressBar:
    """``progress(done, total, label)`` as the parity runners call it."""

    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self._bar = Bar("parity cases", stream=stream, force=enabled)
        self.enabled = self._bar.enabled

    def __call__(self, done: int, total: int, label: str) -> None:
        self._bar.update(done, total, label)

"""A one-line progress bar on stderr for long parity runs; silent unless stderr is a terminal
or the caller forces it (``--progress``), so logs and CI output stay clean."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled if enabled is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self._t0 = time.monotonic()
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:  # redraw at most 10 times a second
            return
        self._last = now
        frac = done / total if total else 1.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = now - self._t0
        eta = f" eta {elapsed / frac - elapsed:4.0f}s" if 0 < frac < 1 else ""
        self.stream.write(f"\r[{bar}] {done}/{total} {elapsed:4.0f}s{eta} {label[:40]:<40}")
        self._shown = True
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()

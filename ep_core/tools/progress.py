"""Progress displays for the tools' long operations (compiling, parity runs, conformance, zoo
downloads), drawn with ``rich`` on stderr. They show only on a terminal, or when a caller forces
them (``--progress``), so logs, pipes and CI output stay clean; stdout is never touched.

``rich`` is imported here and in the CLI only: ``import ep_core`` and the runtime never load it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


def stderr_console(stream: TextIO | None = None, force: bool | None = None) -> Any:
    """A rich Console on ``stream`` (stderr); ``force=True`` draws even when it is no terminal."""
    from rich.console import Console

    return Console(file=stream or sys.stderr, force_terminal=True if force else None, highlight=False)


def enabled(stream: TextIO | None = None, force: bool | None = None) -> bool:
    """Whether a display should be drawn: forced on/off, else only on an interactive terminal."""
    if force is not None:
        return force
    return bool(getattr(stream or sys.stderr, "isatty", lambda: False)())


class Bar:
    """A bar over ``total`` steps: ``update(done, total, label)``; a no-op when not enabled.
    Closed (and left on screen, finished) once ``done`` reaches ``total``, or by ``close()``."""

    def __init__(self, description: str, stream: TextIO | None = None, force: bool | None = None) -> None:
        self.description = description
        self.stream = stream
        self.enabled = enabled(stream, force)
        self._force = force
        self._progress: Any = None
        self._task: Any = None

    def update(self, done: int, total: int, label: str = "") -> None:
        if not self.enabled:
            return
        if self._progress is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[label]}", style="dim"),
                console=stderr_console(self.stream, self._force),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=total, label="")
        self._progress.update(self._task, completed=done, total=total, label=label)
        if total and done >= total:
            self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@contextmanager
def spinner(description: str, stream: TextIO | None = None, force: bool | None = None) -> Iterator[Any]:
    """A spinner with the time elapsed, for work whose length is unknown (a compile, a download).
    Yields ``say(text)`` to change what it says; the line disappears when the work ends."""
    if not enabled(stream, force):
        yield lambda text: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=stderr_console(stream, force),
        transient=True,
    )
    task = progress.add_task(description, total=None)
    with progress:
        yield lambda text: progress.update(task, description=text)

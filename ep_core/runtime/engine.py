"""``Built``: the engine a session runs — its EPs, the partitioned and compiled program, and what
the context writer and IO binding read. Made by ``build.build``; released by ``Built.release``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import EpCoreError, EpFail

if TYPE_CHECKING:
    from ep_core.runtime.discover import PluginRegistry
    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.profiling import Profiler
    from ep_core.runtime.program import GraphProgram
    from ep_core.runtime.units import SessionContext
    from ep_core.sdk.graph import GraphView


@dataclass
class Built:
    """A built engine: what a session runs and what the context writer reads."""

    options: "SessionOptions"
    registry: "PluginRegistry"
    eps: "list[EpInstance]"
    model_path: Path | None
    profiler: "Profiler | None"
    model: Any = None  # the checked, shape-inferred model (layout-transformed if that was kept)
    graph: "GraphView | None" = None
    program: "GraphProgram | None" = None
    context: "SessionContext | None" = None
    notes: list[str] = field(default_factory=list)  # session-level diagnostics (layout decisions)
    context_model_path: str | None = None
    run_hooks: "list[EpInstance]" = field(default_factory=list)

    def programs(self) -> "list[GraphProgram]":
        """The main graph's program and every subgraph program below it."""
        found = [self.program] if self.program is not None else []
        for program in found:
            found.extend(program.subprograms())
        return found

    def release(self) -> None:
        """Release compiled state, then every EP (in reverse order). Every release runs even if one
        raises; the first failure is raised afterwards, typed and naming the EP."""
        errors: list[BaseException] = []
        if self.program is not None:
            try:
                self.program.release()
            except Exception as exc:  # noqa: BLE001 - reported below, after the EPs are released
                errors.append(exc)
            self.program = None
        for ep in reversed(self.eps):
            try:
                ep.close()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc if isinstance(exc, EpCoreError) else EpFail(f"{ep.name}: release failed: {exc!r}"))
        self.eps = []
        if errors:
            raise errors[0]

"""``Built``: the engine a session runs — its EPs, the partitioned and compiled program, and what
the context writer and IO binding read. Made by ``build.build``; released by ``Built.release``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import EpCoreError

if TYPE_CHECKING:
    from ep_core.host.graphs import GraphCapture
    from ep_core.host.session import SessionHost
    from ep_core.runtime.discover import PluginRegistry
    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.options import SessionOptions
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
    host: "SessionHost"  # threads, logger and trace (``host.trace``: None unless profiling)
    model: Any = None  # the checked, shape-inferred model (layout-transformed if that was kept)
    declared: Any = None  # a GraphProto of the model's outputs as declared, before shape inference
    watched: Any = None  # graph outputs whose declared shape runs are compared with (contract.warn_declared)
    graph: "GraphView | None" = None
    program: "GraphProgram | None" = None
    context: "SessionContext | None" = None
    notes: list[str] = field(default_factory=list)  # session-level diagnostics (layout decisions)
    context_model_path: str | None = None
    run_hooks: "list[EpInstance]" = field(default_factory=list)
    capture: "GraphCapture | None" = None  # the EP capturing runs as graphs, and its graphs

    def programs(self) -> "list[GraphProgram]":
        """The main graph's program and every subgraph program below it."""
        found = [self.program] if self.program is not None else []
        for program in found:
            found.extend(program.subprograms())
        return found

    def release(self) -> None:
        """Release compiled state, then every EP (in reverse order), dropping every reference to
        them. Every release runs even if one raises; the first failure is raised afterwards,
        typed and naming the EP and the hook (with the others in its message)."""
        errors: list[EpCoreError] = []
        if self.program is not None:
            errors.extend(self.program.release())
        for ep in reversed(self.eps):
            errors.extend(ep.close())
        self.eps, self.run_hooks, self.program, self.context, self.capture = [], [], None, None, None
        self.host.release()  # the CPU memory arena, once no session holds it, goes back to the OS
        if len(errors) == 1:
            raise errors[0]
        if errors:
            also = "".join(f"; also {e.message}" for e in errors[1:])
            raise type(errors[0])(errors[0].message + also) from errors[0]

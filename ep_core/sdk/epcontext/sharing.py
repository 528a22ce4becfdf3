"""Weight sharing across sessions (``ep.share_ep_contexts`` / ``ep.stop_share_ep_contexts``).

One ``SharedWorkspace`` per EP name and process, guarded by its own lock. At generation the first
session of a group names the context binary (``[model1_name]_[ep].bin``) and every session adds its
graphs to it; identical weights are stored once (their key is their content hash); the last
session (``ep.stop_share_ep_contexts=1``) writes the binary and empties the workspace. At inference
the first session loads the binary, keeps its own graphs and parks the others here; later sessions
take theirs without reading the file again."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ep_core.sdk.config import SessionConfig
    from ep_core.sdk.epcontext.output import ContextOutput

SHARE_KEY = "ep.share_ep_contexts"
STOP_SHARE_KEY = "ep.stop_share_ep_contexts"


def sharing_enabled(options: "SessionConfig") -> bool:
    return options.flag(SHARE_KEY)


def is_last_sharing_session(options: "SessionConfig") -> bool:
    return options.flag(STOP_SHARE_KEY)


@dataclass
class SharedWorkspace:
    """What the sessions of one sharing group hand each other, for one EP."""

    ep_name: str
    lock: threading.RLock = field(default_factory=threading.RLock)
    binary_path: Path | None = None  # generation: where the shared binary will be written
    graphs: dict[str, Any] = field(default_factory=dict)  # generation: graph name -> EP's graph record
    weights: dict[str, Any] = field(default_factory=dict)  # generation: content hash -> weight
    extra: dict[str, Any] = field(default_factory=dict)  # generation: anything else the EP shares
    parked: dict[tuple[str, str], Any] = field(default_factory=dict)  # inference: (binary, graph) -> graph

    @property
    def empty(self) -> bool:
        return self.binary_path is None and not self.graphs and not self.weights and not self.extra

    def binary_relative_to(self, output: "ContextOutput") -> str:
        """The group's binary, named by its first session's output (``[model1]_[ep].bin``), as a
        path relative to ``output``'s context model."""
        with self.lock:
            if self.binary_path is None:
                assert output.folder is not None
                self.binary_path = output.folder / output.binary_name(self.ep_name)
            return output.relative(self.binary_path)

    def add_weight(self, key: str, value: Any) -> bool:
        """Store a weight under its content key; False when an identical one is already there."""
        with self.lock:
            if key in self.weights:
                return False
            self.weights[key] = value
            return True

    def clear_generation(self) -> None:
        with self.lock:
            self.binary_path = None
            self.graphs.clear()
            self.weights.clear()
            self.extra.clear()

    def park(self, binary: str, graph: str, value: Any) -> None:
        with self.lock:
            self.parked.setdefault((binary, graph), value)

    def take(self, binary: str, graph: str) -> Any | None:
        """Move a parked graph to the caller (it is no longer available to others)."""
        with self.lock:
            return self.parked.pop((binary, graph), None)

    def clear_parked(self) -> None:
        with self.lock:
            self.parked.clear()


_workspaces: dict[str, SharedWorkspace] = {}
_lock = threading.Lock()


def workspace(ep_name: str) -> SharedWorkspace:
    """The process-wide workspace of one EP (created on first use)."""
    with _lock:
        ws = _workspaces.get(ep_name)
        if ws is None:
            ws = _workspaces[ep_name] = SharedWorkspace(ep_name)
        return ws


def reset_workspaces() -> None:
    """Forget every workspace (tests; a process that starts a new sharing group from scratch)."""
    with _lock:
        _workspaces.clear()

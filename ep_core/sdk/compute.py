"""What ``ep_compile`` returns: one set of compute functions per fused node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo


@dataclass(frozen=True)
class FusedNode:
    """The node that replaces a fused group: its name, and the values crossing its boundary."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    node_names: tuple[str, ...]


@dataclass(frozen=True)
class ComputeContext:
    """Given to ``create_state``: where the fused node runs and how to reach its device."""

    node_name: str
    memory_info: MemoryInfo = HOST_MEMORY
    stream: Any = None
    allocator: Any = None


@dataclass
class NodeComputeInfo:
    """Compute functions bound to one fused node, like ``OrtNodeComputeInfo``.

    ``compute(state, *inputs)`` returns the fused node's outputs in order. ``create_state`` runs
    once per session (default: no state); ``release_state`` when the session closes."""

    compute: Callable[..., Sequence[Any]]
    create_state: Callable[[ComputeContext], Any] | None = None
    release_state: Callable[[Any], None] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

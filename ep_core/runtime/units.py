"""The values the compile, plan and execute steps hand each other: a runnable ``Unit`` (a node or
fused group), a plan ``Step`` and its ``StepInfo``, and the ``SessionContext`` programs share."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ep_core.runtime.contract import OutputSpec
from ep_core.sdk.compute import FusedNode
from ep_core.sdk.errors import Fail
from ep_core.sdk.graph import GraphView
from ep_core.sdk.memory import MemoryInfo

if TYPE_CHECKING:
    from ep_core.host.trace import Profiler
    from ep_core.runtime.eps import EpInstance

NONE_SLOT = 0  # always None: missing optional inputs
SINK_SLOT = 1  # written by missing optional outputs, never read


@dataclass
class Unit:
    """A node or fused group as one runnable step."""

    name: str
    op_type: str
    ep_index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    order_key: int  # a single node: its index in the graph (get_node_assignment reads it); a group: its first
    compute: Callable[..., Sequence[Any]] | None = None
    host_inputs: frozenset[int] = frozenset()
    host_outputs: frozenset[int] = frozenset()
    fused_nodes: tuple[str, ...] = ()
    state: Any = None
    release: Callable[[Any], None] | None = None


# (compute, input getter, output slots, slots to free, output specs): all the run loop reads
Step = tuple[
    Callable[..., Any],
    Callable[[list[Any]], Sequence[Any]],
    tuple[int, ...],
    tuple[int, ...],
    tuple[OutputSpec | None, ...],
]


@dataclass(frozen=True)
class StepInfo:
    kind: str  # "node" | "fused" | "copy"
    name: str
    op_type: str
    ep: str
    detail: str = ""
    outputs: tuple[str, ...] = ()  # the step's output names, for contract errors


class SessionContext:
    """What a program needs from its session (kept small so programs nest)."""

    def __init__(self, options: Any, eps: "list[EpInstance]", model_hash: str, profiler: "Profiler | None") -> None:
        self.options = options
        self.eps = eps
        self.model_hash = model_hash
        self.profiler = profiler
        self.compiled: list[tuple[int, FusedNode, GraphView]] = []  # for EPContext generation
        self.model_path: Any = None  # the model file's path (None for bytes), set by the session
        self.fused_counter = 0

    def transfer_for(self, src: MemoryInfo, dst: MemoryInfo) -> tuple[Any, Any]:
        """(data transfer, stream of the device side) able to copy src -> dst."""
        for ep in self.eps:
            dt = ep.data_transfer
            if dt is not None and dt.can_copy(src, dst):
                streams = [e.stream for e in self.eps if e.stream is not None and e.memory_info in (src, dst)]
                return dt, streams[0] if streams else None
        raise Fail(
            f"no data transfer can copy from {src} to {dst}: the EPs selected are "
            f"{[e.name for e in self.eps]} and none of their factories provides one"
        )


def model_hash(model_bytes: bytes) -> str:
    return hashlib.sha256(model_bytes).hexdigest()[:8]

"""How an EP claims nodes, and how the core checks its claims.

Each invalid claim is dropped with a recorded reason; the partition goes on. Validation happens
at claim time so the EP's own later claims see a consistent state. A claim that breaks the
contract (a node not offered, claimed twice, an empty group, a returned value instead of calls)
raises ``EpFail`` in strict mode (``EP_CORE_STRICT_PLUGINS=1``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ep_core.sdk.errors import STRICT_ENV, EpFail, strict_mode

if TYPE_CHECKING:
    from ep_core.sdk.graph import GraphView, NodeView
    from ep_core.sdk.kernels import KernelDef, KernelRegistry, LookupResult


@dataclass(frozen=True)
class SingleNodeClaim:
    node: "NodeView"
    kernel_def: "KernelDef"


@dataclass(frozen=True)
class FusedClaim:
    nodes: tuple["NodeView", ...]
    drop_constant_initializers: bool = False


@dataclass(frozen=True)
class RejectedClaim:
    ep_name: str
    nodes: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        return f"{self.ep_name} claim on {list(self.nodes)} rejected: {self.reason}"


@dataclass
class SupportInfo:
    """Collects one EP's claims over the nodes in ``graph`` (those still unclaimed)."""

    ep_name: str
    graph: "GraphView"
    registry: "KernelRegistry | None"
    singles: list[SingleNodeClaim] = field(default_factory=list)
    fused: list[FusedClaim] = field(default_factory=list)
    rejected: list[RejectedClaim] = field(default_factory=list)
    layout_trial: bool = False  # first pass for an NHWC EP: NCHW nodes with an NHWC kernel count
    before: tuple[frozenset[int], ...] = ()  # node indices of the groups earlier EPs claimed
    _claimed: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._available = {n.index for n in self.graph.nodes}

    def _reject(self, nodes: Iterable["NodeView"], reason: str, broken_contract: bool = False) -> None:
        self._record(tuple(n.name for n in nodes), reason, broken_contract)

    def _record(self, names: tuple[str, ...], reason: str, broken_contract: bool) -> None:
        self.rejected.append(RejectedClaim(self.ep_name, names, reason))
        if broken_contract and strict_mode():
            raise EpFail(f"{self.rejected[-1]} ({STRICT_ENV}=1 makes this fatal)")

    def check_return(self, value: object) -> None:
        """Called by the core with what ``ep_get_capability`` returned: claims are made by calling
        this object, so a returned value (say, a list of nodes) would claim nothing, silently.
        Records it as a rejected claim; raises ``EpFail`` in strict mode."""
        if value is None:
            return
        items = list(value) if isinstance(value, (list, tuple, set, frozenset)) else None
        what = f"a {type(value).__name__}" + ("" if items is None else f" of {len(items)} item(s)")
        names = tuple(n.name for n in items or () if isinstance(getattr(n, "name", None), str))
        reason = (
            f"ep_get_capability returned {what}; claims are made by calling support.add_single_node(node) "
            "/ support.add_nodes_to_fuse(nodes), the return value is ignored"
        )
        self._record(names, reason, broken_contract=True)

    def _check_available(self, nodes: Sequence["NodeView"]) -> str | None:
        for n in nodes:
            if n.graph.proto is not self.graph.proto:
                return f"node {n.name!r} is not in the graph offered to {self.ep_name}"
            if n.index in self._claimed:
                return f"node {n.name!r} was claimed twice by {self.ep_name}"
            if n.index not in self._available:
                return f"node {n.name!r} is already assigned to another execution provider"
        return None

    def _lookup(self, node: "NodeView") -> "LookupResult":
        assert self.registry is not None
        found = self.registry.lookup(node)
        if found.entry is None and self.layout_trial:
            from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN

            if node.op_type in LAYOUT_SENSITIVE_OPS and node.domain in ("", "ai.onnx"):
                found = self.registry.lookup(node, domain=NHWC_DOMAIN)
        return found

    def can_serve(self, node: "NodeView") -> bool:
        """Whether ``add_single_node(node)`` would be accepted (no rejection is recorded)."""
        return self.registry is not None and self._check_available([node]) is None and bool(self._lookup(node))

    def add_single_node(self, node: "NodeView") -> bool:
        """Claim one node for the EP's kernel registry; False (and a recorded reason) if refused."""
        problem = self._check_available([node])
        if problem is None and self.registry is None:
            problem = f"{self.ep_name} has no kernel registry to serve single nodes"
        if problem is not None:
            self._reject([node], problem, broken_contract=True)
            return False
        found = self._lookup(node)
        if found.entry is None:
            self._reject([node], found.reason)
            return False
        self._claimed.add(node.index)
        self.singles.append(SingleNodeClaim(node, found.entry.kernel_def))
        return True

    def add_nodes_to_fuse(self, nodes: Sequence["NodeView"], drop_constant_initializers: bool = False) -> bool:
        """Claim a group to be compiled into one fused node; False (and a reason) if refused."""
        nodes = list(nodes)
        problem: str | None = None
        if not nodes:
            problem = "empty group"
        elif len({n.index for n in nodes}) != len(nodes):
            problem = "a node appears twice in the group"
        else:
            problem = self._check_available(nodes)
        if problem is not None:
            self._reject(nodes, problem, broken_contract=True)
            return False
        groups = self.before + tuple(frozenset(n.index for n in f.nodes) for f in self.fused)
        problem = _convexity_problem(self.graph, nodes, groups)
        if problem is not None:
            self._reject(nodes, problem)
            return False
        self._claimed.update(n.index for n in nodes)
        self.fused.append(FusedClaim(tuple(nodes), drop_constant_initializers))
        return True


def _convexity_problem(graph: "GraphView", nodes: Sequence["NodeView"], groups: Sequence[frozenset[int]]) -> str | None:
    """A group is convex when no path leaves it and re-enters it: walk forward from the group's
    outside consumers and fail if the walk reaches a group member. The walk passes through the
    ``groups`` claimed before it as through one node each (a group runs whole): two groups that
    each feed the other would otherwise deadlock the plan."""
    members = {n.index for n in nodes}
    group_of = {i: g for g in groups for i in g}
    frontier = [c for n in nodes for o in n.outputs if o for c in graph.consumers(o) if c.index not in members]
    seen: set[int] = set()
    while frontier:
        cur = frontier.pop()
        if cur.index in seen:
            continue
        seen.update(together := group_of.get(cur.index, (cur.index,)))
        for k in together:
            for c in (c for o in graph.all_nodes[k].outputs if o for c in graph.consumers(o)):
                if c.index in members:
                    via = f"{cur.name!r} (in a group claimed before it)" if cur.index in group_of else repr(cur.name)
                    return f"the group is not convex: a path leaves it through {via} and re-enters at {c.name!r}"
                frontier.append(c)
    return None

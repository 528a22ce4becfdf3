"""Assigning nodes to EPs: ask each EP, in priority order, for its capability over the nodes no
earlier EP claimed, and record its claims and rejected claims in a ``Partition``. The caller
decides what an unclaimed node means (``require_complete`` fails with NOT_IMPLEMENTED, naming
everything a user needs; the layout transformer's passes read it as data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ep_core.sdk.capability import FusedClaim, RejectedClaim, SupportInfo
from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN
from ep_core.sdk.errors import NotImplementedByAnyEp

if TYPE_CHECKING:
    from ep_core.runtime.eps import EpInstance
    from ep_core.sdk.graph import GraphView, NodeView
    from ep_core.sdk.kernels import KernelDef


@dataclass
class Partition:
    """The outcome for one graph (subgraphs are partitioned by their own programs)."""

    graph: "GraphView"
    singles: dict[int, tuple[int, "KernelDef"]] = field(default_factory=dict)  # node index -> (ep, def)
    groups: list[tuple[int, FusedClaim]] = field(default_factory=list)  # (ep, claim)
    rejected: list[RejectedClaim] = field(default_factory=list)
    unclaimed: list[int] = field(default_factory=list)  # node indices no EP claimed, in graph order

    def owners(self) -> dict[str, int]:
        """Node name -> index of the EP that claimed it."""
        out = {self.graph.all_nodes[i].name: ep_i for i, (ep_i, _) in self.singles.items()}
        for ep_i, claim in self.groups:
            out.update((n.name, ep_i) for n in claim.nodes)
        return out


def _visible_to(ep: "EpInstance", node: "NodeView") -> bool:
    """EPContext nodes are offered only to the EP named by their ``source`` attribute."""
    if node.op_type == EP_CONTEXT_OP and node.domain == MS_DOMAIN:
        source = node.attr("source")
        return source is None or ep.accepts_context_source(source)
    return True


def partition_graph(
    graph: "GraphView", eps: "list[EpInstance]", layout_trial: frozenset[int] = frozenset()
) -> Partition:
    """Assign every node an EP can take; ``layout_trial`` holds the indices of NHWC-preferring EPs
    when this is the layout transformer's first pass (their NCHW claims may rest on NHWC kernels)."""
    result = Partition(graph)
    unclaimed = {n.index for n in graph.all_nodes}
    for ep_index, ep in enumerate(eps):
        if not unclaimed:
            break
        view = graph.subset(i for i in unclaimed if _visible_to(ep, graph.all_nodes[i]))
        if not len(view):
            continue
        before = tuple(frozenset(n.index for n in c.nodes) for _, c in result.groups)
        support = SupportInfo(ep.name, view, ep.kernel_registry, layout_trial=ep_index in layout_trial, before=before)
        returned = ep.call("ep_get_capability", graph=view, support=support)
        support.check_return(returned)
        result.rejected.extend(support.rejected)
        for claim in support.singles:
            result.singles[claim.node.index] = (ep_index, claim.kernel_def)
            unclaimed.discard(claim.node.index)
        for group in support.fused:
            result.groups.append((ep_index, group))
            unclaimed.difference_update(n.index for n in group.nodes)
    result.unclaimed = sorted(unclaimed)
    return result


def require_complete(partition: Partition, eps: "list[EpInstance]") -> None:
    """NOT_IMPLEMENTED naming the first unclaimed node and why each EP declined it."""
    if not partition.unclaimed:
        return
    graph = partition.graph
    node = graph.all_nodes[partition.unclaimed[0]]
    declined = []
    for ep in eps:
        reason = ep.decline_reason(node)
        declined.append(f"{ep.name} ({reason})" if reason else ep.name)
    rest = len(partition.unclaimed) - 1
    more = f" and {rest} more node(s)" if rest else ""
    raise NotImplementedByAnyEp(
        f"no execution provider can run {node.describe()}{more} in graph {graph.name!r}. "
        f"Declined by: {'; '.join(declined) or 'no EP selected'}"
    )


def fused_inputs_outputs(
    graph: "GraphView", nodes: "tuple[NodeView, ...]", drop_constant_initializers: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The values a fused group reads from outside and the ones read outside it (or graph outputs)."""
    members = {n.index for n in nodes}
    produced = {o for n in nodes for o in n.outputs if o}
    ins: dict[str, None] = {}
    for n in nodes:
        for i in tuple(n.inputs) + n.implicit_inputs:
            if not i or i in produced:
                continue
            if drop_constant_initializers and graph.constant_value(i) is not None and graph.producer(i) is None:
                continue
            ins.setdefault(i, None)
    graph_outputs = {v.name for v in graph.proto.output}
    outs: list[str] = []
    for n in nodes:
        for o in n.outputs:
            if o and (o in graph_outputs or any(c.index not in members for c in graph.consumers(o))):
                outs.append(o)
    return tuple(ins), tuple(outs)

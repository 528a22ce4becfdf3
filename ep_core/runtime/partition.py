"""Assigning nodes to EPs: ask each EP, in priority order, for its capability over the nodes no
earlier EP claimed; check and record its claims; fail with NOT_IMPLEMENTED, naming everything a
user needs, if some node is left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ep_core.sdk.capability import FusedClaim, RejectedClaim, SupportInfo
from ep_core.sdk.errors import EpFail, NotImplementedByAnyEp

if TYPE_CHECKING:
    from ep_core.sdk.graph import GraphView, NodeView
    from ep_core.sdk.kernels import KernelDef
    from ep_core.runtime.eps import EpInstance

EP_CONTEXT_OP = "EPContext"
MS_DOMAIN = "com.microsoft"


@dataclass
class Partition:
    """The outcome for one graph (subgraphs are partitioned by their own programs)."""

    graph: "GraphView"
    singles: dict[int, tuple[int, "KernelDef"]] = field(default_factory=dict)  # node index -> (ep, def)
    groups: list[tuple[int, FusedClaim]] = field(default_factory=list)  # (ep, claim)
    rejected: list[RejectedClaim] = field(default_factory=list)


def _visible_to(ep: "EpInstance", node: "NodeView") -> bool:
    """EPContext nodes are offered only to the EP named by their ``source`` attribute."""
    if node.op_type == EP_CONTEXT_OP and node.domain == MS_DOMAIN:
        source = node.attr("source")
        return source is None or ep.accepts_context_source(source)
    return True


def partition_graph(
    graph: "GraphView", eps: "list[EpInstance]", layout_trial: frozenset[int] = frozenset()
) -> Partition:
    """Assign every node; ``layout_trial`` holds the indices of NHWC-preferring EPs when this is
    the layout transformer's first pass (their NCHW claims may rest on NHWC kernels)."""
    result = Partition(graph)
    unclaimed = {n.index for n in graph.all_nodes}
    for ep_index, ep in enumerate(eps):
        if not unclaimed:
            break
        view = graph.subset(i for i in unclaimed if _visible_to(ep, graph.all_nodes[i]))
        if not len(view):
            continue
        support = SupportInfo(ep.name, view, ep.kernel_registry, layout_trial=ep_index in layout_trial)
        try:
            ep.call("ep_get_capability", graph=view, support=support)
        except Exception as exc:
            raise EpFail(
                f"{ep.name}.ep_get_capability failed on graph {graph.name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        result.rejected.extend(support.rejected)
        for claim in support.singles:
            result.singles[claim.node.index] = (ep_index, claim.kernel_def)
            unclaimed.discard(claim.node.index)
        for group in support.fused:
            result.groups.append((ep_index, group))
            unclaimed.difference_update(n.index for n in group.nodes)
    if unclaimed and not layout_trial:
        node = graph.all_nodes[min(unclaimed)]
        declined = []
        for ep in eps:
            reason = ep.decline_reason(node)
            declined.append(f"{ep.name} ({reason})" if reason else ep.name)
        more = f" and {len(unclaimed) - 1} more node(s)" if len(unclaimed) > 1 else ""
        raise NotImplementedByAnyEp(
            f"no execution provider can run {node.describe()}{more} in graph {graph.name!r}. "
            f"Declined by: {'; '.join(declined) or 'no EP selected'}"
        )
    return result


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


def describe_assignment(part: Partition, eps: "list[EpInstance]", fused_names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for idx, (ep_i, _) in part.singles.items():
        out[part.graph.all_nodes[idx].name] = {"ep": eps[ep_i].name, "fused_node": None}
    for k, (ep_i, group) in enumerate(part.groups):
        for n in group.nodes:
            out[n.name] = {"ep": eps[ep_i].name, "fused_node": fused_names[k]}
    return out

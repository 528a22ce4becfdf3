"""Cutting the nodes a compiling EP supports into groups it may claim with
``support.add_nodes_to_fuse``.

A group must be convex: no path may leave it and come back in, or the fused node would have to run
both before and after some outside node. Nodes that are contiguous in some topological order of the
whole graph are always convex, because every node on a path between two of them lies between
them in that order. So we walk the graph in topological order (ORT's ``CreateSupportedPartitions``
does the same), taking every supported node that is ready before any unsupported one, and close the
group whenever an unsupported node has to run. Nodes of the graph that are not offered to the EP
(claimed by an earlier EP) count as unsupported: a path through them breaks convexity too."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ep_core.sdk.graph import GraphView, NodeView


def convex_groups(
    graph: "GraphView", supported: Callable[["NodeView"], bool], max_nodes: int | None = None
) -> list[list["NodeView"]]:
    """Groups of ``graph.nodes`` (the nodes offered) for which ``supported(node)`` is true, each
    convex in the whole graph, in topological order, none larger than ``max_nodes``."""
    offered = {n.index for n in graph.nodes}
    everything = graph.all_nodes
    wanted = {n.index for n in everything if n.index in offered and supported(n)}
    successors: list[list[int]] = [[] for _ in everything]
    indegree = [0] * len(everything)
    for n in everything:
        for name in dict.fromkeys((*n.outputs,)):
            if not name:
                continue
            for consumer in dict.fromkeys(c.index for c in graph.consumers(name)):
                if consumer != n.index:
                    successors[n.index].append(consumer)
                    indegree[consumer] += 1
    ready_in = [i for i in range(len(everything)) if indegree[i] == 0 and i in wanted]
    ready_out = [i for i in range(len(everything)) if indegree[i] == 0 and i not in wanted]
    groups: list[list[NodeView]] = []
    current: list[NodeView] = []

    def release(i: int) -> None:
        for j in successors[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                (ready_in if j in wanted else ready_out).append(j)

    while ready_in or ready_out:
        if ready_in and (max_nodes is None or len(current) < max_nodes):
            i = min(ready_in)  # stable: the earliest ready node first
            ready_in.remove(i)
            current.append(everything[i])
        else:
            if current:
                groups.append(current)
                current = []
            if not ready_out:  # the group was full: start the next one
                continue
            i = min(ready_out)
            ready_out.remove(i)
        release(i)
    if current:
        groups.append(current)
    return groups

"""A main graph whose nodes are out of order runs, as in onnxruntime, which sorts it when it
resolves the graph; onnx's checker refuses it ("must be topologically sorted"), so it is sorted
before the checker runs. Editing tools leave such graphs (a node appended after its consumers, a
graph-surgeon export without toposort). What onnxruntime refuses stays refused with its status:
a cycle (FAIL), an input nothing defines (INVALID_ARGUMENT), each naming the node, and a subgraph
out of order (its If/Loop/Scan schema runs onnx's checker on it: INVALID_GRAPH).

A node's place depends on the values its subgraphs read from the main graph too (an If branch
may read a value a later node makes). The stable Kahn order keeps the given order wherever it is
already valid; a sorted graph is returned as it is."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ep_core.sdk.errors import Fail, InvalidArgument
from ep_core.sdk.graph import topo_order


def sorted_topologically(model: Any) -> Any:
    """``model``, or a sorted copy when a graph in it has a node before a value it reads."""
    if _in_order(model.graph):
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    _sort(copy.graph)
    return copy


def _defined(graph: Any) -> set[str]:
    return (
        {v.name for v in graph.input}
        | {t.name for t in graph.initializer}
        | {s.values.name for s in graph.sparse_initializer}
    )


def _subgraphs(node: Any) -> Iterable[Any]:
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def _reads(node: Any) -> set[str]:
    """Every name ``node`` reads: its inputs and what its subgraphs take from enclosing scopes."""
    names = {n for n in node.input if n}
    for g in _subgraphs(node):
        names |= _free_names(g)
    return names


def _free_names(graph: Any) -> set[str]:
    inside = _defined(graph) | {o for n in graph.node for o in n.output if o}
    return {name for n in graph.node for name in _reads(n)} - inside


def _in_order(graph: Any) -> bool:
    seen = _defined(graph)
    for n in graph.node:
        if not _reads(n) <= seen:
            return False
        seen.update(o for o in n.output if o)
    return True


def _describe(i: int, node: Any) -> str:
    return f"node {node.name or f'{node.op_type}_{i}'!r} (op {node.op_type})"


def _sort(graph: Any) -> None:
    nodes = list(graph.node)
    maker = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    available = _defined(graph)
    needs: list[set[int]] = []
    for i, n in enumerate(nodes):
        missing = sorted(r for r in _reads(n) if r not in maker and r not in available)
        if missing:
            raise InvalidArgument(
                f"{_describe(i, n)}: input {missing[0]!r} is not a graph input, initializer, outer-scope value "
                "or output of any node"
            )
        needs.append({maker[r] for r in _reads(n) if r in maker and r not in available})
    users: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    order = topo_order(len(nodes), users, partial=True)
    if len(order) < len(nodes):
        placed = set(order)
        stuck = [i for i in range(len(nodes)) if i not in placed]
        raise Fail(
            f"the graph {graph.name!r} is not acyclic: {_describe(stuck[0], nodes[stuck[0]])} and "
            f"{len(stuck) - 1} other node(s) depend on each other's outputs"
        )
    sorted_nodes = [nodes[i] for i in order]
    del graph.node[:]
    graph.node.extend(sorted_nodes)

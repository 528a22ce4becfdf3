"""Which nodes this EP leaves on the host: small shape computations, as ORT's CUDA EP does.

A node stays on the host when everything it reads is already host-resident (initializers,
Constant values, outputs this EP's kernels keep on the host such as Shape's) and everything it
produces is read only at host-input positions of this EP's kernels (Reshape's shape, Slice's
starts, Clip's bounds ...) or by other host-side nodes. Moving such nodes to the device would only
add copies in both directions; everything else the registry serves goes to the device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ep_core.sdk.graph import GraphView, NodeView
    from ep_core.sdk.kernels import KernelDef

HEAVY_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "MaxPool", "AveragePool", "Resize"})


def host_side_nodes(graph: "GraphView", served: Mapping[int, "KernelDef"]) -> set[int]:
    """Indices of the offered nodes that should run on the host (the CPU fallback EP)."""
    nodes = list(graph.nodes)
    offered = {n.index for n in nodes}
    graph_outputs = {v.name for v in graph.proto.output}

    def host_value(name: str, host: set[int]) -> bool:
        if not name or graph.constant_value(name) is not None and graph.producer(name) is None:
            return True
        prod = graph.producer(name)
        if prod is None:
            return False  # graph inputs arrive wherever the caller put them; treat as device data
        if prod.index in host:
            return True
        kd = served.get(prod.index)
        if kd is not None and prod.index not in host:
            pos = [j for j, o in enumerate(prod.outputs) if o == name]
            return bool(pos) and all(j in kd.host_outputs for j in pos)
        return prod.index not in offered  # already placed by an earlier EP (host, normally)

    def outputs_host_only(n: "NodeView", host: set[int]) -> bool:
        outs = [o for o in n.outputs if o]
        if not outs:
            return False
        for o in outs:
            if o in graph_outputs:
                return False
            consumers = graph.consumers(o)
            if not consumers:
                return False
            for c in consumers:
                if c.index in host or c.index not in offered:
                    continue
                kd = served.get(c.index)
                if kd is None:
                    continue  # nobody here serves it: it runs on the host anyway
                pos = [i for i, x in enumerate(c.inputs) if x == o]
                if not pos or not all(i in kd.host_inputs for i in pos):
                    return False
        return True

    host = {
        n.index
        for n in nodes
        if n.op_type not in HEAVY_OPS and not (served.get(n.index) and served[n.index].host_outputs)
    }
    changed = True
    while changed:
        changed = False
        for n in reversed(nodes):
            if n.index not in host:
                continue
            ins_ok = all(host_value(i, host) for i in tuple(n.inputs) + n.implicit_inputs)
            if not ins_ok or not outputs_host_only(n, host):
                host.discard(n.index)
                changed = True
    return host

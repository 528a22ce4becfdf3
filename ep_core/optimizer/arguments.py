"""Arguments no input can make valid that onnx's inference lets through, refused at load naming
the node (``runtime.load`` calls it after inference): onnxruntime refuses them too, or the
kernels would make up a shape."""

from __future__ import annotations

import math

from ep_core.sdk.errors import InvalidGraph
from ep_core.sdk.graph import GraphView


def check_arguments(graph: GraphView) -> None:
    """Arguments no input can make valid that onnx's inference lets through (onnxruntime's does
    not, or the kernels would make up a shape): negative constant Split sizes, constant Pad
    amounts below zero, an If condition of other than one element, a LayerNormalization axis past
    the rank."""
    import numpy as np

    for n in graph.all_nodes:
        for sub in n.subgraphs.values():
            check_arguments(sub)
        op = n.op_type if n.domain_key == "ai.onnx" else ""
        shapes = [i.shape if (i := n.input_info(k)) is not None else None for k in range(len(n.inputs))]
        known = [s is not None and all(isinstance(d, int) for d in s) for s in shapes]
        const = None  # input 1 when it is a small constant: Split sizes, Pad amounts
        if op in ("Split", "Pad") and len(shapes) > 1 and known[1] and math.prod(shapes[1]) <= 4096:  # type: ignore[arg-type]
            const = graph.constant_value(n.inputs[1])
        bad = ""
        if op == "Split" and (sizes := n.attr("split") if n.opset < 13 else const) is not None:
            if any(int(v) < 0 for v in np.ravel(sizes)):
                bad = f"split sizes {np.ravel(sizes).tolist()} include a negative size"
        elif op == "Pad" and known[0] and (pads := n.attr("pads") if n.opset < 11 else const) is not None:
            p, dims = [int(v) for v in np.ravel(pads)], [int(d) for d in shapes[0] or ()]  # type: ignore[arg-type]
            axes = len(n.inputs) > 3 and n.inputs[3]
            if not axes and len(p) == 2 * len(dims) and any(d + a + b < 0 for d, a, b in zip(dims, p, p[len(dims) :])):
                bad = f"pads {p} take input shape {dims} below zero"
        elif op == "If" and known[0] and math.prod(shapes[0]) != 1:  # type: ignore[arg-type]
            bad = f"its condition has shape {list(shapes[0])}: it must hold one element"  # type: ignore[arg-type]
        elif op == "LayerNormalization" and shapes[0] is not None:
            if not -len(shapes[0]) <= int(n.attr("axis", -1)) < len(shapes[0]):
                bad = f"axis {n.attr('axis')} is outside the rank {len(shapes[0])} of its input"
        if bad:
            raise InvalidGraph(f"{n.describe()}: {bad}")

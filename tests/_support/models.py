"""Small models built in tests with onnx.helper."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, list]],
    outputs: Sequence[tuple[str, int, list | None]],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 21,
    extra_opsets: Sequence[tuple[str, int]] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def add_mul_chain(n: int = 6, shape: list | None = None) -> onnx.ModelProto:
    """x -> Add(y) -> Mul(y) -> Add(y) ... (n nodes) -> out."""
    shape = shape or [2, 3]
    nodes = []
    prev = "x"
    for i in range(n):
        op = "Add" if i % 2 == 0 else "Mul"
        out = "out" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev, "y"], [out], name=f"{op.lower()}_{i}"))
        prev = out
    return make_model(
        nodes, [("x", TensorProto.FLOAT, shape), ("y", TensorProto.FLOAT, shape)], [("out", TensorProto.FLOAT, shape)]
    )

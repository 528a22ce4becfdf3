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


def if_with_fusable_branches() -> onnx.ModelProto:
    """x -> Relu/Exp/Mul chain in the main graph, then an If whose branches hold chains of their own:
    both levels give a fusing EP fused groups (EPContext tests: only main-graph groups get nodes)."""
    f = TensorProto.FLOAT

    def chain(prefix: str, out: str) -> list[onnx.NodeProto]:
        return [
            helper.make_node("Exp", ["h"], [f"{prefix}1"]),
            helper.make_node("Mul", [f"{prefix}1", "h"], [f"{prefix}2"]),
            helper.make_node("Sigmoid", [f"{prefix}2"], [out]),
        ]

    branch_out = [helper.make_tensor_value_info("b", f, [2, 3])]
    then_g = helper.make_graph(chain("t", "b"), "then", [], branch_out)
    else_g = helper.make_graph(chain("e", "e3") + [helper.make_node("Neg", ["e3"], ["b"])], "else", [], branch_out)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["h"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes,
        "if_model",
        [helper.make_tensor_value_info("x", f, [2, 3]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", f, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

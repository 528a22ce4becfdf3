"""``ep_core.sdk.grouping.convex_groups``: every group it makes is one the core accepts
(``SupportInfo.add_nodes_to_fuse``), including where a naive "connected supported nodes" grouping
would leave a group and re-enter it."""

from __future__ import annotations

import itertools
import random

from _support.models import make_model
from onnx import TensorProto, helper

from ep_core.sdk.capability import SupportInfo
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.sdk.grouping import convex_groups

F = TensorProto.FLOAT


def _view(nodes: list, inputs: list[str], outputs: list[str]) -> GraphView:
    model = make_model(nodes, [(i, F, [2]) for i in inputs], [(o, F, [2]) for o in outputs])
    return GraphView(model.graph, opset_map(model))


def _diamond() -> GraphView:
    # a -> (b: Relu outside, c) -> d: {a, c, d} are connected but not convex (a -> b -> d leaves and re-enters)
    return _view(
        [
            helper.make_node("Add", ["x", "x"], ["a"], name="a"),
            helper.make_node("Relu", ["a"], ["b"], name="b"),
            helper.make_node("Add", ["a", "a"], ["c"], name="c"),
            helper.make_node("Add", ["b", "c"], ["d"], name="d"),
        ],
        ["x"],
        ["d"],
    )


def _claim_all(view: GraphView, groups: list[list]) -> SupportInfo:
    support = SupportInfo("GroupingTestExecutionProvider", view, None)
    for group in groups:
        assert support.add_nodes_to_fuse(group), support.rejected
    return support


def test_diamond_is_split_so_each_group_is_convex() -> None:
    view = _diamond()
    groups = convex_groups(view, lambda n: n.op_type == "Add")
    assert [[n.name for n in g] for g in groups] == [["a", "c"], ["d"]]
    _claim_all(view, groups)


def test_nodes_not_offered_count_as_unsupported() -> None:
    view = _diamond()
    offered = view.subset(n.index for n in view.all_nodes if n.name != "b")  # b belongs to an earlier EP
    groups = convex_groups(offered, lambda n: True)
    assert [[n.name for n in g] for g in groups] == [["a", "c"], ["d"]]
    _claim_all(offered, groups)


def test_max_nodes_caps_each_group() -> None:
    chain = _view(
        [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(5)],
        ["v0"],
        ["v5"],
    )
    groups = convex_groups(chain, lambda n: True, max_nodes=2)
    assert [len(g) for g in groups] == [2, 2, 1]
    _claim_all(chain, groups)


def test_random_graphs_always_give_claimable_groups() -> None:
    rng = random.Random(7)
    for trial in range(60):
        values = ["x"]
        nodes = []
        for i in range(rng.randint(3, 14)):
            a, b = rng.choice(values), rng.choice(values)
            op = rng.choice(["Add", "Mul", "Sub"])
            nodes.append(helper.make_node(op, [a, b], [f"t{i}"], name=f"n{i}"))
            values.append(f"t{i}")
        view = _view(nodes, ["x"], [values[-1]])
        ops = set(rng.sample(["Add", "Mul", "Sub"], 2))
        groups = convex_groups(view, lambda n, ops=ops: n.op_type in ops, max_nodes=rng.choice([None, 3]))
        support = _claim_all(view, groups)
        claimed = sorted(n.index for g in groups for n in g)
        assert claimed == sorted(n.index for n in view.nodes if n.op_type in ops), trial
        assert len(claimed) == len(set(itertools.chain(claimed))) == len(support._claimed)

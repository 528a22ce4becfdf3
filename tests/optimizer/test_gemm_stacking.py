"""Gemm stacking (ep_core/optimizer/gemm_stacking.py): independent Gemms sharing a constant B become
Concat -> one Gemm -> Split; dependent ones (a recurrence) are left. Outputs equal ORT_DISABLE_ALL's
and the real onnxruntime's; op counts show what was stacked."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from opt_helpers import LEVELS, make_model, op_counts, optimized

EXTENDED = LEVELS.ORT_ENABLE_EXTENDED
node = helper.make_node


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The optimized model, after its outputs were compared with ORT_DISABLE_ALL's and onnxruntime's."""
    out = optimized(model, EXTENDED, feeds)
    from opt_helpers import session

    got = session(model, EXTENDED).run(None, feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))
    return out


def _independent(rng: np.random.Generator, c_shape: tuple[int, ...] | None, opset: int, trans_b: int) -> Any:
    rows = [1, 3, 2]
    b = rng.standard_normal((5, 8) if trans_b else (8, 5)).astype(np.float32)
    inits: dict[str, np.ndarray] = {"B": b}
    ins = ["B"]
    if c_shape is not None:
        inits["C"] = rng.standard_normal(c_shape).astype(np.float32)
        ins.append("C")
    nodes = [node("Gemm", [f"X{i}", *ins], [f"y{i}"], name=f"g{i}", transB=trans_b, alpha=0.5) for i in range(3)]
    nodes += [node("Relu", [f"y{i}"], [f"Y{i}"], name=f"r{i}") for i in range(3)]
    nodes.append(node("Identity", ["y1"], ["Z"], name="id"))  # a second reader of one stacked output
    model = make_model(nodes, [(f"X{i}", [r, 8]) for i, r in enumerate(rows)], ["Y0", "Y1", "Y2", "Z"], inits, opset)
    feeds = {f"X{i}": rng.standard_normal((r, 8)).astype(np.float32) for i, r in enumerate(rows)}
    return model, feeds


@pytest.mark.parametrize(("c_shape", "opset", "trans_b"), [(None, 17, 0), ((5,), 17, 1), ((1, 5), 11, 0)])
def test_independent_gemms_sharing_b_become_one(
    rng: np.random.Generator, c_shape: tuple[int, ...] | None, opset: int, trans_b: int
) -> None:
    model, feeds = _independent(rng, c_shape, opset, trans_b)
    out = _check(model, feeds)
    assert op_counts(out)["Gemm"] == 1 and op_counts(out)["Concat"] == 1 and op_counts(out)["Split"] == 1
    gemm = next(n for n in out.graph.node if n.op_type == "Gemm")
    split = next(n for n in out.graph.node if n.op_type == "Split")
    assert gemm.name == "g0"  # named after the first member
    assert list(split.output) == ["y0", "y1", "y2"]  # the original values, their readers unchanged
    if opset >= 13:  # the row counts: an int64 initializer input
        sizes = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}[split.input[1]]
        assert sizes.dtype == np.int64 and sizes.tolist() == [1, 3, 2]
    else:
        assert helper.get_attribute_value(next(a for a in split.attribute if a.name == "split")) == [1, 3, 2]


def test_rows_c_or_different_attributes_are_not_stacked(rng: np.random.Generator) -> None:
    inits = {"B": rng.standard_normal((8, 5)).astype(np.float32), "C": rng.standard_normal((2, 5)).astype(np.float32)}
    nodes = [
        node("Gemm", ["X0", "B", "C"], ["Y0"], name="g0"),  # a C with rows
        node("Gemm", ["X1", "B", "C"], ["Y1"], name="g1"),
        node("Gemm", ["X0", "B"], ["Y2"], name="g2", alpha=2.0),  # alone in its group (alpha)
        node("Gemm", ["X1", "B"], ["Y3"], name="g3"),
    ]
    model = make_model(nodes, [("X0", [2, 8]), ("X1", [2, 8])], ["Y0", "Y1", "Y2", "Y3"], inits)
    feeds = {f"X{i}": rng.standard_normal((2, 8)).astype(np.float32) for i in range(2)}
    assert op_counts(_check(model, feeds)) == {"Gemm": 4}


def test_a_recurrent_chain_is_not_stacked(rng: np.random.Generator) -> None:
    inits = {"W": rng.standard_normal((8, 8)).astype(np.float32) * np.float32(0.3)}
    nodes = [node("Gemm", [f"h{t}", "W"], [f"h{t + 1}"], name=f"g{t}") for t in range(4)]
    model = make_model(nodes, [("h0", [1, 8])], ["h4"], inits)
    out = _check(model, {"h0": rng.standard_normal((1, 8)).astype(np.float32)})
    assert op_counts(out) == {"Gemm": 4}


def _unrolled_rnn(rng: np.random.Generator, steps: int) -> onnx.ModelProto:
    """x_t = Gather(X, t) inside each step (the last x_t is made after step 0's readers): the
    input Gemms are independent, the recurrent ones a chain whose first reads the initial state."""
    inits = {
        "Wih": rng.standard_normal((16, 8)).astype(np.float32) * np.float32(0.3),
        "bih": rng.standard_normal(16).astype(np.float32),
        "Whh": rng.standard_normal((16, 16)).astype(np.float32) * np.float32(0.3),
        **{f"t{t}": np.array(t, np.int64) for t in range(steps)},
    }
    nodes = []
    for t in range(steps):
        nodes += [
            node("Gather", ["X", f"t{t}"], [f"x{t}"], name=f"gather{t}"),
            node("Gemm", [f"x{t}", "Wih", "bih"], [f"i{t}"], name=f"ih{t}", transB=1),
            node("Gemm", [f"h{t}", "Whh"], [f"r{t}"], name=f"hh{t}", transB=1),
            node("Add", [f"i{t}", f"r{t}"], [f"s{t}"], name=f"add{t}"),
            node("Tanh", [f"s{t}"], [f"h{t + 1}"], name=f"tanh{t}"),
        ]
    graph = helper.make_graph(
        nodes,
        "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, 2, 8])]
        + [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info(f"h{steps}", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_only_the_independent_members_of_an_unrolled_rnn_are_stacked(rng: np.random.Generator) -> None:
    steps = 5
    feeds = {
        "X": rng.standard_normal((steps, 2, 8)).astype(np.float32),
        "h0": rng.standard_normal((2, 16)).astype(np.float32),
    }
    out = _check(_unrolled_rnn(rng, steps), feeds)
    counts = op_counts(out)
    assert counts["Gemm"] == 1 + steps and counts["Concat"] == 1 and counts["Split"] == 1  # ih stacked, hh kept
    names = [n.name for n in out.graph.node]
    assert "ih0" in names and not any(f"ih{t}" in names for t in range(1, steps))
    onnx.checker.check_model(out)  # still topologically sorted (the nodes were sorted after the insertion)


def test_gemms_in_a_subgraph_are_stacked_there(rng: np.random.Generator) -> None:
    b = rng.standard_normal((8, 5)).astype(np.float32)
    then = helper.make_graph(
        [
            node("Gemm", ["X0", "B"], ["t0"], name="sg0"),
            node("Gemm", ["X1", "B"], ["t1"], name="sg1"),
            node("Add", ["t0", "t1"], ["T"], name="sadd"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("T", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [node("Gemm", ["X0", "B"], ["E"], name="eg0")],
        "else",
        [],
        [helper.make_tensor_value_info("E", TensorProto.FLOAT, None)],
    )
    nodes = [node("If", ["cond"], ["Y"], name="if", then_branch=then, else_branch=other)]
    model = make_model(nodes, [("X0", [2, 8]), ("X1", [2, 8])], ["Y"], {"B": b})
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    feeds = {f"X{i}": rng.standard_normal((2, 8)).astype(np.float32) for i in range(2)}
    out = _check(model, {**feeds, "cond": np.array(True)})
    _check(model, {**feeds, "cond": np.array(False)})
    branch = next(a.g for a in out.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in branch.node] == ["Concat", "Gemm", "Split", "Add"]


@pytest.mark.parametrize("opset", [14, 17])
def test_symbolic_row_counts_are_read_at_run_time_from_opset_15(rng: np.random.Generator, opset: int) -> None:
    b = rng.standard_normal((8, 5)).astype(np.float32)
    nodes = [node("Gemm", [f"X{i}", "B"], [f"Y{i}"], name=f"g{i}") for i in range(2)]
    model = make_model(nodes, [("X0", ["n", 8]), ("X1", ["m", 8])], ["Y0", "Y1"], {"B": b}, opset)
    feeds = {"X0": rng.standard_normal((3, 8)).astype(np.float32), "X1": rng.standard_normal((1, 8)).astype(np.float32)}
    counts = op_counts(_check(model, feeds))
    assert counts == ({"Gemm": 2} if opset < 15 else {"Shape": 2, "Concat": 2, "Gemm": 1, "Split": 1})

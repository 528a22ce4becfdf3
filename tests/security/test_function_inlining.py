"""Model-local functions are inlined at load: a model whose calls expand out of proportion to its
stored nodes (each function calling the previous twice: 2^K nodes from a 1.4 KB model, 20 s and
720 MiB to create at K=17) is refused before inlining; repeated layers as functions still load."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ep_core
from ep_core.sdk.errors import InvalidGraph

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _nested(k: int, calls: int = 2) -> onnx.ModelProto:
    funcs = [helper.make_function("local", "F0", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])], OPSETS[:1])]
    for i in range(1, k + 1):
        names = ["x", *[f"t{j}" for j in range(calls - 1)], "y"]
        nodes = [helper.make_node(f"F{i - 1}", [names[j]], [names[j + 1]], domain="local") for j in range(calls)]
        funcs.append(helper.make_function("local", f"F{i}", ["x"], ["y"], nodes, OPSETS))
    g = helper.make_graph(
        [helper.make_node(f"F{k}", ["x"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(g, functions=funcs, opset_imports=OPSETS, ir_version=10)


def test_an_exponential_function_expansion_is_refused_before_inlining() -> None:
    with pytest.raises(InvalidGraph, match="expand to 131072 nodes when inlined, from 36 stored"):
        ep_core.InferenceSession(_nested(17).SerializeToString(), providers=["CpuReferenceExecutionProvider"])


@pytest.mark.parametrize(("k", "calls"), [(10, 2), (1, 300)])
def test_functions_within_bounds_are_inlined_and_run(k: int, calls: int) -> None:
    """2^10 nested calls, and one function called 300 times in a row (a stack of layers)."""
    sess = ep_core.InferenceSession(_nested(k, calls).SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    got = sess.run(None, {"x": np.array([3.0], np.float32)})[0]
    np.testing.assert_array_equal(got, np.array([3.0 * (-1) ** (calls**k)], np.float32))

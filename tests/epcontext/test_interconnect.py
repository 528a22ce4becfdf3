"""EPContext nodes from different models merged and interconnected (the EP Context design's
reason for ``ep.context_node_name_prefix``): a context node is bound to its graph by position, so
its edges may be renamed; a value of another type or shape reaching it is refused, naming it."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from epcontext_support import NUMBA, options
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession
from ep_core.sdk.errors import InvalidArgument


def _model(path: Path, x: str, y: str, seed: int, width: int = 4) -> None:
    w = np.random.default_rng(seed).standard_normal((width, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", [x, "w"], ["m"]), helper.make_node("Tanh", ["m"], [y])],
        "g",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def _context(path: Path, prefix: str) -> onnx.ModelProto:
    so = options(ep__context_enable=1, ep__context_node_name_prefix=prefix)
    sess = InferenceSession(str(path), so, providers=[NUMBA])
    ctx = Path(sess.context_model_path)
    sess.close()
    return onnx.load(str(ctx))


def _chain(tmp_path: Path, b_width: int) -> tuple[Path, np.ndarray | None]:
    """Model a's context node feeds model b's (b's input edge renamed to a's output 'y'; both
    models call their values x and y)."""
    _model(tmp_path / "a.onnx", "x", "y", 0)
    _model(tmp_path / "b.onnx", "x", "y", 1, b_width)
    a, b = _context(tmp_path / "a.onnx", "A_"), _context(tmp_path / "b.onnx", "B_")
    node = onnx.NodeProto()
    node.CopyFrom(b.graph.node[0])
    node.input[:] = ["y"]
    node.output[:] = ["z"]
    a.graph.node.append(node)
    a.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4]))
    onnx.checker.check_model(a)
    onnx.save(a, str(tmp_path / "chain.onnx"))
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    if b_width != 4:
        return tmp_path / "chain.onnx", None
    ya = ort.InferenceSession(str(tmp_path / "a.onnx")).run(None, {"x": x})[0]
    return tmp_path / "chain.onnx", ort.InferenceSession(str(tmp_path / "b.onnx")).run(None, {"x": ya})[0]


def test_context_nodes_of_two_models_interconnect(tmp_path: Path) -> None:
    path, expected = _chain(tmp_path, 4)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # still signed: the binding is positional, names are free
        sess = InferenceSession(str(path), options(ep__context_require_signature=1), providers=[NUMBA])
    assert sess.get_providers()[0] == NUMBA
    np.testing.assert_allclose(sess.run(["z"], {"x": x})[0], expected, rtol=1e-6, atol=1e-6)


def test_a_value_of_another_shape_reaching_a_context_node_is_refused(tmp_path: Path) -> None:
    path, _ = _chain(tmp_path, 6)  # b was written for [N, 6] inputs; a gives [N, 4]
    sess = InferenceSession(str(path), providers=[NUMBA])
    with pytest.raises(InvalidArgument, match=r"B_.*input 'y' is float32\[3, 4\], but the context graph was written"):
        sess.run(None, {"x": np.ones((3, 4), np.float32)})

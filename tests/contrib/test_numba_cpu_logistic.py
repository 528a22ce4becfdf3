"""A float32 Sigmoid that feeds a quantizer (directly, or through the Mul of a SiLU) compiles to
MLAS's logistic bit for bit (the reference EP's ``special.mlas_logistic``, onnxruntime's kernel),
so quantized outputs equal onnxruntime's; elsewhere the fast form stays."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu")

from ep_core import InferenceSession  # noqa: E402
from ep_cpu_reference.kernels.special import mlas_logistic  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
N = 1 << 16


def _model(silu: bool) -> bytes:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"])]
    if silu:
        nodes.append(helper.make_node("Mul", ["x", "s"], ["m"]))
    nodes.append(helper.make_node("QuantizeLinear", ["m" if silu else "s", "scale", "zp"], ["q"]))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [N]),
            helper.make_tensor_value_info("q", TensorProto.UINT8, [N]),
        ],
        [
            numpy_helper.from_array(np.array(1 / 255 if not silu else 0.05, np.float32), "scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "zp"),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("silu", [False, True])
def test_a_sigmoid_before_a_quantizer_is_mlas_logistic_bit_for_bit(silu: bool) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [rng.standard_normal(N // 2).astype(np.float32) * 6, np.linspace(-20, 20, N // 2, dtype=np.float32)]
    )
    x[:3] = [np.inf, -np.inf, 0.0]
    model = _model(silu)
    sess = InferenceSession(model, providers=[NUMBA])
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {NUMBA}
    s, q = sess.run(None, {"x": x})
    np.testing.assert_array_equal(s.view(np.uint32), mlas_logistic(x).view(np.uint32))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    np.testing.assert_array_equal(q, ort.InferenceSession(model, so).run(None, {"x": x})[1])


def test_a_sigmoid_elsewhere_keeps_the_fast_form() -> None:
    from ep_numba_cpu.ops import expression

    assert "_logistic_mlas32" not in (expression("Sigmoid", {"exact": False}, ["x0"], ["float32"], "float32") or "")
    assert "_logistic_mlas32" in (expression("Sigmoid", {"exact": True}, ["x0"], ["float32"], "float32") or "")

"""The fast recurrent loops (kernels/_rnn_fast.py: both directions per step, negated sigmoid-gate
weights, preallocated buffers) against the real onnxruntime, over what selects them: LSTM, GRU
(linear_before_reset 0 and 1) and RNN in every direction and layout, with and without bias and
initial states, weights as initializers (prepared once) and as graph inputs (prepared per run);
and against the general per-step driver, which sequence lengths select."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ep_core

ort = pytest.importorskip("onnxruntime")

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
T, B, IN, H = 5, 3, 4, 6


def _model(op: str, direction: str, layout: int, with_bias: bool, with_states: bool, const: bool, **attrs):
    """The model and its feed; the same arrays (seeded) whatever the layout."""
    _R = np.random.default_rng(7)
    d = 2 if direction == "bidirectional" else 1
    g = _GATES[op]
    arrays = {
        "x": _R.standard_normal((T, B, IN)).astype(np.float32),
        "w": (_R.standard_normal((d, g * H, IN)) * 0.5).astype(np.float32),
        "r": (_R.standard_normal((d, g * H, H)) * 0.5).astype(np.float32),
    }
    if with_bias:
        arrays["b"] = _R.standard_normal((d, 2 * g * H)).astype(np.float32)
    if with_states:
        arrays["h0"] = _R.standard_normal((d, B, H)).astype(np.float32)
        if op == "LSTM":
            arrays["c0"] = _R.standard_normal((d, B, H)).astype(np.float32)
    if layout:  # batch first: X (B, T, I), states (B, D, H)
        arrays = {n: a.transpose(1, 0, 2).copy() if n in ("x", "h0", "c0") else a for n, a in arrays.items()}
    names = ["x", "w", "r", "b", "", "h0", "c0"][: 7 if op == "LSTM" else 6]
    names = [n if n in arrays else "" for n in names]
    while not names[-1]:
        names.pop()
    outs = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, direction=direction, hidden_size=H, layout=layout, **attrs)
    consts = {"w", "r", "b"} if const else set()
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in arrays.items() if n not in consts
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items() if n in consts]
    graph_out = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], op, inputs, graph_out, inits)
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 22)])
    return model.SerializeToString(), {n: a for n, a in arrays.items() if n not in consts}


def _ep(model: bytes, feed: dict) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    first = sess.run(None, feed)
    second = sess.run(None, feed)  # with the weights prepared by the first run
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    return second


def _compare(model: bytes, feed: dict, layout: int = 0) -> None:
    """onnxruntime has no layout=1 (batch first): its layout-0 results, transposed, are the oracle."""
    if layout:
        m = onnx.load_from_string(model)
        for a in m.graph.node[0].attribute:
            if a.name == "layout":
                a.i = 0
        feed0 = {n: v.transpose(1, 0, 2).copy() if n in ("x", "h0", "c0") else v for n, v in feed.items()}
        for vi in m.graph.input:
            if vi.name in ("x", "h0", "c0"):
                dims = vi.type.tensor_type.shape.dim
                dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
        model0 = m.SerializeToString()
    else:
        model0, feed0 = model, feed
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model0, so, providers=["CPUExecutionProvider"]).run(None, feed0)
    if layout:
        want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2) for w in want]
    for g, w in zip(_ep(model, feed), want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(
    "op,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 0}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]
)
def test_fast_loops_match_onnxruntime(op: str, attrs: dict, direction: str) -> None:
    for layout, with_bias, with_states, const in (
        (0, True, True, True),
        (1, True, True, False),
        (0, False, False, True),
    ):
        _compare(*_model(op, direction, layout, with_bias, with_states, const, **attrs), layout)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_sequence_lengths_take_the_general_driver_and_agree(op: str) -> None:
    """Ragged lengths: steps past a sequence's end emit zeros and keep the state, as onnxruntime."""
    model, feed = _model(op, "bidirectional", 0, True, True, True)
    m = onnx.load_from_string(model)
    m.graph.node[0].input[4] = "lens"
    m.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [B]))
    feed["lens"] = np.array([T, 2, 4], np.int32)
    _compare(m.SerializeToString(), feed)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_initial_states_are_not_written(op: str) -> None:
    """Batch 1: the transposed state is contiguous already, so only an explicit copy keeps the
    loops' in-place updates out of the caller's arrays."""
    model, feed = _model(op, "bidirectional", 0, True, True, False)
    feed = {n: (a[:, :1].copy() if n in ("x", "h0", "c0") else a) for n, a in feed.items()}
    m = onnx.load_from_string(model)
    for vi in m.graph.input:
        if vi.name in ("x", "h0", "c0"):
            vi.type.tensor_type.shape.dim[1].dim_value = 1
    before = {n: a.copy() for n, a in feed.items()}
    _compare(m.SerializeToString(), feed)
    for n, a in feed.items():
        np.testing.assert_array_equal(a, before[n], err_msg=n)


@pytest.mark.parametrize(("op", "attrs"), [("LSTM", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {}), ("RNN", {})])
def test_two_rows_take_a_product_per_row(op: str, attrs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two batch rows and H >= 128: each direction's recurrent product runs as one gemv per row
    (``Recurrent.rows``); against onnxruntime within 1e-4 of the outputs' scale (tanh-bounded: at
    H = 128 these weights give pre-activations near 10, and the stacked product differs from
    onnxruntime by as much)."""
    from ep_cpu_reference.kernels._rnn_fast import Recurrent

    monkeypatch.setitem(globals(), "B", 2)
    monkeypatch.setitem(globals(), "H", 128)
    assert Recurrent(np.zeros((2, _GATES[op] * 128, 128), np.float32), _GATES[op]).rows is not None
    model, feed = _model(op, "bidirectional", 0, True, True, True, **attrs)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(_ep(model, feed), want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)

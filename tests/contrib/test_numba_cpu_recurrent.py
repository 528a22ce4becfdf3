"""The Numba CPU EP's compiled LSTM / GRU loops (ep_numba_cpu.recurrent) against onnxruntime and
the reference EP on one-node models, over the attribute grid: directions, layouts, sequence
lengths, initial states, clip, input_forget / linear_before_reset, peepholes, activations, absent
optional outputs; what ``kernel_sources`` declines, and the typed errors of bad inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
ort = pytest.importorskip("onnxruntime")

from ep_core import InferenceSession  # noqa: E402
from ep_core.sdk.errors import InvalidArgument  # noqa: E402
from ep_numba_cpu import codegen, recurrent  # noqa: E402

INPUTS = {
    "LSTM": ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"],
    "GRU": ["X", "W", "R", "B", "sequence_lens", "initial_h"],
}
OUTPUTS = {"LSTM": ["Y", "Y_h", "Y_c"], "GRU": ["Y", "Y_h"]}
KINDS = {"hidden_size": "int", "direction": "string", "layout": "int", "clip": "float", "input_forget": "int"}
KINDS.update(
    {"linear_before_reset": "int", "activations": "strings", "activation_alpha": "floats", "activation_beta": "floats"}
)
rng = np.random.default_rng(15)


def record(
    op: str, attrs: dict[str, Any], inputs: list[str], outputs: list[str], dtype: str = "float32"
) -> dict[str, Any]:
    """The delegated node's record as spec.py stores it (attributes as [kind, value])."""
    return {
        "kind": "node",
        "op": op,
        "domain": "",
        "opset": 14,
        "attrs": {k: [KINDS[k], v] for k, v in attrs.items()},
        "inputs": inputs,
        "outputs": outputs,
        "in_types": [[dtype if n == "X" else None, None] for n in inputs],
        "out_types": [[dtype, None] for _ in outputs],
    }


def compute(rec: dict[str, Any]) -> Any:
    sources = recurrent.kernel_sources(rec)
    assert sources is not None, recurrent.decline_reason(rec)
    kernels = {ks.key: codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher for ks in sources}
    return recurrent.make_compute(rec, kernels)


def problem(op: str, *, hs=4, seq=5, batch=3, isz=3, direction="forward", layout=0, dtype=np.float32, **opt):
    """Random feeds (small weights: the bounded activations keep values in range)."""
    g, d = (4 if op == "LSTM" else 3), (2 if direction == "bidirectional" else 1)
    xs, ss = ((seq, batch, isz), (d, batch, hs)) if layout == 0 else ((batch, seq, isz), (batch, d, hs))
    feeds = {
        "X": rng.standard_normal(xs),
        "W": rng.standard_normal((d, g * hs, isz)) * 0.5,
        "R": rng.standard_normal((d, g * hs, hs)) * 0.5,
        "B": rng.standard_normal((d, 2 * g * hs)) * 0.5,
    }
    if opt.get("lens") is not None:
        feeds["sequence_lens"] = np.array(opt["lens"], np.int32)
    if opt.get("h0"):
        feeds["initial_h"] = rng.standard_normal(ss)
    if opt.get("c0") and op == "LSTM":
        feeds["initial_c"] = rng.standard_normal(ss)
    if opt.get("p") and op == "LSTM":
        feeds["P"] = rng.standard_normal((d, 3 * hs))
    return {k: v if v.dtype == np.int32 else v.astype(dtype) for k, v in feeds.items()}


def one_node(
    op: str, attrs: dict[str, Any], feeds: dict[str, np.ndarray], outputs: list[str]
) -> tuple[bytes, list[str]]:
    names = [n if n in feeds else "" for n in INPUTS[op]]
    while names[-1] == "":
        names.pop()
    elem = helper.np_dtype_to_tensor_dtype(feeds["X"].dtype)
    ins = [
        helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else elem, feeds[n].shape)
        for n in names
        if n
    ]
    outs = [helper.make_tensor_value_info(n, elem, None) for n in outputs if n]
    graph = helper.make_graph([helper.make_node(op, names, outputs, **attrs)], "g", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return model.SerializeToString(), names


def run_all(op, attrs, feeds, outputs, *, with_ort=True):
    """(ours, onnxruntime's or None, the reference EP's), produced outputs only."""
    data, names = one_node(op, attrs, feeds, outputs)
    rec = record(op, attrs, names, outputs, str(feeds["X"].dtype))
    got = compute(rec)(*[feeds[n] if n else None for n in names])
    assert len(got) == len(outputs)
    assert all((g is None) == (not n) for g, n in zip(got, outputs, strict=True))
    got = [g for g in got if g is not None]
    feed = {n: feeds[n] for n in names if n}
    want = None
    if with_ort:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feed)
    ref = InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    return got, want, ref


def close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lens", [None, [5, 2, 4]])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("extra", ["plain", "states_and_peepholes", "clip"])
def test_grid_matches_onnxruntime_and_reference(op, direction, lens, mode, extra):
    attrs: dict[str, Any] = {"hidden_size": 4, "direction": direction}
    if mode:
        attrs["input_forget" if op == "LSTM" else "linear_before_reset"] = 1
    if extra == "clip":
        attrs["clip"] = 0.8
    states = extra == "states_and_peepholes"
    feeds = problem(op, direction=direction, lens=lens, h0=states, c0=states, p=states)
    got, want, ref = run_all(op, attrs, feeds, OUTPUTS[op])
    close(got, want)
    close(got, ref)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_layout_1_is_layout_0_transposed(op, direction):
    """onnxruntime refuses layout=1: it is checked against the reference EP and against
    onnxruntime on the same problem in layout 0."""
    attrs = {"hidden_size": 4, "direction": direction, "layout": 1}
    feeds = problem(op, direction=direction, layout=1, lens=[5, 3, 1], h0=True, c0=True)
    got, _, ref = run_all(op, attrs, feeds, OUTPUTS[op], with_ort=False)
    close(got, ref)
    feeds0 = {k: v.transpose(1, 0, 2) if k in ("X", "initial_h", "initial_c") else v for k, v in feeds.items()}
    got0, want0, _ = run_all(op, {**attrs, "layout": 0}, feeds0, OUTPUTS[op])
    close(got0, want0)
    np.testing.assert_array_equal(got[0], got0[0].transpose(2, 0, 1, 3))
    for g, g0 in zip(got[1:], got0[1:], strict=True):
        np.testing.assert_array_equal(g, g0.transpose(1, 0, 2))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_empty_sequence_ends_in_zeros_as_onnxruntime(op):
    """A zero sequence length: Y is zero and so are Y_h / Y_c (onnxruntime). The reference EP
    keeps the initial state there instead: every other value must still match it."""
    attrs = {"hidden_size": 4, "direction": "bidirectional"}
    feeds = problem(op, direction="bidirectional", lens=[3, 0, 5], h0=True, c0=True)
    got, want, ref = run_all(op, attrs, feeds, OUTPUTS[op])
    close(got, want)
    for g in got[1:]:
        assert not g[:, 1].any()
    close([got[0]] + [np.delete(g, 1, axis=1) for g in got[1:]], [ref[0]] + [np.delete(r, 1, axis=1) for r in ref[1:]])


@pytest.mark.parametrize(
    "op,outputs",
    [("LSTM", ["Y"]), ("LSTM", ["", "Y_h"]), ("LSTM", ["Y", "", "Y_c"]), ("GRU", ["", "Y_h"]), ("GRU", ["Y"])],
)
def test_absent_outputs(op, outputs):
    feeds = problem(op, lens=[5, 1, 3], h0=True)
    got, want, ref = run_all(op, {"hidden_size": 4}, feeds, outputs)
    close(got, want)
    close(got, ref)


@pytest.mark.parametrize(
    "op,acts",
    [
        ("LSTM", ["HardSigmoid", "Softsign", "Elu"]),
        ("LSTM", ["Sigmoid", "ScaledTanh", "LeakyRelu"]),
        ("LSTM", ["Sigmoid", "Relu", "Softplus"]),
        ("GRU", ["HardSigmoid", "Affine"]),
        ("GRU", ["Sigmoid", "ThresholdedRelu"]),
        ("GRU", ["Sigmoid", "Softsign"]),
    ],
)
def test_activations_with_alpha_beta(op, acts):
    attrs = {
        "hidden_size": 3,
        "direction": "bidirectional",
        "activations": acts + ["Sigmoid", "Tanh", "Tanh"][: len(acts)],
        "activation_alpha": [0.3, 0.7, 0.2],
        "activation_beta": [0.6, 0.4],
        "clip": 2.0,
    }
    feeds = problem(op, hs=3, direction="bidirectional", h0=True)
    got, want, ref = run_all(op, attrs, feeds, OUTPUTS[op])
    close(got, want)
    close(got, ref)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_float64_matches_reference(op):
    """onnxruntime has no double LSTM / GRU: float64 is checked against the reference EP."""
    attrs: dict[str, Any] = {"hidden_size": 4, "direction": "bidirectional"}
    attrs.update({"linear_before_reset": 1} if op == "GRU" else {"clip": 1.5, "input_forget": 1})
    feeds = problem(op, direction="bidirectional", lens=[4, 5, 2], h0=True, c0=True, p=True, dtype=np.float64)
    got, _, ref = run_all(op, attrs, feeds, OUTPUTS[op], with_ort=False)
    close(got, ref, rtol=1e-12, atol=1e-12)


def test_one_kernel_per_op_and_dtype():
    """Shapes and attributes are runtime arguments: every LSTM node of a dtype shares one kernel."""
    keys = set()
    for attrs in ({"hidden_size": 4}, {"hidden_size": 128, "direction": "bidirectional", "clip": 1.0, "layout": 1}):
        for op in ("LSTM", "GRU"):
            for dt in ("float32", "float64"):
                keys.add((op, dt, recurrent.kernel_sources(record(op, attrs, INPUTS[op][:3], ["Y"], dt))[0].key))
    assert len(keys) == 4 and len({k for *_, k in keys}) == 4


@pytest.mark.parametrize(
    "op,attrs,dtype,why",
    [
        ("LSTM", {"hidden_size": 4}, "float16", "dtype 'float16'"),
        ("GRU", {"hidden_size": 4}, None, "dtype None"),
        ("LSTM", {"hidden_size": 4, "activations": ["Sigmoid", "Tanh"]}, "float32", "2 activations"),
        ("GRU", {"hidden_size": 4, "activations": ["Sigmoid", "Gelu"]}, "float32", "'gelu' is not"),
        ("GRU", {"hidden_size": 4, "activations": ["Sigmoid", "Affine"]}, "float32", "onnxruntime defaults them to 0"),
        ("LSTM", {"hidden_size": 4, "direction": "sideways"}, "float32", "direction 'sideways'"),
    ],
)
def test_declined_nodes_say_why(op, attrs, dtype, why):
    """Nodes the loop does not serve (the reference kernel runs or refuses them): a missing or
    non-float dtype, a wrong activation count or name, and activations whose missing alpha/beta
    onnxruntime and ONNX (the reference EP) default differently."""
    rec = record(op, attrs, INPUTS[op][:3], ["Y"], dtype)
    assert recurrent.kernel_sources(rec) is None
    assert why in recurrent.decline_reason(rec)
    with pytest.raises(ValueError, match="not served"):
        recurrent.make_compute(rec, {})


def test_bad_inputs_raise_invalid_argument():
    feeds = problem("LSTM", lens=[5, 6, 1])
    fn = compute(record("LSTM", {"hidden_size": 4}, INPUTS["LSTM"][:5], ["Y"]))
    with pytest.raises(InvalidArgument, match=r"sequence_lens \[5, 6, 1\] must lie in \[0, 5\]"):
        fn(feeds["X"], feeds["W"], feeds["R"], feeds["B"], feeds["sequence_lens"])
    with pytest.raises(InvalidArgument, match="do not match 1 direction"):
        fn(feeds["X"], feeds["W"][:, :8], feeds["R"], None, None)
    with pytest.raises(InvalidArgument, match="initial_h has shape"):
        fn(feeds["X"], feeds["W"], feeds["R"], None, None, np.zeros((1, 2, 4), np.float32))


def test_weights_prepared_once_only_when_read_only():
    """Stored weights are read-only: prepared (transposed, biases folded) once. A writable W may
    hold new values in the same buffer on the next run: it is prepared again."""
    feeds = problem("GRU", h0=True)
    names = ["X", "W", "R", "B", "", "initial_h"]
    fn = compute(record("GRU", {"hidden_size": 4}, names, ["Y", "Y_h"]))
    args = [feeds[n] if n else None for n in names]
    first = fn(*args)
    feeds["W"] *= 2.0  # same object, new values
    again = fn(*args)
    fresh = compute(record("GRU", {"hidden_size": 4}, names, ["Y", "Y_h"]))(
        *[a.copy() if a is not None else None for a in args]
    )
    np.testing.assert_array_equal(again[0], fresh[0])
    assert not np.array_equal(first[0], again[0])
    frozen = [a if a is None else a.copy() for a in args]
    for a in frozen[1:4]:
        a.flags.writeable = False
    np.testing.assert_array_equal(fn(*frozen)[0], fresh[0])
    np.testing.assert_array_equal(fn(*frozen)[0], fresh[0])


def test_frozen_weights_are_prepared_once_and_any_other_array_is_compared(monkeypatch):
    """A runner's weights (stored or folded, nn_common.frozen: the same object holds the same values
    every run) are prepared once and never compared. Any other array may change under the same
    object (a read-only view of a buffer its owner writes): its values are compared every run and
    prepared again when they changed, so a stale preparation is never used."""
    from ep_cpu_reference.kernels.nn_common import frozen
    from ep_numba_cpu import recurrent

    feeds = problem("LSTM")
    names = ["X", "W", "R", "B"]
    fn = compute(record("LSTM", {"hidden_size": 4}, names, ["Y", "Y_h"]))
    weights = [frozen(feeds[n].copy()) for n in ("W", "R", "B")]
    preparations, compared, equal = [], [], np.array_equal
    real = recurrent._Prepared.__init__

    def counted(self, *args):
        preparations.append(1)
        real(self, *args)

    monkeypatch.setattr(recurrent._Prepared, "__init__", counted)
    monkeypatch.setattr(recurrent.np, "array_equal", lambda *a, **k: compared.append(1) or equal(*a, **k))
    want = fn(feeds["X"], *weights)
    for _ in range(3):
        np.testing.assert_array_equal(fn(feeds["X"], *weights)[0], want[0])
    assert len(preparations) == 1 and not compared
    buffers = {n: feeds[n].copy() for n in ("W", "R", "B")}
    views = [buffers[n].view() for n in ("W", "R", "B")]
    for v in views:
        v.flags.writeable = False  # read-only, but its owner can still write
    fn(feeds["X"], *views)
    buffers["W"] *= 2.0  # same view objects, new values
    changed = fn(feeds["X"], *views)
    assert compared
    fresh = compute(record("LSTM", {"hidden_size": 4}, names, ["Y", "Y_h"]))(
        feeds["X"], *(buffers[n].copy() for n in ("W", "R", "B"))
    )
    np.testing.assert_array_equal(changed[0], fresh[0])


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("clip", [None, 0.8])
@pytest.mark.parametrize("bias", [False, True])
def test_nan_in_the_input_goes_through_as_in_the_reference_ep(op, clip, bias):
    """The float32 gates clamped their argument with the NaN on the losing side of the comparison,
    so a NaN step gave finite states where the reference EP's (and torch's) are NaN from that
    step on. onnxruntime 1.31 itself differs by path: NaN without a bias input B, finite with one."""
    feeds = problem(op)
    if not bias:
        del feeds["B"]
    feeds["X"][1, 0, 1] = np.nan
    attrs: dict[str, Any] = {"hidden_size": 4, **({"clip": clip} if clip else {})}
    got, want, ref = run_all(op, attrs, feeds, OUTPUTS[op])
    for g, w, r in zip(got, want, ref, strict=True):
        assert np.isnan(r).any() and np.isnan(w).any() != bias
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6, equal_nan=True)
        if not bias:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_relu_and_hardsigmoid_gates_take_nan_to_zero_in_both_eps(op):
    """onnxruntime's recurrent Relu and HardSigmoid are std::max(0, x): a NaN pre-activation gives
    0 (the Numba loops did so; the reference EP propagated it)."""
    feeds = problem(op)
    feeds["X"][1, 0, 1] = np.nan
    acts = ["HardSigmoid", "Relu", "Relu"][: 3 if op == "LSTM" else 2]
    got, _, ref = run_all(op, {"hidden_size": 4, "activations": acts}, feeds, OUTPUTS[op], with_ort=False)
    for g, r in zip(got, ref, strict=True):
        assert not np.isnan(r).any()
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)

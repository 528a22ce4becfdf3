"""The Numba CPU EP's compiled recurrent product and LSTM cell of com.microsoft DynamicQuantizeLSTM
(ep_numba_cpu.int_loops) give the reference EP's outputs to the bit (the reference itself is
pinned against onnxruntime in tests/cpu_reference/test_quantize_ms.py): int8 and uint8 weights with
zero points, per-tensor and per-column scales, every direction, initial states, and a hidden size
whose sums need float64 in the reference (|sum| >= 2^24) and int32 here."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _support.oracle import one_node_model

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_numba_cpu import int_loops, vnni  # noqa: E402

NUMBA = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]


def _model(direction: str, wdt: Any, per_channel: bool, h: int, states: bool, seed: int) -> tuple[bytes, dict]:
    rng = np.random.default_rng(seed)
    t, b, i = 5, 2, 12
    d = 2 if direction == "bidirectional" else 1
    info = np.iinfo(wdt)
    shp = (d, 4 * h) if per_channel else (d,)
    zero = rng.integers(-3, 4, shp).astype(wdt) if wdt == np.int8 else rng.integers(120, 136, shp).astype(wdt)
    ins = [("x", rng.standard_normal((t, b, i)).astype(np.float32))]
    ins += [("w", rng.integers(info.min, info.max + 1, (d, i, 4 * h)).astype(wdt))]
    ins += [("r", rng.integers(info.min, info.max + 1, (d, h, 4 * h)).astype(wdt))]
    ins += [("b", rng.standard_normal((d, 8 * h)).astype(np.float32) * 0.1), ("sl", None)]
    for _ in range(2):
        ins.append(("s", rng.standard_normal((d, b, h)).astype(np.float32) * 0.5 if states else None))
    ins[-2], ins[-1] = ("h0", ins[-2][1]), ("c0", ins[-1][1])
    ins += [("p", None), ("ws", rng.uniform(0.002, 0.006, shp).astype(np.float32)), ("wz", zero)]
    ins += [("rs", rng.uniform(0.002, 0.006, shp).astype(np.float32)), ("rz", zero)]
    consts = {"w", "r", "b", "ws", "wz", "rs", "rz"}
    return one_node_model("DynamicQuantizeLSTM", ins, [np.float32] * 3, consts, hidden_size=h, direction=direction)


def product_path(path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of ``int_loops``' recurrent product for ``path``: "vnni" (skipped on a CPU
    without AVX-512 VNNI) or "int16" (the loop every CPU runs; VNNI reported absent)."""
    if path == "vnni":
        if not vnni.available():
            pytest.skip("this CPU has no AVX-512 VNNI (the int16 case covers its loop)")
        return "_gemm_recurrent"
    monkeypatch.setattr(vnni, "available", lambda: False)
    return "_product"


@pytest.mark.parametrize("path", ["vnni", "int16"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("wdt", [np.int8, np.uint8])
@pytest.mark.parametrize(("per_channel", "h", "states"), [(False, 8, False), (True, 300, True)])
def test_recurrent_product_matches_the_reference_ep(
    path: str, direction: str, wdt: Any, per_channel: bool, h: int, states: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[bool] = []
    name = product_path(path, monkeypatch)
    real = getattr(int_loops, name)

    def spy(fn: Any, v: np.ndarray) -> Any:
        got = real(fn, v)
        served.append(got is not None)
        return got

    from ep_cpu_reference.kernels import _rnn_fast

    numpy_cells: list[int] = []
    real_cell = _rnn_fast.mlas_lstm_cell
    monkeypatch.setattr(int_loops, name, spy)
    monkeypatch.setattr(_rnn_fast, "mlas_lstm_cell", lambda *a: numpy_cells.append(1) or real_cell(*a))
    model, feed = _model(direction, wdt, per_channel, h, states, seed=h + len(direction))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = InferenceSession(model, providers=NUMBA).run(None, feed)
        assert not numpy_cells  # every step took the compiled cell
        want = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert served == [True] * (2 if direction == "bidirectional" else 1)


def test_weights_past_the_loop_bounds_keep_blas() -> None:
    """|R - R_zp| above 255 (not an int8/uint8 weight) or a hidden size whose sums could leave
    int32: no compiled product."""
    assert int_loops._product(None, np.full((4, 3, 2), 256.0)) is None
    assert int_loops._product(None, np.zeros((4, int_loops._MAX_K + 1, 1))) is None
    assert int_loops._product(None, np.full((4, 3, 2), -255.0)) is not None


@pytest.mark.parametrize("path", ["vnni", "int16"])
def test_sums_past_float32_exactness(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """H = 1100: the reference EP's exact product needs float64 (sums reach 2^24) and rounds it to
    float32; the int32 loops round the same integer the same way."""
    from ep_cpu_reference.kernels import _rnn_fast

    product_path(path, monkeypatch)
    dtypes: list[Any] = []
    real = _rnn_fast.exact_dtype
    monkeypatch.setattr(_rnn_fast, "exact_dtype", lambda w: dtypes.append(real(w)) or dtypes[-1])
    model, feed = _model("forward", np.int8, False, 1100, True, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = InferenceSession(model, providers=NUMBA).run(None, feed)
        want = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    assert np.float64 in dtypes
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_compiled_cell_is_mlas_lstm_cell_bit_for_bit() -> None:
    """The compiled cell against the reference EP's NumPy one, over gate sums from 1e-3 to 1e3 (the
    clamps of the logistic at +-18 and tanh at +-9 crossed), signed zeros, infinities and NaN:
    every float bit for bit (NaN where NumPy gives NaN, its sign bit aside)."""
    from ep_cpu_reference.kernels import _rnn_fast
    from ep_numba_cpu import codegen

    src = int_loops.cell_kernel()
    fn = codegen.compile_kernel(src.source, src.signature, src.parallel).dispatcher
    consts = int_loops._cell_constants()
    rng = np.random.default_rng(5)
    for trial, scale in enumerate([1e-3, 0.5, 3.0, 12.0, 40.0, 1e3] * 3):
        b, h = 1 + trial % 3, int(rng.integers(1, 400))
        g = (rng.standard_normal((4, b, h)) * scale).astype(np.float32)
        c = (rng.standard_normal((b, h)) * scale).astype(np.float32)
        if trial % 6 == 5:
            g.flat[::7], g.flat[1::11], c.flat[::13], c.flat[2::5] = np.nan, -0.0, np.inf, -0.0
        want = [g.copy(), c.copy(), np.empty((b, h), np.float32)]
        got = [g.copy(), c.copy(), np.empty((b, h), np.float32)]
        with np.errstate(all="ignore"):
            _rnn_fast.mlas_lstm_cell(*want)
        fn(*got, *consts)
        for w, o in zip(want[1:], got[1:], strict=True):
            assert np.array_equal(np.isnan(w), np.isnan(o))
            np.testing.assert_array_equal(
                np.where(np.isnan(w), 0, w).view(np.uint32), np.where(np.isnan(o), 0, o).view(np.uint32)
            )


def _loop_case(rng: np.random.Generator, n_dir: int, batch: int, hs: int, bias: bool) -> tuple[Any, ...]:
    n_t = 4
    rq = rng.integers(-127, 129, (n_dir, 4, hs, hs)).astype(np.float64)
    rs = rng.uniform(0.001, 0.01, (4, n_dir, 1, hs)).astype(np.float32)
    xw = (rng.standard_normal((n_t, 4, n_dir, batch, hs)) * 2).astype(np.float32)
    b = (rng.standard_normal((4, n_dir, 1, hs)) * 0.1).astype(np.float32) if bias else None
    h = (rng.standard_normal((n_dir, batch, hs)) * 0.5).astype(np.float32)
    c = (rng.standard_normal((n_dir, batch, hs)) * 0.5).astype(np.float32)
    return xw, rq, rs, b, h, c


@pytest.mark.skipif(not vnni.available(), reason="this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize(("n_dir", "batch", "hs"), [(1, 1, 3), (2, 2, 16), (2, 3, 70), (1, 5, 64), (2, 6, 129)])
@pytest.mark.parametrize("bias", [False, True])
def test_compiled_time_loop_is_dq_lstm_loop_bit_for_bit(n_dir: int, batch: int, hs: int, bias: bool) -> None:
    """DynamicQuantizeLSTM's whole compiled loop (VNNI) against the reference's ``dq_lstm_loop``:
    every state and cell bit for bit, batches past a block of four rows, H off the layout's
    multiples; a non-finite input is left to the reference's loop (None)."""
    from ep_cpu_reference.kernels import _rnn_fast
    from ep_numba_cpu import codegen

    rng = np.random.default_rng(n_dir * 100 + batch * 10 + hs)
    xw, rq, rs, b, h, c = _loop_case(rng, n_dir, batch, hs, bias)
    src = int_loops.loop_kernel()
    fn = codegen.compile_kernel(src.source, src.signature, src.parallel).dispatcher
    run = int_loops._time_loop(fn, rq, int_loops._cell_constants())
    assert run is not None
    want_ys, want_c = _rnn_fast.dq_lstm_loop(xw, rq, rs, b, h.copy(), c.copy(), [None] * n_dir)
    got_ys, got_c = run(xw, rs, b, h.copy(), c.copy())
    np.testing.assert_array_equal(got_ys.view(np.uint32), want_ys.view(np.uint32))
    np.testing.assert_array_equal(got_c.view(np.uint32), want_c.view(np.uint32))
    tiny = np.zeros_like(h)
    tiny[0, 0, 0] = np.float32(1e-44)  # a zero scale at the first step: 0 / 0 saturates low
    want_ys, want_c = _rnn_fast.dq_lstm_loop(xw, rq, rs, b, tiny.copy(), c.copy(), [None] * n_dir)
    got_ys, got_c = run(xw, rs, b, tiny.copy(), c.copy())
    np.testing.assert_array_equal(got_ys.view(np.uint32), want_ys.view(np.uint32))
    np.testing.assert_array_equal(got_c.view(np.uint32), want_c.view(np.uint32))
    xw[1, 2, 0, 0, 0] = np.nan
    assert run(xw, rs, b, h.copy(), c.copy()) is None


@pytest.mark.skipif(not vnni.available(), reason="this CPU has no AVX-512 VNNI")
def test_session_takes_the_compiled_loop_and_leaves_nan_to_the_reference_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = int_loops._time_loop

    def spy(*args: Any) -> Any:
        run = real(*args)
        return None if run is None else (lambda *a: calls.append((got := run(*a)) is not None) or got)

    monkeypatch.setattr(int_loops, "_time_loop", spy)
    model, feed = _model("bidirectional", np.uint8, True, 40, True, seed=9)
    h0 = feed["h0"].copy()
    h0[1, 0, 3] = np.nan  # (a NaN in X is quantized away: X's range leaves it out, as onnxruntime's)
    for feeds in (feed, {**feed, "h0": h0}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = InferenceSession(model, providers=NUMBA).run(None, feeds)
            want = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert calls == [True, False]  # finite: the compiled loop; a NaN state: the reference's loop

"""Fast time loops for the common recurrent layers (default activations, no clip, peepholes,
coupled gates or sequence lengths), shared by LSTM, GRU, RNN and com.microsoft's
DynamicQuantizeLSTM.

Why it is fast: a step of a small recurrent layer costs a dozen tiny NumPy calls, so the call
count (and each call's set-up) is the cost. Both directions advance in the same step (states
stacked as (D, H, B), transposed so that every gate is a contiguous block, the reverse
direction's inputs read backwards), the input projection of every step is one matmul per
direction before the loop, and every temporary is allocated once and written with ``out=``. The
weight columns of the sigmoid gates are negated once, so a gate array holds ``-x`` and the
sigmoid is ``1 / (1 + exp(g))`` with no negation per step: negation is exact in IEEE arithmetic,
so the results are bit for bit those of ``1 / (1 + exp(-x))``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ep_cpu_reference.kernels.nn_common import few_rows
from ep_cpu_reference.kernels.quantize import zero_point
from ep_cpu_reference.kernels.special import mlas_lstm_gates, mlas_tanh


def gate_signs(n_gates: int, n_sigmoid: int, hs: int, dtype: Any) -> np.ndarray:
    """(G*H,) of -1 over the first ``n_sigmoid`` gates' columns (the sigmoid gates: LSTM's i, o,
    f; GRU's z, r), +1 over the rest."""
    s = np.ones(n_gates * hs, dtype)
    s[: n_sigmoid * hs] = -1
    return s


def sigmoid_of_negated(g: np.ndarray) -> None:
    """In place: ``g`` holds ``-x``; it becomes sigmoid(x). exp is capped where it would overflow
    (the sigmoid there is below the type's smallest normal, 0 at its precision)."""
    np.minimum(g, 88.0 if g.dtype.itemsize <= 4 else 709.0, out=g)
    np.exp(g, out=g)
    g += 1.0
    np.reciprocal(g, out=g)


def reversed_dirs(direction: str) -> tuple[bool, ...]:
    """Per stacked direction, whether it reads the sequence backwards."""
    return {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}[direction]


class Recurrent:
    """One matmul's recurrent weights as (D, G', H, H) blocks: gates (G', D, H, B) = R @ h with h
    as (D, H, B), written by one stacked matmul straight into the gate-major buffer, so every
    gate's rows for all directions are contiguous (a strided view costs a ufunc about three times
    a contiguous one here). Each (H, H) @ (H, B) block keeps OpenBLAS on its small-matrix kernel:
    2x faster than one block-diagonal product over both directions at H=128, 4x at H=256."""

    def __init__(self, r: np.ndarray, n_gates: int) -> None:
        n_dir, _, hs = r.shape  # r: (D, G'H, H), sigmoid-gate rows already negated
        self.hs = hs
        self.shape = (n_gates, n_dir, hs)
        self.mat = np.ascontiguousarray(r.reshape(n_dir, n_gates, hs, hs))
        # two batch rows, H >= 128: a gemv per direction and row, 1.7x the stacked product (whose
        # (H, H) @ (H, 2) blocks take OpenBLAS's slow small-N path); at one row, or H < 128, slower
        self.rows = [self.mat[d].reshape(n_gates * hs, hs) for d in range(n_dir)] if hs >= 128 else None

    def buffer(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(storage, its gate view (G', D, H, B)): the same array."""
        buf = np.empty(self.shape + (batch,), self.mat.dtype)
        return buf, buf

    def __call__(self, h: np.ndarray, buf: np.ndarray) -> None:
        if self.rows is not None and h.shape[-1] == 2:
            tmp = np.empty(self.rows[0].shape[0], buf.dtype)
            for d, m in enumerate(self.rows):
                for b in (0, 1):
                    np.dot(m, h[d, :, b], out=tmp)
                    buf[:, d, :, b] = tmp.reshape(buf.shape[0], -1)
            return
        np.matmul(self.mat, h[:, None], out=buf.transpose(1, 0, 2, 3))


def project(x: np.ndarray, wt: np.ndarray, bias: np.ndarray | None, rev: tuple[bool, ...], hs: int) -> np.ndarray:
    """X (T, B, I) @ W_d (I, G*H) (+ bias_d) for every step and direction as (T, G, D, H, B), the
    reverse direction's steps in the order it runs them: one matmul per direction."""
    seq, batch = x.shape[:2]
    x2 = x.reshape(seq * batch, -1)
    n_gates = wt.shape[-1] // hs
    xw = np.empty((seq, n_gates, len(rev), hs, batch), x.dtype)
    for d, back in enumerate(rev):
        p = x2 @ wt[d]
        if bias is not None:
            p += bias[d]
        p = p.reshape(seq, batch, n_gates, hs)
        p = p[::-1] if back else p
        if batch <= 8:  # a copy per batch row runs along H; the whole transpose would run along B
            for b in range(batch):
                xw[:, :, d, :, b] = p[:, b]
        else:
            xw[:, :, d] = p.transpose(0, 2, 3, 1)
    return xw


def lstm_cell(g: np.ndarray, c: np.ndarray, h: np.ndarray) -> None:
    """One LSTM step after the gate sums ``g`` (IOFC, i/o/f negated): c = f*c + i*tanh(cand) in
    place, h = o*tanh(c) into ``h``; ``g`` is overwritten."""
    sigmoid_of_negated(g[:3])
    i, o, f, cand = g
    np.tanh(cand, out=cand)
    cand *= i
    c *= f
    c += cand
    np.tanh(c, out=h)
    h *= o


def mlas_lstm_cell(g: np.ndarray, c: np.ndarray, h: np.ndarray) -> None:
    """``lstm_cell`` with MLAS's logistic and tanh bit for bit, as onnxruntime's LSTM computes its
    activations (float32 only): for DynamicQuantizeLSTM, whose state is quantized again each step,
    so NumPy's ulp differences flipped a quantum of ddddocr's old model at step 2 and drifted 2.8e-3."""
    np.negative(g[:3], out=g[:3])
    g[...] = mlas_lstm_gates(g)
    i, o, f, cand = g
    cand *= i
    c *= f
    c += cand
    h[...] = mlas_tanh(c)
    h *= o


def lstm_loop(xw: np.ndarray, rec: Recurrent, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gates (IOFC, i/o/f negated) = R @ h + xw[t]; returns every step's h (T, D, H, B) in step
    order and the final cell. ``c`` is updated in place (pass a copy)."""
    ys = np.empty((xw.shape[0],) + h.shape, h.dtype)
    buf, g = rec.buffer(h.shape[-1])
    for t in range(xw.shape[0]):
        rec(h, buf)
        g += xw[t]
        h = ys[t]
        lstm_cell(g, c, h)
    return ys, c


def gru_loop(
    xw: np.ndarray, rec: Recurrent, rec_h: Recurrent | None, rbh: np.ndarray | None, h: np.ndarray
) -> np.ndarray:
    """Gates (ZRH, z/r negated). linear_before_reset (``rec_h`` None, ``rec`` all three gates):
    n = tanh(xh + r * (Rh @ h + Rbh)); else (``rec`` z and r, ``rec_h`` h's gate)
    n = tanh(xh + Rh @ (r * h)) with Rbh already in xw. Then h = n + z * (h - n)."""
    ys = np.empty((xw.shape[0],) + h.shape, h.dtype)
    buf, g = rec.buffer(h.shape[-1])
    zr, z, r = g[:2], g[0], g[1]
    if rec_h is None:
        n = g[2]
    else:
        buf_n, gn = rec_h.buffer(h.shape[-1])
        n, rh = gn[0], np.empty(h.shape, h.dtype)
    for t in range(xw.shape[0]):
        x = xw[t]
        rec(h, buf)
        zr += x[:2]
        sigmoid_of_negated(zr)
        if rec_h is None:
            if rbh is not None:
                n += rbh
            n *= r
        else:
            np.multiply(r, h, out=rh)
            rec_h(rh, buf_n)
        n += x[2]
        np.tanh(n, out=n)
        y = ys[t]
        np.subtract(h, n, out=y)
        y *= z
        y += n
        h = y
    return ys


def rnn_loop(xw: np.ndarray, rec: Recurrent, h: np.ndarray) -> np.ndarray:
    """h = tanh(R @ h + xw[t]) (biases in xw)."""
    ys = np.empty((xw.shape[0],) + h.shape, h.dtype)
    buf, g = rec.buffer(h.shape[-1])
    for t in range(xw.shape[0]):
        rec(h, buf)
        y = ys[t]
        np.add(g[0], xw[t, 0], out=y)
        np.tanh(y, out=y)
        h = y
    return ys


def unstep_t(ys: np.ndarray, rev: tuple[bool, ...]) -> np.ndarray:
    """Step-order transposed outputs (T, D, H, B) to ONNX's Y (T, D, B, H)."""
    y = np.empty(ys.shape[:2] + (ys.shape[3], ys.shape[2]), ys.dtype)
    for d, back in enumerate(rev):
        y[:, d] = (ys[::-1, d] if back else ys[:, d]).transpose(0, 2, 1)
    return y


def exact_dtype(wq: np.ndarray) -> Any:
    """float32 when every partial sum of a uint8-range operand (|a - a_zp| <= 255) times the
    integer columns of ``wq`` (I, N) stays below 2^24, so a float32 BLAS product is exact; else
    float64 (exact for any realistic K)."""
    bound = float(np.abs(wq).sum(axis=-2).max(initial=0.0)) * 255.0
    return np.float32 if bound < 2.0**24 else np.float64


def dq_lstm_loop(
    xw: np.ndarray,
    rq: np.ndarray,
    rs: np.ndarray,
    bias: np.ndarray | None,
    h: np.ndarray,
    c: np.ndarray,
    products: Sequence[Callable[[np.ndarray, np.ndarray], None] | None],
    cell: Callable[[np.ndarray, np.ndarray, np.ndarray], None] = mlas_lstm_cell,
) -> tuple[np.ndarray, np.ndarray]:
    """DynamicQuantizeLSTM's time loop, every direction in the same step. ``xw`` (T, 4, D, B, H):
    the scaled input projection, gates IOFC with i/o/f negated, a reverse direction's steps in the
    order it runs them; ``rq`` (D, 4, H, H): R - R_zp per gate (signs applied) in a dtype whose
    BLAS product is exact; ``rs`` (4, D, 1, H): R's scales; ``h``, ``c`` (D, B, H) (``c`` updated in
    place). Returns every step's h (T, D, B, H) in step order, and ``c``. Each step quantizes each
    direction's h as onnxruntime does (uint8 over [min(h, 0), max(h, 0)]), scales the exact integer
    product by h_scale * r_scale in float32, then adds xw[t] and the bias (onnxruntime's order).
    The quantization and the product are per direction; the sums and the cell run once over all
    directions (elementwise, so the floats are those of a direction at a time, in half the calls).

    The step is bound by reading R (4 H^2 floats: 2.4 MB at H=384, more than a core's 2 MB L2),
    so R is multiplied per gate, a (H, H) block keeping OpenBLAS on its small-matrix kernel, in
    zigzag order (gates 0..3, then 3..0): a step starts on the gates the last one read, still
    in L2, instead of evicting each just before it is needed (~1.7x faster at H=384); at one or
    two batch rows each row is its own matrix-vector product (OpenBLAS's gemv: 2-3x faster than
    its small-M gemm, 244 -> 80 us a step at B=2, H=512). Every product is exact, so neither the
    order nor the split changes a result. ``products[d](q, g)``, when given, writes direction d's
    four gates' exact products of the quantized state ``q`` (B, H) into ``g`` (4, B, H) in its
    stead (another EP's compiled integer loop: the same integers, so the same floats); ``cell``
    replaces ``mlas_lstm_cell`` likewise (another EP's compiled loop of the same float operations)."""
    n_steps, _, n_dir, batch, hs = xw.shape
    ys = np.empty((n_steps, n_dir, batch, hs), np.float32)
    g = np.empty(xw.shape[1:], np.float32)
    rows = (4, n_dir * batch, hs)  # the cell's view: directions as more batch rows
    part = np.empty((4, batch, hs), np.float32)  # one direction's products
    acc = part if rq.dtype == np.float32 else np.empty(part.shape, rq.dtype)
    q = np.empty((batch, hs), np.float32)
    qa = q if acc is part else np.empty(q.shape, acc.dtype)
    scale = np.empty(rs.shape[0:1] + rs.shape[2:], np.float32)
    orders = (tuple(range(rq.shape[1])), tuple(reversed(range(rq.shape[1]))))
    for t in range(n_steps):
        for d in range(n_dir):
            hd = h[d]
            sc, zp = _dynamic_params(hd.reshape(-1))
            np.divide(hd, sc, out=q)  # as MlasQuantizeLinear: float32 division, rounded half to even
            np.rint(q, out=q)
            np.fmax(q, -zp, out=q)  # q - zp, saturated to uint8's range; NaN (0/0 of a zero scale) to
            np.fmin(q, 255 - zp, out=q)  # the lower bound, as MLAS's max/min of (value, bound) give
            product = products[d]
            if product is not None:
                product(q, part)
            else:
                if qa is not q:
                    np.copyto(qa, q, casting="unsafe")
                for j in orders[t & 1]:
                    if few_rows(qa, rq[d, j], acc[j]) is None:  # one or two rows: a gemv each
                        np.matmul(qa, rq[d, j], out=acc[j])
                if acc is not part:
                    np.copyto(part, acc, casting="same_kind")
            np.multiply(rs[:, d], sc, out=scale)  # sc * rs, in float32
            np.multiply(part, scale, out=g[:, d])
        g += xw[t]
        if bias is not None:
            g += bias
        h = ys[t]
        cell(g.reshape(rows), c.reshape(rows[1:]), h.reshape(rows[1:]))
    return ys, c


_F0, _F1, _F255 = np.float32(0), np.float32(1), np.float32(255)
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce


def _dynamic_params(flat: np.ndarray) -> tuple[np.float32, int]:
    """``quantize.dynamic_params`` for a non-empty 1-D float32 array, in the same float32
    arithmetic, with the per-call overhead (half of it) of the ndarray methods cut: it runs once
    per time step. A NaN is left out of the range, as there and in onnxruntime (found by red-team
    32: one NaN in the state made every later output NaN)."""
    mn, mx = _MIN(flat), _MAX(flat)
    if mn != mn or mx != mx:
        mn, mx = np.fmin.reduce(flat, initial=_F0), np.fmax.reduce(flat, initial=_F0)
    mn = min(mn, _F0)
    mx = max(mx, _F0)
    scale = _F1 if mx == mn else (mx - mn) / _F255
    return scale, zero_point(mn, scale)

"""Recurrent layers: LSTM, GRU and RNN with every direction, sequence_lens, initial states,
peepholes, clip, custom activations and both layouts.

The input projection of all time steps is one matmul; only the recurrent matmul runs per step.
Reverse directions with per-batch lengths gather each sequence reversed within its own length,
run forward, and scatter back. Steps past a sequence's length emit zeros and keep the state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels import _rnn_fast as fast
from ep_cpu_reference.kernels.nn_common import as_compute, fail, first_since, is_frozen
from ep_cpu_reference.registry import REGISTRY


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1/(1+exp(-x)) in four in-place ufuncs; -x is capped where exp would overflow (the result
    there is below the type's smallest normal, i.e. 0 at its precision). No masks: gate arrays
    are tiny and per-step, so the ufunc count is the cost."""
    t = np.negative(x)
    np.minimum(t, 88.0 if t.dtype.itemsize <= 4 else 709.0, out=t)
    np.exp(t, out=t)
    t += 1.0
    return np.reciprocal(t, out=t)


def _activation(name: str, alpha: float | None, beta: float | None) -> Callable[[np.ndarray], np.ndarray]:
    n = name.lower()
    if n == "sigmoid":
        return _sigmoid
    if n == "tanh":
        return np.tanh
    if n == "relu":  # onnxruntime's recurrent Relu and HardSigmoid are std::max(0, x): NaN gives 0
        return lambda x: np.fmax(x, 0)
    if n == "affine":
        a, b = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return lambda x: a * x + b
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * x)
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > a, x, 0)
    if n == "scaledtanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda x: a * np.tanh(b * x)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: np.minimum(np.fmax(a * x + b, 0), 1)
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.log1p(np.exp(x))
    raise ValueError(name)


_USES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_USES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


class _RnnSpec:
    """Attributes common to the three recurrent ops, parsed once."""

    def __init__(self, node: Any, n_gates: int, defaults: list[str]) -> None:
        self.node = node
        self.direction = node.attr("direction", "forward")
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise fail(node, f"direction={self.direction!r}; allowed forward, reverse, bidirectional")
        self.num_dir = 2 if self.direction == "bidirectional" else 1
        self.hidden = node.attr("hidden_size")
        if self.hidden is None or int(self.hidden) <= 0:  # onnxruntime refuses these too
            raise fail(node, f"hidden_size must be given and positive, got {self.hidden}")
        self.layout = int(node.attr("layout", 0))
        clip = node.attr("clip")
        if clip is not None and clip <= 0 and node.op_type != "RNN":  # onnxruntime's GRU/LSTM refuse it
            raise fail(node, f"clip must be positive, got {clip}")
        self.clip = None if clip is None or clip <= 0 else clip  # RNN: a clip of 0 or less clips nothing
        self.n_gates = n_gates
        names = node.attr("activations") or defaults * self.num_dir
        if len(names) != len(defaults) * self.num_dir:
            raise fail(node, f"activations={names}: need {len(defaults)} per direction")
        alphas = list(node.attr("activation_alpha") or [])
        betas = list(node.attr("activation_beta") or [])
        self.acts: list[Callable[[np.ndarray], np.ndarray]] = []
        for nm in names:
            a = alphas.pop(0) if nm.lower() in _USES_ALPHA and alphas else None
            b = betas.pop(0) if nm.lower() in _USES_BETA and betas else None
            try:
                self.acts.append(_activation(nm, a, b))
            except ValueError:
                raise fail(node, f"activation {nm!r} is not an ONNX RNN activation") from None
        self.per_dir = len(defaults)

    def dir_acts(self, d: int) -> list[Callable[[np.ndarray], np.ndarray]]:
        return self.acts[d * self.per_dir : (d + 1) * self.per_dir]

    def clipped(self, x: np.ndarray) -> np.ndarray:
        if self.clip is None:
            return x
        return np.clip(x, -self.clip, self.clip)


def _unreverse(yd: np.ndarray, ridx: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """A reverse direction's per-step outputs put back in time order (``ridx`` from ``_reverse_index``),
    zero past each row's length."""
    back = np.empty_like(yd)
    back[ridx, np.arange(yd.shape[1])[None, :]] = yd
    if mask is not None:
        back[~mask] = 0
    return back


def _reverse_index(seq: int, batch: int, lens: np.ndarray | None) -> np.ndarray:
    """(T, B) time index reading each batch entry's sequence backwards within its length."""
    t = np.arange(seq)[:, None]
    if lens is None:
        return np.broadcast_to(seq - 1 - t, (seq, batch))
    ln = lens.reshape(1, -1)
    return np.where(t < ln, ln - 1 - t, t)


def _run(
    spec: _RnnSpec,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: Any,
    lens: Any,
    h0: Any,
    extra_states: list[Any],
    step: Callable[..., Any],
    cache: dict[Any, Any] | None = None,
    fold_bias: bool = False,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Shared driver: x is (T, B, I) in compute dtype. Returns Y (T, D, B, H), Y_h (D, B, H) and
    the final extra states (LSTM's cell). ``fold_bias``: Wb + Rb is added to the input projection
    of all steps at once and the step gets ``None`` biases (LSTM and RNN add both unchanged)."""
    seq, batch = x.shape[:2]
    hsz = r.shape[-1]
    dt = x.dtype
    lens_arr = None if lens is None else np.asarray(lens, dtype=np.int64).reshape(-1)
    if lens_arr is not None and np.all(lens_arr == seq):
        lens_arr = None
    mask = None if lens_arr is None else (np.arange(seq)[:, None] < lens_arr[None, :])
    y = np.zeros((seq, spec.num_dir, batch, hsz), dtype=dt)
    y_h = np.zeros((spec.num_dir, batch, hsz), dtype=dt)
    finals: list[np.ndarray] = [np.zeros((spec.num_dir, batch, hsz), dtype=dt) for _ in extra_states]
    for d in range(spec.num_dir):
        reverse = spec.direction == "reverse" or d == 1
        xd = x
        if reverse:
            ridx = _reverse_index(seq, batch, lens_arr)
            xd = x[ridx, np.arange(batch)[None, :]]
        got = None if cache is None else cache.get((d, dt))
        if got is None:
            # transposed views: matmul hands BLAS the transpose flag, no copy per run
            got = (w[d].astype(dt, copy=False).T, r[d].astype(dt, copy=False).T)  # (I, G*H), (H, G*H)
            if cache is not None:
                got = cache[(d, dt)] = (np.ascontiguousarray(got[0]), np.ascontiguousarray(got[1]))
        wt, rt = got
        g = spec.n_gates
        xw = (xd.reshape(seq * batch, x.shape[-1]) @ wt).reshape(seq, batch, g * hsz)
        if b is not None:
            wb = b[d, : g * hsz].astype(dt, copy=False)
            rb = b[d, g * hsz :].astype(dt, copy=False)
            if fold_bias:
                xw += wb + rb
                wb = rb = None
        elif fold_bias:
            wb = rb = None
        else:
            wb = np.zeros(g * hsz, dtype=dt)
            rb = np.zeros(g * hsz, dtype=dt)
        h = np.zeros((batch, hsz), dtype=dt) if h0 is None else h0[d].astype(dt)
        states = [np.zeros((batch, hsz), dtype=dt) if s is None else s[d].astype(dt) for s in extra_states]
        yd = np.zeros((seq, batch, hsz), dtype=dt)
        for t in range(seq):
            h_new, states_new = step(d, xw[t], wb, rb, h, rt, states)
            if mask is not None:
                m = mask[t][:, None]
                h = np.where(m, h_new, h)
                states = [np.where(m, sn, so) for sn, so in zip(states_new, states, strict=False)]
                yd[t] = np.where(m, h_new, 0)
            else:
                h, states = h_new, states_new
                yd[t] = h_new
        if reverse:
            yd = _unreverse(yd, ridx, mask)
        # a row of no step (length 0, or no steps at all) ends in zeros, not its initial state (onnxruntime)
        empty = np.full(batch, seq == 0) if lens_arr is None else (lens_arr == 0) | (seq == 0)
        if empty.any():
            h = np.where(empty[:, None], 0, h)
            states = [np.where(empty[:, None], 0, s) for s in states]
        y[:, d] = yd
        y_h[d] = h
        for f, s in zip(finals, states, strict=False):
            f[d] = s
    return y, y_h, finals


def _io(node: Any, spec: _RnnSpec, x: np.ndarray, states: list[Any]) -> tuple[np.ndarray, list[Any]]:
    xc = as_compute(x)
    if spec.layout == 1:
        xc = xc.transpose(1, 0, 2)
        states = [None if s is None else s.transpose(1, 0, 2) for s in states]
    return xc, states


def _outputs(spec: _RnnSpec, odt: np.dtype, y: np.ndarray, finals: list[np.ndarray], n_out: int) -> tuple[Any, ...]:
    if spec.layout == 1:
        y = y.transpose(2, 0, 1, 3)
        finals = [f.transpose(1, 0, 2) for f in finals]
    outs = [np.ascontiguousarray(y).astype(odt, copy=False)] + [
        np.ascontiguousarray(f).astype(odt, copy=False) for f in finals
    ]
    return tuple(outs[:n_out]) + (None,) * max(0, n_out - len(outs))


def _weight_cache(node: NodeView, ctx: KernelContext) -> dict[Any, Any] | None:
    """Transposed W and R per direction are kept across runs when both are constants."""
    consts = [ctx.constant(n) for n in node.inputs[1:3]]
    return {} if all(c is not None for c in consts) else None


def _check(node: Any, spec: _RnnSpec, w: np.ndarray, r: np.ndarray) -> None:
    g = spec.n_gates
    if w.shape[0] != spec.num_dir or r.shape[0] != spec.num_dir or w.shape[1] != g * r.shape[-1]:
        raise fail(node, f"W {list(w.shape)} / R {list(r.shape)} do not match {spec.num_dir} direction(s) x {g} gates")


def _fast_eligible(node: Any, spec: _RnnSpec, defaults: list[str]) -> bool:
    """Default activations, no clip: the fast loops apply (per run: no peepholes/lengths)."""
    names = [a.lower() for a in (node.attr("activations") or defaults * spec.num_dir)]
    return (
        spec.clip is None
        and names == [a.lower() for a in defaults] * spec.num_dir
        and not node.attr("activation_alpha")
        and not node.attr("activation_beta")
    )


def _fast_run(x: np.ndarray, lens: Any) -> bool:
    """float32/float64 input, at least one step and row, every sequence full length."""
    if x.dtype != np.float32 and x.dtype != np.float64 or 0 in x.shape[:2]:
        return False
    return lens is None or bool(np.all(np.asarray(lens) == x.shape[0]))


class _Prepared:
    """Per-dtype weights for the fast loops, made once when W, R and B are constants:
    transposed W (D, I, G*H) and R as _rnn_fast.Recurrent, sigmoid-gate rows negated, the bias
    added to the input projection and GRU's Rbh (linear_before_reset) kept apart as (D, H, 1).
    ``groups``: the gates each recurrent matmul covers (GRU without linear_before_reset: z and
    r, then h's gate apart, since it multiplies r * h)."""

    def __init__(
        self, node: NodeView, ctx: KernelContext, n_sig: int, groups: tuple[int, ...], split_rbh: bool
    ) -> None:
        self.const = all(ctx.constant(n) is not None for n in node.inputs[1:3]) and (
            len(node.inputs) < 4 or not node.inputs[3] or ctx.constant(node.inputs[3]) is not None
        )
        self.n_sig, self.groups, self.split_rbh = n_sig, groups, split_rbh
        self.cache: dict[Any, tuple[Any, ...]] = {}

    def get(self, w: np.ndarray, r: np.ndarray, b: Any, dt: np.dtype) -> tuple[Any, ...]:
        got = self.cache.get(dt)
        if got is None:
            got = self._weights(w, r, dt) + self._bias(b, r.shape[2], dt)
            if self.const:
                self.cache[dt] = got
        return got

    def _weights(self, w: np.ndarray, r: np.ndarray, dt: np.dtype) -> tuple[Any, ...]:
        """W and R prepared, reused while they are the same frozen arrays (computed once from
        constants inside a subgraph: the kernel cannot see them as constants)."""
        last = self.cache.get("wr")
        if last is not None and last[0] is w and last[1] is r and last[2] == dt:
            return last[3]
        gh, hs = r.shape[1], r.shape[2]
        sign = fast.gate_signs(gh // hs, self.n_sig, hs, dt)[None, :, None]
        wt = np.ascontiguousarray((w.astype(dt) * sign).transpose(0, 2, 1))
        rs = r.astype(dt) * sign
        recs, lo = [], 0
        for n in self.groups:
            recs.append(fast.Recurrent(rs[:, lo * hs : (lo + n) * hs], n))
            lo += n
        got = (wt, recs)
        if is_frozen(w) and is_frozen(r):
            self.cache["wr"] = (w, r, dt, got)
        return got

    def _bias(self, b: Any, hs: int, dt: np.dtype) -> tuple[Any, ...]:
        if b is None:
            return None, None
        gh = b.shape[1] // 2
        sign = fast.gate_signs(gh // hs, self.n_sig, hs, dt)
        wb, rb = b[:, :gh].astype(dt), b[:, gh:].astype(dt)
        rbh = None
        if self.split_rbh:  # GRU, linear_before_reset: Rbh is multiplied by r inside the step
            rbh = rb[:, 2 * hs :, None].copy()
            rb = rb.copy()
            rb[:, 2 * hs :] = 0
        return (wb + rb) * sign, rbh


def _fast(spec: _RnnSpec, x: np.ndarray, prep: tuple[Any, ...], states: list[Any], loop: Any) -> tuple[Any, ...]:
    """Runs ``loop(xw, recs, rbh, h, c)`` (states transposed to (D, H, B)) over layout-normalised
    inputs; returns Y, Y_h (, Y_c) in the node's layout."""
    wt, recs, bias, rbh = prep
    if spec.layout == 1:
        x = x.transpose(1, 0, 2)
        states = [None if s is None else s.transpose(1, 0, 2) for s in states]
    rev = fast.reversed_dirs(spec.direction)
    dt = x.dtype
    hs = recs[0].hs
    xw = fast.project(np.ascontiguousarray(x), wt, bias, rev, hs)
    shape = (len(rev), x.shape[1], hs)
    for s in states:
        if s is not None and s.shape != shape:
            raise fail(spec.node, f"initial state of shape {list(s.shape)}; expected {list(shape)} (D, B, H)")
    # copies (the loops update the cell in place): ascontiguousarray would return the caller's
    # array itself where the transpose is already contiguous (batch 1)
    vals = [
        np.zeros((shape[0], shape[2], shape[1]), dt) if s is None else np.array(s.transpose(0, 2, 1), dt, order="C")
        for s in states
    ]
    ys, extra = loop(xw, recs, rbh, *vals)
    outs = [fast.unstep_t(ys, rev), ys[-1].transpose(0, 2, 1).copy(), *[e.transpose(0, 2, 1).copy() for e in extra]]
    if spec.layout == 1:
        outs = [np.ascontiguousarray(outs[0].transpose(2, 0, 1, 3))] + [o.transpose(1, 0, 2).copy() for o in outs[1:]]
    return tuple(outs)


@REGISTRY.register("LSTM", since=first_since("LSTM"), host_inputs=(4,))
def build_lstm(node: NodeView, ctx: KernelContext) -> Any:
    cache = _weight_cache(node, ctx)
    spec = _RnnSpec(node, 4, ["Sigmoid", "Tanh", "Tanh"])
    input_forget = bool(node.attr("input_forget", 0))
    n_out = len(node.outputs)

    def fast_step(d, xw, wb, rb, h, rt, states):  # type: ignore[no-untyped-def]
        """No peepholes, clip or coupled gates: gates i, o, f are adjacent (ONNX order iofc), so
        one activation call covers all three and one the cell candidate."""
        (c,) = states
        f_act, g_act, h_act = spec.dir_acts(d)
        hs = h.shape[1]
        gates = h @ rt
        gates += xw
        iof = f_act(gates[:, : 3 * hs])
        ct = g_act(gates[:, 3 * hs :])
        c_new = iof[:, 2 * hs :] * c
        ct *= iof[:, :hs]
        c_new += ct
        return iof[:, hs : 2 * hs] * h_act(c_new), [c_new]

    def make_step(p: Any) -> Callable[..., Any]:
        """The per-step cell for peepholes ``p`` (a closure per run: no state shared between runs)."""

        if p is None and spec.clip is None and not input_forget:
            return fast_step

        def step(d, xw, wb, rb, h, rt, states):  # type: ignore[no-untyped-def]
            (c,) = states
            f_act, g_act, h_act = spec.dir_acts(d)
            hs = h.shape[1]
            gates = xw + h @ rt
            gi, go, gf, gc = (gates[:, k * hs : (k + 1) * hs] for k in range(4))
            if p is not None:
                gi = gi + p[d, :hs] * c
                gf = gf + p[d, 2 * hs :] * c
            i = f_act(spec.clipped(gi))
            f = 1 - i if input_forget else f_act(spec.clipped(gf))
            ct = g_act(spec.clipped(gc))
            c_new = f * c + i * ct
            if p is not None:
                go = go + p[d, hs : 2 * hs] * c_new
            o = f_act(spec.clipped(go))
            return o * h_act(c_new), [c_new]

        return step

    fast_ok = _fast_eligible(node, spec, ["Sigmoid", "Tanh", "Tanh"]) and not input_forget
    prepared = _Prepared(node, ctx, 3, (4,), False)

    def fast_lstm(xw, recs, rbh, h, c):  # type: ignore[no-untyped-def]
        ys, c = fast.lstm_loop(xw, recs[0], h, c)
        return ys, [c]

    def compute(x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):  # type: ignore[no-untyped-def]
        _check(node, spec, w, r)
        if fast_ok and p is None and _fast_run(x, seq_lens):
            outs = _fast(spec, x, prepared.get(w, r, b, x.dtype), [h0, c0], fast_lstm)
            return outs[:n_out] + (None,) * max(0, n_out - 3)
        xc, (h0_, c0_) = _io(node, spec, x, [h0, c0])
        step = make_step(None if p is None else p.astype(xc.dtype))
        y, y_h, (y_c,) = _run(spec, xc, w, r, b, seq_lens, h0_, [c0_], step, cache, fold_bias=True)
        return _outputs(spec, x.dtype, y, [y_h, y_c], n_out)

    return compute


@REGISTRY.register("GRU", since=first_since("GRU"), host_inputs=(4,))
def build_gru(node: NodeView, ctx: KernelContext) -> Any:
    cache = _weight_cache(node, ctx)
    spec = _RnnSpec(node, 3, ["Sigmoid", "Tanh"])
    lbr = bool(node.attr("linear_before_reset", 0))
    n_out = len(node.outputs)

    def step(d, xw, wb, rb, h, rt, states):  # type: ignore[no-untyped-def]
        f_act, g_act = spec.dir_acts(d)
        hs = h.shape[1]
        xz, xr, xh = (xw[:, k * hs : (k + 1) * hs] + wb[k * hs : (k + 1) * hs] for k in range(3))
        rz, rr, rh_b = (rb[k * hs : (k + 1) * hs] for k in range(3))
        hr = h @ rt[:, : 2 * hs]
        z = f_act(spec.clipped(xz + hr[:, :hs] + rz))
        rgate = f_act(spec.clipped(xr + hr[:, hs:] + rr))
        if lbr:
            hh = g_act(spec.clipped(xh + rgate * (h @ rt[:, 2 * hs :] + rh_b)))
        else:
            hh = g_act(spec.clipped(xh + (rgate * h) @ rt[:, 2 * hs :] + rh_b))
        return (1 - z) * hh + z * h, []

    fast_ok = _fast_eligible(node, spec, ["Sigmoid", "Tanh"])
    prepared = _Prepared(node, ctx, 2, (3,) if lbr else (2, 1), lbr)

    def fast_gru(xw, recs, rbh, h):  # type: ignore[no-untyped-def]
        return fast.gru_loop(xw, recs[0], None if lbr else recs[1], rbh, h), []

    def compute(x, w, r, b=None, seq_lens=None, h0=None):  # type: ignore[no-untyped-def]
        _check(node, spec, w, r)
        if fast_ok and _fast_run(x, seq_lens):
            outs = _fast(spec, x, prepared.get(w, r, b, x.dtype), [h0], fast_gru)
            return outs[:n_out] + (None,) * max(0, n_out - 2)
        xc, (h0_,) = _io(node, spec, x, [h0])
        y, y_h, _ = _run(spec, xc, w, r, b, seq_lens, h0_, [], step, cache)
        return _outputs(spec, x.dtype, y, [y_h], n_out)

    return compute


@REGISTRY.register("RNN", since=first_since("RNN"), host_inputs=(4,))
def build_rnn(node: NodeView, ctx: KernelContext) -> Any:
    cache = _weight_cache(node, ctx)
    spec = _RnnSpec(node, 1, ["Tanh"])
    n_out = len(node.outputs)

    def step(d, xw, wb, rb, h, rt, states):  # type: ignore[no-untyped-def]
        (f_act,) = spec.dir_acts(d)
        return f_act(spec.clipped(xw + h @ rt)), []

    fast_ok = _fast_eligible(node, spec, ["Tanh"])
    prepared = _Prepared(node, ctx, 0, (1,), False)

    def fast_rnn(xw, recs, rbh, h):  # type: ignore[no-untyped-def]
        return fast.rnn_loop(xw, recs[0], h), []

    def compute(x, w, r, b=None, seq_lens=None, h0=None):  # type: ignore[no-untyped-def]
        _check(node, spec, w, r)
        if fast_ok and _fast_run(x, seq_lens):
            outs = _fast(spec, x, prepared.get(w, r, b, x.dtype), [h0], fast_rnn)
            return outs[:n_out] + (None,) * max(0, n_out - 2)
        xc, (h0_,) = _io(node, spec, x, [h0])
        y, y_h, _ = _run(spec, xc, w, r, b, seq_lens, h0_, [], step, cache, fold_bias=True)
        return _outputs(spec, x.dtype, y, [y_h], n_out)

    return compute

"""ONNX LSTM and GRU as compiled time loops: no Python per time step.

Why: small recurrent layers (a few steps, hidden size ~100) cost a dozen NumPy calls per step
in the reference EP, so the call count, not the arithmetic, is their cost. Here the input
projection of every step and direction is one BLAS product (NumPy's ``np.dot``, before the
kernel), and one compiled kernel per op and dtype runs the whole time loop: each step's recurrent
product and the gate arithmetic. The recurrent product (``_mm``) is a loop over H of multiply-adds
of R's rows, vectorised across the gates, for up to 8 batch rows: at batch 2 and H = 256 that is
16 us a step where ``np.dot`` (BLAS's small-matrix path, through SciPy's OpenBLAS) took 92 us, on a
2-core AVX-512 EPYC; from 9 rows on BLAS is faster and ``np.dot`` serves. The kernels are shape-generic
(sizes, direction, layout, sequence lengths, initial states, peepholes, clip, input_forget /
linear_before_reset and the ONNX activation set are runtime arguments), so a model compiles at
most one LSTM and one GRU kernel per dtype.

Semantics are onnxruntime's and the reference EP's ``nn_rnn``: outputs past a sequence's length
are zero, Y_h / Y_c hold each sequence's last valid step, a reverse direction reads each sequence
backwards within its own length; a sequence of length 0 ends in zero Y_h / Y_c (onnxruntime; the
reference EP keeps the initial state there). float32 Sigmoid and Tanh are the rational forms
onnxruntime's recurrent kernels use (MLAS logistic / tanh): plain multiply-adds and one division,
so the gate loops vectorise; float64 uses ``math.exp`` / ``math.tanh``.

The keys of a delegated node's record (spec.py's "node" step) read here; everything else is
ignored::

    step = {"op": "LSTM" | "GRU",
            "domain": "" | "ai.onnx",
            "opset": int,                                   # optional; < 7 is declined
            "attrs": {name: [kind, value] | value},         # spec.py's typed attributes
            "outputs": [name | ""],                         # ONNX order; "" = not produced
            "in_types": [[dtype | None, shape | None], ...]}  # in_types[0][0]: X's dtype

Kernel sources are written from the fixed templates below with only a dtype from a fixed table
substituted: no string of a record reaches generated code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument
from ep_cpu_reference.kernels.nn_common import is_frozen
from ep_numba_cpu.generate import KernelSource

DTYPES = ("float32", "float64")
# the ONNX recurrent activations, as the kernels' runtime codes
ACTIVATIONS = {
    "sigmoid": 0,
    "tanh": 1,
    "relu": 2,
    "affine": 3,
    "leakyrelu": 4,
    "thresholdedrelu": 5,
    "scaledtanh": 6,
    "hardsigmoid": 7,
    "elu": 8,
    "softsign": 9,
    "softplus": 10,
}
# (uses alpha, uses beta, default alpha, default beta): ONNX's defaults, the reference EP's
_ARGS = {
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
}
# activations whose missing alpha/beta onnxruntime takes as 0 where ONNX (and the reference EP) do not
_DISPUTED = ("affine", "scaledtanh", "thresholdedrelu")
_DEFAULTS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}
_GATES = {"LSTM": 4, "GRU": 3}
_N_OUT = {"LSTM": 3, "GRU": 2}
_N_IN = {"LSTM": 8, "GRU": 6}

# ip (int64) fields: sizes and flags the kernels read
_IP = ("dirs", "reverse", "layout", "hidden", "has_lens", "has_h0", "has_c0", "has_p", "has_clip", "mode", "simple")
_N_IP = len(_IP)  # then 3 (LSTM) / 2 (GRU) activation codes per direction, for 2 directions

_SCALAR_F32 = """
@njit
def _sig(v):
    x = np.float32(-18.0) if v < np.float32(-18.0) else v  # NaN goes through, as onnxruntime's
    x = np.float32(18.0) if x > np.float32(18.0) else x
    x2 = x * x
    p = x2 * np.float32(4.37031012579801e-11) + np.float32(1.15627324459942e-07)
    p = p * x2 + np.float32(6.08574864600143e-05)
    p = p * x2 + np.float32(8.51377133304701e-03)
    p = p * x2 + np.float32(2.48287947061529e-01)
    p = p * x
    q = x2 * np.float32(6.10247389755681e-13) + np.float32(5.76102136993427e-09)
    q = q * x2 + np.float32(6.29106785017040e-06)
    q = q * x2 + np.float32(1.70198817374094e-03)
    q = q * x2 + np.float32(1.16817656904453e-01)
    q = q * x2 + np.float32(9.93151921023180e-01)
    r = p / q + np.float32(0.5)
    r = np.float32(0.0) if r < np.float32(0.0) else r
    return np.float32(1.0) if r > np.float32(1.0) else r


@njit
def _tanh(v):
    x = np.float32(-9.0) if v < np.float32(-9.0) else v
    x = np.float32(9.0) if x > np.float32(9.0) else x
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    p = p * x
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return p / q
"""

_SCALAR_F64 = """
@njit
def _sig(v):
    t = -v
    t = t if t < 709.0 else 709.0
    return 1.0 / (1.0 + math.exp(t))


@njit
def _tanh(v):
    return math.tanh(v)
"""

_COMMON = '''
@njit
def _mm(a, b, out):
    if a.shape[0] > 8:
        np.dot(a, b, out)
        return
    for i in range(a.shape[0]):
        o = out[i]
        o[:] = 0
        for k in range(a.shape[1]):
            s = a[i, k]
            br = b[k]
            for j in range(o.shape[0]):
                o[j] += s * br[j]


@njit
def _act(code, v, a, b, c):
    """ONNX activation ``code`` (recurrent.ACTIVATIONS) of v clipped to [-c, c] (c < 0: no
    clip), with its alpha, beta."""
    zero = DT(0.0)
    one = DT(1.0)
    if c >= zero:
        v = -c if v < -c else v
        v = c if v > c else v
    if code == 0:
        return _sig(v)
    if code == 1:
        return _tanh(v)
    if code == 2:
        return v if v > zero else zero
    if code == 3:
        return a * v + b
    if code == 4:
        return v if v >= zero else a * v
    if code == 5:
        return v if v > a else zero
    if code == 6:
        return a * _tanh(b * v)
    if code == 7:
        t = a * v + b
        t = t if t > zero else zero
        return t if t < one else one
    if code == 8:
        return v if v >= zero else a * (math.exp(v) - one)
    if code == 9:
        return v / (one + abs(v))
    return math.log1p(math.exp(v))


@njit
def _fold_bias(xw, bias, n_bias):
    """Adds the first ``n_bias`` columns of each direction's bias row to the input projection
    (T, B, D*n_gates*H) or (B, T, ...) of every step."""
    width = xw.shape[2] // bias.shape[0]
    for r0 in range(xw.shape[0]):
        for r1 in range(xw.shape[1]):
            row = xw[r0, r1]
            for d in range(bias.shape[0]):
                bd = bias[d]
                lo = d * width
                for j in range(n_bias):
                    row[lo + j] += bd[j]


@njit
def _start(h, h0, d, layout, on):
    """Direction d's initial state (zeros without one) into h (B, H)."""
    for b in range(h.shape[0]):
        for j in range(h.shape[1]):
            if on:
                h[b, j] = h0[d, b, j] if layout == 0 else h0[b, d, j]
            else:
                h[b, j] = 0


@njit
def _emit(y, h, s, t, d, b, layout, active):
    """Y at time t for an active row (its new h), zeros at time s past a row's length."""
    if y.size == 0:
        return
    if active:
        yrow = y[t, d, b] if layout == 0 else y[b, t, d]
        for j in range(h.shape[1]):
            yrow[j] = h[b, j]
    else:
        yrow = y[s, d, b] if layout == 0 else y[b, s, d]
        for j in range(h.shape[1]):
            yrow[j] = 0


@njit
def _final(yh, h, d, layout, lens, has_lens):
    """The last state of direction d; zeros for an empty sequence, as onnxruntime."""
    for b in range(h.shape[0]):
        row = yh[d, b] if layout == 0 else yh[b, d]
        keep = not has_lens or lens[b] > 0
        for j in range(h.shape[1]):
            row[j] = h[b, j] if keep else 0
'''

_HEAD = """
    n_dir = ip[0]
    layout = ip[2]
    hs = ip[3]
    has_lens = ip[4] != 0
    has_h0 = ip[5] != 0
    mode = ip[9] != 0
    simple = ip[10] != 0
    n_steps = xw.shape[0] if layout == 0 else xw.shape[1]
    batch = xw.shape[1] if layout == 0 else xw.shape[0]
    for b in range(batch):
        if has_lens and (lens[b] < 0 or lens[b] > n_steps):
            return 1
    no_clip = DT(-1.0)
    cl = DT(fp[0]) if ip[8] != 0 else no_clip
    h = np.empty((batch, hs), dtype=np.DT)
"""

_LSTM = (
    '''
def kernel(y, yh, yc, xw, rt, bias, peep, h0, c0, lens, ip, fp):
    """ONNX LSTM; gates i, o, f, c. mode: input_forget; simple: default activations, no clip,
    peepholes or input_forget."""
'''
    + _HEAD
    + """
    has_c0 = ip[6] != 0
    has_p = ip[7] != 0
    gh = 4 * hs
    _fold_bias(xw, bias, gh)
    c = np.empty((batch, hs), dtype=np.DT)
    g = np.empty((batch, gh), dtype=np.DT)
    for d in range(n_dir):
        back = d == 1 or ip[1] != 0
        f_code, g_code, h_code = ip[_N_IP + 3 * d], ip[_N_IP + 3 * d + 1], ip[_N_IP + 3 * d + 2]
        fa, ga, ha = DT(fp[1 + 3 * d]), DT(fp[2 + 3 * d]), DT(fp[3 + 3 * d])
        fb, gb_, hb = DT(fp[7 + 3 * d]), DT(fp[8 + 3 * d]), DT(fp[9 + 3 * d])
        _start(h, h0, d, layout, has_h0)
        _start(c, c0, d, layout, has_c0)
        rd = rt[d]
        base = d * gh
        for s in range(n_steps):
            _mm(h, rd, g)
            for b in range(batch):
                n = lens[b] if has_lens else n_steps
                t = n - 1 - s if back else s
                if s >= n:
                    _emit(y, h, s, t, d, b, layout, s < n)
                    continue
                xr = xw[t, b] if layout == 0 else xw[b, t]
                gr = g[b]
                hr = h[b]
                cr = c[b]
                if simple:
                    for j in range(hs):
                        i = _sig(gr[j] + xr[base + j])
                        f = _sig(gr[2 * hs + j] + xr[base + 2 * hs + j])
                        cn = f * cr[j] + i * _tanh(gr[3 * hs + j] + xr[base + 3 * hs + j])
                        cr[j] = cn
                        hr[j] = _sig(gr[hs + j] + xr[base + hs + j]) * _tanh(cn)
                else:
                    for j in range(hs):
                        cj = cr[j]
                        gi = gr[j] + xr[base + j]
                        gf = gr[2 * hs + j] + xr[base + 2 * hs + j]
                        if has_p:
                            gi = gi + peep[d, j] * cj
                            gf = gf + peep[d, 2 * hs + j] * cj
                        i = _act(f_code, gi, fa, fb, cl)
                        if mode:
                            f = DT(1.0) - i
                        else:
                            f = _act(f_code, gf, fa, fb, cl)
                        ct = _act(g_code, gr[3 * hs + j] + xr[base + 3 * hs + j], ga, gb_, cl)
                        cn = f * cj + i * ct
                        go = gr[hs + j] + xr[base + hs + j]
                        if has_p:
                            go = go + peep[d, hs + j] * cn
                        o = _act(f_code, go, fa, fb, cl)
                        cr[j] = cn
                        hr[j] = o * _act(h_code, cn, ha, hb, no_clip)
                _emit(y, h, s, t, d, b, layout, s < n)
        _final(yh, h, d, layout, lens, has_lens)
        _final(yc, c, d, layout, lens, has_lens)
    return 0
"""
)

_GRU = (
    '''
def kernel(y, yh, xw, rzr, rhh, bias, h0, lens, ip, fp):
    """ONNX GRU; gates z, r, h; bias rows (Wbz+Rbz, Wbr+Rbr, Wbh, Rbh). mode:
    linear_before_reset; simple: default activations, no clip."""
'''
    + _HEAD
    + """
    gh = 3 * hs
    _fold_bias(xw, bias, gh)
    one = DT(1.0)
    rh = np.empty((batch, hs), dtype=np.DT)
    gzr = np.empty((batch, 2 * hs), dtype=np.DT)
    gn = np.empty((batch, hs), dtype=np.DT)
    for d in range(n_dir):
        back = d == 1 or ip[1] != 0
        f_code, g_code = ip[_N_IP + 2 * d], ip[_N_IP + 2 * d + 1]
        fa, ga = DT(fp[1 + 2 * d]), DT(fp[2 + 2 * d])
        fb, gb_ = DT(fp[5 + 2 * d]), DT(fp[6 + 2 * d])
        _start(h, h0, d, layout, has_h0)
        rbh = bias[d, gh:]
        rzd = rzr[d]
        rhd = rhh[d]
        base = d * gh
        for s in range(n_steps):
            _mm(h, rzd, gzr)
            if mode:
                _mm(h, rhd, gn)
            else:  # n's recurrent product is of r * h
                for b in range(batch):
                    n = lens[b] if has_lens else n_steps
                    if s < n:
                        t = n - 1 - s if back else s
                        xr = xw[t, b] if layout == 0 else xw[b, t]
                        for j in range(hs):
                            gv = gzr[b, hs + j] + xr[base + hs + j]
                            r = _sig(gv) if simple else _act(f_code, gv, fa, fb, cl)
                            rh[b, j] = r * h[b, j]
                _mm(rh, rhd, gn)
            for b in range(batch):
                n = lens[b] if has_lens else n_steps
                t = n - 1 - s if back else s
                if s >= n:
                    _emit(y, h, s, t, d, b, layout, s < n)
                    continue
                xr = xw[t, b] if layout == 0 else xw[b, t]
                gr = gzr[b]
                nr = gn[b]
                hr = h[b]
                if simple and mode:
                    for j in range(hs):
                        z = _sig(gr[j] + xr[base + j])
                        r = _sig(gr[hs + j] + xr[base + hs + j])
                        hh = _tanh(xr[base + 2 * hs + j] + r * (nr[j] + rbh[j]))
                        hr[j] = (one - z) * hh + z * hr[j]
                elif simple:
                    for j in range(hs):
                        z = _sig(gr[j] + xr[base + j])
                        hh = _tanh(xr[base + 2 * hs + j] + (nr[j] + rbh[j]))
                        hr[j] = (one - z) * hh + z * hr[j]
                else:
                    for j in range(hs):
                        z = _act(f_code, gr[j] + xr[base + j], fa, fb, cl)
                        if mode:
                            r = _act(f_code, gr[hs + j] + xr[base + hs + j], fa, fb, cl)
                            hv = xr[base + 2 * hs + j] + r * (nr[j] + rbh[j])
                        else:
                            hv = xr[base + 2 * hs + j] + (nr[j] + rbh[j])
                        hh = _act(g_code, hv, ga, gb_, cl)
                        hr[j] = (one - z) * hh + z * hr[j]
                _emit(y, h, s, t, d, b, layout, s < n)
        _final(yh, h, d, layout, lens, has_lens)
    return 0
"""
)


def _source(op: str, dtype: str) -> str:
    """The kernel source of ``op`` for ``dtype`` (both from fixed tables)."""
    scalar = _SCALAR_F32 if dtype == "float32" else _SCALAR_F64
    body = (_COMMON + (_LSTM if op == "LSTM" else _GRU)).replace("DT(", f"np.{dtype}(").replace("np.DT", f"np.{dtype}")
    head = f"import math\nimport numpy as np\nfrom numba import njit\n\n_N_IP = {_N_IP}\n\n"
    return head + scalar + body


def _signature(op: str, dtype: str) -> str:
    w, r = f"{dtype}:{{}}:C:w", f"{dtype}:{{}}:C:r"
    ints = "int32:1:C:r,int64:1:C:r,float64:1:C:r"
    if op == "LSTM":  # y, yh, yc, xw, rt, bias, peep, h0, c0, lens, ip, fp
        parts = [w.format(4), w.format(3), w.format(3), w.format(3), r.format(3), r.format(2)]
        return ",".join([*parts, r.format(2), r.format(3), r.format(3), ints])
    # GRU: y, yh, xw, rzr, rhh, bias, h0, lens, ip, fp
    parts = [w.format(4), w.format(3), w.format(3), r.format(3), r.format(3), r.format(2), r.format(3)]
    return ",".join([*parts, ints])


def kernel_for(op: str, dtype: str) -> KernelSource:
    """The one compiled loop serving every ``op`` node of ``dtype``."""
    if op not in _GATES or dtype not in DTYPES:
        raise ValueError(f"no recurrent kernel for {op} {dtype}")
    return KernelSource(_source(op, dtype), _signature(op, dtype), False)


_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor")


def record_value(v: Any) -> Any:
    """An attribute's value: records hold ``[kind, value]`` (spec.py), plain Python values pass."""
    return v[1] if isinstance(v, list | tuple) and len(v) == 2 and v[0] in _KINDS else v


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Attrs:
    """A node's attributes parsed once, or the reason the compiled loop does not serve it."""

    def __init__(self, step: Mapping[str, Any]) -> None:
        self.op = str(step.get("op"))
        self.default_acts = False
        self.codes: list[int] = []
        self.alphas: list[float] = []
        self.betas: list[float] = []
        self.produced = [bool(n) for n in step.get("outputs") or []]
        in_types = step.get("in_types") or []
        self.dtype = in_types[0][0] if in_types and in_types[0] else None
        attrs = {k: record_value(v) for k, v in (step.get("attrs") or {}).items()}
        try:
            self.direction = _text(attrs.get("direction", "forward"))
            self.dirs = 2 if self.direction == "bidirectional" else 1
            self.hidden: Any = attrs.get("hidden_size")
            self.layout = int(attrs.get("layout", 0))
            clip = attrs.get("clip")
            self.clip = None if clip is None else float(clip)
            self.mode = int(attrs.get("input_forget" if self.op == "LSTM" else "linear_before_reset", 0))
        except (TypeError, ValueError) as exc:
            self.why: str | None = f"malformed attribute: {exc}"
            return
        self.why = self._check(step, attrs)

    def _check(self, step: Mapping[str, Any], attrs: Mapping[str, Any]) -> str | None:
        if self.op not in _GATES:
            return f"op {self.op!r} is not LSTM or GRU"
        if step.get("domain", "") not in ("", "ai.onnx"):
            return f"domain {step.get('domain')!r} is not the ONNX domain"
        if int(step.get("opset", 7)) < 7:
            return f"opset {step.get('opset')} predates the ONNX-7 definition of {self.op}"
        if "output_sequence" in attrs:
            return "attribute output_sequence (opset 1)"
        if self.dtype not in DTYPES:
            return f"X's dtype {self.dtype!r} is not float32 or float64"
        if self.direction not in ("forward", "reverse", "bidirectional"):
            return f"direction {self.direction!r}"
        if type(self.hidden) is not int or self.hidden <= 0:
            return f"hidden_size {self.hidden!r} is not a positive integer"
        if self.layout not in (0, 1):
            return f"layout {self.layout}"
        if self.clip is not None and not self.clip > 0:  # onnxruntime refuses it: so does the reference EP
            return f"clip {self.clip} is not positive"
        if self.mode not in (0, 1):
            return f"{'input_forget' if self.op == 'LSTM' else 'linear_before_reset'}={self.mode}"
        if not 1 <= len(self.produced) <= _N_OUT[self.op]:
            return f"{len(self.produced)} outputs"
        return self._activations(attrs)

    def _activations(self, attrs: Mapping[str, Any]) -> str | None:
        """Codes and alpha/beta per activation, consumed in order as onnxruntime and the reference do."""
        defaults = _DEFAULTS[self.op]
        names = [_text(n).lower() for n in (attrs.get("activations") or defaults * self.dirs)]
        if len(names) != len(defaults) * self.dirs:
            return f"{len(names)} activations for {self.dirs} direction(s)"
        alphas = [float(a) for a in attrs.get("activation_alpha") or []]
        betas = [float(b) for b in attrs.get("activation_beta") or []]
        for name in names:
            if name not in ACTIVATIONS:
                return f"activation {name!r} is not an ONNX recurrent activation"
            uses_a, uses_b, da, db = _ARGS.get(name, (False, False, 0.0, 0.0))
            if name in _DISPUTED and ((uses_a and not alphas) or (uses_b and not betas)):
                return f"activation {name!r} without its alpha/beta: onnxruntime defaults them to 0, ONNX to {da}, {db}"
            self.codes.append(ACTIVATIONS[name])
            self.alphas.append((alphas.pop(0) if alphas else da) if uses_a else 0.0)
            self.betas.append((betas.pop(0) if betas else db) if uses_b else 0.0)
        if self.dirs == 1:  # the kernels read two directions' codes
            self.codes *= 2
            self.alphas *= 2
            self.betas *= 2
        self.default_acts = all(n == dn for n, dn in zip(names, defaults * self.dirs, strict=True))
        return None


def kernel_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    """The kernel serving this LSTM/GRU node, or None where the compiled loop does not serve it
    (``decline_reason`` says why); the reference kernel runs it then."""
    a = _Attrs(step)
    return None if a.why else [kernel_for(a.op, str(a.dtype))]


def decline_reason(step: Mapping[str, Any]) -> str | None:
    """Why ``kernel_sources`` returns None for this node (None when it serves it)."""
    return _Attrs(step).why


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: what the compiled loops' read-only signatures take."""
    a = a.view()
    a.flags.writeable = False
    return a


class _Prepared:
    """W^T of both directions side by side (I, D*G*H), R^T per direction ((D, H, G*H) for LSTM;
    GRU's z/r columns (D, H, 2H) and h columns (D, H, H) apart, each a contiguous BLAS operand) and
    the folded biases, made once for the read-only W/R/B a run passes (stored weights: every run)."""

    def __init__(self, op: str, dt: np.dtype, w: np.ndarray, r: np.ndarray, b: np.ndarray | None) -> None:
        self.src = (w, r, b)
        # what W/R/B held: weights a graph computes (silero's, under If) arrive as new arrays every run
        self.held = tuple(None if v is None else np.array(v) for v in (w, r, b))
        n_dir, gh, isz = w.shape
        hs = r.shape[2]
        self.wt = readonly(np.ascontiguousarray(w.astype(dt, copy=False).transpose(2, 0, 1).reshape(isz, n_dir * gh)))
        rt = r.astype(dt, copy=False).transpose(0, 2, 1)
        bb = np.zeros((n_dir, 2 * gh), dt) if b is None else b.astype(dt, copy=False)
        if op == "LSTM":
            self.rec = [readonly(np.ascontiguousarray(rt))]
            bias = bb[:, :gh] + bb[:, gh:]
        else:  # z, r: Wb + Rb; h: Wbh and Rbh apart (Rbh sits inside r * (...) with linear_before_reset)
            self.rec = [
                readonly(np.ascontiguousarray(rt[:, :, : 2 * hs])),
                readonly(np.ascontiguousarray(rt[:, :, 2 * hs :])),
            ]
            bias = np.concatenate(
                [bb[:, : 2 * hs] + bb[:, gh : gh + 2 * hs], bb[:, 2 * hs : gh], bb[:, gh + 2 * hs :]], 1
            )
        self.bias = readonly(np.ascontiguousarray(bias))

    def matches(self, w: Any, r: Any, b: Any) -> bool:
        """Whether these are the frozen arrays prepared (a runner's weights, stored or folded, and
        the reference kernels' results computed once from them: the same objects every run, see
        ``nn_common.frozen``); any other array, read-only or not, may hold new values in the same
        memory (a user's input over a buffer it writes), so it is compared with what was prepared."""
        if all(
            (h is None and v is None) or (h is v and is_frozen(v)) for h, v in zip(self.src, (w, r, b), strict=True)
        ):
            return True
        # equal values: comparing costs a fraction of preparing again (transposed copies, folded biases)
        return all(
            (h is None and v is None)
            or (h is not None and v is not None and h.shape == v.shape and h.dtype == v.dtype and np.array_equal(h, v))
            for h, v in zip(self.held, (w, r, b), strict=True)
        )


def make_compute(
    step: Mapping[str, Any], kernels: Mapping[str, Any] | Sequence[Any]
) -> Callable[..., tuple[np.ndarray | None, ...]]:
    """``compute(*inputs) -> outputs`` for a node ``kernel_sources`` serves; ``kernels``: the
    compiled dispatchers of ``kernel_sources(step)``, by key or in its order. Inputs in ONNX order
    (None for absent optional ones, trailing ones may be left out); outputs one per entry of
    ``step["outputs"]``, None where the node does not produce it."""
    a = _Attrs(step)
    if a.why:
        raise ValueError(f"{a.op} node not served by the compiled loop: {a.why}")
    op, dt = a.op, np.dtype(str(a.dtype))
    key = kernel_for(op, str(a.dtype)).key
    fn = kernels[key] if isinstance(kernels, Mapping) else kernels[0]
    gates, hs, n_dir, lstm = _GATES[op], int(a.hidden), a.dirs, op == "LSTM"
    simple = a.default_acts and a.clip is None and (a.mode == 0 or not lstm)
    head = [n_dir, int(a.direction == "reverse"), a.layout, hs, int(a.clip is not None), a.mode]
    fp = readonly(np.array([a.clip or 0.0, *a.alphas, *a.betas], np.float64))
    empty2, empty3 = readonly(np.zeros((0, 0), dt)), readonly(np.zeros((0, 0, 0), dt))
    no_lens = readonly(np.zeros(0, np.int32))
    produced = a.produced + [False] * (_N_OUT[op] - len(a.produced))
    ip_cache: dict[tuple[int, ...], np.ndarray] = {}
    prepared: list[_Prepared] = []
    where = f"{op} node {next((o for o in step.get('outputs') or [] if o), '')}"

    def bad(msg: str) -> InvalidArgument:
        return InvalidArgument(f"NumbaCpuExecutionProvider: {where}: {msg}")

    def state(v: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        if v.shape != shape:
            raise bad(f"{what} has shape {list(v.shape)}; expected {list(shape)}")
        return readonly(np.ascontiguousarray(v, dtype=dt))

    def compute(*args: Any) -> tuple[np.ndarray | None, ...]:
        args = args + (None,) * (_N_IN[op] - len(args))
        x, w, r, b, lens, h0 = args[:6]
        c0, p = (args[6], args[7]) if lstm else (None, None)
        if x.ndim != 3 or x.dtype != dt:
            raise bad(f"X must be 3-D {dt}, got {x.dtype} of shape {list(x.shape)}")
        if w.shape != (n_dir, gates * hs, x.shape[2]) or r.shape != (n_dir, gates * hs, hs):
            raise bad(
                f"W {list(w.shape)} / R {list(r.shape)} do not match {n_dir} direction(s) x {gates} gates of {hs}"
            )
        if b is not None and b.shape != (n_dir, 2 * gates * hs):
            raise bad(f"B has shape {list(b.shape)}; expected {[n_dir, 2 * gates * hs]}")
        prep = prepared[0] if prepared and prepared[0].matches(w, r, b) else None
        if prep is None:
            prep = _Prepared(op, dt, w, r, b)
            prepared[:] = [prep]
        seq, batch = (x.shape[0], x.shape[1]) if a.layout == 0 else (x.shape[1], x.shape[0])
        sshape = (n_dir, batch, hs) if a.layout == 0 else (batch, n_dir, hs)
        flags = (lens is not None, h0 is not None, c0 is not None, p is not None)
        ip = ip_cache.get(flags)
        if ip is None:  # the kernel's int arguments (recurrent._IP, then the activation codes)
            fields = [*head[:4], *map(int, flags), *head[4:], int(simple and not flags[3]), *a.codes]
            ip = ip_cache[flags] = readonly(np.array(fields, np.int64))
        if lens is None:
            lens = no_lens
        elif lens.shape != (batch,):
            raise bad(f"sequence_lens has shape {list(lens.shape)}; expected [{batch}]")
        else:
            lens = readonly(np.ascontiguousarray(lens, dtype=np.int32))
        h0 = empty3 if h0 is None else state(h0, sshape, "initial_h")
        yshape = (seq, n_dir, batch, hs) if a.layout == 0 else (batch, seq, n_dir, hs)
        y = np.empty(yshape, dt) if produced[0] else np.empty((0, 0, 0, 0), dt)
        yh = np.empty(sshape, dt)
        # every step's input projection, both directions: one BLAS product (NumPy's BLAS: faster
        # here than the one Numba binds); the kernel adds the biases in place
        rows = x.shape[0] * x.shape[1]  # not -1: an input size of 0 leaves -1 undefined
        xw = np.dot(x.reshape(rows, x.shape[2]), prep.wt).reshape(x.shape[0], x.shape[1], n_dir * gates * hs)
        if lstm:
            c0 = empty3 if c0 is None else state(c0, sshape, "initial_c")
            if p is not None and p.shape != (n_dir, 3 * hs):
                raise bad(f"P has shape {list(p.shape)}; expected {[n_dir, 3 * hs]}")
            p = empty2 if p is None else readonly(np.ascontiguousarray(p, dtype=dt))
            yc = np.empty(sshape, dt)
            status = fn(y, yh, yc, xw, *prep.rec, prep.bias, p, h0, c0, lens, ip, fp)
            outs: list[np.ndarray | None] = [y, yh, yc]
        else:
            status = fn(y, yh, xw, *prep.rec, prep.bias, h0, lens, ip, fp)
            outs = [y, yh]
        if status:
            raise bad(f"sequence_lens {lens.tolist()} must lie in [0, {seq}]")
        return tuple(o if keep else None for o, keep in zip(outs, a.produced, strict=False))

    return compute

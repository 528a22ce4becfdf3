"""Vectorised special functions NumPy lacks: erf and the GELU family built on it.

NumPy has no erf and scipy is not a dependency; ``np.vectorize(math.erf)`` costs ~100 ns per
element. float32 uses the faithfully rounded erff of N. Juffa that onnxruntime's MLAS kernel
(``MlasComputeErf``) uses, so results agree with onnxruntime to an ulp or two; float64 uses
fdlibm's s_erf.c (Sun, < 1 ulp); float16/bfloat16 compute in float32 as onnxruntime does."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

_BLOCK = 65536  # elements per pass: the ~10 temporaries of a block stay in L2 (2x faster at 1M)


def _blocked(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn`` (elementwise, many in-place NumPy passes on 1-D arrays) over x in cache-sized
    blocks: one Python iteration per 64K elements, not per element."""
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.size <= _BLOCK:
        return fn(flat).reshape(x.shape)
    out = np.empty(flat.shape, fn(flat[:1]).dtype)
    for i in range(0, flat.size, _BLOCK):
        out[i : i + _BLOCK] = fn(flat[i : i + _BLOCK])
    return out.reshape(x.shape)


# --- float32: MLAS / Juffa erff (|x| <= 0.921875: x + x*P(x^2); else 1 - exp(-(a + a*Q(a))))
_SPLIT32 = np.float32(0.921875)
_UPPER32 = np.float32(3.925)  # erf rounds to 1.0f beyond
_SIGN32 = np.int32(-(2**31))
_SMALL32 = [np.float32(c) for c in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1, -3.76124859e-1)]
_SMALL32_LAST = np.float32(1.28379151e-1)
_BIG32 = [np.float32(c) for c in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2, 1.06777847e-1)]
_BIG32_LAST = [np.float32(6.34846687e-1), np.float32(1.28717512e-1)]


def _horner(t: np.ndarray, coeffs: list[np.float32]) -> np.ndarray:
    """coeffs[0]*t^(n-1) + ... + coeffs[-1], in place on one fresh array (t's dtype)."""
    r = np.multiply(t, coeffs[0])
    for c in coeffs[1:-1]:
        r += c
        r *= t
    r += coeffs[-1]
    return r


def _erf32(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    np.minimum(a, _UPPER32, out=a)  # NaN propagates; +-inf -> 1.0f
    small = _horner(np.multiply(a, a), [*_SMALL32, _SMALL32_LAST])
    small *= a
    small += a
    big = _horner(a, [*_BIG32, *_BIG32_LAST])
    big *= a
    big += a
    np.negative(big, out=big)
    np.exp(big, out=big)
    np.subtract(np.float32(1.0), big, out=big)
    # select and copysign as bit operations: np.where on a random mask and np.copysign cost
    # ~5x these SIMD integer passes. mask: -1 where a > split (the sign bit of split - a)
    mask = np.subtract(_SPLIT32, a, out=a).view(np.int32)
    np.right_shift(mask, 31, out=mask)
    out, low = big.view(np.int32), small.view(np.int32)
    np.bitwise_xor(out, low, out=out)
    out &= mask
    out ^= low  # big where the mask is set, else small (both >= 0, or NaN)
    sign = np.bitwise_and(x.view(np.int32), _SIGN32, out=low)
    out |= sign
    return out.view(np.float32)


# --- float64: fdlibm s_erf.c (Sun Microsystems, 1993; freely distributable), < 1 ulp.
_ERX = 8.45062911510467529297e-01
_PP = (-2.37630166566501626084e-05, -5.77027029648944159157e-03, -2.84817495755985104766e-02,
       -3.25042107247001499370e-01, 1.28379167095512558561e-01)  # fmt: skip
_QQ = (-3.96022827877536812320e-06, 1.32494738004321644526e-04, 5.08130628187576562776e-03,
       6.50222499887672944485e-02, 3.97917223959155352819e-01, 1.0)  # fmt: skip
_PA = (-2.16637559486879084300e-03, 3.54783043256182359371e-02, -1.10894694282396677476e-01,
       3.18346619901161753674e-01, -3.72207876035701323847e-01, 4.14856118683748331666e-01,
       -2.36211856075265944077e-03)  # fmt: skip
_QA = (1.19844998467991074170e-02, 1.36370839120290507362e-02, 1.26171219808761642112e-01,
       7.18286544141962662868e-02, 5.40397917702171048937e-01, 1.06420880400844228286e-01, 1.0)  # fmt: skip
_RA = (-9.81432934416914548592e00, -8.12874355063065934246e01, -1.84605092906711035994e02,
       -1.62396669462573470355e02, -6.23753324503260060396e01, -1.05586262253232909814e01,
       -6.93858572707181764372e-01, -9.86494403484714822705e-03)  # fmt: skip
_SA = (-6.04244152148580987438e-02, 6.57024977031928170135e00, 1.08635005541779435134e02,
       4.29008140027567833386e02, 6.45387271733267880336e02, 4.34565877475229228821e02,
       1.37657754143519042600e02, 1.96512716674392571292e01, 1.0)  # fmt: skip
_RB = (-4.83519191608651397019e02, -1.02509513161107724954e03, -6.37566443368389627722e02,
       -1.60636384855821916062e02, -1.77579549177547519889e01, -7.99283237680523006574e-01,
       -9.86494292470009928597e-03)  # fmt: skip
_SB = (-2.24409524465858183362e01, 4.74528541206955367215e02, 2.55305040643316442583e03,
       3.19985821950859553908e03, 1.53672958608443695994e03, 3.25792512996573918826e02,
       3.03380607434824582924e01, 1.0)  # fmt: skip


def _poly(t: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    r = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        r *= t
        r += c
    return r


def _erf64(x: np.ndarray) -> np.ndarray:
    """fdlibm's intervals, each evaluated only on its own elements (boolean-mask gathers):
    ~10 float64 passes per element instead of a Python call."""
    a = np.abs(x)
    out = a.copy()  # NaN stays NaN; every other element is overwritten below
    m = a < 0.84375
    t = a[m]
    z = t * t
    out[m] = t + t * (_poly(z, _PP) / _poly(z, _QQ))
    m = (a >= 0.84375) & (a < 1.25)
    s = a[m] - 1.0
    out[m] = _ERX + _poly(s, _PA) / _poly(s, _QA)
    m = (a >= 1.25) & (a < 6.0)  # erfc(a) = exp(-a*a - 0.5625 + R/S) / a, -a*a split exactly
    t = a[m]
    w = 1.0 / (t * t)
    ratio = np.where(t < 1 / 0.35, _poly(w, _RA) / _poly(w, _SA), _poly(w, _RB) / _poly(w, _SB))
    hi = (t.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    out[m] = 1.0 - np.exp(-hi * hi - 0.5625) * np.exp((hi - t) * (hi + t) + ratio) / t
    out[a >= 6.0] = 1.0  # 1 - tiny rounds to 1
    return np.copysign(out, x)


def erf(x: np.ndarray) -> np.ndarray:
    """erf elementwise in x's float type (float16/bfloat16 through float32); other inputs
    (integers) in float64, which the caller casts back."""
    x = np.asarray(x)
    if x.dtype == np.float32:
        return _blocked(_erf32, x)
    if x.dtype == np.float64:
        return _erf64(x.reshape(-1)).reshape(x.shape)
    if x.dtype == np.float16 or x.dtype.name == "bfloat16":
        return _blocked(_erf32, x.astype(np.float32)).astype(x.dtype)
    return _erf64(x.astype(np.float64).reshape(-1)).reshape(x.shape)


# --- GELU family, in onnxruntime's float32 operation order (x*SQRT1_2 -> erf -> 0.5*x*(e+1)).
_SQRT1_2 = math.sqrt(0.5)
_TANH_B = math.sqrt(2.0 / math.pi)
_TANH_C = 0.044715 * math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """x * 0.5 * (1 + erf(x / sqrt(2))) in x's type (float32 or float64)."""
    return _blocked(_gelu, x) if x.dtype == np.float32 else _gelu(x.reshape(-1)).reshape(x.shape)


def _gelu(x: np.ndarray) -> np.ndarray:
    t = _erf32(np.multiply(x, np.float32(_SQRT1_2))) if x.dtype == np.float32 else erf(x * _SQRT1_2)
    t += x.dtype.type(1.0)
    t *= x
    t *= x.dtype.type(0.5)
    return t


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) in x's type (float32 or float64)."""
    return _blocked(_gelu_tanh, x) if x.dtype == np.float32 else _gelu_tanh(x.reshape(-1)).reshape(x.shape)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    f = x.dtype.type
    t = np.multiply(x, x)
    t *= f(_TANH_C)
    t += f(_TANH_B)
    t *= x
    np.tanh(t, out=t)
    t += f(1.0)
    t *= x
    t *= f(0.5)
    return t


# Eigen's logistic coefficients as MLAS stores them (float32): p's alpha_9..alpha_1, q's beta_10..beta_0
LOGISTIC_P = tuple(
    np.float64(np.float32(c)) for c in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05)
)
LOGISTIC_P += tuple(np.float64(np.float32(c)) for c in (8.51377133304701e-03, 2.48287947061529e-01))
LOGISTIC_Q = tuple(
    np.float64(np.float32(c)) for c in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06)
)
LOGISTIC_Q += tuple(
    np.float64(np.float32(c)) for c in (1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)
)
_LOGISTIC_BLOCK = 1 << 14  # elements per pass: the float64 temporaries stay in cache


def _fma_horner(v2: np.ndarray, coefs: tuple[Any, ...], tmp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """MLAS's FMA Horner steps p = fma(p, v2, c) as float32(float64(p) * v2 + c): the float64
    product of two float32 is exact, so only a float64 sum landing on a float32 midpoint can
    round twice. Checked over every float32 v2 in [0, 324]: four v2 do, one of them is x*x
    for a float32 x (+-0.0042869034), and its logistic still comes out exact."""
    np.multiply(v2, coefs[0], out=tmp)
    np.add(tmp, coefs[1], out=out, casting="unsafe")
    for c in coefs[2:]:
        np.multiply(out, v2, out=tmp)
        np.add(tmp, c, out=out, casting="unsafe")
    return out


SIGMOID_TAIL = np.float32(-8.0)  # below: onnxruntime's own logistic (the Numba EP's threshold too)


def with_mlas_tail(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y`` (a float32 sigmoid of ``x``, written in place) with MLAS's logistic where x < -8:
    there onnxruntime's rational form drifts from the true value and reaches exactly 0 below about
    -18, where 1/(1 + e^-x) gives 1e-9..1e-20; an ArgMax or a sum of such a row (silence into a
    pitch decoder) then differs whole, so both CPU EPs give onnxruntime's values there."""
    tail = x < SIGMOID_TAIL
    if tail.any():
        y[tail] = mlas_logistic(x[tail])
    return y


# Eigen's tanh coefficients as MLAS stores them (float32): p's alpha_13..alpha_1, q's beta_6..beta_0
TANH_P = tuple(
    np.float64(np.float32(c))
    for c in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08)
)
TANH_P += tuple(np.float64(np.float32(c)) for c in (1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03))
TANH_Q = tuple(
    np.float64(np.float32(c))
    for c in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
)


def padded(coefs: tuple[Any, ...], n: int) -> tuple[Any, ...]:
    """Leading zero coefficients: an FMA Horner step from 0 gives the next coefficient exactly, so
    a padded polynomial rounds as the original, and several share one pass of array operations."""
    return (np.float64(0.0),) * (n - len(coefs)) + coefs


def _stacked(p: tuple[Any, ...], q: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Numerator and denominator coefficients stacked on a leading axis of 2 (each step's pair of
    shape (2, *shape)): both polynomials in one Horner pass, half the calls at small sizes."""
    n = max(len(p), len(q))
    pairs = zip(padded(p, n), padded(q, n), strict=True)
    return tuple(np.stack(np.broadcast_arrays(*map(np.float64, pair))).reshape((2, *shape)) for pair in pairs)


def _rational(v: np.ndarray, coefs: tuple[np.ndarray, ...]) -> np.ndarray:
    """v * p(v^2) / q(v^2) in MLAS's FMA steps (float32 ``v``, stacked ``coefs``)."""
    v2 = (v * v).astype(np.float64)
    pq = _fma_horner(v2, coefs, np.empty((2, *v2.shape)), np.empty((2, *v.shape), np.float32))
    pq[0] *= v
    pq[0] /= pq[1]
    return pq[0]


_TANH_PQ = _stacked(TANH_P, TANH_Q, (1,))


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """MlasComputeTanh as onnxruntime 1.31's x86-64 FMA3 kernel computes it, bit for bit (checked
    on 500,001 values over [-10, 10] and near 0): x clamped to [-9, 9], Eigen's rational p(x)/q(x)
    in FMA steps. onnxruntime's recurrent ops take their activations from MLAS; where their state is
    quantized again every step (DynamicQuantizeLSTM) one ulp of NumPy's tanh flips a quantum."""
    x = np.asarray(x, np.float32)
    flat = x.reshape(-1)
    y = np.empty_like(flat)
    for s in range(0, flat.size, _LOGISTIC_BLOCK):
        v = np.clip(flat[s : s + _LOGISTIC_BLOCK], np.float32(-9.0), np.float32(9.0))
        y[s : s + _LOGISTIC_BLOCK] = _rational(v, _TANH_PQ)
    return y.reshape(x.shape)


# LSTM gates i, o, f (logistic) and the candidate (tanh) in one pass: per-gate bounds and coefficients
_GATE_BOUND = np.array([18.0, 18.0, 18.0, 9.0], np.float32).reshape(4, 1, 1)
_GATE_PQ = _stacked(
    tuple(np.array(c) for c in zip(*([padded(LOGISTIC_P, 7)] * 3 + [padded(TANH_P, 7)]), strict=True)),
    tuple(np.array(c) for c in zip(*([padded(LOGISTIC_Q, 6)] * 3 + [padded(TANH_Q, 6)]), strict=True)),
    (4, 1, 1),
)


def mlas_lstm_gates(x: np.ndarray) -> np.ndarray:
    """MLAS's logistic of x[:3] and tanh of x[3] (x: (4, B, H) float32), bit for bit as
    ``mlas_logistic`` and ``mlas_tanh``, in one pass of array operations: an LSTM step calls it
    once, and at small batch the per-call overhead is most of its cost."""
    p = _rational(np.clip(x, -_GATE_BOUND, _GATE_BOUND), _GATE_PQ)
    p[:3] += np.float32(0.5)
    np.maximum(p[:3], np.float32(0.0), out=p[:3])
    return p


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    """MlasComputeLogistic as onnxruntime's x86-64 FMA3 kernel computes it, bit for bit: x
    clamped to [-18, 18], Eigen's rational p(x)/q(x) in FMA steps, + 0.5, clamped below at 0
    only (it returns 1.0000001 near x = 18)."""
    x = np.asarray(x, np.float32)
    flat = x.reshape(-1)
    y = np.empty_like(flat)
    for s in range(0, flat.size, _LOGISTIC_BLOCK):
        v = np.clip(flat[s : s + _LOGISTIC_BLOCK], np.float32(-18.0), np.float32(18.0))
        p = _rational(v, _LOGISTIC_PQ)  # numerator and denominator in one stacked Horner pass
        p += np.float32(0.5)
        np.maximum(p, np.float32(0.0), out=y[s : s + _LOGISTIC_BLOCK])
    return y.reshape(x.shape)


_LOGISTIC_PQ = _stacked(LOGISTIC_P, LOGISTIC_Q, (1,))

"""SVMClassifier and SVMRegressor (ai.onnx.ml), natively and as onnxruntime 1.31 computes them
(svmclassifier.cc, svmregressor.cc, ml_common.h), not as the ONNX reference does: converted
scikit-learn / libsvm models are checked against onnxruntime.

A run computes the kernel matrix of every row against every support vector in one matrix product
(RBF from |x|^2 + |sv|^2 - 2 x.sv in float64), every one-vs-one decision value in a second
(the dual coefficients laid out once, at build time, as a [vectors, pairs] matrix) and the votes in
a third. Probabilities follow libsvm: Platt's sigmoid per pair, then the pairwise coupling
(``multiclass_probability``) iterated as onnxruntime iterates it, so that the same rows stop after
the same sweep; it runs in float64 where onnxruntime runs float32 (results agree to ~1e-7).
onnxruntime's conventions kept on purpose (tests/cpu_reference/test_svm.py pins each): the label
comes from the votes even when probabilities are asked for; two classes without probabilities
score [-s, s] (NONE; LOGISTIC of it) or [1 - s, s] (SOFTMAX, SOFTMAX_ZERO: untransformed); scores of three or more
classes without probabilities are the decision values, one per pair, transformed as a row; the
linear mode (no support vectors) adds rho[0] to every class; a linear binary classifier labels
class 1 when its top score is >= 0.5 (all coefficients >= 0) or > 0 (some negative)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import mul, sub
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument, InvalidGraph, NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.trees import POSTS, as_2d, logistic, option, post_scores, probit
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]
ML = "ai.onnx.ml"
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_CHUNK = 1 << 21  # kernel matrix entries per step: bounds memory on big batches
_PY_ROWS = 4  # up to this many rows, the coupling runs in Python floats (fewer calls than NumPy)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _floats(node: NodeView, name: str) -> np.ndarray:
    """A float attribute as onnxruntime holds it (float32), widened to float64 for the math."""
    return np.asarray(node.attr(name, []) or [], dtype=np.float32).astype(np.float64).ravel()


class _Kernel:
    """K(x, v) for every row x and vector v: LINEAR x.v, POLY (gamma x.v + coef0)^degree, RBF
    exp(-gamma |x - v|^2), SIGMOID tanh(gamma x.v + coef0); kernel_params = [gamma, coef0, degree]."""

    def __init__(self, node: NodeView, kind: str, vectors: np.ndarray) -> None:
        params = _floats(node, "kernel_params")
        if params.size not in (0, 3):
            raise InvalidGraph(f"{node.describe()}: kernel_params must hold [gamma, coef0, degree], got {params.size}")
        self.kind = kind
        values: list[float] = params.tolist() if params.size else [0.0, 0.0, 0.0]
        self.gamma, self.coef0, self.degree = values
        self.vt = np.ascontiguousarray(vectors.T)  # [F, V]
        if kind == "RBF":  # -gamma |x - v|^2 = x.(2 gamma v) - gamma |v|^2 - gamma |x|^2
            self.vectors = vectors
            self.vt = self.vt * (2.0 * self.gamma)
            self.sq = -self.gamma * (vectors * vectors).sum(axis=1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        dot = x @ self.vt
        if self.kind == "LINEAR":
            return dot
        if self.kind == "RBF":
            xx = np.einsum("ij,ij->i", x, x)[:, None]
            k = np.exp(np.minimum(dot + (self.sq - self.gamma * xx), 0.0))
            far = ~np.isfinite(xx[:, 0])  # an infinite (or overflowing) row: inf - inf in the expansion
            if far.any():  # the distance itself, as onnxruntime sums it: exp(-inf) = 0
                k[far] = np.exp(-self.gamma * np.square(x[far, None, :] - self.vectors[None]).sum(axis=2))
            return k  # type: ignore[no-any-return]
        dot = self.gamma * dot + self.coef0
        if self.kind == "POLY":
            return _power(dot, self.degree)
        return np.tanh(dot)  # type: ignore[no-any-return]


def _power(base: np.ndarray, degree: float) -> np.ndarray:
    """base ** degree; a small whole degree by multiplications (a float64 power is 40x slower)."""
    if degree != int(degree) or not 1 <= degree <= 8:
        return np.power(base, degree)  # type: ignore[no-any-return]
    out = base.copy()
    for _ in range(int(degree) - 1):
        out *= base
    return out


def _rows(x: np.ndarray, features: int, where: str) -> np.ndarray:
    """X as float64 [N, features], through float32 as onnxruntime casts every input type."""
    if x.dtype not in (np.float32, np.float64, np.int64, np.int32):
        raise InvalidArgument(f"{where}: X must be float, double, int64 or int32, got {x.dtype}")
    v = as_2d(x, where)
    if v.shape[1] != features:
        raise InvalidArgument(f"{where}: X has {v.shape[1]} features per row, the model expects {features}")
    return v.astype(np.float32, copy=False).astype(np.float64)


def _chunked(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, width: int) -> np.ndarray:
    step = max(1, _CHUNK // max(1, width))
    if x.shape[0] <= step:
        return fn(x)
    return np.concatenate([fn(x[lo : lo + step]) for lo in range(0, x.shape[0], step)])


class _Coupling:
    """libsvm's multiclass_probability (pairwise coupling) for k classes, sweep for sweep as
    onnxruntime's ml_common.h, over rows of pair probabilities [N, pairs] (pairs in (0, 1), (0, 2),
    ... order) -> [N, k]. Index arrays are laid out once, per model."""

    def __init__(self, k: int, compiled: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.k = k
        self.compiled = compiled  # another EP's loop over Q [N, k, k] -> p [N, k], as ``_rows`` computes
        iu, ju = np.triu_indices(k, 1)
        self.upper, self.lower, self.diag = iu * k + ju, ju * k + iu, np.arange(k) * (k + 1)

    def q(self, v: np.ndarray) -> np.ndarray:
        """Q [N, k, k]: r[i, j] = v (i < j), r[j, i] = 1 - v; Q[i, j] = -r[j, i] r[i, j] and
        Q[i, i] = the sum of r[j, i]^2 over j != i."""
        n, k = v.shape[0], self.k
        r = np.zeros((n, k * k))
        r[:, self.upper] = v
        r[:, self.lower] = 1 - v
        r3 = r.reshape(n, k, k)
        rt = np.swapaxes(r3, 1, 2)
        q = -(rt * r3)
        q.reshape(n, k * k)[:, self.diag] = (rt * rt).sum(axis=2)  # r[i, i] is 0: the sum over j != i
        return q

    def __call__(self, v: np.ndarray) -> np.ndarray:
        q = self.q(v)
        if self.compiled is not None:
            return self.compiled(q)
        if v.shape[0] <= _PY_ROWS:
            return np.array([self._row(m) for m in q], dtype=np.float64).reshape(-1, self.k)
        return self._rows(q)

    def _row(self, qm: np.ndarray) -> list[float]:
        """One row: Q.p by NumPy, the sweep in Python floats. A sweep keeps p and Q.p
        unnormalised (one scale) and builds each (Q.p)[i] from the steps before it: the same
        arithmetic as onnxruntime's rescaled vectors with O(k) work per step."""
        k = self.k
        q = qm.tolist()
        diag = [q[i][i] for i in range(k)]
        p, eps = [1.0 / k] * k, 0.005 / k
        for _ in range(100):
            qp = (qm @ p).tolist()
            pqp = sum(map(mul, p, qp))
            # onnxruntime's running max from 0 skips NaN (a NaN row stops at once, uniform)
            if max((e for e in map(abs, map(sub, qp, repeat(pqp, k))) if e > 0.0), default=0.0) < eps:
                break
            c: list[float] = []
            scale = 1.0
            for qi, qpi, qii in zip(q, qp, diag, strict=True):
                qpi = (qpi + sum(map(mul, c, qi))) / scale
                d = (pqp - qpi) / qii
                s = 1.0 + d
                pqp = (pqp + d * (d * qii + 2.0 * qpi)) / s / s
                c.append(d * scale)
                scale *= s
            p = [(a + b) / scale for a, b in zip(p, c, strict=True)]
        return p

    def _rows(self, q: np.ndarray) -> np.ndarray:
        """Many rows: the same sweeps vectorised over the rows still iterating (a row stops at
        the sweep where onnxruntime stops it)."""
        n, k = q.shape[0], self.k
        out = np.full((n, k), 1.0 / k)
        rows, p, eps = np.arange(n), out.copy(), 0.005 / k
        for _ in range(100):
            qp = np.einsum("nij,nj->ni", q, p)
            pqp = (p * qp).sum(axis=1)
            done = np.fmax.reduce(np.abs(qp - pqp[:, None]), axis=1, initial=0.0) < eps  # NaN skipped, as above
            if done.any():
                out[rows[done]] = p[done]
                keep = ~done
                rows, q, p, qp, pqp = rows[keep], q[keep], p[keep], qp[keep], pqp[keep]
                if not rows.size:
                    return out
            for i in range(k):
                qii = q[:, i, i]
                d = (pqp - qp[:, i]) / qii
                p[:, i] += d
                s = 1.0 + d
                pqp = (pqp + d * (d * qii + 2.0 * qp[:, i])) / s / s
                qp = (qp + d[:, None] * q[:, i, :]) / s[:, None]
                p /= s[:, None]
        out[rows] = p  # 100 sweeps without converging: onnxruntime keeps the last iterate
        return out


_P_LO, _P_HI = float(np.float32(1e-7)), float(np.float32(1) - np.float32(1e-7))  # onnxruntime's float32 bounds


def _pair_probabilities(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(i | i or j) per pair from Platt's sigmoid, 1 - logistic(a s + b) = 1 / (1 + exp(a s + b)),
    clipped to [1e-7, 1 - 1e-7] as onnxruntime does (it rounds to float32 on the way: ~1e-7)."""
    e = np.exp(np.minimum(scores * a + b, 80.0))
    return np.minimum(np.maximum(1.0 / (1.0 + e), _P_LO), _P_HI)  # type: ignore[no-any-return]


def _labels(node: NodeView) -> np.ndarray:
    strings = node.attr("classlabels_strings")
    if strings:
        return np.array([_text(s) for s in strings], dtype=object)
    return np.asarray(node.attr("classlabels_ints", []) or [], dtype=np.int64)


class _Classifier:
    """The attributes of one SVMClassifier, checked and laid out for the vectorised run."""

    def __init__(self, node: NodeView, couple: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        where = self.where = node.describe()
        self.labels = _labels(node)
        k = self.k = self.labels.size
        if k < 1:
            raise InvalidGraph(f"{where}: needs classlabels_ints or classlabels_strings")
        self.post = option(node, "post_transform", POSTS, "NONE")
        per_class = np.asarray(node.attr("vectors_per_class", []) or [], dtype=np.int64)
        coef, rho = _floats(node, "coefficients"), _floats(node, "rho")
        self.prob_a, self.prob_b = _floats(node, "prob_a"), _floats(node, "prob_b")
        if self.prob_a.size != self.prob_b.size:
            raise InvalidGraph(f"{where}: prob_a has {self.prob_a.size} values, prob_b {self.prob_b.size}")
        if not coef.size or not rho.size:
            raise InvalidGraph(f"{where}: needs coefficients and rho")
        self.all_positive = bool((coef >= 0).all())
        self.proba = self.prob_a.size > 0
        vectors = int(per_class.sum())
        self.svc = vectors > 0
        if not self.svc:  # liblinear: one coefficient row per class, rho[0] for all
            if coef.size % k:
                raise InvalidGraph(f"{where}: {coef.size} coefficients do not split into {k} class rows")
            self.features = coef.size // k
            self.kernel = _Kernel(node, "LINEAR", coef.reshape(k, -1))
            self.rho = rho[:1]
            return
        if k < 2 or per_class.size != k or (per_class < 0).any():
            raise InvalidGraph(f"{where}: vectors_per_class must hold one count per class (2 or more), got {per_class}")
        sv = _floats(node, "support_vectors")
        if sv.size % vectors or not sv.size:
            raise InvalidGraph(f"{where}: {sv.size} support_vectors values do not split into {vectors} vectors")
        pairs = k * (k - 1) // 2
        if coef.size < (k - 1) * vectors or rho.size < pairs or (self.proba and self.prob_a.size < pairs):
            raise InvalidGraph(
                f"{where}: needs {(k - 1) * vectors} coefficients and {pairs} rho (and prob_a/prob_b when set), "
                f"got {coef.size} and {rho.size}"
            )
        self.features = sv.size // vectors
        self.kernel = _Kernel(node, option(node, "kernel_type", KERNELS, "LINEAR"), sv.reshape(vectors, -1))
        self.rho, self.prob_a, self.prob_b = rho[:pairs], self.prob_a[:pairs], self.prob_b[:pairs]
        # dual coefficients as [vectors, pairs]: pair (i, j) weighs class i's vectors by row j - 1
        # and class j's by row i, as svmclassifier.cc walks them
        c = coef[: (k - 1) * vectors].reshape(k - 1, vectors)
        start = np.concatenate([[0], np.cumsum(per_class)])
        self.dual = np.zeros((vectors, pairs))
        win, lose = np.zeros((pairs, k)), np.zeros((pairs, k))  # the vote goes to i if d > 0, else to j
        iu, ju = np.triu_indices(k, 1)
        for p, (i, j) in enumerate(zip(iu.tolist(), ju.tolist(), strict=True)):
            self.dual[start[i] : start[i + 1], p] = c[j - 1, start[i] : start[i + 1]]
            self.dual[start[j] : start[j + 1], p] = c[i, start[j] : start[j + 1]]
            win[p, i] = lose[p, j] = 1
        self.pairs, self.coupling = pairs, _Coupling(k, couple)
        self.vote_gain, self.vote_base = win - lose, lose.sum(axis=0)  # votes = base + (d > 0) @ gain

    def decisions(self, x: np.ndarray) -> np.ndarray:
        """One decision value per row and pair (SVC) or per row and class (linear), float64."""
        if not self.svc:
            return self.kernel(x) + self.rho[0]
        return self.kernel(x) @ self.dual + self.rho  # type: ignore[no-any-return]

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = _chunked(self.decisions, _rows(x, self.features, self.where), self.pairs if self.svc else self.k)
        s = d.astype(np.float32)
        if not self.svc:
            return self._linear(s)
        idx = np.argmax((d > 0) @ self.vote_gain + self.vote_base, axis=1)  # the first class with most votes
        if self.proba:
            probs = self.coupling(_pair_probabilities(s.astype(np.float64), self.prob_a, self.prob_b))
            probs = probs.astype(np.float32)
            return self.labels[idx], post_scores(probs, self.post)
        if self.k > 2:
            return self.labels[idx], post_scores(s, self.post)
        v = s[:, 0]
        if self.post == "PROBIT":  # onnxruntime leaves the second column unwritten (0)
            out = np.stack([probit(v), np.zeros_like(v)], axis=1)
        elif self.post in ("NONE", "LOGISTIC"):
            out = np.stack([-v, v], axis=1)
            out = logistic(out) if self.post == "LOGISTIC" else out
        else:
            out = np.stack([np.float32(1) - v, v], axis=1)
        return self.labels[idx], out

    def _linear(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.argmax(s, axis=1)
        if self.k == 2 and not self.proba:
            top = s.max(axis=1)
            one = top >= 0.5 if self.all_positive else top > 0
            idx = np.where(one, 1, idx)
        out = post_scores(s, self.post) if self.k > 1 else (probit(s) if self.post == "PROBIT" else s)
        return self.labels[idx], out


@REGISTRY.register("SVMClassifier", since=1, domain=ML)
def build_svm_classifier(
    node: NodeView, ctx: KernelContext, couple: Callable[[np.ndarray], np.ndarray] | None = None
) -> Fn:
    """Label [N] (int64 or string) and scores: [N, classes] with probabilities or in the linear
    mode, else [N, pairs] decision values ([N, 2] for two classes). ``couple``: a compiled
    pairwise coupling (``_Coupling._rows``'s arithmetic) another EP runs these kernels with."""
    return _Classifier(node, couple)


@REGISTRY.register("SVMRegressor", since=1, domain=ML)
def build_svm_regressor(node: NodeView, ctx: KernelContext) -> Fn:
    """[N, 1]: sum of coefficient * K(x, sv) + rho[0]; the linear mode (n_supports 0) is
    x . coefficients + rho[0]; one_class gives +1 / -1."""
    where = node.describe()
    post = _text(node.attr("post_transform", "NONE"))
    if post != "NONE":
        raise NotImplementedByAnyEp(
            f"{where}: post_transform {post!r} is not supported: onnxruntime 1.31 ignores it for SVMRegressor "
            "and the spec leaves it undefined for one regressed value; export the model with NONE"
        )
    vectors = int(node.attr("n_supports", 0))
    coef, rho = _floats(node, "coefficients"), _floats(node, "rho")
    if not coef.size or not rho.size:
        raise InvalidGraph(f"{where}: needs coefficients and rho")
    if vectors > 0:
        sv = _floats(node, "support_vectors")
        if sv.size % vectors or not sv.size or coef.size < vectors:
            raise InvalidGraph(
                f"{where}: {sv.size} support_vectors values and {coef.size} coefficients for n_supports={vectors}"
            )
        kernel = _Kernel(node, option(node, "kernel_type", KERNELS, "LINEAR"), sv.reshape(vectors, -1))
        weights = coef[:vectors]
    else:
        kernel, weights = _Kernel(node, "LINEAR", coef.reshape(1, -1)), np.ones(1)
    features = kernel.vt.shape[0]
    one_class = bool(node.attr("one_class", 0))

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        v = _rows(x, features, where)
        y = _chunked(lambda c: kernel(c) @ weights + rho[0], v, weights.size).astype(np.float32)
        if one_class:
            y = np.where(y > 0, np.float32(1), np.float32(-1))
        return (y.reshape(-1, 1),)

    return compute

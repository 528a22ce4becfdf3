"""Tree-ensemble traversal and SVM probability coupling as compiled loops.

Why: scikit-learn models converted to ONNX are one node each (TreeEnsemble*, SVMClassifier), and
the reference EP's NumPy kernels spend their time where NumPy is weakest: walking every (tree, row)
pair one tree level per call (gradient boosting: 150 trees of depth 4), and libsvm's pairwise
coupling, up to 100 sweeps of a k x k system per row. Here those two loops are compiled; every
other part of these ops (attribute checks, forest layout, aggregation, base values, post
transforms, labels, decision values, votes) is the reference EP's kernel, called with the
compiled loop through its ``traverse_for`` / ``couple`` parameter: one source of truth, and the
same results (the comparisons are the reference's, in the same dtype; the coupling is
``_Coupling._rows``'s arithmetic, onnxruntime's ``multiclass_probability``).

Trees: one kernel per comparison dtype (float32, or float64 for double input; X's declared dtype
picks it, and a run whose X needs the other dtype walks the trees with NumPy, as the reference
EP). Forests of one comparison mode without missing-value tracking (what scikit-learn, LightGBM
and XGBoost export) take a branch-free walk over four rows at a time; the others a general walk
(every mode, BRANCH_MEMBER sets, NaN to the missing-value branch). Memory safety: the reference
EP's ``Forest.finish`` checks every link, root and feature id, and ``Forest.leaves`` checks X's
width before the kernel runs (Numba does not bounds-check).

Kernel sources are fixed text (the dtype is the signature's): no string of a record reaches
generated code. The comparison mode is a run-time argument of one walk (a loop-invariant branch,
about 6% slower than a walk per mode, and compiled in 0.7 s instead of 2.4 s)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_numba_cpu.generate import KernelSource
from ep_numba_cpu.recurrent import readonly, record_value

ML = "ai.onnx.ml"
TREE_OPS = ("TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble")
SVM_OPS = ("SVMClassifier",)
OPS = TREE_OPS + SVM_OPS
DTYPES = ("float32", "float64")

_WALK = """from numba import njit

LEAF = 7


@njit(inline="always")
def compare(m, v, th):
    if m == 0:
        return v <= th
    if m == 1:
        return v < th
    if m == 2:
        return v >= th
    if m == 3:
        return v > th
    if m == 4:
        return v == th
    return v != th


def kernel(x, roots, feature, threshold, mode, kids, missing, members, weights, ip, out, sums):
    depth = ip[0]
    simple = ip[1]
    n_rows = x.shape[0]
    n_trees = roots.shape[0]
    if simple >= 0:
        for t in range(n_trees):
            r = roots[t]
            n = 0
            while n + 4 <= n_rows:
                c0 = r
                c1 = r
                c2 = r
                c3 = r
                for _ in range(depth):
                    c0 = kids[2 * c0 + compare(simple, x[n, feature[c0]], threshold[c0])]
                    c1 = kids[2 * c1 + compare(simple, x[n + 1, feature[c1]], threshold[c1])]
                    c2 = kids[2 * c2 + compare(simple, x[n + 2, feature[c2]], threshold[c2])]
                    c3 = kids[2 * c3 + compare(simple, x[n + 3, feature[c3]], threshold[c3])]
                out[t, n] = c0
                out[t, n + 1] = c1
                out[t, n + 2] = c2
                out[t, n + 3] = c3
                n += 4
            while n < n_rows:
                c = r
                for _ in range(depth):
                    c = kids[2 * c + compare(simple, x[n, feature[c]], threshold[c])]
                out[t, n] = c
                n += 1
    else:
        for t in range(n_trees):
            r = roots[t]
            for n in range(n_rows):
                c = r
                for _ in range(depth):
                    m = mode[c]
                    if m == LEAF:
                        break
                    v = x[n, feature[c]]
                    if m == 6:
                        go = False
                        for s in range(members.shape[1]):
                            if members[c, s] == v:
                                go = True
                                break
                    else:
                        go = compare(m, v, threshold[c])
                    if missing[c] and v != v:
                        go = True
                    c = kids[2 * c + go]
                out[t, n] = c
    if ip[2] == 1 and n_trees > 0:
        for n in range(n_rows):
            for k in range(sums.shape[1]):
                sums[n, k] = weights[out[0, n], k]
        for t in range(1, n_trees):
            for n in range(n_rows):
                for k in range(sums.shape[1]):
                    sums[n, k] += weights[out[t, n], k]
"""
# (the sums are a pass after the walk: adding weights inside the four-row walk made it 4.7x slower)

_COUPLING = """import numpy as np


def kernel(q, out):
    n_rows = q.shape[0]
    k = q.shape[1]
    eps = 0.005 / k
    p = np.empty(k)
    qp = np.empty(k)
    for r in range(n_rows):
        for i in range(k):
            p[i] = 1.0 / k
        for _ in range(100):
            for i in range(k):
                s = 0.0
                for j in range(k):
                    s += q[r, i, j] * p[j]
                qp[i] = s
            pqp = 0.0
            for i in range(k):
                pqp += p[i] * qp[i]
            err = 0.0
            for i in range(k):
                e = abs(qp[i] - pqp)
                if e > err:
                    err = e
            if err < eps:
                break
            for i in range(k):
                qii = q[r, i, i]
                d = (pqp - qp[i]) / qii
                p[i] += d
                s1 = 1.0 + d
                pqp = (pqp + d * (d * qii + 2.0 * qp[i])) / s1 / s1
                for j in range(k):
                    qp[j] = (qp[j] + d * q[r, i, j]) / s1
                    p[j] /= s1
        for i in range(k):
            out[r, i] = p[i]
"""


def tree_kernel(dtype: str) -> KernelSource:
    """The one traversal kernel of ``dtype`` (every tree-ensemble node of that comparison dtype)."""
    if dtype not in DTYPES:
        raise ValueError(f"no tree kernel for {dtype}")
    r = f"{dtype}:{{}}:C:r"
    # x, roots, feature, threshold, mode, kids, missing, members, weights, ip, out, sums
    parts = [r.format(2), "int32:1:C:r", "int32:1:C:r", r.format(1), "int8:1:C:r", "int32:1:C:r"]
    parts += ["boolean:1:C:r", r.format(2), r.format(2), "int64:1:C:r", "int64:2:C:w", f"{dtype}:2:C:w"]
    return KernelSource(_WALK, ",".join(parts), False)


def coupling_kernel() -> KernelSource:
    """libsvm's pairwise coupling over rows of Q [N, k, k] -> p [N, k], float64."""
    return KernelSource(_COUPLING, "float64:3:C:r,float64:2:C:w", False)


def _attr(step: Mapping[str, Any], name: str) -> Any:
    return record_value((step.get("attrs") or {}).get(name))


def _tree_dtype(step: Mapping[str, Any]) -> str:
    """The comparison dtype X's declared dtype gives (float64 for double, else float32)."""
    types = step.get("in_types") or [[None, None]]
    return "float64" if types[0][0] == "float64" else "float32"


def kernel_sources(step: Mapping[str, Any]) -> list[KernelSource] | None:
    """The compiled loop serving this ai.onnx.ml node, or None (the reference kernel runs it: an
    SVMClassifier without probabilities, or a linear one, has no loop to compile)."""
    if step.get("domain") != ML:
        return None
    if step.get("op") in TREE_OPS:
        return [tree_kernel(_tree_dtype(step))]
    if step.get("op") in SVM_OPS and _attr(step, "prob_a") and sum(_attr(step, "vectors_per_class") or [0]) > 0:
        return [coupling_kernel()]
    return None


def make_compute(
    step: Mapping[str, Any], kernels: Sequence[Any], weights: Mapping[str, np.ndarray], host: Any
) -> Callable[..., Any]:
    """The reference EP's kernel for this node, run with the compiled loop of ``kernels`` (the
    dispatchers of ``kernel_sources(step)``, in its order). ``delegate.BuildError`` when the
    reference kernel refuses the node."""
    from ep_numba_cpu import delegate

    fn = kernels[0]
    if step["op"] in TREE_OPS:
        dtype = np.dtype(_tree_dtype(step))
        return delegate.build(step, weights, host, traverse_for=lambda forest, acc: _walker(fn, dtype, forest, acc))
    return delegate.build(step, weights, host, couple=lambda q: _couple(fn, q))


def _walker(fn: Any, dtype: np.dtype, forest: Any, acc: Any) -> tuple[Callable[..., np.ndarray], ...] | None:
    """``leaves(x)`` and ``summed(x)`` for one finished forest through the kernel ``fn`` (of
    comparison ``dtype``), or None where the kernel does not serve it (another comparison dtype;
    more nodes or a larger feature id than int32 holds): NumPy's walk then."""
    m = forest.mode.size
    if np.dtype(acc) != dtype or 2 * m >= 2**31 or forest.features >= 2**31:
        return None
    ro = readonly
    roots, feature = ro(forest.roots.astype(np.int32)), ro(forest.feature.astype(np.int32))
    threshold, mode = ro(forest.threshold.astype(dtype)), ro(forest.mode.astype(np.int8))
    kids, missing = ro(forest.kids.astype(np.int32)), ro(forest.missing_true.astype(np.bool_))
    members = forest.members.astype(dtype)
    members = ro(members if members.shape[1] else np.zeros((m, 1), dtype) + np.nan)
    weights = ro(np.ascontiguousarray(forest.weights, dtype=dtype))
    one = forest.modes_used[0] if forest.simple is not None else -1
    ip_leaves = ro(np.array([forest.depth, one, 0], dtype=np.int64))
    ip_sums = ro(np.array([forest.depth, one, 1], dtype=np.int64))
    no_sums = np.zeros((1, weights.shape[1]), dtype)
    walk = (roots, feature, threshold, mode, kids, missing, members, weights)

    def leaves(x: np.ndarray) -> np.ndarray:
        out = np.empty((roots.size, x.shape[0]), dtype=np.int64)
        fn(ro(np.ascontiguousarray(x, dtype=dtype)), *walk, ip_leaves, out, no_sums)
        return out

    def summed(x: np.ndarray) -> np.ndarray:
        """Tree by tree, as the reference EP's ``tree_sum`` (and onnxruntime) adds: the same floats."""
        if not roots.size:  # no tree: NumPy's sum of nothing
            return np.zeros((x.shape[0], weights.shape[1]), dtype)
        out = np.empty((roots.size, x.shape[0]), dtype=np.int64)
        sums = np.empty((x.shape[0], weights.shape[1]), dtype)
        fn(ro(np.ascontiguousarray(x, dtype=dtype)), *walk, ip_sums, out, sums)
        return sums

    return leaves, summed


def _couple(fn: Any, q: np.ndarray) -> np.ndarray:
    out = np.empty(q.shape[:2], dtype=np.float64)
    fn(readonly(np.ascontiguousarray(q, dtype=np.float64)), out)
    return out

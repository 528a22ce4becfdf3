"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier, TreeEnsembleRegressor, TreeEnsemble),
natively and as onnxruntime computes them.

The node attributes become flat arrays once, at kernel build time (leaves loop onto themselves);
a run steps every (tree, row) pair together, one vectorised gather + compare per tree level, so
there is no Python loop per row or per tree. Aggregation, base values, the binary-classifier
special cases and the post-transforms (including onnxruntime's approximate PROBIT) follow
onnxruntime's tree_ensemble_aggregator.h / ml_common.h, not the ONNX reference: converted
scikit-learn, LightGBM and XGBoost models are checked against onnxruntime. onnxruntime 1.31's
quirks are kept on purpose (tests/cpu_reference/test_trees.py pins each against it): a score no
leaf gave reads 0; a two-class model weighting both classes labels rows with the literal int64 1/0;
a lone binary score under PROBIT leaves onnxruntime's second column unwritten (0 here);
TreeEnsemble's post_transform integers follow onnxruntime's enum (1 LOGISTIC, 2 SOFTMAX).
BRANCH_MEMBER tests exact membership (onnxruntime takes integer sets only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument, InvalidGraph
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]
ML = "ai.onnx.ml"
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER", "LEAF")
LEAF = 7
POSTS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")  # onnxruntime's POST_EVAL_TRANSFORM order
AGGS = ("AVERAGE", "SUM", "MIN", "MAX")
_CHUNK = 1 << 22  # gathered (tree, row, target) values per step: bounds memory on big batches


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_COMPARE = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)


def _compare(mode: int, v: np.ndarray, th: np.ndarray) -> np.ndarray:
    return _COMPARE[mode](v, th)  # type: ignore[no-any-return]


@dataclass
class Forest:
    """Flat node arrays over every tree; leaves have mode LEAF and point at themselves."""

    feature: np.ndarray  # int64 [M]
    threshold: np.ndarray  # [M], the comparison dtype
    mode: np.ndarray  # int8 [M]
    true_next: np.ndarray  # int64 [M]
    false_next: np.ndarray  # int64 [M]
    missing_true: np.ndarray  # bool [M]
    members: np.ndarray  # [M, S] set values of BRANCH_MEMBER nodes, NaN padded ([M, 0] when none)
    roots: np.ndarray  # int64 [T]
    weights: np.ndarray  # [M, K] in the accumulation dtype: summed leaf weights per target
    has: np.ndarray  # bool [M, K]: the leaf carries a weight for that target
    depth: int = 0
    modes_used: tuple[int, ...] = ()
    full: bool = False  # every leaf weights every target (no per-row "has a score" bookkeeping)
    any_missing: bool = False
    simple: Callable[..., np.ndarray] | None = None  # the one comparison when no node needs more
    kids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (false, true) per node
    doubled: tuple[np.ndarray, ...] = ()  # kids, feature, threshold indexed by 2 * node id (2 * child in kids)
    features: int = 0  # the columns X needs: 1 + the largest feature id an interior node reads
    traverse: Callable[[np.ndarray], np.ndarray] | None = None  # a compiled ``leaves`` (TraverseFor)
    traverse_sum: Callable[[np.ndarray], np.ndarray] | None = None  # a compiled ``summed``
    _starts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)

    def finish(self, where: str) -> Forest:
        """Checks the links and computes the depth (the number of steps every row needs)."""
        m = self.mode.size
        for name, ids in (("true", self.true_next), ("false", self.false_next)):
            if ids.size and (ids.min() < 0 or ids.max() >= m):
                raise InvalidGraph(f"{where}: a {name} branch points outside the tree's nodes")
        if self.roots.size and (self.roots.min() < 0 or self.roots.max() >= m):
            raise InvalidGraph(f"{where}: a tree root points outside the tree's nodes")
        inner = self.feature[self.mode != LEAF]
        if inner.size and inner.min() < 0:
            raise InvalidGraph(f"{where}: a node reads feature {int(inner.min())}; feature ids start at 0")
        self.features = int(inner.max()) + 1 if inner.size else 0
        self.full = bool(self.has[self.mode == LEAF].all())
        self.modes_used = tuple(sorted({int(v) for v in np.unique(self.mode)} - {LEAF}))
        self.any_missing = bool(self.missing_true.any())
        one = self.modes_used[0] if len(self.modes_used) == 1 and self.modes_used[0] != 6 else None
        self.simple = _COMPARE[one] if one is not None and not self.any_missing else None
        self.kids = np.stack([self.false_next, self.true_next], axis=1).reshape(-1)
        self.doubled = (2 * self.kids, np.repeat(self.feature, 2), np.repeat(self.threshold, 2))
        frontier, depth = self.roots, 0
        while frontier.size:
            inner = frontier[self.mode[frontier] != LEAF]
            if not inner.size:
                break
            depth += 1
            if depth > m:
                raise InvalidGraph(f"{where}: the trees have a cycle (a node is its own descendant)")
            nxt = np.unique(np.concatenate([self.true_next[inner], self.false_next[inner]]))
            frontier = nxt
        self.depth = depth
        return self

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """The leaf every (tree, row) pair lands on, [T, N]: one flat vector of pairs, each level
        a gather of feature and threshold, a compare, and a gather of the child. Trees of one
        comparison mode without missing-value tracking (the common case) take the shortest loop:
        at batch 1 the NumPy calls per level are the cost. ``traverse``, when set, computes the same."""
        n, f = x.shape
        self._check_width(f)
        if self.traverse is not None:
            return self.traverse(x)
        flat = x.reshape(-1)
        kids, feature, threshold = self.kids, self.feature, self.threshold
        if self.simple is not None:  # doubled node ids (2j): one call fewer per level
            compare, kids2, feature2, threshold2 = self.simple, *self.doubled
            cur, offs = self._start(n, f)
            for _ in range(self.depth):
                at = feature2[cur]
                if offs is not None:
                    at += offs
                cur = kids2[cur + compare(flat[at], threshold2[cur])]
            return (cur >> 1).reshape(self.roots.size, n)  # type: ignore[no-any-return]
        if n == 1:
            cur = self.roots.copy()
            offs = None
        else:
            offs = np.tile(np.arange(n, dtype=np.int64) * f, self.roots.size)
            cur = np.repeat(self.roots, n)
        for _ in range(self.depth):
            at = feature[cur]
            v = flat[at if offs is None else at + offs]
            th = threshold[cur]
            if self.simple is not None:
                cond = self.simple(v, th)
            else:
                mode = self.mode[cur]
                cond = np.zeros(cur.shape, dtype=bool)
                for m in self.modes_used:
                    hit = mode == m
                    if m == 6:
                        cond |= hit & (self.members[cur] == v[..., None]).any(axis=-1)
                    else:
                        cond |= hit & _compare(m, v, th)
                if self.any_missing:
                    cond |= self.missing_true[cur] & np.isnan(v)
            cur *= 2
            cur += cond  # kids holds (false, true) per node
            cur = kids[cur]
        return cur.reshape(self.roots.size, n)  # type: ignore[no-any-return]

    def _start(self, n: int, f: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The doubled roots of every (tree, row) pair and each pair's row offset into X (None for
        one row), kept for the last few batch shapes: building them took ~10 us of a 32-row run."""
        got = self._starts.get((n, f))
        if got is None:
            if len(self._starts) >= 8:
                self._starts.clear()
            offs = None if n == 1 else np.tile(np.arange(n, dtype=np.int64) * f, self.roots.size)
            got = self._starts[(n, f)] = (np.repeat(2 * self.roots, n), offs)
        return got

    def summed(self, x: np.ndarray) -> np.ndarray:
        """Per row and target, the leaf weights summed tree by tree in the accumulation dtype
        (every leaf weights every target: ``full``), [N, K] (``tree_sum``). ``traverse_sum``, when
        set, adds the same numbers in the same order after its walk."""
        if self.traverse_sum is not None:
            self._check_width(x.shape[1])
            return self.traverse_sum(x)
        return tree_sum(self.weights[self.leaves(x)])

    def _check_width(self, f: int) -> None:
        """Rows must hold every feature a node reads (a compiled walk does not bounds-check)."""
        if f < self.features:
            raise InvalidArgument(
                f"X has {f} features per row; the trees read feature {self.features - 1}: "
                f"feed rows of at least {self.features} features"
            )


def tree_sum(w: np.ndarray) -> np.ndarray:
    """[T, N, K] -> [N, K]: tree by tree, as onnxruntime adds. NumPy reduces an outer axis
    sequentially (``out += w[t]``, vectorised across N * K: 25x faster than ``cumsum`` at
    100x32x10) but sums pairwise along the innermost one, which it is when N * K is 1: a one-row,
    one-target regressor of 9+ trees would round differently, so that shape takes ``cumsum``."""
    if not w.shape[0]:
        return np.zeros(w.shape[1:], w.dtype)
    if w[0].size > 1:
        return np.ascontiguousarray(w).sum(axis=0)  # type: ignore[no-any-return]
    return np.cumsum(w, axis=0)[-1]  # type: ignore[no-any-return]


def _erfinv(x: np.ndarray) -> np.ndarray:
    """onnxruntime's float32 ErfInv approximation (ml_common.h): float32 steps, a correctly rounded
    log and 2 / (pi * 0.147) from the double pi; bit-identical to onnxruntime over (0, 1)."""
    f = np.float32
    sgn = np.where(x < 0, f(-1), f(1)).astype(np.float32)
    y = (f(1) - x) * (f(1) + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(y.astype(np.float64)).astype(np.float32)
        v = f(2 / (np.pi * 0.147)) + f(0.5) * lg
        v2 = f(1) / f(0.147) * lg
        return (sgn * np.sqrt(np.sqrt(v * v - v2) - v)).astype(np.float32)  # type: ignore[no-any-return]


def probit(x: np.ndarray) -> np.ndarray:
    return (np.float32(1.41421356) * _erfinv(x * np.float32(2) - np.float32(1))).astype(np.float32)  # type: ignore[no-any-return]


def logistic(x: np.ndarray) -> np.ndarray:
    """onnxruntime's ComputeLogistic: 1 / (1 + exp(-|x|)), mirrored for x < 0 (exp(-|x|) <= 1:
    it never overflows)."""
    x = np.asarray(x, dtype=np.float32)
    v = np.float32(1) / (np.float32(1) + np.exp(-np.abs(x)))
    return np.where(x < 0, np.float32(1) - v, v)  # type: ignore[no-any-return]


def post_scores(scores: np.ndarray, post: str) -> np.ndarray:
    """onnxruntime's write_scores for rows of two or more scores, in float32."""
    s = scores.astype(np.float32)
    if post == "NONE":
        return s
    if post == "LOGISTIC":
        return logistic(s)
    if post == "PROBIT":
        return probit(s)
    top = np.maximum(s.max(axis=1, keepdims=True), np.float32(-np.finfo(np.float32).max))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if post == "SOFTMAX":
            e = np.exp(s - top)
        else:  # SOFTMAX_ZERO: (near-)zero scores mark absent classes and stay (near) zero
            e = np.where(np.abs(s) > np.float32(1e-7), np.exp(s - top), s * np.exp(-top))
        return (e / e.sum(axis=1, keepdims=True, dtype=np.float32)).astype(np.float32)  # type: ignore[no-any-return]


def _aggregate(forest: Forest, x: np.ndarray, agg: str, acc: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row and target: the aggregated leaf weights (trees in order) and whether any leaf
    gave that target a weight."""
    n = x.shape[0]
    t, k = forest.roots.size, forest.weights.shape[1]
    weights = forest.weights  # already in the accumulation dtype
    step = max(1, _CHUNK // max(1, t * k))
    if n <= step and agg in ("SUM", "AVERAGE") and forest.full:  # the common case, fewest NumPy calls
        return forest.summed(x), np.ones((n, k), dtype=bool)
    scores = np.zeros((n, k), dtype=acc)
    has = np.zeros((n, k), dtype=bool)
    for lo in range(0, n, step):
        cur = forest.leaves(x[lo : lo + step])
        w = weights[cur]  # [T, n, K]
        h = forest.has[cur] if agg in ("MIN", "MAX") or not forest.full else None
        has[lo : lo + step] = h.any(axis=0) if h is not None else True
        if agg in ("SUM", "AVERAGE"):
            scores[lo : lo + step] = tree_sum(w)
        elif h is not None:  # MIN, MAX
            fill = np.inf if agg == "MIN" else -np.inf
            scores[lo : lo + step] = (np.min if agg == "MIN" else np.max)(np.where(h, w, fill), axis=0)
    if agg in ("MIN", "MAX"):
        scores = np.where(has, scores, 0).astype(acc)
    return scores, has


def as_2d(x: np.ndarray, where: str) -> np.ndarray:
    """X as [N, features] (1-D as one row); a batch of no rows stays one (-1 cannot size it)."""
    if x.ndim == 0:
        raise InvalidArgument(f"{where}: X must have at least one dimension, got a scalar")
    return x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


def _acc_dtype(x: np.ndarray, where: str) -> Any:
    if x.dtype == np.float64:
        return np.float64
    if x.dtype in (np.float32, np.float16, np.int64, np.int32):
        return np.float32
    raise InvalidArgument(f"{where}: X must be float, double, int64 or int32, got {x.dtype}")


def _regress(forest: Forest, x: np.ndarray, agg: str, post: str, base: np.ndarray, acc: Any) -> np.ndarray:
    """onnxruntime's regression aggregators (TreeAggregatorSum/Average/Min/Max)."""
    n_trees, k = forest.roots.size, forest.weights.shape[1]
    has: np.ndarray | None = None  # None: every target scored on every row
    if agg in ("SUM", "AVERAGE") and forest.full and x.shape[0] * n_trees * k <= _CHUNK:
        scores = forest.summed(x)  # the fewest calls at small batches
    else:
        scores, has = _aggregate(forest, x, agg, acc)
    if agg == "AVERAGE":
        scores = (scores / acc(n_trees)).astype(acc)
    if k == 1:  # FinalizeScores1: one base value (or none); only PROBIT applies
        out = scores + acc(base[0] if base.size == 1 else 0)
        return probit(out.astype(np.float32)) if post == "PROBIT" else out.astype(np.float32)
    if base.size == k:
        scores = (scores + base.astype(acc)).astype(acc)
    return post_scores(scores if has is None else np.where(has, scores, 0), post)  # unscored reads 0 (ScoreValue)


def _classify(
    forest: Forest, x: np.ndarray, post: str, base: np.ndarray, binary: bool, positive: bool, acc: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Label indices and scores, as onnxruntime's TreeAggregatorClassifier."""
    s, has = _aggregate(forest, x, "SUM", acc)
    n, k = s.shape
    b = base.astype(acc)
    if k > 2 and forest.full:  # every class scored on every row: no bookkeeping
        if b.size:
            s[:, : b.size] += b[:k]
        return np.argmax(s, axis=1), post_scores(s, post)
    if k > 2:
        nb = min(b.size, k)
        s[:, :nb] += b[:nb]
        has[:, :nb] = True
        idx = np.argmax(np.where(has, s, -np.inf), axis=1)  # the first best of the scored classes
        return idx, post_scores(np.where(has, s, 0), post)
    s0, s1, h0, h1 = s[:, 0].copy(), s[:, 1].copy(), has[:, 0], has[:, 1].copy()
    extra = np.full(n, -1)
    two = np.ones(n, dtype=bool)  # the row keeps two scores (else onnxruntime pops the second)
    if b.size == 2:
        t1 = b[1] + s0
        s1, s0 = np.where(h1, t1, s1 + b[1]), np.where(h1, -t1, s0 + b[0])
    elif b.size == 1:
        s0 = s0 + b[0]
        two = h1.copy()
    elif b.size == 0:
        extra[:] = 3
        two = h1.copy()
    h1 = h1 & two
    pos = np.where(h1, s1, np.where(h0, s0, 0))
    if binary:
        win = pos > 0.5 if positive else pos > 0
        extra = np.where(win, 0, 1) if positive else np.where(win, 2, 3)
    else:
        win = pos > 0
    idx = win.astype(np.int64)
    out = post_scores(np.stack([np.where(h0, s0, 0), np.where(h1, s1, 0)], axis=1), post)  # unscored reads 0
    one = ~two
    if one.any():  # one score: onnxruntime writes it and derives the other (add_second_class)
        v = s0[one].astype(np.float32)
        e = extra[one]
        if post == "PROBIT":
            pair = np.stack([probit(v), np.zeros_like(v)], axis=1)
        else:
            flip = np.stack([np.float32(1) - v, v], axis=1)
            mixed = np.stack([logistic(-v), logistic(v)], axis=1) if post == "LOGISTIC" else np.stack([-v, v], axis=1)
            lone = np.stack([v, np.zeros_like(v)], axis=1)  # onnxruntime leaves column 1 unwritten
            pair = np.where((e <= 1)[:, None] & (e >= 0)[:, None], flip, np.where((e >= 2)[:, None], mixed, lone))
        out[one] = pair
    return idx, out


def _ids(node: NodeView, name: str) -> np.ndarray:
    return np.asarray(node.attr(name, []), dtype=np.int64)


def _floats(node: NodeView, name: str, dtype: Any) -> np.ndarray:
    tensor = node.attr(f"{name}_as_tensor")
    values = node.attr(name)
    if tensor is not None and values:
        raise InvalidGraph(f"{node.describe()}: sets both {name} and {name}_as_tensor; set one")
    return np.asarray(tensor if tensor is not None else (values or []), dtype=dtype).ravel()


def _pair_index(tree: np.ndarray, nid: np.ndarray) -> tuple[bool, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """Whether a (tree id, node id) pair repeats, and a lookup giving each queried pair's node
    position (-1 for a pair no node has). Ids are ranked densely, so a pair is one sorted int64
    key whatever the ids' values: a dict over a forest's 10^5 nodes took ~70 ms a session."""
    trees, tree_rank = np.unique(tree, return_inverse=True)
    nids, nid_rank = np.unique(nid, return_inverse=True)
    keys = tree_rank.astype(np.int64) * max(nids.size, 1) + nid_rank
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    repeated = bool(sorted_keys.size > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any())

    def find(qt: np.ndarray, qn: np.ndarray) -> np.ndarray:
        if not sorted_keys.size or not qt.size:
            return np.full(qt.shape, -1, dtype=np.int64)
        ti = np.minimum(np.searchsorted(trees, qt), trees.size - 1)
        ni = np.minimum(np.searchsorted(nids, qn), nids.size - 1)
        qk = ti * nids.size + ni
        pos = np.minimum(np.searchsorted(sorted_keys, qk), sorted_keys.size - 1)
        ok = (trees[ti] == qt) & (nids[ni] == qn) & (sorted_keys[pos] == qk)
        return np.where(ok, order[pos], -1)

    return repeated, find


def _forest_v3(node: NodeView, prefix: str, k: int, dtype: Any) -> Forest:
    """A Forest from the TreeEnsembleClassifier/Regressor (opset 1, 3) attributes."""
    where = node.describe()
    tree, nid = _ids(node, "nodes_treeids"), _ids(node, "nodes_nodeids")
    m = tree.size
    modes_txt = [_text(v) for v in node.attr("nodes_modes", [])]
    unknown = sorted(set(modes_txt) - set(MODES) - {"BRANCH_MEMBER"})
    if unknown or "BRANCH_MEMBER" in modes_txt:
        raise InvalidGraph(
            f"{where}: nodes_modes must be BRANCH_LEQ/LT/GTE/GT/EQ/NEQ or LEAF, got {unknown or ['BRANCH_MEMBER']}"
        )
    cols = {
        "nodes_nodeids": nid,
        "nodes_featureids": _ids(node, "nodes_featureids"),
        "nodes_modes": np.array([MODES.index(v) for v in modes_txt], dtype=np.int8),
        "nodes_truenodeids": _ids(node, "nodes_truenodeids"),
        "nodes_falsenodeids": _ids(node, "nodes_falsenodeids"),
        "nodes_values": _floats(node, "nodes_values", dtype),
    }
    for name, col in cols.items():
        if col.size != m:
            raise InvalidGraph(f"{where}: {name} has {col.size} entries for {m} nodes (nodes_treeids)")
    missing = _ids(node, "nodes_missing_value_tracks_true")
    if missing.size not in (0, m):
        raise InvalidGraph(f"{where}: nodes_missing_value_tracks_true has {missing.size} entries for {m} nodes")
    repeated, find = _pair_index(tree, nid)
    if repeated:
        raise InvalidGraph(f"{where}: a (tree id, node id) pair appears twice")
    mode = cols["nodes_modes"]
    leaf = mode == LEAF

    def link(ids: np.ndarray, name: str) -> np.ndarray:
        out = np.arange(m, dtype=np.int64)  # a leaf links to itself
        inner = np.flatnonzero(~leaf)
        got = find(tree[inner], ids[inner])
        bad = np.flatnonzero(got < 0)
        if bad.size:
            j = inner[bad[0]]
            raise InvalidGraph(
                f"{where}: node {int(nid[j])} of tree {int(tree[j])} has {name} {int(ids[j])}, not a node of that tree"
            )
        out[inner] = got
        return out

    roots = np.flatnonzero(np.concatenate([[True], tree[1:] != tree[:-1]])) if m else np.zeros(0, np.int64)
    weights, has = np.zeros((m, k), dtype=dtype), np.zeros((m, k), dtype=bool)
    wt, wn, wi = _ids(node, f"{prefix}_treeids"), _ids(node, f"{prefix}_nodeids"), _ids(node, f"{prefix}_ids")
    ww = _floats(node, f"{prefix}_weights", np.float64)
    if not (wt.size == wn.size == wi.size == ww.size):
        raise InvalidGraph(f"{where}: {prefix}_treeids/nodeids/ids/weights differ in length")
    at = find(wt, wn)
    bad = np.flatnonzero((at < 0) | (wi < 0) | (wi >= k))
    if bad.size:
        t, i, c = (int(a[bad[0]]) for a in (wt, wn, wi))
        raise InvalidGraph(
            f"{where}: weight for tree {t} node {i} class/target {c} names no node or an index outside [0, {k})"
        )
    np.add.at(weights, (at, wi), ww)  # in the attribute's order, each sum rounded to dtype as it goes
    has[at, wi] = True
    return Forest(
        feature=np.where(leaf, 0, cols["nodes_featureids"]),
        threshold=cols["nodes_values"],
        mode=mode,
        true_next=link(cols["nodes_truenodeids"], "nodes_truenodeids"),
        false_next=link(cols["nodes_falsenodeids"], "nodes_falsenodeids"),
        missing_true=missing.astype(bool) if missing.size else np.zeros(m, dtype=bool),
        members=np.zeros((m, 0), dtype=dtype),
        roots=roots,
        weights=weights,
        has=has,
    ).finish(where)


def option(node: NodeView, name: str, choices: Sequence[str], default: str) -> str:
    """A string attribute of a fixed set, refused at session creation when not one of them."""
    value = _text(node.attr(name, default))
    if value not in choices:
        raise InvalidGraph(f"{node.describe()}: {name} must be one of {', '.join(choices)}, got {value!r}")
    return value


TraverseFor = Callable[
    [Forest, Any], tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]] | None
]
"""Compiled ``leaves`` and ``summed`` for a finished forest and its comparison dtype (or None:
NumPy's), what another EP passes the builders below to run these kernels with its own walk."""


def _per_dtype(
    node: NodeView, build: Callable[[Any], Forest], traverse_for: TraverseFor | None
) -> Callable[[np.ndarray], tuple[Forest, Any]]:
    """Forests are built per comparison dtype (float32 thresholds, float64 for double input), lazily."""
    cache: dict[Any, Forest] = {}

    def made(acc: Any) -> Forest:
        forest = build(acc)
        walks = traverse_for(forest, acc) if traverse_for is not None else None
        if walks is not None:
            forest.traverse, forest.traverse_sum = walks
        return forest

    by_input: dict[Any, tuple[Forest, Any]] = {}

    def get(x: np.ndarray) -> tuple[Forest, Any]:
        hit = by_input.get(x.dtype)
        if hit is None:
            acc = _acc_dtype(x, node.describe())
            if acc not in cache:
                cache[acc] = made(acc)
            hit = by_input[x.dtype] = (cache[acc], acc)
        return hit

    get(np.zeros(1, dtype=np.float32))  # attribute errors surface at session creation
    return get


@REGISTRY.register("TreeEnsembleClassifier", since=1, domain=ML)
def build_tree_classifier(node: NodeView, ctx: KernelContext, traverse_for: TraverseFor | None = None) -> Fn:
    """Label (int64 or string) and per-class scores [N, classes]."""
    ints = node.attr("classlabels_int64s")
    strings = node.attr("classlabels_strings")
    labels = np.array(ints, dtype=np.int64) if ints else np.array([_text(s) for s in strings or []], dtype=object)
    k = labels.size
    if k < 2:
        raise InvalidGraph(f"{node.describe()}: needs at least two classlabels_int64s or classlabels_strings, got {k}")
    post = option(node, "post_transform", POSTS, "NONE")
    base = _floats(node, "base_values", np.float64)
    ids = _ids(node, "class_ids")
    binary = k == 2 and np.unique(ids).size == 1
    positive = bool((_floats(node, "class_weights", np.float64) >= 0).all())
    forests = _per_dtype(node, lambda acc: _forest_v3(node, "class", k, acc), traverse_for)

    # two classes weighted apart: onnxruntime's label is its positive_label_/negative_label_, the
    # literal int64 1/0 whatever classlabels_int64s holds (string labels: index 1/0)
    literal = k == 2 and not binary and labels.dtype != object

    def compute(x: np.ndarray) -> tuple[Any, Any]:
        forest, acc = forests(x)
        v = as_2d(x, node.describe()).astype(acc, copy=False)
        idx, scores = _classify(forest, v, post, base, binary, positive, acc)
        return (idx if literal else labels[idx]), scores

    return compute


@REGISTRY.register("TreeEnsembleRegressor", since=1, domain=ML)
def build_tree_regressor(node: NodeView, ctx: KernelContext, traverse_for: TraverseFor | None = None) -> Fn:
    """Regressed values [N, n_targets]."""
    k = int(node.attr("n_targets", 1))
    post = option(node, "post_transform", POSTS, "NONE")
    agg = option(node, "aggregate_function", AGGS, "SUM")
    base = _floats(node, "base_values", np.float64)
    forests = _per_dtype(node, lambda acc: _forest_v3(node, "target", k, acc), traverse_for)

    def compute(x: np.ndarray) -> tuple[Any]:
        forest, acc = forests(x)
        v = as_2d(x, node.describe()).astype(acc, copy=False)
        return (_regress(forest, v, agg, post, base, acc),)

    return compute


def _forest_v5(node: NodeView, k: int, dtype: Any) -> Forest:
    """A Forest from TreeEnsemble (opset 5): interior nodes first, then the leaves."""
    where = node.describe()
    feat = _ids(node, "nodes_featureids")
    p = feat.size
    mode = np.asarray(node.attr("nodes_modes", np.zeros(0)), dtype=np.int8).ravel()
    splits = np.asarray(node.attr("nodes_splits", np.zeros(0)), dtype=dtype).ravel()
    tn, fn = _ids(node, "nodes_truenodeids"), _ids(node, "nodes_falsenodeids")
    tl, fl = _ids(node, "nodes_trueleafs"), _ids(node, "nodes_falseleafs")
    missing = _ids(node, "nodes_missing_value_tracks_true")
    lt = _ids(node, "leaf_targetids")
    lw = np.asarray(node.attr("leaf_weights", np.zeros(0)), dtype=np.float64).ravel()
    for name, col in (("nodes_modes", mode), ("nodes_splits", splits), ("nodes_truenodeids", tn)):
        if col.size != p:
            raise InvalidGraph(f"{where}: {name} has {col.size} entries for {p} nodes (nodes_featureids)")
    for name, col in (("nodes_falsenodeids", fn), ("nodes_trueleafs", tl), ("nodes_falseleafs", fl)):
        if col.size != p:
            raise InvalidGraph(f"{where}: {name} has {col.size} entries for {p} nodes (nodes_featureids)")
    if missing.size not in (0, p) or lt.size != lw.size:
        raise InvalidGraph(
            f"{where}: nodes_missing_value_tracks_true or leaf_targetids/leaf_weights have the wrong length"
        )
    if mode.size and (mode.min() < 0 or mode.max() > 6):
        raise InvalidGraph(f"{where}: nodes_modes must be in 0..6, got {sorted(set(mode.tolist()))}")
    if lt.size and (lt.min() < 0 or lt.max() >= k):
        raise InvalidGraph(f"{where}: leaf_targetids must be in [0, {k})")
    n_leaf = lw.size
    members = np.zeros((p + n_leaf, 0), dtype=dtype)
    member_nodes = np.flatnonzero(mode == 6)
    if member_nodes.size:
        flat = np.asarray(node.attr("membership_values", np.zeros(0)), dtype=dtype).ravel()
        cuts = np.flatnonzero(np.isnan(flat))
        sets = [s[~np.isnan(s)] for s in np.split(flat, cuts)]
        sets = sets[: member_nodes.size] if len(sets) >= member_nodes.size else sets
        if len(sets) < member_nodes.size:
            raise InvalidGraph(
                f"{where}: membership_values holds {len(sets)} sets for {member_nodes.size} BRANCH_MEMBER nodes"
            )
        members = np.full((p + n_leaf, max(1, max(s.size for s in sets))), np.nan, dtype=dtype)
        for j, s in zip(member_nodes, sets, strict=True):
            members[j, : s.size] = s
    me = np.arange(p + n_leaf, dtype=np.int64)
    true_next = np.concatenate([np.where(tl != 0, tn + p, tn), me[p:]])
    false_next = np.concatenate([np.where(fl != 0, fn + p, fn), me[p:]])
    weights, has = np.zeros((p + n_leaf, k), dtype=dtype), np.zeros((p + n_leaf, k), dtype=bool)
    weights[p + np.arange(n_leaf), lt] = lw
    has[p + np.arange(n_leaf), lt] = True
    return Forest(
        feature=np.concatenate([feat, np.zeros(n_leaf, dtype=np.int64)]),
        threshold=np.concatenate([splits, np.zeros(n_leaf, dtype=dtype)]),
        mode=np.concatenate([mode, np.full(n_leaf, LEAF, dtype=np.int8)]),
        true_next=true_next,
        false_next=false_next,
        missing_true=np.concatenate(
            [missing.astype(bool) if missing.size else np.zeros(p, dtype=bool), np.zeros(n_leaf, dtype=bool)]
        ),
        members=members,
        roots=_ids(node, "tree_roots"),
        weights=weights,
        has=has,
    ).finish(where)


@REGISTRY.register("TreeEnsemble", since=5, domain=ML)
def build_tree_ensemble(node: NodeView, ctx: KernelContext, traverse_for: TraverseFor | None = None) -> Fn:
    """Regressed values [N, n_targets] in X's dtype (onnxruntime's regression aggregators).
    post_transform is read as onnxruntime 1.31 reads it, its own enum order (1 LOGISTIC, 2 SOFTMAX),
    which swaps the spec's 1 SOFTMAX / 2 LOGISTIC: models are checked against onnxruntime."""
    k = int(node.attr("n_targets", 1))
    post_i, agg_i = int(node.attr("post_transform", 0)), int(node.attr("aggregate_function", 1))
    if not (0 <= post_i < len(POSTS)) or not (0 <= agg_i < len(AGGS)):
        raise InvalidGraph(f"{node.describe()}: post_transform must be in 0..4 and aggregate_function in 0..3")
    post, agg = POSTS[post_i], AGGS[agg_i]
    forests = _per_dtype(node, lambda acc: _forest_v5(node, k, acc), traverse_for)

    def compute(x: np.ndarray) -> tuple[Any]:
        forest, acc = forests(x)
        v = as_2d(x, node.describe()).astype(acc, copy=False)
        return (_regress(forest, v, agg, post, np.zeros(0), acc).astype(x.dtype),)

    return compute

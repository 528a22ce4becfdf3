"""The Numba CPU EP's compiled loops for ai.onnx.ml ops (ep_numba_cpu.ml_loops): tree walks and
SVM probability coupling give the reference EP's outputs (itself pinned against onnxruntime in
tests/cpu_reference/test_trees.py and test_svm.py) on one-node models: each comparison mode alone
(the branch-free walk, batches not a multiple of four), every mode with NaNs and missing-value
tracking (the general walk), float and double input, TreeEnsemble (opset 5) with set membership,
SVM probabilities over 2..6 classes; and X narrower than the trees read is a typed error, not a
read past the row."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_core.sdk.errors import InvalidArgument  # noqa: E402
from ep_numba_cpu import ml_loops  # noqa: E402

F = 6
NUMBA = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]
REFERENCE = ["CpuReferenceExecutionProvider"]
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _trees(seed: int, n_trees: int, depth: int, modes: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    """Trees with breadth-first node ids; a branch stops early at random."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_trees):
        nodes: list[dict[str, Any]] = [{"depth": 0}]
        i = 0
        while i < len(nodes):
            n = nodes[i]
            if n["depth"] < depth and (n["depth"] == 0 or rng.random() < 0.8):
                n.update(mode=str(rng.choice(modes)), feature=int(rng.integers(F)), missing=int(rng.integers(2)))
                n.update(value=float(rng.integers(-3, 4)) + float(rng.choice([0.0, 0.5])), true=len(nodes))
                n["false"] = len(nodes) + 1
                nodes += [{"depth": n["depth"] + 1}, {"depth": n["depth"] + 1}]
            else:
                n.update(mode="LEAF", feature=0, value=0.0, missing=0, true=0, false=0)
            i += 1
        out.append(nodes)
    return out


def _v3(op: str, trees: list[list[dict[str, Any]]], k: int, missing: bool, elem: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    cols = ("treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids")
    attrs: dict[str, Any] = {f"nodes_{c}": [] for c in cols}
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"
    attrs.update({f"{prefix}_{c}": [] for c in ("treeids", "nodeids", "ids", "weights")})
    miss = []
    for t, tree in enumerate(trees):
        for i, n in enumerate(tree):
            for c, v in zip(cols, (t, i, n["feature"], n["mode"], n["value"], n["true"], n["false"]), strict=True):
                attrs[f"nodes_{c}"].append(v)
            miss.append(n["missing"])
            if n["mode"] == "LEAF":
                for c in range(k):
                    attrs[f"{prefix}_treeids"].append(t)
                    attrs[f"{prefix}_nodeids"].append(i)
                    attrs[f"{prefix}_ids"].append(c)
                    attrs[f"{prefix}_weights"].append(float(rng.standard_normal()))
    if missing:
        attrs["nodes_missing_value_tracks_true"] = miss
    if op == "TreeEnsembleClassifier":
        attrs["classlabels_int64s"] = list(range(k))
        outs = [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, k]),
        ]
    else:
        attrs["n_targets"] = k
        outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, k])]
    return _model(op, attrs, outs, elem, 3)


def _v5(trees: list[list[dict[str, Any]]], seed: int) -> bytes:
    """TreeEnsemble (opset 5): interior nodes and leaves listed apart, some nodes BRANCH_MEMBER."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[Any]] = {c: [] for c in ("modes", "splits", "feats", "tn", "fn", "tl", "fl", "miss")}
    members: list[float] = []
    leaf_t: list[int] = []
    leaf_w: list[float] = []
    roots: list[int] = []
    for tree in trees:
        interior = [i for i, n in enumerate(tree) if n["mode"] != "LEAF"]
        pos = {i: len(cols["modes"]) + j for j, i in enumerate(interior)}
        leaf_pos = {}
        for i, n in enumerate(tree):
            if n["mode"] == "LEAF":
                leaf_pos[i] = len(leaf_t)
                leaf_t.append(int(rng.integers(2)))
                leaf_w.append(float(rng.standard_normal()))
        roots.append(len(cols["modes"]))
        for i in interior:
            n = tree[i]
            mode = 6 if rng.random() < 0.3 else MODES.index(n["mode"])
            if mode == 6:
                members.extend([float(v) for v in rng.choice(np.arange(-4, 5) + 0.0, size=3, replace=False)] + [np.nan])
            for c, v in (("modes", mode), ("splits", n["value"]), ("feats", n["feature"]), ("miss", n["missing"])):
                cols[c].append(v)
            for side, ids, leafs in (("true", "tn", "tl"), ("false", "fn", "fl")):
                is_leaf = tree[n[side]]["mode"] == "LEAF"
                cols[ids].append(leaf_pos[n[side]] if is_leaf else pos[n[side]])
                cols[leafs].append(int(is_leaf))
    attrs: dict[str, Any] = dict(
        n_targets=2,
        tree_roots=roots,
        nodes_modes=numpy_helper.from_array(np.array(cols["modes"], dtype=np.uint8), "m"),
        nodes_splits=numpy_helper.from_array(np.array(cols["splits"], dtype=np.float32), "s"),
        nodes_featureids=cols["feats"],
        nodes_truenodeids=cols["tn"],
        nodes_falsenodeids=cols["fn"],
        nodes_trueleafs=cols["tl"],
        nodes_falseleafs=cols["fl"],
        nodes_missing_value_tracks_true=cols["miss"],
        leaf_targetids=leaf_t,
        leaf_weights=numpy_helper.from_array(np.array(leaf_w, dtype=np.float32), "w"),
        membership_values=numpy_helper.from_array(np.array(members[:-1], dtype=np.float32), "mv"),
    )
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2])]
    return _model("TreeEnsemble", attrs, outs, TensorProto.FLOAT, 5)


def _model(op: str, attrs: dict[str, Any], outputs: list[Any], elem: int, ml_opset: int) -> bytes:
    node = helper.make_node(op, ["X"], [o.name for o in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "ml", [helper.make_tensor_value_info("X", elem, [None, None])], outputs)
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ml_opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10).SerializeToString()


def _x(seed: int, n: int, dtype: Any = np.float32, nan: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=(n, F)).astype(dtype) + rng.choice([0.0, 0.5, 0.25], size=(n, F)).astype(dtype)
    if nan:
        x[rng.random((n, F)) < 0.1] = np.nan
    return x


def _sessions(model: bytes) -> tuple[Any, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, providers=NUMBA), InferenceSession(model, providers=REFERENCE)


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per forest the Numba EP laid out: True where the compiled walk serves it."""
    seen: list[bool] = []
    real = ml_loops._walker

    def spy(*args: Any) -> Any:
        got = real(*args)
        seen.append(got is not None)
        return got

    monkeypatch.setattr(ml_loops, "_walker", spy)
    return seen


def _same(got: list[Any], want: list[Any]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["TreeEnsembleRegressor", "TreeEnsembleClassifier"])
@pytest.mark.parametrize("modes", [(m,) for m in MODES] + [MODES])
def test_tree_walks_match_the_reference_ep(op: str, modes: tuple[str, ...], walks: list[bool]) -> None:
    """One mode without missing-value tracking takes the branch-free walk; all modes with it the
    general walk; float and double input (the float64 kernel); 1, 7 and 64 rows; scores summed
    tree by tree inside the walk (40 trees: the order of float additions shows)."""
    seed = 40 + MODES.index(modes[0]) + 7 * len(modes)
    trees = _trees(seed, n_trees=9 if len(modes) == 1 else 40, depth=5, modes=modes)
    missing = len(modes) > 1
    for elem, dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)):
        numba, reference = _sessions(_v3(op, trees, 3, missing, elem, seed))
        for n in (1, 7, 64):
            x = _x(seed + n, n, dtype, nan=missing)
            _same(numba.run(None, {"X": x}), reference.run(None, {"X": x}))
    # float input: its float32 forest walked by the kernel; double input: the float32 forest of the
    # creation-time attribute check (NumPy's walk, never run), then its float64 one by the kernel
    assert walks == [True, False, True]


def test_tree_ensemble_v5_with_sets_and_nans(walks: list[bool]) -> None:
    trees = [t for t in _trees(7, n_trees=8, depth=5, modes=MODES) if len(t) > 1]
    numba, reference = _sessions(_v5(trees, 7))
    for n in (3, 33):
        x = np.floor(_x(n, n))  # whole numbers: membership tests meet the sets
        _same(numba.run(None, {"X": x}), reference.run(None, {"X": x}))
    assert walks == [True]


def test_integer_input_compares_in_float32(walks: list[bool]) -> None:
    """X of int64 compares in float32, as onnxruntime: the float32 kernel serves it; a forest of
    another comparison dtype than the kernel's walks with NumPy."""
    trees = _trees(5, n_trees=4, depth=4, modes=("BRANCH_LEQ",))
    numba, reference = _sessions(_v3("TreeEnsembleRegressor", trees, 1, False, TensorProto.INT64, 5))
    feed = {"X": _x(5, 10, nan=False).astype(np.int64)}
    _same(numba.run(None, feed), reference.run(None, feed))
    assert walks == [True]
    forest = type("Forest", (), {"mode": np.zeros(3, np.int8)})()
    assert ml_loops._walker(None, np.dtype("float32"), forest, np.float64) is None


def test_narrow_input_is_a_typed_error() -> None:
    """The trees read feature 5; rows of 3 features are refused before any walk (the compiled one
    does not bounds-check), naming the node."""
    trees = _trees(9, n_trees=3, depth=3, modes=("BRANCH_LT",))
    trees[0][0]["feature"] = F - 1
    numba, reference = _sessions(_v3("TreeEnsembleRegressor", trees, 1, False, TensorProto.FLOAT, 9))
    for sess in (numba, reference):
        with pytest.raises(
            InvalidArgument,
            match=r"TreeEnsembleRegressor.*: X has 3 features per row; the trees read feature 5: feed rows of at least 6",
        ):
            sess.run(None, {"X": np.zeros((4, 3), np.float32)})


def _svc(k: int, kernel: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    per_class = rng.integers(1, 5, size=k)
    v, pairs = int(per_class.sum()), k * (k - 1) // 2
    attrs: dict[str, Any] = dict(
        kernel_type=kernel,
        kernel_params={"RBF": [0.4, 0.0, 0.0], "POLY": [0.3, 1.0, 3.0]}[kernel],
        support_vectors=rng.standard_normal(v * F).tolist(),
        vectors_per_class=per_class.tolist(),
        coefficients=(rng.standard_normal((k - 1) * v) * 0.8).tolist(),
        rho=(rng.standard_normal(pairs) * 0.3).tolist(),
        classlabels_ints=list(range(10, 10 + k)),
        prob_a=(-rng.uniform(0.5, 4.0, pairs)).tolist(),
        prob_b=(rng.standard_normal(pairs) * 0.2).tolist(),
    )
    outs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None]),
    ]
    return _model("SVMClassifier", attrs, outs, TensorProto.FLOAT, 3)


@pytest.mark.parametrize("k", [2, 3, 6])
@pytest.mark.parametrize("kernel", ["RBF", "POLY"])
def test_svm_coupling_matches_the_reference_ep(k: int, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Probabilities from the compiled coupling equal the reference EP's (its vectorised sweeps:
    the same arithmetic in another summation order, so within float32 rounding); labels equal."""
    calls: list[int] = []
    real = ml_loops._couple
    monkeypatch.setattr(ml_loops, "_couple", lambda fn, q: calls.append(q.shape[0]) or real(fn, q))
    numba, reference = _sessions(_svc(k, kernel, 100 + k))
    for n in (1, 5, 40):
        x = np.random.default_rng(n).standard_normal((n, F)).astype(np.float32)
        got, want = numba.run(None, {"X": x}), reference.run(None, {"X": x})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=2e-6, atol=2e-7)
    assert calls == [1, 5, 40]


def test_kernel_sources_decline_what_has_no_loop() -> None:
    """An SVM without probabilities (no coupling) and ops of other domains get no compiled loop."""
    base = {"op": "SVMClassifier", "domain": "ai.onnx.ml", "in_types": [["float32", None]]}
    assert ml_loops.kernel_sources({**base, "attrs": {"vectors_per_class": ["ints", [2, 2]]}}) is None
    with_proba = {"vectors_per_class": ["ints", [2, 2]], "prob_a": ["floats", [-1.0]]}
    assert ml_loops.kernel_sources({**base, "attrs": with_proba}) == [ml_loops.coupling_kernel()]
    assert ml_loops.kernel_sources({**base, "op": "TreeEnsemble", "domain": "", "attrs": {}}) is None
    double = {**base, "op": "TreeEnsemble", "attrs": {}, "in_types": [["float64", None]]}
    assert ml_loops.kernel_sources(double) == [ml_loops.tree_kernel("float64")]


def test_one_target_one_row_sums_in_tree_order() -> None:
    """150 trees, one target, one row at a time: scores added tree by tree, identical on both EPs
    and to onnxruntime at one thread (NumPy's reduce would add that case pairwise)."""
    ort = pytest.importorskip("onnxruntime")
    trees = _trees(21, n_trees=150, depth=4, modes=("BRANCH_LEQ",))
    model = _v3("TreeEnsembleRegressor", trees, 1, False, TensorProto.FLOAT, 21)
    numba, reference = _sessions(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = _x(21, 60, nan=False)
    for row in x:
        feed = {"X": row[None]}
        want = theirs.run(None, feed)
        _same(numba.run(None, feed), want)
        _same(reference.run(None, feed), want)


@pytest.mark.parametrize("k", [3, 9])
def test_svm_nan_row_is_uniform_as_onnxruntime(k: int) -> None:
    """A NaN row: onnxruntime's coupling stops at once (its running max skips NaN) with 1/k each;
    both EPs do the same, in the compiled loop, the vectorised sweeps and the per-row Python one."""
    ort = pytest.importorskip("onnxruntime")
    model = _svc(k, "RBF", 100 + k)
    numba, reference = _sessions(model)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n in (1, 8):  # one row: the reference EP's Python sweep; eight: its vectorised one
        x = np.random.default_rng(n).standard_normal((n, F)).astype(np.float32)
        x[0, 0] = np.nan
        want = theirs.run(None, {"X": x})
        for got in (numba.run(None, {"X": x}), reference.run(None, {"X": x})):
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_allclose(got[1], want[1], rtol=2e-6, atol=2e-7)
        np.testing.assert_array_equal(want[1][0], np.full(k, 1 / k, np.float32))

"""The native tree-ensemble kernels (ep_cpu_reference/kernels/trees.py) against onnxruntime.

Random forests and boosted-tree structures are generated with a fixed seed and built directly with
onnx.helper: every node mode, NaN inputs with and without missing-value tracking, multi-class,
binary (both onnxruntime special cases), int and string labels, regression with several targets,
every post_transform and aggregate_function, float and double input, and TreeEnsemble (opset 5)
with set membership. Labels must be identical and scores within 1e-5."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

F = 6
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
POSTS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _tree(rng: np.random.Generator, depth: int, modes: tuple[str, ...]) -> list[dict[str, Any]]:
    """One tree, node ids in breadth-first order from 0; a branch stops early at random."""
    nodes: list[dict[str, Any]] = [{"depth": 0}]
    i = 0
    while i < len(nodes):
        n = nodes[i]
        if n["depth"] < depth and (n["depth"] == 0 or rng.random() < 0.8):
            n.update(
                mode=str(rng.choice(modes)),
                feature=int(rng.integers(F)),
                value=float(rng.integers(-3, 4)) + float(rng.choice([0.0, 0.5])),
                missing=int(rng.integers(2)),
                true=len(nodes),
                false=len(nodes) + 1,
            )
            nodes += [{"depth": n["depth"] + 1}, {"depth": n["depth"] + 1}]
        else:
            n.update(mode="LEAF", feature=0, value=0.0, missing=0, true=0, false=0)
        i += 1
    return nodes


def _forest(seed: int, n_trees: int, depth: int, modes: tuple[str, ...] = MODES) -> list[list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    return [_tree(rng, int(rng.integers(1, depth + 1)), modes) for _ in range(n_trees)]


def _node_attrs(forest: list[list[dict[str, Any]]], missing: bool) -> dict[str, Any]:
    attrs: dict[str, list[Any]] = {k: [] for k in ("treeids", "nodeids", "featureids", "modes", "values")}
    attrs.update(truenodeids=[], falsenodeids=[], missing_value_tracks_true=[])
    for t, tree in enumerate(forest):
        for i, n in enumerate(tree):
            attrs["treeids"].append(t)
            attrs["nodeids"].append(i)
            attrs["featureids"].append(n["feature"])
            attrs["modes"].append(n["mode"])
            attrs["values"].append(n["value"])
            attrs["truenodeids"].append(n["true"])
            attrs["falsenodeids"].append(n["false"])
            attrs["missing_value_tracks_true"].append(n["missing"])
    if not missing:
        del attrs["missing_value_tracks_true"]
    return {f"nodes_{k}": v for k, v in attrs.items()}


def _leaf_weights(forest, rng, k: int, ids: list[int] | None, positive: bool, prefix: str) -> dict[str, Any]:
    """Weights at every leaf for the class/target ids (all when None, else those listed)."""
    out: dict[str, list[Any]] = {f"{prefix}_{n}": [] for n in ("treeids", "nodeids", "ids", "weights")}
    for t, tree in enumerate(forest):
        for i, n in enumerate(tree):
            if n["mode"] != "LEAF":
                continue
            cols = ids if ids is not None else list(range(k))
            w = rng.dirichlet(np.ones(len(cols))) if positive else rng.standard_normal(len(cols))
            for c, v in zip(cols, w, strict=True):
                out[f"{prefix}_treeids"].append(t)
                out[f"{prefix}_nodeids"].append(i)
                out[f"{prefix}_ids"].append(c)
                out[f"{prefix}_weights"].append(float(v))
    return out


def _model(op: str, attrs: dict[str, Any], outputs: list[Any], dtype: int = TensorProto.FLOAT, ml_opset: int = 3):
    node = helper.make_node(op, ["X"], [o.name for o in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", dtype, [None, F])], outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ml_opset)]
    )
    model.ir_version = 10
    return model.SerializeToString()


def _inputs(seed: int, n: int = 64, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=(n, F)).astype(dtype) + rng.choice([0.0, 0.5, 0.25], size=(n, F)).astype(dtype)
    x[rng.random((n, F)) < 0.1] = np.nan
    return x


def _run_both(model: bytes, x: np.ndarray) -> tuple[list[Any], list[Any]]:
    import ep_core

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    return sess.run(None, {"X": x}), want


def _check(got: list[Any], want: list[Any], labels: bool) -> None:
    if labels:
        np.testing.assert_array_equal(np.asarray(got[0]).astype(str), np.asarray(want[0]).astype(str))
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5, atol=1e-5)
    assert got[-1].dtype == want[-1].dtype and got[-1].shape == want[-1].shape


def _classifier(attrs: dict[str, Any], labels: list[Any], dtype: int = TensorProto.FLOAT) -> bytes:
    if isinstance(labels[0], str):
        attrs["classlabels_strings"] = labels
        label_type = TensorProto.STRING
    else:
        attrs["classlabels_int64s"] = labels
        label_type = TensorProto.INT64
    outs = [
        helper.make_tensor_value_info("label", label_type, [None]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, len(labels)]),
    ]
    return _model("TreeEnsembleClassifier", attrs, outs, dtype)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("base", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_multiclass(post: str, base: bool, sparse: bool) -> None:
    seed = POSTS.index(post) * 4 + base * 2 + sparse
    rng = np.random.default_rng(seed)
    forest = _forest(seed, n_trees=7, depth=5)
    k = 4
    attrs = _node_attrs(forest, missing=True)
    ids = [0, 2] if sparse else None  # sparse: classes 1 and 3 get no weight (absent in argmax)
    attrs.update(_leaf_weights(forest, rng, k, ids, positive=not sparse, prefix="class"))
    attrs["post_transform"] = post
    if base:
        attrs["base_values"] = [float(v) for v in rng.standard_normal(k)]
    labels: list[Any] = [10, 20, 30, 40] if seed % 2 else ["a", "b", "c", "d"]
    got, want = _run_both(_classifier(attrs, labels), _inputs(seed))
    _check(got, want, labels=True)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize(
    "kind,base",
    [
        ("both", 0),  # random-forest style: both classes weighted at every leaf
        ("one_mixed", 0),  # boosting style: one class id, signed weights
        ("one_mixed", 1),
        ("one_mixed", 2),
        ("one_positive", 0),  # one class id, weights all >= 0 (threshold 0.5)
        ("one_positive", 2),
        ("zero_mixed", 1),  # the single class id is 0
    ],
)
def test_binary(post: str, kind: str, base: int) -> None:
    seed = 100 + POSTS.index(post) * 10 + base
    rng = np.random.default_rng(seed)
    forest = _forest(seed, n_trees=5, depth=4)
    attrs = _node_attrs(forest, missing=False)
    ids = None if kind == "both" else [0] if kind.startswith("zero") else [1]
    attrs.update(
        _leaf_weights(forest, rng, 2, ids, positive=kind != "one_mixed" and kind != "zero_mixed", prefix="class")
    )
    if kind == "one_positive":
        attrs["class_weights"] = [w / len(forest) for w in attrs["class_weights"]]
    attrs["post_transform"] = post
    if base:
        attrs["base_values"] = [float(v) for v in rng.standard_normal(base)]
    for labels in ([0, 1], [3, 7], ["no", "yes"]):
        got, want = _run_both(_classifier(dict(attrs), labels), _inputs(seed))
        if kind == "zero_mixed" and post == "PROBIT":  # one score: onnxruntime leaves column 1 unwritten
            got, want = [got[0], got[1][:, :1]], [want[0], want[1][:, :1]]
        _check(got, want, labels=True)


def _regressor(attrs: dict[str, Any], k: int, dtype: int = TensorProto.FLOAT) -> bytes:
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, k])]
    return _model("TreeEnsembleRegressor", attrs, outs, dtype)


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("k", [1, 3])
def test_regressor(agg: str, post: str, k: int) -> None:
    seed = 200 + ["SUM", "AVERAGE", "MIN", "MAX"].index(agg) * 10 + POSTS.index(post) * 2 + k
    rng = np.random.default_rng(seed)
    forest = _forest(seed, n_trees=6, depth=6)
    attrs = _node_attrs(forest, missing=True)
    attrs.update(_leaf_weights(forest, rng, k, None, positive=False, prefix="target"))
    if post == "PROBIT":  # probit wants scores in (0, 1)
        attrs["target_weights"] = [0.5 / len(forest) + 0.05 * np.tanh(w) / len(forest) for w in attrs["target_weights"]]
        attrs["base_values"] = [0.2] * k
    else:
        attrs["base_values"] = [float(v) for v in rng.standard_normal(k)]
    attrs.update(n_targets=k, aggregate_function=agg, post_transform=post)
    got, want = _run_both(_regressor(attrs, k), _inputs(seed))
    _check(got, want, labels=False)


@pytest.mark.parametrize("op", ["TreeEnsembleClassifier", "TreeEnsembleRegressor"])
def test_double_and_as_tensor(op: str) -> None:
    """Double input compares in double; nodes_values_as_tensor / base_values_as_tensor are read."""
    rng = np.random.default_rng(7)
    forest = _forest(7, n_trees=8, depth=6)
    attrs = _node_attrs(forest, missing=True)
    attrs["nodes_values_as_tensor"] = numpy_helper.from_array(
        np.array(attrs.pop("nodes_values"), dtype=np.float64) + 1e-9, "v"
    )
    k = 3
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"
    attrs.update(_leaf_weights(forest, rng, k, None, positive=False, prefix=prefix))
    attrs["base_values_as_tensor"] = numpy_helper.from_array(rng.standard_normal(k), "b")
    if op == "TreeEnsembleClassifier":
        model = _classifier(attrs, [5, 6, 7], dtype=TensorProto.DOUBLE)
    else:
        attrs["n_targets"] = k
        model = _regressor(attrs, k, dtype=TensorProto.DOUBLE)
    x = _inputs(7, dtype=np.float64) + 1e-9 * np.random.default_rng(8).choice([-1, 0, 1], size=(64, F))
    got, want = _run_both(model, x)
    _check(got, want, labels=op == "TreeEnsembleClassifier")


def _v5(forest, rng, k: int, agg: int, post: int, member: bool) -> bytes:
    """TreeEnsemble (opset 5): interior nodes and leaves listed apart; BRANCH_MEMBER sets."""
    modes, splits, feats, tn, fn, tl, fl, miss, members = [], [], [], [], [], [], [], [], []
    leaf_t, leaf_w, roots = [], [], []
    for tree in forest:
        interior = [i for i, n in enumerate(tree) if n["mode"] != "LEAF"]
        if not interior:  # a single-leaf tree: one node whose branches share one leaf
            interior = []
        pos = {i: len(modes) + j for j, i in enumerate(interior)}
        leaf_pos: dict[int, int] = {}
        for i, n in enumerate(tree):
            if n["mode"] == "LEAF":
                leaf_pos[i] = len(leaf_t)
                leaf_t.append(int(rng.integers(k)))
                leaf_w.append(float(rng.standard_normal()))
        roots.append(len(modes))
        for i in interior:
            n = tree[i]
            mode = 6 if member and rng.random() < 0.3 else MODES.index(n["mode"])
            modes.append(mode)
            splits.append(n["value"])
            if mode == 6:
                members.extend([float(v) for v in rng.choice(np.arange(-4, 5) + 0.0, size=3, replace=False)] + [np.nan])
            feats.append(n["feature"])
            miss.append(n["missing"])
            for side, ids, leafs in (("true", tn, tl), ("false", fn, fl)):
                child = n[side]
                is_leaf = tree[child]["mode"] == "LEAF"
                ids.append(leaf_pos[child] if is_leaf else pos[child])
                leafs.append(int(is_leaf))
    attrs: dict[str, Any] = dict(
        n_targets=k,
        aggregate_function=agg,
        post_transform=post,
        tree_roots=roots,
        nodes_modes=numpy_helper.from_array(np.array(modes, dtype=np.uint8), "m"),
        nodes_splits=numpy_helper.from_array(np.array(splits, dtype=np.float32), "s"),
        nodes_featureids=feats,
        nodes_truenodeids=tn,
        nodes_falsenodeids=fn,
        nodes_trueleafs=tl,
        nodes_falseleafs=fl,
        nodes_missing_value_tracks_true=miss,
        leaf_targetids=leaf_t,
        leaf_weights=numpy_helper.from_array(np.array(leaf_w, dtype=np.float32), "w"),
    )
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members[:-1], dtype=np.float32), "mv")
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, k])]
    return _model("TreeEnsemble", attrs, outs, ml_opset=5)


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("member", [False, True])
def test_tree_ensemble_v5(agg: int, post: int, member: bool) -> None:
    seed = 300 + agg * 10 + post * 2 + member
    rng = np.random.default_rng(seed)
    forest = [t for t in _forest(seed, n_trees=6, depth=5) if len(t) > 1]
    k = 1 if post == 4 else 2
    x = _inputs(seed)
    if member:  # onnxruntime tests membership of non-integer inputs inconsistently: keep them whole
        x = np.floor(x)
    got, want = _run_both(_v5(forest, rng, k, agg, post, member), x)
    _check(got, want, labels=False)


def test_one_row_and_chunked_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single row, and a batch gathered in several chunks (the chunk made small here), give
    onnxruntime's values."""
    from ep_cpu_reference.kernels import trees

    monkeypatch.setattr(trees, "_CHUNK", 40 * 3 * 100)  # 100 rows per chunk
    rng = np.random.default_rng(11)
    forest = _forest(11, n_trees=40, depth=6)
    attrs = _node_attrs(forest, missing=True)
    attrs.update(_leaf_weights(forest, rng, 3, None, positive=True, prefix="class"))
    model = _classifier(attrs, [0, 1, 2])
    for n in (1, 1050):
        got, want = _run_both(model, _inputs(11, n=n))
        _check(got, want, labels=True)


def test_batch_sizes_changing_between_runs_of_one_session() -> None:
    """One comparison mode, no missing-value tracking (the walk that keeps each batch shape's
    start): one session run at ten batch sizes in turn (past the eight shapes it keeps, and back),
    each against onnxruntime."""
    import ep_core

    rng = np.random.default_rng(21)
    forest = _forest(21, n_trees=30, depth=5, modes=("BRANCH_LEQ",))
    attrs = _node_attrs(forest, missing=False)
    attrs.update(_leaf_weights(forest, rng, 2, None, positive=False, prefix="target"), n_targets=2)
    model = _regressor(attrs, 2)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    peer = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    for n in (32, 1, 5, 32, 2, 3, 4, 6, 7, 8, 9, 1, 32):
        x = np.nan_to_num(_inputs(n, n=n))
        np.testing.assert_array_equal(sess.run(None, {"X": x})[0], peer.run(None, {"X": x})[0])


def test_bad_link_is_invalid_graph() -> None:
    """A branch to a node id that its tree lacks is refused at session creation, naming the node."""
    import ep_core
    from ep_core.sdk.errors import EpCoreError

    forest = _forest(3, n_trees=2, depth=2)
    attrs = _node_attrs(forest, missing=False)
    attrs["nodes_truenodeids"][0] = 99
    attrs.update(_leaf_weights(forest, np.random.default_rng(3), 1, None, positive=False, prefix="target"))
    with pytest.raises(EpCoreError, match="nodes_truenodeids 99"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep_core.InferenceSession(_regressor(attrs, 1), providers=["CpuReferenceExecutionProvider"])


def _sklearn_models() -> list[tuple[str, Any, bool]]:
    ensemble = pytest.importorskip("sklearn.ensemble")
    return [
        ("rf_binary", ensemble.RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0), True),
        ("rf_multi", ensemble.RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0), True),
        ("gb_binary", ensemble.GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0), True),
        ("gb_multi", ensemble.GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0), True),
        ("et_regressor", ensemble.ExtraTreesRegressor(n_estimators=12, max_depth=6, random_state=0), False),
        ("gb_regressor", ensemble.GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0), False),
    ]


def test_sklearn_converted_models() -> None:
    """Real scikit-learn ensembles converted with skl2onnx (when both are installed; they are not
    project dependencies). HistGradientBoosting is left out: skl2onnx 1.20 cannot convert it under
    onnx 1.23 (it passes booleans for nodes_missing_value_tracks_true)."""
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, F)).astype(np.float32)
    for name, model, classifier in _sklearn_models():
        classes = 2 if "binary" in name else 3
        y = (
            (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int)
            if classes == 2
            else np.digitize(x[:, 0] + x[:, 3], [-0.5, 0.5])
        )
        xt = x.copy()
        model.fit(xt, y if classifier else x[:, 0] * 2 + x[:, 1])
        onx = skl2onnx.to_onnx(
            model, initial_types=[("X", FloatTensorType([None, F]))], options={"zipmap": False} if classifier else None
        )
        got, want = _run_both(onx.SerializeToString(), xt[:64])
        _check(got, want, labels=classifier)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (2, 1), (32, 10), (7, 3)])
def test_tree_sum_adds_tree_by_tree(shape: tuple[int, int], dtype: Any) -> None:
    """``tree_sum`` gives, to the bit, the sum taken one tree after another (onnxruntime's order)
    in every shape, the one-row one-target shape (where NumPy would sum pairwise) included."""
    from ep_cpu_reference.kernels.trees import tree_sum

    rng = np.random.default_rng(5)
    for trees in (1, 9, 100, 301):
        w = (rng.standard_normal((trees, *shape)) * rng.choice([1e-4, 1.0, 1e4], (trees, *shape))).astype(dtype)
        want = w[0].copy()
        for t in range(1, trees):
            want += w[t]
        got = tree_sum(w)
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fault", ["repeated pair", "weight of no node", "class out of range"])
def test_bad_forest_records_are_invalid_graph(fault: str) -> None:
    """A (tree id, node id) pair given twice, or a leaf weight naming a node no tree has or a
    target outside the outputs, is refused at session creation naming what is wrong."""
    import ep_core
    from ep_core.sdk.errors import EpCoreError

    forest = _forest(4, n_trees=3, depth=3)
    attrs = _node_attrs(forest, missing=False)
    attrs.update(_leaf_weights(forest, np.random.default_rng(4), 1, None, positive=False, prefix="target"))
    if fault == "repeated pair":
        attrs["nodes_nodeids"][1] = attrs["nodes_nodeids"][0]
        match = "appears twice"
    elif fault == "weight of no node":
        attrs["target_nodeids"][0] = 10**6
        match = "names no node"
    else:
        attrs["target_ids"][-1] = 3
        match = r"outside \[0, 1\)"
    with pytest.raises(EpCoreError, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep_core.InferenceSession(_regressor(attrs, 1), providers=["CpuReferenceExecutionProvider"])


def test_node_ids_of_any_size_link_as_given() -> None:
    """Node ids far apart (10^15 steps) and per-tree numbering are only labels: the forest built
    from them computes what the same forest with small ids does."""
    import ep_core

    forest = _forest(6, n_trees=4, depth=4)
    attrs = _node_attrs(forest, missing=False)
    attrs.update(_leaf_weights(forest, np.random.default_rng(6), 1, None, positive=False, prefix="target"))
    big = {k: list(v) for k, v in attrs.items()}
    for key in ("nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids", "target_nodeids"):
        big[key] = [i * 10**15 + 7 for i in attrs[key]]
    x = _inputs(6, n=64)
    small_out = ep_core.InferenceSession(_regressor(attrs, 1), providers=["CpuReferenceExecutionProvider"]).run(
        None, {"X": x}
    )
    big_out = ep_core.InferenceSession(_regressor(big, 1), providers=["CpuReferenceExecutionProvider"]).run(
        None, {"X": x}
    )
    np.testing.assert_array_equal(small_out[0], big_out[0])

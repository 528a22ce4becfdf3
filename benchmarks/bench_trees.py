"""Tree-ensemble and SVM latency: the reference EP's native kernels (ep_cpu_reference/kernels/trees.py,
svm.py) against onnxruntime CPU (one thread) and onnx.reference.ReferenceEvaluator, at batch 1 and 32,
on a 100-tree depth-6 random forest classifier (3 classes), a 100-tree depth-6 boosted regressor, a
10-class RBF SVC with probabilities and an RBF SVR, both shaped as scikit-learn's on the digits data
(64 features, 36 support vectors per class for the SVC, 300 for the SVR).

Usage: python benchmarks/bench_trees.py [--trees N] [--depth D] [--budget S] [--numba]

``--numba`` puts NumbaCpuExecutionProvider first: its compiled tree walk and SVM coupling inside
the reference kernels (plugins_contrib/ep_numba_cpu, ``ml_loops``).

Each engine reports its median wall-clock latency over the time budget after one warm-up call;
ep-core's outputs are checked against onnxruntime first (onnx.reference's too, except the SVC's
probabilities, which it computes unlike onnxruntime/libsvm)."""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

F = 20


def _forest(n_trees: int, depth: int, k: int, classifier: bool, seed: int = 0) -> bytes:
    """Full binary trees of the given depth, BRANCH_LEQ splits on random features."""
    rng = np.random.default_rng(seed)
    a: dict[str, list[Any]] = {n: [] for n in ("tree", "node", "feat", "mode", "val", "true", "false")}
    w: dict[str, list[Any]] = {n: [] for n in ("tree", "node", "id", "weight")}
    inner = 2**depth - 1
    for t in range(n_trees):
        for i in range(2 * inner + 1):
            leaf = i >= inner
            a["tree"].append(t)
            a["node"].append(i)
            a["feat"].append(0 if leaf else int(rng.integers(F)))
            a["mode"].append("LEAF" if leaf else "BRANCH_LEQ")
            a["val"].append(0.0 if leaf else float(rng.standard_normal()))
            a["true"].append(0 if leaf else 2 * i + 1)
            a["false"].append(0 if leaf else 2 * i + 2)
            if leaf:
                weights = rng.dirichlet(np.ones(k)) / n_trees if classifier else rng.standard_normal(k) * 0.1
                for c, v in enumerate(weights):
                    for key, value in zip(w, (t, i, c, float(v)), strict=True):
                        w[key].append(value)
    prefix = "class" if classifier else "target"
    attrs: dict[str, Any] = dict(
        nodes_treeids=a["tree"],
        nodes_nodeids=a["node"],
        nodes_featureids=a["feat"],
        nodes_modes=a["mode"],
        nodes_values=a["val"],
        nodes_truenodeids=a["true"],
        nodes_falsenodeids=a["false"],
        **{
            f"{prefix}_{suffix}": w[key]
            for key, suffix in (("tree", "treeids"), ("node", "nodeids"), ("id", "ids"), ("weight", "weights"))
        },
    )
    if classifier:
        attrs["classlabels_int64s"] = list(range(k))
        outs = [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, k]),
        ]
        op = "TreeEnsembleClassifier"
    else:
        attrs["n_targets"] = k
        outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, k])]
        op = "TreeEnsembleRegressor"
    node = helper.make_node(op, ["X"], [o.name for o in outs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "forest", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, F])], outs
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    return model.SerializeToString()


SVM_F, SVM_K, SVM_PER_CLASS, SVR_VECTORS = 64, 10, 36, 300


def _svm(classifier: bool, seed: int = 0) -> bytes:
    """An RBF SVC (libsvm layout: class c's dual coefficients positive in the pairs where c comes
    first, negative where it comes second, so votes and probabilities are consistent) or SVR."""
    rng = np.random.default_rng(seed)
    if classifier:
        centers = rng.standard_normal((SVM_K, SVM_F))
        sv = np.repeat(centers, SVM_PER_CLASS, axis=0) + 0.5 * rng.standard_normal((SVM_K * SVM_PER_CLASS, SVM_F))
        owner = np.repeat(np.arange(SVM_K), SVM_PER_CLASS)
        alpha = rng.uniform(0.1, 1.0, sv.shape[0])
        coef = np.where(np.arange(SVM_K - 1)[:, None] >= owner[None, :], alpha, -alpha)
        pairs = SVM_K * (SVM_K - 1) // 2
        attrs: dict[str, Any] = dict(
            vectors_per_class=[SVM_PER_CLASS] * SVM_K,
            rho=(rng.standard_normal(pairs) * 0.1).tolist(),
            prob_a=(-rng.uniform(2.0, 5.0, pairs)).tolist(),
            prob_b=(rng.standard_normal(pairs) * 0.1).tolist(),
            classlabels_ints=list(range(SVM_K)),
        )
        outs = [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, SVM_K]),
        ]
        op = "SVMClassifier"
    else:
        sv = rng.standard_normal((SVR_VECTORS, SVM_F))
        coef = rng.standard_normal(SVR_VECTORS)
        attrs = dict(n_supports=SVR_VECTORS, rho=[0.3])
        outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])]
        op = "SVMRegressor"
    attrs.update(
        kernel_type="RBF",
        kernel_params=[1.0 / SVM_F, 0.0, 0.0],
        support_vectors=sv.ravel().tolist(),
        coefficients=coef.ravel().tolist(),
    )
    node = helper.make_node(op, ["X"], [o.name for o in outs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "svm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, SVM_F])], outs
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    return model.SerializeToString()


def _svm_rows(batch: int, seed: int) -> np.ndarray:
    """Rows near the SVC's class centers (the same centers as _svm's seed 0)."""
    centers = np.random.default_rng(0).standard_normal((SVM_K, SVM_F))
    rng = np.random.default_rng(seed)
    return (centers[rng.integers(SVM_K, size=batch)] + 0.5 * rng.standard_normal((batch, SVM_F))).astype(np.float32)


def _median(fn: Callable[[], Any], budget: float, max_runs: int = 2000) -> float:
    fn()
    times: list[float] = []
    end = time.perf_counter() + budget
    while (time.perf_counter() < end or len(times) < 3) and len(times) < max_runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per engine and case")
    parser.add_argument(
        "--numba", action="store_true", help="ep-core with NumbaCpuExecutionProvider first (its compiled loops)"
    )
    args = parser.parse_args()
    providers = ["CpuReferenceExecutionProvider"]
    if args.numba:
        providers.insert(0, "NumbaCpuExecutionProvider")

    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    import ep_core

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    print(f"trees: {args.trees} trees, depth {args.depth}, {F} features; SVMs: RBF, {SVM_F} features; median latency")
    print(f"ep-core providers: {providers}")
    print(f"{'model':<16}{'batch':>6}{'ep-core us':>12}{'ort us':>10}{'ref us':>12}{'ep/ort':>9}{'ref/ep':>9}")
    cases = (
        ("tree classifier", _forest(args.trees, args.depth, 3, True), F),
        ("tree regressor", _forest(args.trees, args.depth, 1, False), F),
        ("svc 10 proba", _svm(True), SVM_F),
        ("svr", _svm(False), SVM_F),
    )
    for name, model, features in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = ep_core.InferenceSession(model, ep_core.SessionOptions(intra_op_num_threads=1), providers=providers)
        theirs = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        ref = ReferenceEvaluator(model)
        for batch in (1, 32):
            x = (
                _svm_rows(batch, batch)
                if name.startswith("svc")
                else np.random.default_rng(batch).standard_normal((batch, features)).astype(np.float32)
            )
            want = theirs.run(None, {"X": x})
            got = ours.run(None, {"X": x})
            if len(want) > 1:
                np.testing.assert_array_equal(got[0], want[0])  # labels identical
            checked = [got] + ([] if name.startswith("svc") else [ref.run(None, {"X": x})])
            for out in checked:
                np.testing.assert_allclose(np.asarray(out[-1]), want[-1], rtol=1e-4, atol=1e-5)
            t_ep = _median(lambda: ours.run(None, {"X": x}), args.budget)  # noqa: B023
            t_ort = _median(lambda: theirs.run(None, {"X": x}), args.budget)  # noqa: B023
            t_ref = _median(lambda: ref.run(None, {"X": x}), args.budget, max_runs=50)  # noqa: B023
            print(
                f"{name:<16}{batch:>6}{t_ep * 1e6:>12.1f}{t_ort * 1e6:>10.1f}{t_ref * 1e6:>12.1f}"
                f"{t_ep / t_ort:>9.2f}{t_ref / t_ep:>9.1f}"
            )


if __name__ == "__main__":
    main()

"""The native SVM kernels (ep_cpu_reference/kernels/svm.py) against onnxruntime.

Models are built with onnx.helper from seeded random support vectors, dual coefficients, rho and
Platt parameters, shaped as libsvm / skl2onnx lays them out: SVC with every kernel, 2, 3 and 10
classes, with and without probabilities (libsvm's pairwise coupling), every post_transform, int and
string labels, the linear mode (no support vectors) with all-positive and mixed coefficients, and
SVR (kernels, linear mode, one_class). Batches of 1 and 3 take the per-row coupling path, 40 rows
the vectorised one. Labels must be identical and scores within 1e-5 relative."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")

F = 5
KERNELS = {"LINEAR": [0.0, 0.0, 0.0], "POLY": [0.3, 1.0, 3.0], "RBF": [0.4, 0.0, 0.0], "SIGMOID": [0.2, 0.5, 0.0]}


def _model(op: str, attrs: dict[str, Any], outputs: list[Any], elem: int = TensorProto.FLOAT) -> bytes:
    node = helper.make_node(op, ["X"], [o.name for o in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "svm", [helper.make_tensor_value_info("X", elem, [None, None])], outputs)
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=imports, ir_version=8).SerializeToString()


def _classifier(attrs: dict[str, Any], elem: int = TensorProto.FLOAT) -> bytes:
    label = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
    outs = [
        helper.make_tensor_value_info("label", label, [None]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None]),
    ]
    return _model("SVMClassifier", attrs, outs, elem)


def _svc(k: int, kernel: str, proba: bool, seed: int = 0, **extra: Any) -> dict[str, Any]:
    """libsvm's layout: vectors grouped by class, coefficients [k - 1, vectors], one rho per pair."""
    rng = np.random.default_rng(seed)
    per_class = rng.integers(1, 5, size=k)
    v, pairs = int(per_class.sum()), k * (k - 1) // 2
    attrs: dict[str, Any] = dict(
        kernel_type=kernel,
        kernel_params=KERNELS[kernel],
        support_vectors=rng.standard_normal(v * F).tolist(),
        vectors_per_class=per_class.tolist(),
        coefficients=(rng.standard_normal((k - 1) * v) * 0.8).tolist(),
        rho=(rng.standard_normal(pairs) * 0.3).tolist(),
        classlabels_ints=list(range(10, 10 + k)),
    )
    if proba:
        attrs.update(
            prob_a=(-rng.uniform(0.5, 4.0, pairs)).tolist(), prob_b=(rng.standard_normal(pairs) * 0.2).tolist()
        )
    attrs.update(extra)
    return attrs


def _x(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, F)).astype(np.float32)


def _both(model: bytes, x: np.ndarray) -> tuple[list[Any], list[Any]]:
    import ep_core

    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"X": x})
    return got, want


def _same(got: list[Any], want: list[Any], columns: slice = slice(None)) -> None:
    assert [str(v) for v in np.asarray(got[0]).tolist()] == [str(v) for v in np.asarray(want[0]).tolist()]
    assert got[1].dtype == np.float32 and got[1].shape == want[1].shape
    np.testing.assert_allclose(got[1][:, columns], want[1][:, columns], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("k", [2, 3, 10])
@pytest.mark.parametrize("proba", [False, True])
def test_svc_matches_onnxruntime(kernel: str, k: int, proba: bool) -> None:
    model = _classifier(_svc(k, kernel, proba, seed=k))
    for n in (1, 3, 40):  # 1 and 3 rows couple in Python, 40 in NumPy
        _same(*_both(model, _x(n, seed=n)))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("proba", [False, True])
def test_svc_post_transforms(post: str, k: int, proba: bool) -> None:
    """Two classes without probabilities: [-s, s] for NONE, its logistic for LOGISTIC, [1 - s, s]
    for SOFTMAX and SOFTMAX_ZERO; PROBIT writes
    only the first column (onnxruntime leaves the second unwritten, so it is not compared)."""
    model = _classifier(_svc(k, "RBF", proba, seed=3, post_transform=post))
    got, want = _both(model, _x(12))
    _same(got, want, slice(0, 1) if (post == "PROBIT" and k == 2 and not proba) else slice(None))


def test_svc_string_labels_and_input_types() -> None:
    attrs = _svc(3, "RBF", True, seed=5)
    del attrs["classlabels_ints"]
    attrs["classlabels_strings"] = ["cat", "dog", "eel"]
    x = _x(20)
    _same(*_both(_classifier(attrs), x))
    binary = _svc(2, "POLY", False, seed=6)
    del binary["classlabels_ints"]
    binary["classlabels_strings"] = ["no", "yes"]
    _same(*_both(_classifier(binary), x[:5]))
    for elem, dtype in ((TensorProto.DOUBLE, np.float64), (TensorProto.INT64, np.int64)):
        _same(*_both(_classifier(_svc(4, "LINEAR", True, seed=7), elem), (x * 3).astype(dtype)))


@pytest.mark.parametrize("coef_sign", ["positive", "mixed"])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svc_linear_mode(coef_sign: str, k: int, post: str) -> None:
    """No support vectors: liblinear scores x . w_c + rho[0]; a binary model labels class 1 when
    its top score is >= 0.5 (all coefficients >= 0) or > 0 (mixed signs)."""
    rng = np.random.default_rng(k)
    coef = rng.uniform(0.0, 0.4, k * F) if coef_sign == "positive" else rng.standard_normal(k * F) * 0.4
    attrs = dict(
        coefficients=coef.tolist(),
        rho=[0.1],
        classlabels_ints=list(range(k)),
        post_transform=post,
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],  # onnxruntime requires them
    )
    x = np.concatenate([_x(30), np.abs(_x(10, seed=2))])
    _same(*_both(_classifier(attrs), x))


def test_svc_probabilities_are_libsvm_coupling() -> None:
    """The pairwise-coupling probabilities of a 10-class model with probabilities (onnx.reference
    differed from onnxruntime by up to 0.47 here): rows sum to 1 and match onnxruntime."""
    got, want = _both(_classifier(_svc(10, "RBF", True, seed=11)), _x(25, seed=4))
    _same(got, want)
    np.testing.assert_allclose(got[1].sum(axis=1), 1.0, rtol=1e-5)


def _regressor(attrs: dict[str, Any]) -> bytes:
    return _model("SVMRegressor", attrs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("one_class", [0, 1])
def test_svr_matches_onnxruntime(kernel: str, one_class: int) -> None:
    rng = np.random.default_rng(len(kernel))
    attrs = dict(
        kernel_type=kernel,
        kernel_params=KERNELS[kernel],
        support_vectors=rng.standard_normal(7 * F).tolist(),
        n_supports=7,
        coefficients=rng.standard_normal(7).tolist(),
        rho=[0.25],
        one_class=one_class,
    )
    for n in (1, 33):
        got, want = _both(_regressor(attrs), _x(n))
        assert got[0].dtype == np.float32 and got[0].shape == (n, 1)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_svr_linear_mode() -> None:
    attrs = dict(
        coefficients=[0.5, -1.0, 0.25, 2.0, 0.0], rho=[-0.3], kernel_type="RBF", kernel_params=[9.0, 0, 0], n_supports=0
    )
    got, want = _both(_regressor(attrs), _x(9))  # no support vectors: the kernel is linear whatever it says
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def test_svm_errors_name_the_node() -> None:
    import ep_core
    from ep_core.sdk.errors import EpCoreError, NotImplementedByAnyEp

    def session(model: bytes) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])

    bad = _svc(3, "RBF", True)
    bad["rho"] = [0.0]  # three pairs need three
    with pytest.raises(EpCoreError, match=r"SVMClassifier.*rho"):
        session(_classifier(bad))
    bad = _svc(3, "RBF", False, kernel_type="CUBIC")
    with pytest.raises(EpCoreError, match="kernel_type must be one of"):
        session(_classifier(bad))
    with pytest.raises(EpCoreError, match="X has 4 features per row, the model expects 5"):
        session(_classifier(_svc(3, "RBF", False))).run(None, {"X": np.zeros((2, 4), dtype=np.float32)})
    attrs = dict(coefficients=[1.0] * F, rho=[0.0], post_transform="LOGISTIC")
    with pytest.raises(NotImplementedByAnyEp, match="post_transform 'LOGISTIC'.*export the model with NONE"):
        session(_regressor(attrs))

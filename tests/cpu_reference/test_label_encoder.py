"""The native LabelEncoder (ep_cpu_reference/kernels/ml.py) against onnxruntime: opset 1
(classes_strings), opset 2 (keys_*/values_* lists) and opset 4 (tensor keys, values and default),
every key/value type pair onnxruntime serves, defaults, repeated keys and NaN keys."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
ELEM.update({np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int32): TensorProto.INT32})
ELEM.update({np.dtype(np.int16): TensorProto.INT16, np.dtype(object): TensorProto.STRING})


def _model(x: np.ndarray, out_elem: int, opset: int, **attrs: Any) -> bytes:
    node = helper.make_node("LabelEncoder", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node],
        "le",
        [helper.make_tensor_value_info("X", ELEM[x.dtype], [None, None])],
        [helper.make_tensor_value_info("Y", out_elem, [None, None])],
    )
    imports = [helper.make_opsetid("", 18 if opset < 4 else 21), helper.make_opsetid("ai.onnx.ml", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=8 if opset < 4 else 10).SerializeToString()


def _check(x: np.ndarray, out_elem: int, opset: int, **attrs: Any) -> np.ndarray:
    import ep_core

    model = _model(x, out_elem, opset, **attrs)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got,) = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, {"X": x})
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(got, want)  # exact, signed zero included
        assert (np.signbit(got) == np.signbit(want)).all() if got.dtype.kind == "f" else True
    return got


STR = np.array([["a", "b", "zz"], ["c", "a", ""]], dtype=object)
INT = np.array([[3, 1, -7], [0, 2, 99]], dtype=np.int64)
FLT = np.array([[0.5, -0.0, 2.25], [7.0, 0.5, np.nan]], dtype=np.float32)


def test_opset1_classes_strings_both_ways() -> None:
    classes = ["a", "b", "c", "a"]  # a repeated string maps to its last index
    assert _check(STR, TensorProto.INT64, 1, classes_strings=classes).tolist() == [[3, 1, -1], [2, 3, -1]]
    _check(STR, TensorProto.INT64, 1, classes_strings=classes, default_int64=42)
    _check(INT, TensorProto.STRING, 1, classes_strings=classes, default_string="?")


@pytest.mark.parametrize("opset", [2, 4])
@pytest.mark.parametrize(
    "x,out,attrs",
    [
        (STR, TensorProto.INT64, dict(keys_strings=["a", "c", "a"], values_int64s=[5, 6, 7])),
        (STR, TensorProto.FLOAT, dict(keys_strings=["a", "b"], values_floats=[0.5, -2.0])),
        (INT, TensorProto.STRING, dict(keys_int64s=[1, 3, 0], values_strings=["one", "three", "zero"])),
        (INT, TensorProto.FLOAT, dict(keys_int64s=[2, 3], values_floats=[1.5, 2.5], default_float=9.0)),
        (FLT, TensorProto.INT64, dict(keys_floats=[0.5, 0.0, 7.0], values_int64s=[1, 2, 3], default_int64=-5)),
        (FLT, TensorProto.STRING, dict(keys_floats=[2.25, 0.5], values_strings=["x", "y"], default_string="none")),
    ],
)
def test_keys_values_lists(opset: int, x: np.ndarray, out: int, attrs: dict[str, Any]) -> None:
    _check(x, out, opset, **attrs)


def test_opset4_tensors_defaults_and_nan_keys() -> None:
    def t(values: list[Any], dtype: Any, name: str = "t") -> Any:
        return numpy_helper.from_array(np.array(values, dtype=dtype), name)

    keys, values = t([0.5, np.nan, 7.0], np.float64), t([10, 20, 30], np.int64)
    x = FLT.astype(np.float64)
    got = _check(x, TensorProto.INT64, 4, keys_tensor=keys, values_tensor=values, default_tensor=t([-9], np.int64))
    assert got.tolist() == [[10, -9, -9], [30, 10, 20]]  # NaN finds the NaN key from opset 4 on
    _check(FLT, TensorProto.FLOAT, 4, keys_tensor=t([np.nan, 2.25], np.float32), values_tensor=t([1, 2], np.float32))
    _check(INT, TensorProto.DOUBLE, 4, keys_tensor=t([1, 3], np.int64), values_tensor=t([0.25, -1.0], np.float64))
    _check(STR, TensorProto.INT16, 4, keys_strings=["a", "c"], values_tensor=t([4, 5], np.int16))
    _check(STR, TensorProto.STRING, 4, keys_strings=["a", "zz"], values_strings=["A", "ZZ"], default_string="-")
    _check(INT, TensorProto.INT64, 4, keys_int64s=[3, 3, 0], values_int64s=[1, 2, 3], default_int64=8)


def test_label_encoder_keys_and_values_pair_up() -> None:
    import ep_core
    from ep_core.sdk.errors import EpCoreError

    model = _model(INT, TensorProto.INT64, 2, keys_int64s=[1, 2], values_int64s=[2])
    with warnings.catch_warnings(), pytest.raises(EpCoreError, match="2 keys for 1 values"):
        warnings.simplefilter("ignore")
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])

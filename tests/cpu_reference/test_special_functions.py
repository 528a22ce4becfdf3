"""The vectorised erf against math.erf, and every GELU-family op of the reference EP (ai.onnx Erf
and Gelu, com.microsoft Gelu, BiasGelu, FastGelu, QuickGelu) against the real onnxruntime.

Where 1 + erf (or 1 + tanh) cancels (x around -2..-4), onnxruntime's float32 result carries the
same ~1e-7 absolute error ours does, only at different elements: there the comparison is
absolute (atol); everywhere else it is relative 1e-6."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import ep_core
from ep_cpu_reference.kernels.special import erf, gelu, gelu_tanh

ort = pytest.importorskip("onnxruntime")

_GRID = np.linspace(-10.0, 10.0, 400_001)
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 0.84375, 0.921875, 1.25, 1 / 0.35, 3.925, 6.0])


def _math_erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in x.ravel()]).reshape(x.shape)


def test_erf_float32_within_1e_7_absolute_and_2_ulp() -> None:
    x = _GRID.astype(np.float32)
    got = erf(x)
    assert got.dtype == np.float32
    want = _math_erf(x)
    err = np.abs(got.astype(np.float64) - want)
    assert err.max() <= 1e-7
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (err[want != 0] / ulp[want != 0]).max() <= 2.0


def test_erf_float64_within_1_ulp() -> None:
    got = erf(_GRID)
    assert got.dtype == np.float64
    want = _math_erf(_GRID)
    assert (np.abs(got - want) / np.spacing(np.abs(want))).max() <= 1.0
    tiny = np.array([1e-300, 5e-324, 1e-17, 0.5, 1.0, 2.0, 3.0, 5.5, 27.0])
    np.testing.assert_allclose(erf(tiny), _math_erf(tiny), rtol=2.3e-16, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_special_values(dtype: type) -> None:
    x = _SPECIAL.astype(dtype)
    got = erf(x)
    want = _math_erf(x)
    np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == np.float32 else 2.3e-16, atol=0)
    assert np.array_equal(np.signbit(got[:2]), [False, True])  # erf(-0) is -0


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_erf_half_types_compute_in_float32(dtype: type) -> None:
    x = _GRID[::100].astype(dtype)
    got = erf(x)
    assert got.dtype == np.dtype(dtype)
    assert np.array_equal(got, erf(x.astype(np.float32)).astype(dtype))


def test_gelu_helpers_stay_in_float32() -> None:
    """float32 in, float32 arithmetic: no float64 round trip."""
    x = np.linspace(-8, 8, 1001, dtype=np.float32)
    assert gelu(x).dtype == np.float32 and gelu_tanh(x).dtype == np.float32
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(gelu(x), 0.5 * x64 * (1 + _math_erf(x64 / math.sqrt(2))), rtol=1e-6, atol=4e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shapes_scalars_empties_views_and_blocks(dtype: type) -> None:
    """0-d, empty and strided inputs keep their shape; arrays past one 64K block give the
    same values as elementwise evaluation."""
    for fn in (erf, gelu, gelu_tanh):
        assert fn(np.ones((), dtype)).shape == ()
        assert fn(np.zeros((2, 0), dtype)).shape == (2, 0)
        x = np.linspace(-5, 5, 3 * 70001, dtype=dtype).reshape(3, 70001)[:, ::2]
        whole = fn(x)
        assert whole.shape == x.shape and whole.dtype == dtype
        parts = np.stack([fn(np.ascontiguousarray(x[:, i : i + 1])) for i in (0, 17, 34999, 35000)], axis=1)
        np.testing.assert_array_equal(whole[:, [0, 17, 34999, 35000]], parts[..., 0])


def _model(op: str, domain: str, feeds: dict, opset: int, **attrs: object) -> bytes:
    node = helper.make_node(op, list(feeds), ["y"], domain=domain, **attrs)
    dt = helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    g = helper.make_graph([node], op, inputs, [helper.make_tensor_value_info("y", dt, None)])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, ir_version=10, opset_imports=ops).SerializeToString()


_R = np.random.default_rng(14)
_X = (_R.standard_normal((32, 768)) * 3).astype(np.float32)
_B = _R.standard_normal(768).astype(np.float32)
MS = "com.microsoft"
# (op, domain, inputs, opset, attrs, float32 atol where 1 + erf/tanh cancels, float32 rtol elsewhere):
# erf-based ops share onnxruntime's erf algorithm (rtol 1e-6); the tanh- and sigmoid-based ones
# meet onnxruntime's own rational tanh/logistic approximations, each ~1 ulp off the true value.
CASES = [
    ("Erf", "", {"x": _X}, 13, {}, 0.0, 1e-6),
    ("Gelu", "", {"x": _X}, 20, {}, 4e-7, 1e-6),
    ("Gelu", "", {"x": _X}, 20, {"approximate": "tanh"}, 1e-6, 2e-6),
    ("Gelu", MS, {"x": _X}, 17, {}, 4e-7, 1e-6),
    ("BiasGelu", MS, {"x": _X, "b": _B}, 17, {}, 4e-7, 1e-6),
    ("FastGelu", MS, {"x": _X}, 17, {}, 1e-6, 2e-6),
    ("FastGelu", MS, {"x": _X, "b": _B}, 17, {}, 1e-6, 2e-6),
    ("QuickGelu", MS, {"x": _X}, 17, {"alpha": 1.702}, 1e-6, 2e-6),
]
_IDS = [f"{c[1] or 'ai.onnx'}-{c[0]}-{'-'.join(c[2])}-{c[4].get('approximate', 'none')}" for c in CASES]


def _both(op: str, domain: str, feeds: dict, opset: int, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    model = _model(op, domain, feeds, opset, **attrs)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want


_PARAMS = "op,domain,feeds,opset,attrs,atol,rtol"


@pytest.mark.parametrize(_PARAMS, CASES, ids=_IDS)
def test_float32_matches_onnxruntime(
    op: str, domain: str, feeds: dict, opset: int, attrs: dict, atol: float, rtol: float
) -> None:
    got, want = _both(op, domain, feeds, opset, attrs)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    big = np.abs(want) >= 0.1  # away from the cancelling tail: relative only, no absolute slack
    np.testing.assert_allclose(got[big], want[big], rtol=rtol, atol=0)


@pytest.mark.parametrize(_PARAMS, CASES, ids=_IDS)
def test_float16_matches_onnxruntime(
    op: str, domain: str, feeds: dict, opset: int, attrs: dict, atol: float, rtol: float
) -> None:
    """onnxruntime's float16 kernels round at other steps: within a float16 ulp (2**-10 relative),
    and 1e-5 absolute in the cancelling tail."""
    got, want = _both(op, domain, {k: v.astype(np.float16) for k, v in feeds.items()}, opset, attrs)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0**-10, atol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
def test_sigmoid_tail_is_onnxruntime_s_on_both_cpu_eps(fused: bool) -> None:
    """Below -8 onnxruntime's MLAS logistic drifts from 1/(1 + e^-x) and is exactly 0 below about
    -18: both CPU EPs give its values there (bit for bit), so a row of saturated logits (silence
    into torchfcpe's pitch decoder) has onnxruntime's ArgMax; above, within float32 rounding.
    ``fused``: a Conv + Sigmoid the optimizer makes one FusedConv of."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import ep_core

    ramp = np.concatenate([np.linspace(-100, 20, 997), [-45.5, -20.56, -16.5, -8.0, -7.99]])
    silence = np.random.default_rng(0).uniform(-45.6, -16.4, ramp.size)  # the decoder's logits on silence
    x = np.stack([ramp, silence]).astype(np.float32).reshape(1, 1, 2, -1)
    nodes = [helper.make_node("Sigmoid", ["c" if fused else "x"], ["y"])]
    inits = []
    if fused:
        nodes.insert(0, helper.make_node("Conv", ["x", "w"], ["c"]))
        inits = [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")]
    nodes.append(helper.make_node("ArgMax", ["y"], ["i"], axis=-1))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    tail = x < -8
    for providers in (
        ["CpuReferenceExecutionProvider"],
        ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"],
    ):
        got = ep_core.InferenceSession(model, providers=providers).run(None, {"x": x})
        np.testing.assert_array_equal(got[0][tail], want[0][tail], err_msg=providers[0])
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=2e-7, err_msg=providers[0])
        np.testing.assert_array_equal(got[1][..., 1, :], want[1][..., 1, :], err_msg=providers[0])  # the saturated row
    assert (want[0][x < -18.5] == 0).all()  # what the exact form would not give

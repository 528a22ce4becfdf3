"""The Numba CPU EP's direct float32 convolution (``direct_conv``): stride phases, tap offsets,
8-channel tiles, the flat output copied out with its bias, against onnxruntime; when sessions take
it (one thread) and when not; the kernel's refusal of buffers that do not fit its geometry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
ort = pytest.importorskip("onnxruntime")

from ep_core import InferenceSession  # noqa: E402
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
rng = np.random.default_rng(11)


def _conv_model(x_shape: tuple[int, ...], w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]) -> bytes:
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(bias, "b")] if bias is not None else [])
    ins = ["x", "w"] + (["b"] if bias is not None else [])
    g = helper.make_graph(
        [helper.make_node("Conv", ins, ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _run(model: bytes, x: np.ndarray, threads: int, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, int]:
    """Our output at ``threads`` and how many times the direct kernel ran."""
    from ep_numba_cpu import runtime

    calls = []
    real = runtime._run_direct

    def spy(*args: Any) -> Any:
        run = real(*args)

        def counted(v: np.ndarray) -> np.ndarray:
            calls.append(1)
            return run(v)

        return counted

    monkeypatch.setattr(runtime, "_run_direct", spy)
    so = SessionOptions(intra_op_num_threads=threads)
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model, so, providers=[NUMBA])
    assert all(a["ep"] == NUMBA for a in sess.get_node_assignment().values())
    (y,) = sess.run(None, {"x": x})
    return y, len(calls)


CASES = [
    # (x shape, w shape, attrs, bias)
    ((1, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((2, 5, 10, 7), (12, 5, 3, 3), {"pads": [1, 0, 2, 1]}, True),  # batch 2, 12 channels: a part tile
    ((1, 6, 13, 14), (8, 6, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ((1, 3, 17, 16), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 0, 0]}, False),  # an RGB stem
    ((1, 4, 20, 19), (8, 4, 5, 5), {"strides": [2, 2], "pads": [2, 2, 2, 2]}, True),
    ((1, 4, 12, 12), (8, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 3, 2, 3]}, True),
    ((1, 4, 12, 13), (8, 4, 3, 3), {"strides": [2, 2], "dilations": [2, 2], "pads": [2, 2, 1, 1]}, True),
    ((1, 8, 9, 9), (16, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ((1, 6, 9, 9), (24, 2, 3, 3), {"group": 3, "strides": [2, 2]}, True),
    ((1, 8, 7, 7), (8, 8, 2, 2), {}, True),  # no pads, an even kernel
    ((2, 4, 30), (8, 4, 5), {"pads": [2, 2]}, True),  # 1-D
    ((1, 4, 40, 41), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # planes past one 16-lane run a row
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "with_bias"), CASES)
def test_direct_convolution_matches_onnxruntime_on_one_thread(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], with_bias: bool, monkeypatch
) -> None:
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32) if with_bias else None
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = _conv_model(x_shape, w, bias, attrs)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got, direct_runs = _run(model, x, 1, monkeypatch)
    assert direct_runs == 1
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _filter(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_more_threads_keep_blas_and_shapes_it_loses_on_never_take_it(monkeypatch) -> None:
    """The direct kernel is serial: a session at 2 threads keeps the BLAS plan (and compiles no
    direct kernel). At 1 thread these keep it too, where the direct kernel measured slower: fewer
    than 8 output channels a group (a tile computes 8), 1x1 products, strided or not (the phase
    copy would serve one phase), under 16 products a tap set (a 1-channel 3x3), a stride of 3 or
    more, and a 2x3 plane (a tile computes 16 positions)."""
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    dense = _conv_model(x.shape, _filter(8, 8, 3, 3), None, {"pads": [1] * 4})
    assert _run(dense, x, 2, monkeypatch)[1] == 0
    assert _run(dense, x, 1, monkeypatch)[1] == 1
    one_channel = rng.standard_normal((1, 1, 9, 9)).astype(np.float32)
    small = rng.standard_normal((1, 8, 2, 3)).astype(np.float32)  # 6 positions a plane: a tile computes 32
    cases = [
        (_conv_model(x.shape, _filter(4, 8, 3, 3), None, {}), x),
        (_conv_model(x.shape, _filter(8, 8, 1, 1), None, {}), x),
        (_conv_model(x.shape, _filter(16, 8, 1, 1), None, {"strides": [2, 2]}), x),
        (_conv_model(one_channel.shape, _filter(8, 1, 3, 3), None, {"pads": [1] * 4}), one_channel),
        (_conv_model(x.shape, _filter(8, 8, 3, 3), None, {"strides": [3, 3]}), x),
        (_conv_model(small.shape, _filter(8, 8, 3, 3), None, {"pads": [1] * 4}), small),
    ]
    for model, feed in cases:
        got, runs = _run(model, feed, 1, monkeypatch)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
        assert runs == 0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_kernel_refuses_buffers_that_do_not_fit_its_geometry() -> None:
    """Numba does not bounds-check: a scratch one value short, or an offset table that reads past
    the padded input, returns 1 (the runtime raises) without writing; the exact sizes return 0."""
    from ep_numba_cpu import codegen, direct_conv

    ks = direct_conv.kernel_source()
    fn = codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    dp = direct_conv.plan(x.shape, w, 1, (2, 2), (1, 1), (1, 1), (5, 5))
    assert dp is not None
    bias = np.zeros(8, np.float32)

    def call(xpad: int, yflat: int, offsets: np.ndarray) -> tuple[int, np.ndarray]:
        out = np.full(dp.out_shape, 7.0, np.float32)
        padded = np.zeros(xpad, np.float32)
        dp.fill(x, np.zeros(dp.xpad_size, np.float32))  # (the fill itself is NumPy's, bounds-checked)
        rc = fn(out, padded, dp.weights, offsets, bias, np.zeros(yflat, np.float32), dp.geometry)
        return rc, out

    assert call(dp.xpad_size, dp.yflat_size, dp.offsets)[0] == 0
    far = dp.offsets.copy()
    far[-1] = dp.xpad_size
    for args in ((dp.xpad_size - 1, dp.yflat_size, dp.offsets), (dp.xpad_size, dp.yflat_size - 1, dp.offsets)):
        rc, out = call(*args)
        assert rc == 1 and (out == 7.0).all()
    rc, out = call(dp.xpad_size, dp.yflat_size, far)
    assert rc == 1 and (out == 7.0).all()
    negative = dp.offsets.copy()
    negative[0] = -1
    assert call(dp.xpad_size, dp.yflat_size, negative)[0] == 1


def test_a_plan_runs_its_choice_at_any_thread_count_and_sums_one_way(monkeypatch, tmp_path) -> None:
    """Only a session asking for one thread plans the direct kernel (a session left to choose,
    0, does not, even in a process of one CPU); a context it writes runs the same kernel in a
    session of two threads, so the outputs are the same bits (a Ray driver and its actors)."""
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    model = _conv_model(x.shape, _filter(16, 8, 3, 3), None, {"pads": [1] * 4})
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert _run(model, x, 0, monkeypatch)[1] == 0
    so = SessionOptions(intra_op_num_threads=1)
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    so.add_session_config_entry("ep.context_file_path", str(tmp_path / "ctx.onnx"))
    InferenceSession(model, so, providers=[NUMBA])
    one, runs_one = _run(model, x, 1, monkeypatch)
    two, runs_two = _run((tmp_path / "ctx.onnx").read_bytes(), x, 2, monkeypatch)
    assert runs_one == 1 and runs_two == 1
    np.testing.assert_array_equal(one, two)


def test_a_cpu_without_avx512_plans_no_direct_kernel(monkeypatch) -> None:
    """Without AVX-512 the micro-kernel's accumulators do not fit the registers (2.4x slower than
    BLAS under a Haswell target): the plan keeps the BLAS convolution."""
    from ep_numba_cpu import direct_conv

    monkeypatch.setattr(direct_conv, "available", lambda: False)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    assert _run(_conv_model(x.shape, _filter(8, 8, 3, 3), None, {"pads": [1] * 4}), x, 1, monkeypatch)[1] == 0


def test_the_plan_records_the_choice_and_a_loader_holds_it_to_the_filter() -> None:
    """``direct: true`` on the conv step is what a context keeps (a loader does not re-decide from
    its own CPU or threads); a value other than true, or true on a convolution the kernel does not
    serve, is refused naming the field."""
    import json

    import onnx

    from ep_core.sdk.graph import GraphView, opset_map
    from ep_numba_cpu import direct_conv, generate, spec
    from ep_numba_cpu.planner import build_plan

    def record(w: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        m = onnx.shape_inference.infer_shapes(
            onnx.load_from_string(_conv_model((1, 8, 9, 9), w, None, {"pads": [1] * 4}))
        )
        gp = build_plan(GraphView(m.graph, opset_map(m)), ["x"], ["y"], lambda n: False, one_thread=True)
        return json.loads(
            json.dumps({"plan": gp.plan, "weights": dict.fromkeys(gp.weights, "0" * 64), "types": gp.types})
        ), gp.weights

    rec, weights = record(_filter(8, 8, 3, 3))
    conv = next(st for st in rec["plan"]["steps"] if st["kind"] == "conv")
    assert conv.get("direct") is (True if direct_conv.available() else None)
    conv["direct"] = True
    spec.check_record(rec)
    assert "direct" in generate.expand(rec["plan"], weights)[0]["steps"][0]
    conv["direct"] = 1
    with pytest.raises(spec.SpecError, match=r"plan\.steps\[0\]\.direct: 1 is not true"):
        spec.check_record(rec)
    rec, weights = record(_filter(8, 8, 1, 1))
    conv = next(st for st in rec["plan"]["steps"] if st["kind"] == "conv")
    assert "direct" not in conv
    conv["direct"] = True
    spec.check_record(rec)
    with pytest.raises(spec.SpecError, match=r"direct: the direct kernel does not serve this convolution"):
        generate.expand(rec["plan"], weights)

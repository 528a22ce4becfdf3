"""The Numba CPU EP's exact 8-bit products on AVX-512 VNNI (``ep_numba_cpu.vnni``): the compiled
kernel against int64 arithmetic over the layout's edges (rows past a block of four, K not a
multiple of 4, N not of 64, every sign of zero point), B's layout refusals, and MatMulInteger and
QLinearMatMul on the EP giving the reference EP's outputs to the bit. The kernel tests skip on a
CPU without VNNI; there, the EP must not plan the kernel at all (tested everywhere)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _support.oracle import one_node_model

pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")

from ep_core import InferenceSession  # noqa: E402
from ep_numba_cpu import codegen, generate, int_loops, vnni  # noqa: E402

NUMBA = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]
needs_vnni = pytest.mark.skipif(not vnni.available(), reason="this CPU has no AVX-512 VNNI")


def _on_numba_and_reference(model: bytes, feed: dict, spied: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(EPs the Numba session assigned, its outputs, the reference EP's, whether ``vnni.<spied>`` ran)."""
    calls: list[int] = []
    real = getattr(vnni, spied)
    monkeypatch.setattr(vnni, spied, lambda *a: calls.append(1) or real(*a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model, providers=NUMBA)
        got = sess.run(None, feed)
        want = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    return {a["ep"] for a in sess.get_node_assignment().values()}, got, want, bool(calls)


def _kernel() -> Any:
    ks = vnni.gemm_kernel()
    return codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher


def _ints(rng: np.random.Generator, dt: Any, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


@needs_vnni
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 9])
@pytest.mark.parametrize(("k", "n"), [(1, 1), (3, 65), (37, 70), (384, 128), (1100, 64)])
@pytest.mark.parametrize(("adt", "azp", "bdt", "bzp"), [(np.uint8, 128, np.int8, 0), (np.int8, -3, np.uint8, 131)])
def test_product_is_int64_arithmetic(m: int, k: int, n: int, adt: Any, azp: int, bdt: Any, bzp: int) -> None:
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = _ints(rng, adt, (m, k)), _ints(rng, bdt, (k, n))
    want = (a.astype(np.int64) - azp) @ (b.astype(np.int64) - bzp)
    packed = vnni.pack((b.astype(np.float64) - bzp).astype(np.float32))
    assert packed is not None
    got = vnni.product(_kernel(), packed, (a.astype(np.float32) - azp).reshape(1, m, k))
    assert got is not None and got.dtype == np.int32 and got.shape == (1, m, n)
    np.testing.assert_array_equal(got[0], want)


@needs_vnni
def test_extreme_values_and_per_column_zero_points() -> None:
    """Every A' at its ends (0 - 255 and 255 - 0) against columns at theirs, with a zero point per
    column of B: the largest sums the layout meets."""
    k = 1024
    a = np.concatenate([np.full((2, k), 255), np.zeros((2, k)), np.full((1, k), 7)]).astype(np.int64)
    b = np.stack([np.full(k, 0), np.full(k, 255), np.arange(k) % 256, np.full(k, 128)], 1).astype(np.int64)
    bzp = np.array([255, 0, 17, 128])
    for azp in (0, 255):
        want = (a - azp) @ (b - bzp)
        got = vnni.product(_kernel(), vnni.pack((b - bzp).astype(np.float64)), (a - azp).astype(np.float32))
        np.testing.assert_array_equal(got, want)


@needs_vnni
def test_a_beyond_256_values_or_nan_takes_the_float_product() -> None:
    packed = vnni.pack(np.ones((2, 3), np.float32))
    assert vnni.product(_kernel(), packed, np.array([[0.0, 256.0]], np.float32)) is None
    assert vnni.product(_kernel(), packed, np.array([[1000.0, 1001.0]], np.float32)) is None  # past int32's bound
    assert vnni.product(_kernel(), packed, np.array([[0.0, np.nan]], np.float32)) is None
    assert vnni.product(_kernel(), packed, np.array([[np.nan, 0.0]], np.float32)) is None
    np.testing.assert_array_equal(vnni.product(_kernel(), packed, np.array([[-255.0, 0.0]], np.float32)), [[-255] * 3])
    with pytest.raises(ValueError, match="A has 3 columns, B 2 rows"):
        vnni.product(_kernel(), packed, np.zeros((1, 3), np.float32))


def test_layout_refuses_what_int8_cannot_hold() -> None:
    assert vnni.pack(np.array([[0.0], [256.0]])) is None  # a column spanning 257 values
    assert vnni.pack(np.array([[0.5]])) is None  # not an integer
    assert vnni.pack(np.array([[np.nan]])) is None
    assert vnni.pack(np.array([[1000.0], [1001.0]])) is None  # not 8-bit data minus a zero point
    assert vnni.pack(np.zeros((vnni.MAX_K + 1, 1))) is None
    assert vnni.pack(np.zeros((2, 3, 4))) is None  # a batched B keeps the float product
    assert vnni.pack(np.zeros((0, 4))) is None
    p = vnni.pack(np.array([[-255.0, 255.0], [0.0, 45.0]]))  # spans of up to 255 at any offset
    assert p is not None and p.s.dtype == np.int8 and p.s.shape == (1, 256)
    np.testing.assert_array_equal(p.cb, [-255 + 128, 45 + 128])
    np.testing.assert_array_equal(p.bsum, [-255, 300])


def test_no_vnni_no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU without VNNI plans no kernel for MatMulInteger (the reference kernel's float product
    serves it) and DynamicQuantizeLSTM's portable int16 loop."""
    monkeypatch.setattr(vnni, "available", lambda: False)
    assert generate.node_sources({"op": "MatMulInteger", "domain": ""}) is None
    assert generate.node_sources({"op": "QLinearConv", "domain": "", "in_types": [["uint8", None]]}) is None
    dq = generate.node_sources({"op": "DynamicQuantizeLSTM", "domain": "com.microsoft"})
    assert dq is not None and dq[0] == int_loops.product_kernel()


def _matmul_integer(rng: np.random.Generator, per_column: bool) -> tuple[bytes, dict]:
    ins = [("a", _ints(rng, np.uint8, (3, 40, 96))), ("b", _ints(rng, np.int8, (96, 70)))]
    ins += [("azp", np.uint8(131)), ("bzp", _ints(rng, np.int8, (70,)) if per_column else np.int8(-2))]
    return one_node_model("MatMulInteger", ins, [np.int32], {"b", "azp", "bzp"}, domain="")


def _qlinear_matmul(rng: np.random.Generator, per_column: bool) -> tuple[bytes, dict]:
    ins = [("a", _ints(rng, np.int8, (40, 200))), ("as", np.float32(0.02)), ("azp", np.int8(5))]
    ins += [("b", _ints(rng, np.uint8, (200, 33)))]
    ins += [("bs", rng.uniform(0.001, 0.003, 33).astype(np.float32) if per_column else np.float32(0.002))]
    ins += [("bzp", _ints(rng, np.uint8, (33,)) if per_column else np.uint8(120))]
    ins += [("ys", np.float32(0.5)), ("yzp", np.int8(-1))]
    return one_node_model("QLinearMatMul", ins, [np.int8], {"b", "as", "azp", "bs", "bzp", "ys", "yzp"}, domain="")


@needs_vnni
@pytest.mark.parametrize("build", [_matmul_integer, _qlinear_matmul])
@pytest.mark.parametrize("per_column", [False, True])
def test_ops_match_the_reference_ep(build: Any, per_column: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    model, feed = build(np.random.default_rng(int(per_column)), per_column)
    eps, got, want, served = _on_numba_and_reference(model, feed, "product", monkeypatch)
    assert eps == {"NumbaCpuExecutionProvider"}
    assert served  # the VNNI product ran
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _conv_int64(x: np.ndarray, zp: int, w: np.ndarray, bias: Any, k: Any, st: Any, dl: Any, pb: Any, pe: Any) -> Any:
    """conv(x - zp, w) + bias in int64 by shifted slices (the test's own arithmetic)."""
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + pb[0] + pe[0], wd + pb[1] + pe[1]), np.int64)
    xp[:, :, pb[0] : pb[0] + h, pb[1] : pb[1] + wd] = x.astype(np.int64) - zp
    oh = (xp.shape[2] - (dl[0] * (k[0] - 1) + 1)) // st[0] + 1
    ow = (xp.shape[3] - (dl[1] * (k[1] - 1) + 1)) // st[1] + 1
    out = np.zeros((n, w.shape[0], oh, ow), np.int64)
    for a in range(k[0]):
        for b in range(k[1]):
            rows = slice(a * dl[0], a * dl[0] + st[0] * (oh - 1) + 1, st[0])
            cols = slice(b * dl[1], b * dl[1] + st[1] * (ow - 1) + 1, st[1])
            out += np.einsum("nchw,mc->nmhw", xp[:, :, rows, cols], w[:, :, a, b].astype(np.int64))
    return out + (0 if bias is None else bias.astype(np.int64).reshape(1, -1, 1, 1)), [oh, ow]


@needs_vnni
@pytest.mark.parametrize(
    ("shape", "m", "k", "st", "dl", "pb", "pe", "dt", "zp"),
    [
        ((1, 3, 9, 11), 5, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), np.uint8, 128),
        ((2, 16, 14, 14), 70, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), np.int8, -5),
        ((1, 24, 20, 17), 24, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), np.uint8, 0),
        ((1, 7, 10, 10), 130, (5, 3), (1, 2), (2, 1), (2, 0), (1, 3), np.int8, 127),
        ((1, 1, 3, 3), 1, (3, 3), (1, 1), (1, 1), (4, 4), (4, 4), np.uint8, 255),  # most taps padded
    ],
)
def test_conv_is_int64_arithmetic(
    shape: Any, m: int, k: Any, st: Any, dl: Any, pb: Any, pe: Any, dt: Any, zp: int
) -> None:
    rng = np.random.default_rng(m)
    x = _ints(rng, dt, shape)
    w = (rng.integers(-128, 128, (m, shape[1], *k)) - rng.integers(-3, 3, (m, 1, 1, 1))).astype(np.float64)
    bias = rng.integers(-(2**30), 2**30, m).astype(np.int32)
    want, out = _conv_int64(x, zp, w.astype(np.int64), bias, k, st, dl, pb, pe)
    ks = vnni.conv_kernel(np.dtype(dt).name)
    fn = codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher
    got = vnni.conv(fn, vnni.pack_conv(w, 1), x, zp, bias, (list(k), list(st), list(dl), list(pb), out))
    assert got is not None and got.dtype == np.float32
    np.testing.assert_array_equal(got, want.astype(np.float32))  # the float32 nearest each exact sum


@needs_vnni
def test_plan_takes_vnni_for_constant_weights_of_its_layout() -> None:
    """``int_loops.takes_vnni`` at planning: a constant 2-D B, or a computed B of a known 8-bit
    dtype; a constant group-1 2-D filter over a known 8-bit x; the kernels then follow the plan's
    record (``"int8"``), not the CPU."""
    w2, w4 = np.zeros((4, 3), np.int8), np.zeros((2, 3, 3, 3), np.int8)
    mmi = {"op": "MatMulInteger", "domain": "", "inputs": ["a", "b"], "attrs": {}, "in_types": [["uint8", None]] * 2}
    conv = {**mmi, "op": "ConvInteger", "inputs": ["x", "w"], "attrs": {"group": ["int", 1]}}
    assert int_loops.takes_vnni(mmi, {"b": w2}) == "vnni"
    assert int_loops.takes_vnni(mmi, {}) == "vnni-runtime"  # B computed at run time
    assert int_loops.takes_vnni({**mmi, "in_types": [["uint8", None], [None, None]]}, {}) is None
    assert int_loops.takes_vnni(mmi, {"b": w4}) is None
    assert int_loops.takes_vnni(conv, {"w": w4}) == "vnni"
    assert int_loops.takes_vnni({**conv, "attrs": {"group": ["int", 3]}}, {"w": w4}) is None
    assert int_loops.takes_vnni({**conv, "in_types": [[None, None]] * 2}, {"w": w4}) is None
    assert generate.node_sources(conv) is None  # no record: the float product
    assert generate.node_sources({**conv, "int8": "vnni"}) == [vnni.conv_kernel("uint8")]


def test_a_vnni_plan_on_a_cpu_without_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from ep_numba_cpu.spec import SpecError

    monkeypatch.setattr(vnni, "available", lambda: False)
    step = {"op": "MatMulInteger", "domain": "", "int8": "vnni"}
    with pytest.raises(SpecError, match="AVX-512 VNNI, which this CPU"):
        generate.node_sources(step)


def test_conv_layout_refuses_groups_and_other_ranks() -> None:
    assert vnni.pack_conv(np.zeros((4, 1, 3, 3)), 4) is None
    assert vnni.pack_conv(np.zeros((4, 2, 3)), 1) is None
    p = vnni.pack_conv(np.arange(2 * 3 * 2 * 2, dtype=np.float64).reshape(2, 3, 2, 2) - 5, 1)
    assert p is not None and (p.k, p.n) == (12, 2)


def _qlinear_conv(rng: np.random.Generator, per_channel: bool, group: int) -> tuple[bytes, dict]:
    c, m = 8, 12
    ins = [("x", _ints(rng, np.uint8, (2, c, 11, 9))), ("xs", np.float32(0.03)), ("xzp", np.uint8(120))]
    ins += [("w", _ints(rng, np.int8, (m, c // group, 3, 3)))]
    ins += [("ws", rng.uniform(0.001, 0.01, m).astype(np.float32) if per_channel else np.float32(0.004))]
    ins += [("wzp", np.zeros(m, np.int8) if per_channel else np.int8(0)), ("ys", np.float32(0.07))]
    ins += [("yzp", np.uint8(128)), ("b", rng.integers(-5000, 5000, m).astype(np.int32))]
    consts = {"xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"}
    attrs = {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": group}
    return one_node_model("QLinearConv", ins, [np.uint8], consts, domain="", **attrs)


def _conv_integer(rng: np.random.Generator, per_channel: bool, group: int) -> tuple[bytes, dict]:
    ins = [("x", _ints(rng, np.int8, (1, 6, 10, 12))), ("w", _ints(rng, np.uint8, (9, 6 // group, 3, 2)))]
    ins += [("xzp", np.int8(-7)), ("wzp", _ints(rng, np.uint8, (9,)) if per_channel else np.uint8(131))]
    attrs = {"dilations": [2, 1], "pads": [1, 1, 1, 1], "group": group}
    return one_node_model("ConvInteger", ins, [np.int32], {"w", "xzp", "wzp"}, domain="", **attrs)


@needs_vnni
@pytest.mark.parametrize("build", [_qlinear_conv, _conv_integer])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("group", [1, 3])
def test_convs_match_the_reference_ep(
    build: Any, per_channel: bool, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouped convolutions keep the float product (the layout takes group 1 only)."""
    if build is _qlinear_conv and group == 3:
        group = 2
    model, feed = build(np.random.default_rng(group + int(per_channel)), per_channel, group)
    eps, got, want, served = _on_numba_and_reference(model, feed, "conv", monkeypatch)
    assert eps == {"NumbaCpuExecutionProvider"}
    assert served == (group == 1)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


_CTX_CHILD = """
import json, sys, warnings
import numpy as np
from ep_numba_cpu import codegen, vnni
if sys.argv[1] == "no-vnni":
    vnni.available = lambda: False
import ep_core
so = ep_core.SessionOptions()
if sys.argv[2] == "compile":
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", sys.argv[4])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    sess = ep_core.InferenceSession(sys.argv[3], so, providers=["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"])
    y = sess.run(None, {"a": np.load(sys.argv[5])})[0]
print(json.dumps({"y": y.ravel().tolist(), "stats": codegen.STATS, "warnings": [str(w.message) for w in caught]}))
"""


@needs_vnni
def test_context_compiled_without_vnni_loads_as_signed_on_a_cpu_with_it(tmp_path: Any) -> None:
    """The plan records the choice (``"int8": "vnni"`` or not), so a context made where VNNI was
    absent keeps its float products on a CPU that has it: its kernels rebuild from the context
    (none compiled), and its signature still matches its plan."""
    import json
    import os
    import subprocess
    import sys

    model, feed = _matmul_integer(np.random.default_rng(4), False)
    src, ctx = tmp_path / "m.onnx", tmp_path / "m_ctx.onnx"
    src.write_bytes(model)
    np.save(tmp_path / "a.npy", feed["a"])
    env = dict(os.environ, EP_NUMBA_CPU_KERNEL_CACHE_DIR=str(tmp_path / "cache"))

    def child(*args: str) -> dict[str, Any]:
        run = subprocess.run([sys.executable, "-c", _CTX_CHILD, *args], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        return json.loads(run.stdout.splitlines()[-1])

    made = child("no-vnni", "compile", str(src), str(ctx), str(tmp_path / "a.npy"))
    loaded = child("host", "load", str(ctx), "-", str(tmp_path / "a.npy"))
    assert loaded["stats"]["compiled"] == 0, loaded  # (the VNNI kernel was compiled here before)
    assert not any("modified after signing" in w for w in loaded["warnings"]), loaded["warnings"]
    assert loaded["y"] == made["y"]


@needs_vnni
@pytest.mark.parametrize(
    ("adt", "bdt", "a_shape", "b_shape"),
    [
        (np.uint8, np.uint8, (1, 3, 40, 16), (1, 3, 16, 70)),
        (np.int8, np.uint8, (3, 5, 7), (3, 7, 70)),
        (np.uint8, np.int8, (2, 9, 130), (130, 65)),
        (np.int8, np.int8, (1, 1), (1, 1)),
    ],
)
def test_run_time_product_is_int64_arithmetic(adt: Any, bdt: Any, a_shape: Any, b_shape: Any) -> None:
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = _ints(rng, adt, a_shape), _ints(rng, bdt, b_shape)
    ks = vnni.bmm_kernel(np.dtype(adt).name, np.dtype(bdt).name)
    fn = codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher
    ia, ib = np.iinfo(adt), np.iinfo(bdt)
    for za, zb in ((ia.min, ib.max), (ia.max, ib.min), (0, 0)):
        want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
        got = vnni.run_time_product(fn, a, np.array(za, adt), b, np.array(zb, bdt))
        assert got is not None and got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    per_column = _ints(rng, bdt, (b_shape[-1],))
    assert b_shape[-1] == 1 or vnni.run_time_product(fn, a, None, b, per_column) is None  # the float product
    assert vnni.run_time_product(fn, a[None], None, b[None, None], None) is None  # batch dims differ


def _run_time_b(rng: np.random.Generator, op: str) -> tuple[bytes, dict]:
    a, b = _ints(rng, np.uint8, (2, 30, 40)), _ints(rng, np.int8, (2, 40, 50))
    if op == "MatMulInteger":
        ins = [("a", a), ("b", b), ("azp", np.uint8(3)), ("bzp", np.int8(-2))]
        return one_node_model(op, ins, [np.int32], {"azp", "bzp"}, domain="")
    ins = [("a", a), ("as", np.float32(0.02)), ("azp", np.uint8(3)), ("b", b), ("bs", np.float32(0.01))]
    ins += [("bzp", np.int8(-2)), ("ys", np.float32(0.3)), ("yzp", np.uint8(128))]
    return one_node_model(op, ins, [np.uint8], {"as", "azp", "bs", "bzp", "ys", "yzp"}, domain="")


@needs_vnni
@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul"])
def test_computed_b_matches_the_reference_ep(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """B as a graph input (an attention product of a QDQ transformer): both operands on VNNI."""
    model, feed = _run_time_b(np.random.default_rng(11), op)
    eps, got, want, served = _on_numba_and_reference(model, feed, "run_time_product", monkeypatch)
    assert eps == {"NumbaCpuExecutionProvider"}
    assert served
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@needs_vnni
def test_a_zero_point_per_row_of_a_stays_on_vnni() -> None:
    """Each row of A' moves by its own offset: rows spanning 256 values each, 510 together."""
    rng = np.random.default_rng(12)
    a = _ints(rng, np.uint8, (5, 40)).astype(np.int64)
    b = _ints(rng, np.int8, (40, 70)).astype(np.int64)
    zp = np.array([0, 255, 17, 128, 3]).reshape(-1, 1)
    got = vnni.product(_kernel(), vnni.pack(b.astype(np.float32)), (a - zp).astype(np.float32))
    assert got is not None
    np.testing.assert_array_equal(got, (a - zp) @ b)


@needs_vnni
def test_empty_operands_take_the_float_product() -> None:
    ks = vnni.bmm_kernel("uint8", "int8")
    fn = codegen.compile_kernel(ks.source, ks.signature, ks.parallel).dispatcher
    for a_shape, b_shape in (((2, 0, 40), (2, 40, 7)), ((2, 3, 0), (2, 0, 5)), ((3, 4), (4, 0))):
        assert vnni.run_time_product(fn, np.zeros(a_shape, np.uint8), None, np.zeros(b_shape, np.int8), None) is None
    ins = [("a", np.zeros((2, 0, 40), np.uint8)), ("b", np.zeros((2, 40, 7), np.int8))]
    model, feed = one_node_model("MatMulInteger", ins, [np.int32], set(), domain="")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got,) = InferenceSession(model, providers=NUMBA).run(None, feed)
    assert got.shape == (2, 0, 7) and got.dtype == np.int32


def test_int8_records_are_checked() -> None:
    """A context's ``"int8"`` must name kernels its op has, for the 8-bit dtypes they compile for
    (``spec`` refuses the record at load, naming the field)."""
    conv = {"op": "QLinearConv", "domain": "", "int8": "vnni", "in_types": [["uint8", None]] + [[None, None]] * 8}
    mmi = {"op": "MatMulInteger", "domain": "", "int8": "vnni-runtime", "in_types": [["uint8", None], ["int8", None]]}
    assert int_loops.int8_problem(conv) is None and int_loops.int8_problem(mmi) is None
    assert "not one of" in str(int_loops.int8_problem({**conv, "int8": "avx"}))
    assert "8-bit inputs" in str(int_loops.int8_problem({**conv, "in_types": [["float32", None]]}))
    assert "8-bit inputs" in str(int_loops.int8_problem({**mmi, "in_types": [["uint8", None], [None, None]]}))
    assert "not 'QLinearConv'" in str(int_loops.int8_problem({**conv, "int8": "vnni-runtime"}))
    assert "has no 8-bit kernels" in str(int_loops.int8_problem({**mmi, "op": "Relu", "int8": "vnni"}))


@needs_vnni
def test_a_product_inside_a_branch_is_worth_a_group() -> None:
    """An 8-bit product in an If's branch runs on the EP (its VNNI kernel pays the runner's call)."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, seed: int) -> Any:
        w = np.random.default_rng(seed).integers(-128, 128, (64, 96)).astype(np.int8)
        node = helper.make_node("MatMulInteger", ["a", f"B{name}"], [f"y{name}"])
        out = [helper.make_tensor_value_info(f"y{name}", TensorProto.INT32, None)]
        return helper.make_graph([node], name, [], out, [numpy_helper.from_array(w, f"B{name}")])

    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("t", 1), else_branch=branch("e", 2))
    ins = [
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        helper.make_tensor_value_info("a", TensorProto.UINT8, [32, 64]),
    ]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    feed = {"cond": np.array(True), "a": np.random.default_rng(0).integers(0, 256, (32, 64)).astype(np.uint8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model, providers=NUMBA)
        got = sess.run(None, feed)
        want = InferenceSession(model, providers=["CpuReferenceExecutionProvider"]).run(None, feed)
    eps = {k: v["ep"] for k, v in sess.get_node_assignment().items()}
    assert eps["If_0/then_branch/MatMulInteger_0"] == "NumbaCpuExecutionProvider", eps
    np.testing.assert_array_equal(got[0], want[0])


def test_a_plan_without_8_bit_products_leaves_vnni_alone(tmp_path: Any) -> None:
    """Asking for the CPU's features starts Numba's code generator (~60 MB and ~0.2 s): a plan of
    delegated steps with no 8-bit product must not import ``vnni`` (the string-bomb test's peak
    crossed its 300 MB line when every delegated step asked)."""
    import json
    import subprocess
    import sys

    from onnx import TensorProto, helper

    nodes = [helper.make_node("ConstantOfShape", ["n"], ["z"]), helper.make_node("Shape", ["z"], ["y"])]
    init = [helper.make_tensor("n", TensorProto.INT64, [1], [1000])]
    out = [helper.make_tensor_value_info("y", TensorProto.INT64, [1])]
    graph = helper.make_graph(nodes, "g", [], out, init)
    (tmp_path / "m.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString()
    )
    code = (
        "import json, sys, warnings; warnings.simplefilter('ignore'); import ep_core; "
        f"ep_core.InferenceSession({str(tmp_path / 'm.onnx')!r}, providers=['NumbaCpuExecutionProvider']); "
        "print(json.dumps('ep_numba_cpu.vnni' in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) is False

"""float16 on the Numba-CUDA EP: float16 nodes are claimed (not left to the CPU), math runs in
float32 (float64 in the row reductions) and is rounded once at the store, a fused chain over
float16 compiles to one kernel (and to PTX); bfloat16 runs in the elementwise and data-movement
families (as uint16 bits, float32 math) and is declined with the reason elsewhere. Per-op float16
and bfloat16 cases against the reference EP come from the registry (cases.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .conftest import EP, REF, SIM, all_on_ep, assert_close, run_both, session, skip_unless_cudasim

H = TensorProto.FLOAT16
F16_TOL = 2e-3  # two float16 ulps near 1 (rtol and atol)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "f16", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape: list[int], t: int = H) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def transformer_block() -> onnx.ModelProto:
    """MatMul, a fusable Add-Gelu-Mul chain, Softmax, LayerNormalization, ReduceMean: all float16."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8, 6)).astype(np.float16), "w"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (6,)).astype(np.float16), "b"),
        numpy_helper.from_array(np.float16(1.5).reshape(()), "s"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, (6,)).astype(np.float16), "g"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (6,)).astype(np.float16), "beta"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["t0"], name="add"),
        helper.make_node("Gelu", ["t0"], ["t1"], name="gelu", approximate="tanh"),
        helper.make_node("Mul", ["t1", "s"], ["t2"], name="mul"),
        helper.make_node("Softmax", ["t2"], ["sm"], name="softmax", axis=-1),
        helper.make_node("LayerNormalization", ["t2", "g", "beta"], ["ln"], name="layernorm", axis=-1),
        helper.make_node("ReduceMean", ["ln", "axes"], ["rm"], name="reducemean", keepdims=0),
    ]
    outs = [_vi("sm", [2, 3, 6]), _vi("ln", [2, 3, 6]), _vi("rm", [2, 6])]
    return _model(nodes, [_vi("x", [2, 3, 8])], outs, inits, opset=20)


def test_float16_nodes_run_on_the_ep_and_match_the_reference() -> None:
    x = np.random.default_rng(0).uniform(-2, 2, (2, 3, 8)).astype(np.float16)
    got, ref, sess = run_both(transformer_block(), {"x": x})
    assert all_on_ep(sess) == {}, sess.get_node_assignment()
    ep = sess.execution_providers[0].ep
    assert [sorted(g.spec["inputs"]) for g in ep.compiled] == [["b", "mm", "s"]]  # add-gelu-mul, one kernel
    assert ep.compiled[0].spec["input_dtypes"] == ["float16"] * 3
    assert all(o.dtype == np.float16 for o in got)
    assert_close(got, ref, F16_TOL, "float16 block")


def test_a_fused_float16_chain_computes_in_float32_and_rounds_once() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["t0"], name="sq"),
        helper.make_node("Sub", ["t0", "x"], ["t1"], name="sub"),
        helper.make_node("Sigmoid", ["t1"], ["y"], name="sig"),
    ]
    model = _model(nodes, [_vi("x", [2, 5])], [_vi("y", [2, 5])])
    x = np.linspace(-3, 3, 10, dtype=np.float16).reshape(2, 5)
    got, ref, sess = run_both(model, {"x": x})
    ep = sess.execution_providers[0].ep
    assert len(ep.compiled) == 1 and ep.compiled[0].launches["fused"] == 1
    # the program widens the float16 inputs on load: every statement computes in float32
    assert {s.compute_dtype for s in ep.compiled[0].program.statements} == {"float32"}
    x32 = x.astype(np.float32)
    once = (1 / (1 + np.exp(-(x32 * x32 - x32)))).astype(np.float16)
    np.testing.assert_array_equal(got[0], once)
    assert_close(got, ref, F16_TOL, "fused chain vs node-by-node reference")


def test_matmul_and_reduce_accumulate_wider_than_float16() -> None:
    """2100 ones: a float16 running sum sticks at 2048 (2048 + 1 rounds back to 2048)."""
    k = 2100
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["mm"], name="mm"),
        helper.make_node("ReduceSum", ["a"], ["rs"], name="rs", keepdims=0),
    ]
    model = _model(nodes, [_vi("a", [1, k]), _vi("b", [k, 1])], [_vi("mm", [1, 1]), _vi("rs", [])], opset=11)
    sess = session(model)
    mm, rs = sess.run(None, {"a": np.ones((1, k), np.float16), "b": np.ones((k, 1), np.float16)})
    assert all_on_ep(sess) == {}
    assert mm.dtype == rs.dtype == np.float16
    assert float(mm[0, 0]) == float(rs) == 2100.0


def test_gemm_float16_epilogue_matches_the_reference() -> None:
    rng = np.random.default_rng(3)
    a, b, c = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((3, 4), (5, 4), (5,)))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", transB=1, alpha=0.5, beta=2.0)
    model = _model([node], [_vi("a", [3, 4]), _vi("b", [5, 4]), _vi("c", [5])], [_vi("y", [3, 5])])
    got, ref, sess = run_both(model, {"a": a, "b": b, "c": c})
    assert all_on_ep(sess) == {}
    exact = (0.5 * (a.astype(np.float64) @ b.T.astype(np.float64)) + 2.0 * c).astype(np.float16)
    np.testing.assert_allclose(got[0].astype(np.float64), exact, rtol=1e-3, atol=1e-3)
    assert_close(got, ref, F16_TOL, "gemm")


def test_cast_from_double_to_float16_rounds_once() -> None:
    """1 + 2**-11 + 2**-40 is just above a float16 tie: through float32 it lands on the tie and
    rounds to even (1.0); rounded directly it goes up to 1 + 2**-10, as NumPy does."""
    node = helper.make_node("Cast", ["x"], ["y"], name="cast", to=H)
    model = _model([node], [_vi("x", [2], TensorProto.DOUBLE)], [_vi("y", [2])])
    x = np.array([1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40)])
    got, ref, sess = run_both(model, {"x": x})
    assert all_on_ep(sess) == {}
    np.testing.assert_array_equal(got[0], x.astype(np.float16))
    assert float(got[0][0]) == 1 + 2.0**-10
    assert_close(got, ref, 0.0, "cast")


def test_where_compare_and_clip_on_float16() -> None:
    nodes = [
        helper.make_node("Greater", ["x", "y"], ["m"], name="gt"),
        helper.make_node("Where", ["m", "x", "y"], ["w"], name="where"),
        helper.make_node("Clip", ["w", "lo", "hi"], ["z"], name="clip"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.float16), n) for n, v in (("lo", -0.5), ("hi", 0.75))]
    outs = [_vi("z", [3, 4]), _vi("m", [3, 4], TensorProto.BOOL)]
    model = _model(nodes, [_vi("x", [3, 4]), _vi("y", [4])], outs, inits)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.uniform(-2, 2, (3, 4)).astype(np.float16), "y": rng.uniform(-2, 2, (4,)).astype(np.float16)}
    got, ref, sess = run_both(model, feeds)
    assert all_on_ep(sess) == {}
    assert_close(got, ref, 0.0, "where/greater/clip are exact")


def test_bfloat16_elementwise_runs_here_and_the_rest_is_declined_with_the_reason() -> None:
    import ml_dtypes

    from ep_cuda_numba.registry import BF16_REASON

    bf = TensorProto.BFLOAT16
    nodes = [
        helper.make_node("Add", ["a", "b"], ["c"], name="add"),
        helper.make_node("Tanh", ["c"], ["d"], name="tanh"),
        helper.make_node("Transpose", ["d"], ["e"], name="transpose"),
        helper.make_node("MatMul", ["e", "a"], ["y"], name="matmul"),
    ]
    model = _model(nodes, [_vi("a", [3, 3], bf), _vi("b", [3, 3], bf)], [_vi("y", [3, 3], bf), _vi("d", [3, 3], bf)])
    rng = np.random.default_rng(7)
    feeds = {k: rng.uniform(-2, 2, (3, 3)).astype(ml_dtypes.bfloat16) for k in "ab"}
    sess = session(model, [EP, REF])
    where = {k: v["ep"] for k, v in sess.get_node_assignment().items()}
    assert where == {"add": EP, "tanh": EP, "transpose": EP, "matmul": REF}
    ep = next(e.ep for e in sess.execution_providers if e.name == EP)
    assert ep.declined == {"matmul": BF16_REASON}
    assert len(ep.compiled) == 1 and ep.compiled[0].spec["input_dtypes"] == ["bfloat16", "bfloat16"]
    got = sess.run(None, feeds)
    a, b = (feeds[k].astype(np.float32) for k in "ab")
    once = np.tanh(a + b).astype(ml_dtypes.bfloat16)  # float32 math, rounded once
    np.testing.assert_array_equal(got[1].view(np.uint16), once.view(np.uint16))
    assert_close(got, session(model, [REF]).run(None, feeds), 1.6e-2, "bfloat16 block")


def test_bfloat16_rounding_bits_match_ml_dtypes() -> None:
    """The integer rounding the GPU kernels use (``bf16_round_bits``) against ml_dtypes' float32 ->
    bfloat16 cast, on random float32 bit patterns plus ties, infinities and NaNs."""
    import ml_dtypes

    from ep_cuda_numba.codegen import bf16_round_bits

    rng = np.random.default_rng(0)
    special = [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0]
    u = np.concatenate([rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32), np.array(special, np.uint32)])
    f = u.view(np.float32)
    if SIM:  # the simulator calls device functions from the host
        got = np.array([bf16_round_bits(x) for x in u], np.uint16)
    else:
        from numba import cuda

        @cuda.jit
        def round_all(src, dst):  # type: ignore[no-untyped-def]
            i = cuda.grid(1)
            if i < src.size:
                dst[i] = bf16_round_bits(src[i])

        out = cuda.device_array(u.size, np.uint16)
        round_all[(u.size + 255) // 256, 256](cuda.to_device(u), out)
        got = out.copy_to_host()
    nan = np.isnan(f)
    np.testing.assert_array_equal(got[~nan], f[~nan].astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()


FUSED_F16_PTX = """
from types import SimpleNamespace
import numba.cuda.dispatcher as dispatcher
import onnx
from cuda_numba.test_float16 import transformer_block
# no GPU here: device functions (bfloat16 bits) compile for the target named, as in ptxcheck
dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(8, 0))
from ep_core.sdk.compute import FusedNode
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.runtime.partition import fused_inputs_outputs
from ep_cuda_numba.fusion import compile_group
m = onnx.shape_inference.infer_shapes(transformer_block())
g = GraphView(m.graph, opset_map(m))
chain = tuple(n for n in g.all_nodes if n.name in ("add", "gelu", "mul"))
view = g.subset([n.index for n in chain])
ins, outs = fused_inputs_outputs(g, chain, False)
fused = FusedNode("group", ins, outs, tuple(n.name for n in chain))
ep = SimpleNamespace(name="NumbaCudaExecutionProvider", options=SimpleNamespace(max_threads_per_block=256), simulated=False)
ptx = compile_group(view, fused, ep).compile_ptx((8, 0))
assert ".entry" in ptx and "cvt.rn.f16.f32" in ptx, ptx[:500]
from onnx import TensorProto, helper
bf = [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [2, 3]) for n in "abcd"]
nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Tanh", ["c"], ["d"])]
m = helper.make_model(helper.make_graph(nodes, "bf", bf[:2], bf[3:]), opset_imports=[helper.make_opsetid("", 17)])
m = onnx.shape_inference.infer_shapes(m)
g = GraphView(m.graph, opset_map(m))
ins, outs = fused_inputs_outputs(g, tuple(g.all_nodes), False)
fused = FusedNode("bf", ins, outs, tuple(n.name for n in g.all_nodes))
bptx = compile_group(g.subset(range(2)), fused, ep).compile_ptx((8, 0))
assert ".entry" in bptx and ".u16" in bptx, bptx[:500]
print("PTX OK", len(ptx), len(bptx))
"""


@skip_unless_cudasim("on a GPU the fused float16 kernel is compiled for real")
def test_fused_float16_and_bfloat16_groups_compile_to_ptx() -> None:
    from .test_ptx_dry_run import run_nvvm_script

    proc = run_nvvm_script(FUSED_F16_PTX)
    assert proc.returncode == 0 and "PTX OK" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]

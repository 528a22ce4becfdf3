"""Compile: chains of elementwise ops become ONE generated kernel per fused group; fused groups
become EPContext nodes whose graphs (a signed fusion spec, never code, plus constants) live in one
context binary that a later session claims back and runs; the compatibility string is recorded
and judged. The binary's layout and sharing: test_context_binary.py; tampering:
test_context_tampering.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core.sdk.errors import InvalidGraph
from ep_cuda_numba.spec_check import SPEC_FORMAT

from .conftest import EP, SIM, all_on_ep, assert_close, run_both, session

SHAPE = [2, 3, 4]


def chain_model() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", -0.5), ("hi", 0.75))]
    nodes = [
        helper.make_node("Add", ["x", "b"], ["t0"], name="add"),
        helper.make_node("Mul", ["t0", "c"], ["t1"], name="mul"),
        helper.make_node("Sigmoid", ["t1"], ["t2"], name="sigmoid"),
        helper.make_node("Clip", ["t2", "lo", "hi"], ["t3"], name="clip"),
        helper.make_node("Cast", ["t3"], ["y"], name="cast", to=TensorProto.DOUBLE),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, SHAPE)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=SHAPE).astype(np.float32),
        "b": rng.normal(size=[4]).astype(np.float32),
        "c": rng.normal(size=[3, 1]).astype(np.float32),
    }


def test_an_elementwise_chain_runs_as_one_generated_kernel() -> None:
    got, ref, sess = run_both(chain_model(), feeds())
    assignment = sess.get_node_assignment()
    fused = {v["fused_node"] for v in assignment.values()}
    assert len(fused) == 1 and None not in fused and all(v["ep"] == EP for v in assignment.values())
    assert_close(got, ref, 1e-6, "fused chain")
    ep = sess.execution_providers[0].ep
    (group,) = ep.compiled
    assert group.source.count("def fused_kernel") == 1 and "math.exp" in group.source
    assert len(group.program.statements) == 5
    before = dict(group.launches)
    sess.run(None, feeds(1))
    assert group.launches["fused"] == before["fused"] + 1 and group.launches["fallback"] == before["fallback"]
    assert [line for line in sess.get_plan() if "fused" in line.split()[1]], "the plan runs one fused step"


def test_a_group_output_smaller_than_the_group_is_computed_exactly() -> None:
    nodes = [
        helper.make_node("Mul", ["b", "c"], ["a"], name="mul"),
        helper.make_node("Add", ["x", "a"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "bcast",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    f = feeds()
    f["c"] = np.arange(4, dtype=np.float32)
    got, ref, sess = run_both(model, f)
    assert_close(got, ref, 1e-6, "broadcast group")
    (group,) = sess.execution_providers[0].ep.compiled
    assert group.launches["fallback"] == 1  # 'a' has shape [4], the group [2, 3, 4]: node by node


def test_fusion_can_be_turned_off() -> None:
    sess = session(chain_model(), [(EP, {"enable_fusion": "0"})])
    assert all(v["fused_node"] is None for v in sess.get_node_assignment().values())
    assert_close(sess.run(None, feeds()), session(chain_model()).run(None, feeds()), 1e-6)


def _compile(tmp_path: Path, embed: int) -> tuple[Path, Path]:
    from ep_core import SessionOptions

    src = tmp_path / "chain.onnx"
    onnx.save(chain_model(), src)
    opts = SessionOptions()
    opts.add_session_config_entry("ep.context_enable", "1")
    opts.add_session_config_entry("ep.context_embed_mode", str(embed))
    sess = session(str(src), sess_options=opts)
    ctx = Path(sess.context_model_path)
    assert ctx.is_file() and ctx != src
    return src, ctx


@pytest.mark.parametrize("embed", [1, 0])
def test_fused_groups_become_ep_context_nodes_that_run_again(tmp_path: Path, embed: int) -> None:
    from ep_cuda_numba import context_binary

    src, ctx = _compile(tmp_path, embed)
    model = onnx.load(ctx)
    (node,) = [n for n in model.graph.node]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "EPContext" and node.domain == "com.microsoft"
    assert attrs["source"] == EP.encode() and attrs["embed_mode"] == embed and attrs["main_context"] == 1
    if embed:
        blob = attrs["ep_cache_context"]
    else:
        rel = attrs["ep_cache_context"].decode()
        assert rel == f"chain_{EP}.bin" and not Path(rel).is_absolute()
        blob = (ctx.parent / rel).read_bytes()
    meta, tensors = context_binary.read(blob, AssertionError)
    assert meta["format"] == context_binary.FORMAT and set(meta["graphs"]) == {node.name}
    record = meta["graphs"][node.name]
    assert json.loads(attrs["notes"])["signature"].startswith("hmac-sha256:")
    assert [e["op"] for e in record["spec"]["nodes"]] == ["Add", "Mul", "Sigmoid", "Clip", "Cast"]
    assert record["constants"] == []  # the Clip bounds are baked into the kernel's params
    assert sorted(tensors) == ([] if SIM else [f"ptx.{record['ptx']['sha256']}"]), (
        "no weights; on a GPU, the kernel's PTX"
    )
    assert (record["ptx"] is None) == SIM
    assert attrs["hardware_architecture"] == (b"sim" if SIM else attrs["hardware_architecture"])
    key = f"ep_compatibility_info.{EP}"
    info = {p.key: p.value for p in model.metadata_props}[key]
    assert info.startswith("ep_cuda_numba=") and ("target=sim" in info) == SIM
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # signed by this user's key: no warning
        loaded = session(str(ctx))
    assert all_on_ep(loaded) == {}
    assert len(loaded.execution_providers[0].ep.loaded_context_groups) == 1
    assert_close(loaded.run(None, feeds(2)), session(str(src)).run(None, feeds(2)), 1e-6, "from the context model")


def test_compatibility_verdicts(tmp_path: Path) -> None:
    from ep_cuda_numba.device import probe
    from ep_cuda_numba.epcontext import compatibility_info, validate_compatibility

    devices = list(probe().devices)
    here = compatibility_info(0)
    assert validate_compatibility(devices, here) == "SUPPORTED_OPTIMAL"
    moved = here.replace("target=", "target=sm_1")
    assert validate_compatibility(devices, moved).startswith("SUPPORTED_PREFER_RECOMPILATION")
    assert ";driver=" in here
    other_driver = here.replace("driver=", "driver=9")
    assert "CUDA driver" in validate_compatibility(devices, other_driver)
    assert validate_compatibility(devices, here.replace(f"spec={SPEC_FORMAT}", "spec=99")).startswith("UNSUPPORTED")
    assert validate_compatibility(devices, "something else").startswith("UNSUPPORTED")
    _, ctx = _compile(tmp_path, 1)
    model = onnx.load(ctx)
    for p in model.metadata_props:
        if p.key == f"ep_compatibility_info.{EP}":
            p.value = p.value.replace(f"spec={SPEC_FORMAT}", "spec=99")
    with pytest.raises(InvalidGraph, match="recompile"):
        session(model)


def test_a_payload_naming_an_unknown_op_is_refused(tmp_path: Path) -> None:
    from ep_cuda_numba import context_binary

    _, ctx = _compile(tmp_path, 1)
    model = onnx.load(ctx)
    node = model.graph.node[0]
    attr = next(a for a in node.attribute if a.name == "ep_cache_context")
    meta, _ = context_binary.read(attr.s, AssertionError)
    meta["graphs"][node.name]["spec"]["nodes"][0]["op"] = "__import__('os').system"
    attr.s = context_binary.pack(meta["graphs"], {}, {})
    notes = next(a for a in node.attribute if a.name == "notes")
    notes.s = json.dumps({k: v for k, v in json.loads(notes.s).items() if k != "binary_sha256"}).encode()
    next(a for a in node.attribute if a.name == "max_size").i = len(attr.s)
    with pytest.raises(InvalidGraph, match="not an elementwise op this EP fuses"):
        session(model)


def test_constant_clip_bounds_are_baked_into_the_fused_kernel() -> None:
    nodes = [
        helper.make_node("Constant", [], ["lo"], name="lo", value=numpy_helper.from_array(np.array(0.0, np.float32))),
        helper.make_node("Constant", [], ["hi"], name="hi", value=numpy_helper.from_array(np.array(6.0, np.float32))),
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("Mul", ["c", "x"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "relu6",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).uniform(-4, 4, SHAPE).astype(np.float32)
    got, ref, sess = run_both(model, {"x": x})
    assert_close(got, ref, 1e-6, "relu6 chain")
    assignment = sess.get_node_assignment()
    # the Constant bounds are initializers by then (the graph optimizer lifts them, as onnxruntime's loader)
    assert set(assignment) == {"add", "clip", "mul"}
    assert len({v["fused_node"] for v in assignment.values()}) == 1 and assignment["clip"]["fused_node"] is not None
    assert len([line for line in sess.get_plan() if " copy " in line]) == 2, "only x up and y down"


def test_the_generator_refuses_statements_outside_its_grammar() -> None:
    """The guard in front of exec: every op's generated statement passes, anything else does not."""
    from ep_core.sdk.errors import EpFail
    from ep_cuda_numba.codegen import ALL_OPS, check_expression, instantiate, op_expression
    from ep_cuda_numba.spec_check import param_count

    for op in ALL_OPS:
        n = 3 if op in ("Where", "Max", "Sum", "Mean", "Min") else ALL_OPS[op].arity
        for dt in (np.dtype(np.float32), np.dtype(np.int64)):
            template = op_expression(op, n, dt, None, np.dtype(np.float64))
            expr = instantiate(template, [f"v{i}" for i in range(n)], [f"p{i}" for i in range(param_count(op))])
            check_expression(expr.replace("F(", "F0("))
    for bad in (
        "__import__('os').system('true')",
        "v0.__class__",
        "v0 if v0 else (lambda: 0)()",
        "v0\n        v1",
        "v0; v1",
        "[v0][0]",
        "v0 # comment",
        "x0 + v1",
        "eval('1')",
    ):
        with pytest.raises(EpFail, match="outside the generator's grammar"):
            check_expression(bad)

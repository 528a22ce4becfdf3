"""Context models of real models load without compiling and give the source model's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from epcontext_support import NUMBA, ctx_nodes

from ep_core import InferenceSession

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("embed", [0, 1])
@pytest.mark.parametrize("name", ["magika", "ppocr_det"])
def test_ctx_model_loads_without_compiling_and_matches_the_source(compiled, count_compiles, name, embed):
    c = compiled(name, embed)
    count_compiles = count_compiles()
    sess = InferenceSession(str(c.ctx), providers=[NUMBA])
    assert count_compiles.numba == 0, "loading the context model compiled kernels"
    assert count_compiles.ep_compile == 0, "loading the context model called ep_compile"
    got = sess.run(None, c.feed)
    for a, b in zip(got, c.expected, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [i.name for i in sess.get_inputs()] == c.input_names
    assert [o.name for o in sess.get_outputs()] == c.output_names
    on_numba = [n for n, a in sess.get_node_assignment().items() if a["ep"] == NUMBA]
    assert on_numba and all(n.startswith(f"{NUMBA}_") for n in on_numba)


@pytest.mark.parametrize("name", ["magika", "ppocr_det"])
def test_numba_outputs_match_onnxruntime(compiled, name):
    ort = pytest.importorskip("onnxruntime")
    c = compiled(name, 1)
    want = ort.InferenceSession(str(c.source), providers=["CPUExecutionProvider"]).run(None, c.feed)
    for a, b in zip(c.expected, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_fused_groups_are_substantial(compiled):
    # ppocr_det: ~310 nodes once the graph optimizer folds its BatchNormalizations into the Convs
    for name, min_nodes in (("magika", 40), ("ppocr_det", 300)):
        c = compiled(name, 1)
        sess = InferenceSession(str(c.source), providers=[NUMBA])
        fused = [n for n, a in sess.get_node_assignment().items() if a["fused_node"]]
        assert len(fused) >= min_nodes, f"{name}: only {len(fused)} nodes fused"


def test_embed_mode_0_writes_one_binary_named_after_the_model(compiled):
    name = "silero_vad_16k_op15"  # two fused groups around an If (magika is one group)
    c = compiled(name, 0)
    files = sorted(p.name for p in c.folder.iterdir())
    assert files == [f"{name}.onnx", f"{name}_NumbaCpuExecutionProvider.bin", f"{name}_ctx.onnx"]
    model = onnx.load(str(c.ctx))
    nodes = ctx_nodes(model)
    assert len(nodes) > 1
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert [a["main_context"] for a in attrs] == [1] + [0] * (len(nodes) - 1)
    assert attrs[0]["ep_cache_context"] == f"{name}_NumbaCpuExecutionProvider.bin".encode()
    assert all(a["embed_mode"] == 0 and a["source"] == NUMBA.encode() for a in attrs)
    assert all(a["partition_name"] == n.name.encode() for a, n in zip(attrs, nodes, strict=True))


def test_embed_mode_1_model_is_self_contained_and_checks(compiled):
    c = compiled("ppocr_det", 1)
    assert sorted(p.name for p in c.folder.iterdir()) == ["ppocr_det.onnx", "ppocr_det_ctx.onnx"]
    model = onnx.load(str(c.ctx))
    onnx.checker.check_model(model)
    assert {p.key for p in model.metadata_props} >= {f"ep_compatibility_info.{NUMBA}"}
    for n in ctx_nodes(model):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["main_context"] == 1 and attrs["embed_mode"] == 1
        assert attrs["ep_cache_context"][:8] != b""
    src = onnx.load(str(c.source))
    assert [i.name for i in model.graph.input] == [i.name for i in src.graph.input]
    assert [o.name for o in model.graph.output] == [o.name for o in src.graph.output]
    assert not any(t.HasField("data_location") and t.data_location == 1 for t in model.graph.initializer)


def test_node_name_prefix_names_nodes_partitions_and_graphs(tmp_path, compiled):
    from epcontext_support import compile_model

    compiled("magika", 1)  # kernels already compiled in this process
    c = compile_model("magika", tmp_path, 1, ep__context_node_name_prefix="m1_")
    model = onnx.load(str(c.ctx))
    for n in ctx_nodes(model):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert n.name.startswith("m1_" + NUMBA)
        assert attrs["partition_name"] == n.name.encode()
    sess = InferenceSession(str(c.ctx), providers=[NUMBA])
    np.testing.assert_array_equal(sess.run(None, c.feed)[0], c.expected[0])


def test_a_new_kernel_is_compiled_once_the_counter_sees_it(count_compiles, tmp_path):
    """Positive control for the compile counter the round-trip tests rely on."""
    count_compiles = count_compiles()
    from onnx import TensorProto, helper

    # a random LeakyRelu slope is a literal of the kernel's source: no earlier session compiled it
    k = float(np.random.default_rng().uniform(1, 2))
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky", alpha=k)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    sess = InferenceSession(str(path), providers=[NUMBA])
    assert count_compiles.numba >= 1 and count_compiles.ep_compile == 1
    got = sess.run(None, {"x": -np.ones(4, np.float32)})[0]
    np.testing.assert_allclose(got, np.full(4, -k, np.float32), rtol=1e-6)


def test_disable_compile_loads_the_context_model_and_the_core_refuses_the_source(compiled):
    """``session.disable_compile=1``: the EP never reads it; the core lets EPContext nodes load and
    fails a session that would compile, instead of the EP quietly leaving its nodes to the CPU."""
    from ep_core import SessionOptions
    from ep_core.sdk.errors import ModelRequiresCompilation

    c = compiled("magika", 1)
    so = SessionOptions()
    so.add_session_config_entry("session.disable_compile", "1")
    got = InferenceSession(str(c.ctx), so, providers=[NUMBA]).run(None, c.feed)
    for a, b in zip(got, c.expected, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ModelRequiresCompilation, match=f"{NUMBA} needs to compile .*session.disable_compile=1"):
        InferenceSession(str(c.source), so, providers=[NUMBA])

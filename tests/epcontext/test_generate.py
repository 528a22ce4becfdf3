"""Generation: where the model goes, what is refused before compiling, and that a failure leaves
no file behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from _support.models import if_with_fusable_branches
from epcontext_support import NUMBA, ctx_nodes, options
from onnx import TensorProto, helper

import ep_core.runtime.context_write as gen
from ep_core import InferenceSession
from ep_core.sdk.epcontext.output import staged_name
from ep_core.sdk.errors import InvalidArgument, ModelRequiresCompilation
from ep_core.tools.zoo import fetch_model


def _magika(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "magika.onnx"
    shutil.copy(fetch_model("magika"), p)
    return p


def unsupported_only(path: Path) -> Path:
    """A model with no node the Numba EP fuses (a Transpose of strings: no dtype it stores)."""
    node = helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [3, 2])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_bytes_model_without_context_file_path_fails_before_compiling(count_compiles):
    count_compiles = count_compiles()
    data = fetch_model("magika").read_bytes()
    with pytest.raises(InvalidArgument) as e:
        InferenceSession(data, options(ep__context_enable=1), providers=[NUMBA])
    assert "ep.context_file_path" in e.value.message and "bytes" in e.value.message
    assert count_compiles.ep_compile == 0


def test_bytes_model_with_context_file_path(compiled, tmp_path):
    compiled("magika", 1)
    out = tmp_path / "out" / "m_ctx.onnx"
    sess = InferenceSession(
        fetch_model("magika").read_bytes(), options(ep__context_enable=1, ep__context_file_path=out), providers=[NUMBA]
    )
    assert Path(sess.context_model_path) == out
    assert sorted(p.name for p in out.parent.iterdir()) == ["m_NumbaCpuExecutionProvider.bin", "m_ctx.onnx"]


def test_existing_output_is_not_overwritten_and_nothing_compiles(tmp_path, count_compiles):
    count_compiles = count_compiles()
    src = _magika(tmp_path)
    out = tmp_path / "magika_ctx.onnx"
    out.write_bytes(b"keep me")
    with pytest.raises(InvalidArgument) as e:
        InferenceSession(str(src), options(ep__context_enable=1), providers=[NUMBA])
    assert str(out) in e.value.message and "ep.context_overwrite" in e.value.message
    assert out.read_bytes() == b"keep me"
    assert count_compiles.ep_compile == 0


def test_overwrite_replaces_existing_output(tmp_path, compiled):
    compiled("magika", 1)
    src = _magika(tmp_path)
    out = tmp_path / "magika_ctx.onnx"
    out.write_bytes(b"old")
    InferenceSession(
        str(src), options(ep__context_enable=1, ep__context_overwrite=1, ep__context_embed_mode=1), providers=[NUMBA]
    )
    assert ctx_nodes(onnx.load(str(out)))


def test_the_source_model_is_never_overwritten(tmp_path):
    src = _magika(tmp_path)
    before = src.read_bytes()
    with pytest.raises(InvalidArgument) as e:
        InferenceSession(
            str(src),
            options(ep__context_enable=1, ep__context_file_path=src, ep__context_overwrite=1),
            providers=[NUMBA],
        )
    assert "source model" in e.value.message
    assert src.read_bytes() == before


def test_failure_midway_leaves_no_partial_file(tmp_path, compiled, monkeypatch):
    compiled("magika", 0)
    src = _magika(tmp_path)

    def boom(*a, **k):
        # the EP has staged its binary by now; the model is not written yet
        staged = "-".join(staged_name("x").split("-")[:3]) + "-"  # .epctx-<host>-<this pid>-
        assert any(
            p.name.startswith(staged) and p.name.endswith("-magika_NumbaCpuExecutionProvider.bin")
            for p in tmp_path.iterdir()
        )
        raise RuntimeError("disk full")

    monkeypatch.setattr(gen, "_build_model", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        InferenceSession(str(src), options(ep__context_enable=1), providers=[NUMBA])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["magika.onnx"]


def test_nothing_compiled_warns_and_writes_a_copy(tmp_path):
    src = unsupported_only(tmp_path / "t.onnx")
    with pytest.warns(RuntimeWarning, match="nothing was compiled"):
        sess = InferenceSession(str(src), options(ep__context_enable=1), providers=[NUMBA])
    model = onnx.load(sess.context_model_path)
    assert [n.op_type for n in model.graph.node] == ["Transpose"]


def test_external_initializers_file_holds_every_initializer(tmp_path, compiled):
    c = compiled("silero_vad_op18_ifless", 1)  # its If keeps initializers outside the fused group
    src = tmp_path / "silero_vad_op18_ifless.onnx"
    shutil.copy(fetch_model("silero_vad_op18_ifless"), src)
    sess = InferenceSession(
        str(src),
        options(
            ep__context_enable=1,
            ep__context_embed_mode=1,
            ep__context_model_external_initializers_file_name="weights.data",
        ),
        providers=[NUMBA],
    )
    model = onnx.load(sess.context_model_path, load_external_data=False)
    assert model.graph.initializer
    assert all(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    assert (tmp_path / "weights.data").is_file()
    again = InferenceSession(sess.context_model_path, providers=[NUMBA])
    np.testing.assert_array_equal(again.run(None, c.feed)[0], c.expected[0])


def test_ctx_model_does_not_depend_on_source_external_data(tmp_path, compiled):
    c = compiled("magika", 1)
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    model = onnx.load(str(fetch_model("magika")))
    onnx.save(model, str(src_dir / "magika.onnx"), save_as_external_data=True, location="magika.data", size_threshold=0)
    out = tmp_path / "out" / "magika_ctx.onnx"
    InferenceSession(
        str(src_dir / "magika.onnx"), options(ep__context_enable=1, ep__context_file_path=out), providers=[NUMBA]
    )
    shutil.rmtree(src_dir)
    sess = InferenceSession(str(out), providers=[NUMBA])
    np.testing.assert_array_equal(sess.run(None, c.feed)[0], c.expected[0])


def test_context_file_path_that_is_a_folder_is_refused(tmp_path):
    src = _magika(tmp_path / "m")
    with pytest.raises(InvalidArgument, match="is a folder"):
        InferenceSession(str(src), options(ep__context_enable=1, ep__context_file_path=tmp_path), providers=[NUMBA])


def test_fused_groups_inside_if_branches_do_not_break_context_generation(tmp_path):
    """The context model replaces the main graph's groups with EPContext nodes; groups the EP fused
    inside If branches stay ONNX nodes there and compile again on load (the core writes EPContext
    nodes for the main graph only, so the EP offers none for a subgraph's groups)."""
    src = tmp_path / "m.onnx"
    onnx.save(if_with_fusable_branches(), src)
    ctx = tmp_path / "m_ctx.onnx"
    feeds = [{"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "cond": np.array(c)} for c in (True, False)]
    sess = InferenceSession(str(src), options(ep__context_enable=1, ep__context_file_path=ctx), providers=[NUMBA])
    want = [sess.run(None, f)[0] for f in feeds]
    model = onnx.load(ctx)
    assert [n.op_type for n in model.graph.node] == ["EPContext", "If"]
    assert [n.op_type for n in model.graph.node[1].attribute[0].g.node] != ["EPContext"]
    again = InferenceSession(str(ctx), options(), providers=[NUMBA])
    for f, w in zip(feeds, want):
        np.testing.assert_allclose(again.run(None, f)[0], w, rtol=1e-6)
    # so session.disable_compile=1 refuses it, saying why compiling it once more would not help
    with pytest.raises(ModelRequiresCompilation, match="inside If/Loop/Scan bodies get no EPContext node"):
        InferenceSession(str(ctx), options(session__disable_compile=1), providers=[NUMBA])


def test_graph_inputs_and_outputs_without_shapes_compile_to_a_context_model(tmp_path):
    """Inputs and outputs declared with a dtype and no shape field (as onnxruntime accepts, and
    ep-core loads): the context model is checked as leniently as the source was, not refused by
    onnx's checker after compiling."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    sess = InferenceSession(str(src), options(ep__context_enable=1), providers=[NUMBA])
    want = sess.run(None, {"x": x})[0]
    ctx = InferenceSession(sess.context_model_path, providers=[NUMBA])
    assert [n.op_type for n in onnx.load(sess.context_model_path).graph.node] == ["EPContext"]
    np.testing.assert_array_equal(ctx.run(None, {"x": x})[0], want)

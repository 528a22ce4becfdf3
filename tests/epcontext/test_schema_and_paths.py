"""The EPContext schema and the path rules of the loading helpers."""

from __future__ import annotations

import onnx
import pytest
from epcontext_support import options
from onnx import TensorProto, helper

from ep_core.sdk.epcontext.payload import ContextNode, context_base_dir, read_context_payload, resolve_context_file
from ep_core.sdk.epcontext.schema import attribute_defaults, register_ep_context_schema
from ep_core.sdk.errors import InvalidGraph


def test_schema_registers_once_with_the_designs_defaults():
    register_ep_context_schema()
    register_ep_context_schema()
    schema = onnx.defs.get_schema("EPContext", 1, "com.microsoft")
    assert set(schema.attributes) == {
        "main_context",
        "ep_cache_context",
        "embed_mode",
        "ep_sdk_version",
        "onnx_model_filename",
        "hardware_architecture",
        "partition_name",
        "source",
        "notes",
        "max_size",
    }
    assert attribute_defaults() == {"main_context": 1, "embed_mode": 1, "max_size": 0}
    assert schema.attributes["main_context"].default_value.i == 1


def test_a_model_with_epcontext_nodes_passes_the_checker():
    register_ep_context_schema()
    node = helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", ep_cache_context=b"\x00\xff", source="X")
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.checker.check_model(m)
    cn = ContextNode.from_node(node)
    assert (cn.main_context, cn.embed_mode, cn.max_size, cn.ep_cache_context) == (1, 1, 0, b"\x00\xff")


def _node(path: str) -> ContextNode:
    return ContextNode("n", ("x",), ("y",), embed_mode=0, ep_cache_context=path.encode())


def test_paths_resolve_inside_the_model_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(b"abc")
    assert resolve_context_file(_node("sub/a.bin"), tmp_path) == (tmp_path / "sub" / "a.bin").resolve()
    assert read_context_payload(_node("sub/a.bin"), tmp_path) == b"abc"
    with pytest.raises(InvalidGraph, match="leaves the model's folder"):
        resolve_context_file(_node("../a.bin"), tmp_path / "sub")
    with pytest.raises(InvalidGraph, match="absolute"):
        resolve_context_file(_node(str(tmp_path / "sub" / "a.bin")), tmp_path)


def test_a_path_with_control_characters_is_refused_typed(tmp_path):
    """An embedded payload whose embed_mode was flipped to 0 reads as a path with NUL bytes."""
    for path in ("a\x00b.bin", "payload\n.bin"):
        with pytest.raises(InvalidGraph, match="control characters"):
            resolve_context_file(_node(path), tmp_path)


def test_a_symlink_leaving_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "link.bin").symlink_to(outside)
    with pytest.raises(InvalidGraph, match="leaves the model's folder"):
        resolve_context_file(_node("link.bin"), tmp_path / "m")


def test_base_dir_is_the_model_folder_or_the_context_file_path_folder(tmp_path):
    assert context_base_dir(tmp_path / "a" / "m.onnx", None) == (tmp_path / "a").resolve()
    assert (
        context_base_dir(None, options(ep__context_file_path=tmp_path / "b" / "m.onnx")) == (tmp_path / "b").resolve()
    )
    assert context_base_dir(None, options()) is None
    with pytest.raises(InvalidGraph, match="ep.context_file_path"):
        resolve_context_file(_node("a.bin"), None)

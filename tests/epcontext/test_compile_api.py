"""The compile API and ``ep-core compile``."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from epcontext_support import NUMBA, ctx_nodes
from test_generate import unsupported_only

from ep_core import CompileApiFlags, InferenceSession, ModelCompiler
from ep_core.sdk.errors import Fail, InvalidArgument
from ep_core.tools.zoo import fetch_model


def test_compile_to_file_and_run(tmp_path, compiled):
    c = compiled("magika", 0)
    out = tmp_path / "x" / "compiled.onnx"
    src = tmp_path / "magika.onnx"
    shutil.copy(fetch_model("magika"), src)
    mc = ModelCompiler(None, str(src), providers=[NUMBA])
    assert mc.compile_to_file(out) == str(out)
    assert mc.nodes_compiled > 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["compiled.onnx", "magika_NumbaCpuExecutionProvider.bin"]
    np.testing.assert_array_equal(InferenceSession(str(out), providers=[NUMBA]).run(None, c.feed)[0], c.expected[0])


def test_compile_to_bytes_needs_embedding(compiled):
    c = compiled("magika", 1)
    with pytest.raises(InvalidArgument, match="embed_compiled_data_into_model=True"):
        ModelCompiler(None, str(fetch_model("magika")), providers=[NUMBA]).compile_to_bytes()
    data = ModelCompiler(
        None, fetch_model("magika").read_bytes(), embed_compiled_data_into_model=True, providers=[NUMBA]
    ).compile_to_bytes()
    assert ctx_nodes(onnx.load_from_string(data))
    np.testing.assert_array_equal(InferenceSession(data, providers=[NUMBA]).run(None, c.feed)[0], c.expected[0])


def test_error_if_output_file_exists(tmp_path, compiled):
    compiled("magika", 1)
    out = tmp_path / "m_ctx.onnx"
    out.write_bytes(b"x")
    mc = ModelCompiler(None, str(fetch_model("magika")), embed_compiled_data_into_model=True, providers=[NUMBA])
    with pytest.raises(InvalidArgument, match="already exists"):
        mc.compile_to_file(out)
    assert out.read_bytes() == b"x"
    ModelCompiler(
        None,
        str(fetch_model("magika")),
        embed_compiled_data_into_model=True,
        providers=[NUMBA],
        flags=CompileApiFlags.NONE,
    ).compile_to_file(out)
    assert ctx_nodes(onnx.load(str(out)))


def test_error_if_no_nodes_compiled(tmp_path):
    src = unsupported_only(tmp_path / "t.onnx")
    out = tmp_path / "t_out.onnx"
    with pytest.raises(Fail, match="nothing was compiled"):
        ModelCompiler(None, str(src), providers=[NUMBA]).compile_to_file(out)
    assert not out.exists()
    with pytest.warns(RuntimeWarning, match="nothing was compiled"):
        ModelCompiler(None, str(src), providers=[NUMBA], flags=CompileApiFlags.NONE).compile_to_file(out)
    assert out.exists()
    with pytest.raises(Fail, match="nothing was compiled"):
        ModelCompiler(None, str(src), embed_compiled_data_into_model=True, providers=[NUMBA]).compile_to_bytes()


def test_cli_compile(tmp_path, compiled, capsys):
    from ep_core.tools.cli import main

    c = compiled("magika", 1)
    src = tmp_path / "magika.onnx"
    shutil.copy(fetch_model("magika"), src)
    assert main(["compile", str(src), "--providers", NUMBA, "--embed"]) == 0
    out = tmp_path / "magika_ctx.onnx"
    assert out.is_file() and '"epcontext_nodes"' in capsys.readouterr().out
    np.testing.assert_array_equal(InferenceSession(str(out), providers=[NUMBA]).run(None, c.feed)[0], c.expected[0])
    assert main(["compile", str(src), "--providers", NUMBA, "--embed"]) == 2  # exists: refused (a usage error)
    assert "already exists" in capsys.readouterr().err

"""Weight sharing: N models, one binary named after the first, N+1 files; the first inference
session loads the binary and parks the other graphs, later sessions take theirs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from epcontext_support import NUMBA, feed_for, options
from onnx import TensorProto, helper

from ep_core import InferenceSession
from ep_core.sdk.epcontext.sharing import reset_workspaces, workspace
from ep_core.tools.zoo import fetch_model


def _variant(src: Path, dest: Path) -> None:
    """magika with one more node at its end: same weights, a different graph."""
    model = onnx.load(str(src))
    out = model.graph.output[0].name
    for n in model.graph.node:
        for i, o in enumerate(n.output):
            if o == out:
                n.output[i] = out + "_raw"
    model.graph.node.append(helper.make_node("Mul", [out + "_raw", "two"], [out], name="scale_by_two"))
    model.graph.initializer.append(helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    onnx.save(model, str(dest))


@pytest.fixture
def models(tmp_path, compiled):
    compiled("magika", 0)  # kernels compiled once in this process
    reset_workspaces()
    src = tmp_path / "src"
    src.mkdir()
    m1, m2 = src / "model1.onnx", src / "model2.onnx"
    shutil.copy(fetch_model("magika"), m1)
    _variant(m1, m2)
    yield m1, m2
    reset_workspaces()


def _weights_bytes(path: Path) -> int:
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(path)).graph.initializer)


def test_ctx_gen_writes_n_plus_one_files_and_both_models_run(models, tmp_path):
    from ep_core.tools.cli import main

    m1, m2 = models
    out = tmp_path / "out"
    assert main(["ctx-gen", "-e", NUMBA, "-i", "parallel|0", "--output-dir", str(out), f"{m1},{m2}"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == [f"model1_{NUMBA}.bin", "model1_ctx.onnx", "model2_ctx.onnx"]
    assert (out / f"model1_{NUMBA}.bin").stat().st_size < 1.1 * _weights_bytes(m1)
    assert workspace(NUMBA).empty

    feed = feed_for("magika")
    want1 = InferenceSession(str(m1), providers=[NUMBA]).run(None, feed)[0]
    share = options(ep__share_ep_contexts=1)
    s1 = InferenceSession(str(out / "model1_ctx.onnx"), share, providers=[NUMBA])
    # the first session parked model2's graphs: the second one never reads the binary
    (out / f"model1_{NUMBA}.bin").rename(out / "moved.bin")
    s2 = InferenceSession(str(out / "model2_ctx.onnx"), share, providers=[NUMBA])
    np.testing.assert_array_equal(s1.run(None, feed)[0], want1)
    np.testing.assert_allclose(s2.run(None, feed)[0], want1 * 2, rtol=1e-6)


def test_sessions_share_through_session_options(models, tmp_path):
    m1, m2 = models
    out = tmp_path / "o"
    so = options(ep__context_enable=1, ep__share_ep_contexts=1, ep__context_file_path=out / "model1_ctx.onnx")
    InferenceSession(str(m1), so, providers=[NUMBA])
    assert not (out / f"model1_{NUMBA}.bin").exists()  # written by the last session only
    so2 = options(
        ep__context_enable=1,
        ep__share_ep_contexts=1,
        ep__stop_share_ep_contexts=1,
        ep__context_file_path=out / "model2_ctx.onnx",
    )
    InferenceSession(str(m2), so2, providers=[NUMBA])
    assert sorted(p.name for p in out.iterdir()) == [f"model1_{NUMBA}.bin", "model1_ctx.onnx", "model2_ctx.onnx"]
    # without sharing at inference, each model loads the binary itself
    feed = feed_for("magika")
    a = InferenceSession(str(out / "model1_ctx.onnx"), providers=[NUMBA]).run(None, feed)[0]
    b = InferenceSession(str(out / "model2_ctx.onnx"), providers=[NUMBA]).run(None, feed)[0]
    np.testing.assert_allclose(b, a * 2, rtol=1e-6)


def test_sharing_needs_embed_mode_0(models, tmp_path):
    from ep_core.sdk.errors import ConfigError

    m1, _ = models
    so = options(
        ep__context_enable=1,
        ep__share_ep_contexts=1,
        ep__context_embed_mode=1,
        ep__context_file_path=tmp_path / "x_ctx.onnx",
    )
    with pytest.raises(ConfigError, match="ep.context_embed_mode=0"):
        InferenceSession(str(m1), so, providers=[NUMBA])
    assert not (tmp_path / "x_ctx.onnx").exists()

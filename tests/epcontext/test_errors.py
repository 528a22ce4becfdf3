"""Every bad context gives its own precise error, naming the node and the file."""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from epcontext_support import NUMBA, ctx_nodes, options, set_attr

from ep_core import InferenceSession
from ep_core.sdk.errors import InvalidGraph, NotImplementedByAnyEp

BIN = "magika_NumbaCpuExecutionProvider.bin"


@pytest.fixture
def ctx0(compiled, tmp_path):
    return compiled("magika", 0).copy_to(tmp_path / "m")


def _load(path: Path, **entries):
    return InferenceSession(str(path), options(**entries) if entries else None, providers=[NUMBA])


def _first_node(path: Path) -> str:
    return ctx_nodes(onnx.load(str(path)))[0].name


def test_missing_binary(ctx0):
    (ctx0.folder / BIN).unlink()
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert _first_node(ctx0.ctx) in e.value.message and BIN in e.value.message and "does not exist" in e.value.message


def test_truncated_binary(ctx0):
    p = ctx0.folder / BIN
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert _first_node(ctx0.ctx) in e.value.message and BIN in e.value.message
    assert "corrupt" in e.value.message  # the model's sha256 of the binary catches it first


def test_corrupt_binary(ctx0):
    p = ctx0.folder / BIN
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert _first_node(ctx0.ctx) in e.value.message and BIN in e.value.message and "sha256" in e.value.message


def _rewrite_blob(model_path: Path, blob_path: Path, edit) -> None:
    """Edit the blob's header, then record the new blob's sha256 in the model (as a forger would)."""
    data = blob_path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8 : 8 + n])
    meta = json.loads(head["__metadata__"]["ep_numba_cpu"])
    edit(meta, head)
    head["__metadata__"]["ep_numba_cpu"] = json.dumps(meta)
    raw = json.dumps(head).encode()
    raw += b" " * ((-len(raw)) % 8)
    new = struct.pack("<Q", len(raw)) + raw + data[8 + n :]
    blob_path.write_bytes(new)
    model = onnx.load(str(model_path))
    node = ctx_nodes(model)[0]
    notes = json.loads(onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "notes")))
    notes["blob_sha256"] = hashlib.sha256(new).hexdigest()
    set_attr(node, "notes", json.dumps(notes))
    onnx.save(model, str(model_path))


def test_version_mismatch(ctx0):
    def edit(meta, head):
        meta["numba"] = "0.1.0"

    _rewrite_blob(ctx0.ctx, ctx0.folder / BIN, edit)
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    msg = e.value.message
    assert "numba 0.1.0" in msg and _first_node(ctx0.ctx) in msg and BIN in msg


def test_edited_context_is_never_unpickled_and_rebuilt_from_its_spec(ctx0, monkeypatch):
    """A forged blob (a kernel's recorded sha256 replaced, the blob's sha256 in the model rewritten to
    match) breaks the signature of the nodes whose graph uses that kernel: their payloads never
    reach pickle, their kernels are compiled from the regenerated source, with a warning that says
    why; under ep.context_require_signature=1 the session is refused."""
    import ep_numba_cpu.codegen as codegen

    forged = []

    def edit(meta, head):
        key = sorted(meta["kernels"])[0]
        meta["kernels"][key]["sha256"] = "0" * 64
        forged.append(key)

    _rewrite_blob(ctx0.ctx, ctx0.folder / BIN, edit)
    rebuilt = []
    orig = codegen.rebuild_kernel

    def recording(key, *a, **k):
        rebuilt.append(key)
        return orig(key, *a, **k)

    monkeypatch.setattr(codegen, "rebuild_kernel", recording)
    with pytest.warns(RuntimeWarning, match="modified after signing.*ep-core trust-key") as w:
        sess = _load(ctx0.ctx)
    assert BIN in str(w[0].message)
    assert forged[0] not in rebuilt
    for a, b in zip(sess.run(None, ctx0.feed), ctx0.expected, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx, ep__context_require_signature=1)
    assert "ep.context_require_signature=1" in e.value.message and BIN in e.value.message
    assert "modified after signing" in e.value.message


def test_a_context_signed_elsewhere_loads_fast_once_its_key_is_trusted(ctx0, tmp_path, monkeypatch, count_compiles):
    """Signed with another user's key: warned (naming the key and ``ep-core trust-key``), compiled
    from the spec; after trusting that key it loads its machine code without compiling."""
    from ep_core.sdk.epcontext import signing

    mine = signing.key_dir() / signing.OWN_KEY_FILE
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(tmp_path / "elsewhere"))
    with pytest.warns(RuntimeWarning, match="which this user does not trust.*ep-core trust-key"):
        sess = _load(ctx0.ctx)
    np.testing.assert_array_equal(sess.run(None, ctx0.feed)[0], ctx0.expected[0])
    with pytest.raises(InvalidGraph, match="ep.context_require_signature=1"):
        _load(ctx0.ctx, ep__context_require_signature=1)
    signing.trust_key(mine)
    counter = count_compiles()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = _load(ctx0.ctx, ep__context_require_signature=1)
    assert counter.numba == 0
    np.testing.assert_array_equal(sess.run(None, ctx0.feed)[0], ctx0.expected[0])


@pytest.mark.parametrize(
    "fmt,why", [("ep_numba_cpu/2", "stored kernel source"), ("ep_numba_cpu/3", "no delegated node steps")]
)
def test_older_context_format_is_refused_with_the_way_out(ctx0, fmt, why):
    def edit(meta, head):
        meta["format"] = fmt

    _rewrite_blob(ctx0.ctx, ctx0.folder / BIN, edit)
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    msg = e.value.message
    assert f"'{fmt}'" in msg and why in msg and "regenerate the context model" in msg
    assert _first_node(ctx0.ctx) in msg and BIN in msg


def test_swapped_partition_names_are_an_invalid_graph(compiled, tmp_path):
    ctx0 = compiled("silero_vad_16k_op15", 0).copy_to(tmp_path / "s")  # two fused groups around an If
    model = onnx.load(str(ctx0.ctx))
    a, b = ctx_nodes(model)[:2]
    pa, pb = (
        onnx.helper.get_attribute_value(next(x for x in n.attribute if x.name == "partition_name")) for n in (a, b)
    )
    set_attr(a, "partition_name", pb)
    set_attr(b, "partition_name", pa)
    onnx.save(model, str(ctx0.ctx))
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert (
        "names another node's graph" in e.value.message
        and "silero_vad_16k_op15_NumbaCpuExecutionProvider.bin" in e.value.message
    )
    assert a.name in e.value.message or b.name in e.value.message


@pytest.mark.parametrize(
    "path,why",
    [
        ("../" + BIN, "leaves the model's folder"),
        ("/etc/passwd", "absolute"),
        ("sub/../../" + BIN, "leaves the model's folder"),
    ],
)
def test_path_outside_the_model_folder_is_refused(ctx0, path, why):
    (ctx0.folder.parent / BIN).write_bytes((ctx0.folder / BIN).read_bytes())
    model = onnx.load(str(ctx0.ctx))
    set_attr(ctx_nodes(model)[0], "ep_cache_context", path.encode())
    onnx.save(model, str(ctx0.ctx))
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert why in e.value.message and path in e.value.message and _first_node(ctx0.ctx) in e.value.message


def test_binary_in_a_subfolder_is_found(ctx0):
    (ctx0.folder / "bins").mkdir()
    (ctx0.folder / BIN).rename(ctx0.folder / "bins" / BIN)
    model = onnx.load(str(ctx0.ctx))
    set_attr(ctx_nodes(model)[0], "ep_cache_context", f"bins/{BIN}".encode())
    onnx.save(model, str(ctx0.ctx))
    sess = _load(ctx0.ctx)
    assert (sess.run(None, ctx0.feed)[0] == ctx0.expected[0]).all()


def test_foreign_source_is_not_claimed(ctx0):
    model = onnx.load(str(ctx0.ctx))
    for n in ctx_nodes(model):
        set_attr(n, "source", "QnnExecutionProvider")
    onnx.save(model, str(ctx0.ctx))
    with pytest.raises(NotImplementedByAnyEp) as e:
        _load(ctx0.ctx)
    assert "EPContext" in e.value.message and _first_node(ctx0.ctx) in e.value.message


def test_alias_source_is_claimed(ctx0):
    """Claimed; the signature covers ``source`` as written, so the edit is reported."""
    model = onnx.load(str(ctx0.ctx))
    for n in ctx_nodes(model):
        set_attr(n, "source", "NumbaCpu")
    onnx.save(model, str(ctx0.ctx))
    with pytest.warns(RuntimeWarning, match="modified after signing"):
        sess = _load(ctx0.ctx)
    assert (sess.run(None, ctx0.feed)[0] == ctx0.expected[0]).all()


def test_main_context_0_without_a_primary(ctx0):
    model = onnx.load(str(ctx0.ctx))
    first = ctx_nodes(model)[0]
    set_attr(first, "main_context", 0)
    onnx.save(model, str(ctx0.ctx))
    with pytest.raises(InvalidGraph) as e:
        _load(ctx0.ctx)
    assert "no main_context=1 node" in e.value.message and first.name in e.value.message


def test_bytes_model_needs_context_file_path_to_find_its_binary(ctx0):
    data = ctx0.ctx.read_bytes()
    with pytest.raises(InvalidGraph) as e:
        InferenceSession(data, providers=[NUMBA])
    assert "ep.context_file_path" in e.value.message and BIN in e.value.message
    sess = InferenceSession(data, options(ep__context_file_path=str(ctx0.ctx)), providers=[NUMBA])
    assert (sess.run(None, ctx0.feed)[0] == ctx0.expected[0]).all()


def test_corrupt_embedded_payload(compiled, tmp_path):
    c = compiled("magika", 1).copy_to(tmp_path / "e")
    model = onnx.load(str(c.ctx))
    node = ctx_nodes(model)[0]
    blob = bytearray(onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "ep_cache_context")))
    blob[-10] ^= 0xFF
    set_attr(node, "ep_cache_context", bytes(blob))
    onnx.save(model, str(c.ctx))
    with pytest.raises(InvalidGraph) as e:
        _load(c.ctx)
    assert node.name in e.value.message and "embedded" in e.value.message

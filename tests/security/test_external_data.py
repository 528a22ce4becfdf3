"""External data is checked against its file before it is read, and a model past protobuf's
2 GiB loads: its external data stays in its file (onnx checks and infers the model without it)
and ``GraphView`` reads each tensor once, into one array.

The 2.004 GiB model is behind ``EP_CORE_SECURITY_HEAVY=1`` (``make security``): it writes a 2 GiB
file. ``make test`` runs the same code path on a small model with the inline limit lowered."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ep_core
from ep_core.host import model_files
from ep_core.runtime import load
from ep_core.sdk.errors import InvalidGraph, NoSuchFile

HEAVY = os.environ.get("EP_CORE_SECURITY_HEAVY") == "1"


def _gather_model(folder: Path, n: int, chunk: int = 1 << 24) -> Path:
    """y = w[idx] + 0 * reshape(s): ``w`` holds n float32 values 0..n-1 (mod 2^24, exact in
    float32) in ``w.bin``, written in chunks so that the test never holds it; ``s`` (a Reshape
    shape) is external too, so inference goes without the values of external tensors."""
    with open(folder / "w.bin", "wb") as fh:
        for start in range(0, n, chunk):
            fh.write((np.arange(start, min(n, start + chunk), dtype=np.int64) % (1 << 24)).astype(np.float32).tobytes())
        fh.write(np.array([-1], np.int64).tobytes())
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n])
    s = TensorProto(name="s", data_type=TensorProto.INT64, dims=[1])
    for t, offset, length in ((w, 0, 4 * n), (s, 4 * n, 8)):
        for key, value in (("location", "w.bin"), ("offset", offset), ("length", length)):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
        t.data_location = TensorProto.EXTERNAL
    nodes = [
        helper.make_node("Gather", ["w", "idx"], ["g"], name="gather"),
        helper.make_node("Reshape", ["g", "s"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "external",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w, s],
    )
    path = folder / "model.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()
    )
    return path


def _expect(n: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.array([0, n // 2, n - 1], np.int64)
    return idx, (idx % (1 << 24)).astype(np.float32)


def test_data_past_the_inline_limit_stays_in_its_file_and_runs(tmp_path, monkeypatch):
    n = 4096
    path = _gather_model(tmp_path, n)
    monkeypatch.setattr(model_files, "INLINE_LIMIT", 1024)
    proto, _ = load.load_model(str(path), None)
    model = load.check_and_infer(proto)
    (w,) = [t for t in model.graph.initializer if t.name == "w"]
    location = {e.key: e.value for e in w.external_data}["location"]
    assert w.data_location == TensorProto.EXTERNAL and location == str(tmp_path / "w.bin")
    assert not w.HasField("raw_data") and [v.name for v in model.graph.input] == ["idx"]
    sess = ep_core.InferenceSession(str(path), providers=["CpuReferenceExecutionProvider"])
    idx, want = _expect(n)
    np.testing.assert_array_equal(sess.run(None, {"idx": idx})[0], want)


def test_the_optimized_model_of_data_left_in_its_file_names_no_absolute_path(tmp_path, monkeypatch):
    """optimized_model_filepath wrote the absolute location the loader had checked: a model no
    loader accepts (onnx, onnxruntime and ep-core refuse absolute external paths), naming where the
    user keeps their files (red-team 12). The data left in the source's file is written again."""
    import onnxruntime as ort

    n = 4096
    path = _gather_model(tmp_path, n)
    monkeypatch.setattr(model_files, "INLINE_LIMIT", 1024)
    so = ep_core.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "out" / "optimized.onnx")
    (tmp_path / "out").mkdir()
    ep_core.InferenceSession(str(path), so, providers=["CpuReferenceExecutionProvider"])
    written = (tmp_path / "out" / "optimized.onnx").read_bytes()
    assert str(tmp_path).encode() not in written
    idx, want = _expect(n)
    got = ort.InferenceSession(str(tmp_path / "out" / "optimized.onnx")).run(None, {"idx": idx})[0]
    np.testing.assert_array_equal(got, want)


def test_data_under_the_limit_is_read_into_the_model(tmp_path):
    path = _gather_model(tmp_path, 4096)
    model = load.check_and_infer(load.load_model(str(path), None)[0])
    assert all(t.data_location == TensorProto.DEFAULT and t.HasField("raw_data") for t in model.graph.initializer)


@pytest.mark.parametrize(
    ("entries", "error", "message"),
    [
        ({"location": "../w.bin"}, NoSuchFile, "cannot be read"),
        ({"location": "w.bin", "offset": "16000"}, InvalidGraph, "do not fit"),
        ({"location": "w.bin", "length": "8"}, InvalidGraph, "need 16384 bytes"),
        ({"location": "w.bin", "offset": "x"}, InvalidGraph, "invalid literal"),
    ],
)
def test_external_data_that_does_not_fit_its_file_is_refused(tmp_path, entries, error, message):
    path = _gather_model(tmp_path, 4096)
    model = onnx.load(str(path), load_external_data=False)
    w = model.graph.initializer[0]
    del w.external_data[:]
    for k, v in entries.items():
        e = w.external_data.add()
        e.key, e.value = k, v
    path.write_bytes(model.SerializeToString())
    with pytest.raises(error, match=message) as info:
        ep_core.InferenceSession(str(path), providers=["CpuReferenceExecutionProvider"])
    assert "'w'" in info.value.message


_CHILD = """
import json, resource, sys, time
import numpy as np
import ep_core
t0 = time.perf_counter()
sess = ep_core.InferenceSession(sys.argv[1], providers=["CpuReferenceExecutionProvider"])
n = int(sys.argv[2])
idx = np.array([0, n // 2, n - 1], np.int64)
y = sess.run(None, {"idx": idx})[0]
print(json.dumps({"y": y.tolist(), "seconds": time.perf_counter() - t0}))
"""


@pytest.mark.skipif(not HEAVY, reason="writes a 2.004 GiB file: run with EP_CORE_SECURITY_HEAVY=1 (make security)")
def test_a_2_004_gib_external_data_model_loads_and_runs_holding_its_data_once(tmp_path):
    n = int(2.004 * 2**30) // 4
    path = _gather_model(tmp_path, n)
    assert (tmp_path / "w.bin").stat().st_size > 2.004 * 2**30
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(n)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    _, want = _expect(n)
    assert out["y"] == want.tolist()
    print(f"2.004 GiB external data: loaded and ran in {out['seconds']:.1f} s, peak RSS {peak / 2**30:.2f} GiB")
    if before * 1024 < peak:  # this child set the peak: its data is held once, not twice
        assert peak < 1.5 * 2.004 * 2**30


def _sparse_constant_model(folder: Path, location: str) -> Path:
    """A Constant whose sparse_value keeps its 4 values in external data at ``location``."""
    values = TensorProto(name="vals", data_type=TensorProto.UINT8, dims=[4])
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = values.external_data.add()
        entry.key, entry.value = key, value
    values.data_location = TensorProto.EXTERNAL
    sparse = helper.make_sparse_tensor(values, helper.make_tensor("idx", TensorProto.INT64, [4], [0, 2, 4, 6]), [8])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], sparse_value=sparse)],
        "sparse",
        [],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [8])],
    )
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(path))
    return path


def test_sparse_external_data_is_read_from_the_model_folder_only(tmp_path, monkeypatch):
    """A sparse tensor's external values were resolved against the working folder: a downloaded
    model could return a file of the user's current directory. Now as every tensor: the model's
    folder only (onnxruntime also looks there, and refuses the file missing)."""
    model_dir, cwd = tmp_path / "model", tmp_path / "cwd"
    model_dir.mkdir()
    cwd.mkdir()
    (cwd / "private.bin").write_bytes(b"\x07\x08\x09\x0a")
    monkeypatch.chdir(cwd)
    path = _sparse_constant_model(model_dir, "private.bin")
    with pytest.raises(NoSuchFile, match="'vals' \\('private.bin' in folder"):
        ep_core.InferenceSession(str(path), providers=["CpuReferenceExecutionProvider"])
    (model_dir / "private.bin").write_bytes(b"\x01\x02\x03\x04")  # beside the model: read, checked
    got = ep_core.InferenceSession(str(path), providers=["CpuReferenceExecutionProvider"]).run(None, {})[0]
    np.testing.assert_array_equal(got, np.array([1, 0, 2, 0, 3, 0, 4, 0], np.uint8))


def _linked_model(folder: Path, model_link: str, data_link: str) -> Path:
    """A model at ``folder/model.onnx`` whose data file ``model.onnx_data`` is a symbolic link to
    ``data_link``; the model file itself a link to ``model_link`` when given (relative to folder)."""
    from onnx import numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    real = folder / ("real.onnx" if not model_link else model_link)
    real.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(real), save_as_external_data=True, location="model.onnx_data", size_threshold=0)
    data = real.parent / "model.onnx_data"
    target = (folder / data_link).resolve() if not os.path.isabs(data_link) else Path(data_link)
    if data.resolve() != target and not os.path.isabs(data_link):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(data, target)
    if model_link:
        os.symlink(os.path.relpath(real, folder), folder / "model.onnx")
    else:
        os.replace(real, folder / "model.onnx")
    if not (folder / "model.onnx_data").is_symlink():
        if (folder / "model.onnx_data").exists():
            os.remove(folder / "model.onnx_data")
        os.symlink(data_link, folder / "model.onnx_data")
    return folder / "model.onnx"


def test_a_hugging_face_cache_layout_loads(tmp_path: Path) -> None:
    """snapshots/<rev>/model.onnx and model.onnx_data are links into blobs/: onnxruntime resolves the
    data file against the model file's real folder and runs it; onnx's resolver refuses every link."""
    snap = tmp_path / "models--org--m" / "snapshots" / "rev"
    path = _linked_model(snap, "../../blobs/model", "../../blobs/model.onnx_data")
    y = ep_core.InferenceSession(str(path)).run(None, {"x": np.ones(4, np.float32)})[0]
    np.testing.assert_array_equal(y, [1, 2, 3, 4])


@pytest.mark.parametrize("target", ["/etc/hostname", "../elsewhere/model.onnx_data"])
def test_a_data_link_out_of_the_model_s_folders_is_refused(tmp_path: Path, target: str) -> None:
    """As onnxruntime ('External data path escapes model directory'): a link out of both the model's
    folder and the model file's real folder is not followed."""
    path = _linked_model(tmp_path / "m", "", target)
    with pytest.raises(InvalidGraph, match="external data of tensor 'w'"):
        ep_core.InferenceSession(str(path))

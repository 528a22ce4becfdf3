"""Inputs of `ep-core run`: made up from the model (dims, id ranges, conventions) and read from
files (.npy, .npz, images, .wav audio, raw bytes), batched by file."""

from __future__ import annotations

import struct
import wave
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.tools.cli import _feeds


def _graph(model: onnx.ModelProto) -> GraphView:
    return GraphView(model.graph, opset_map(model))


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return str(path)


def _ids_model() -> onnx.ModelProto:
    """ids -> Cast -> Gather(table[11, 4]); onehot_ids -> OneHot(depth 5); flag -> Where."""
    table = numpy_helper.from_array(np.zeros((11, 4), np.float32), "table")
    depth = numpy_helper.from_array(np.array(5, np.int64), "depth")
    values = numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "values")
    return make_model(
        [
            helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
            helper.make_node("Gather", ["table", "ids64"], ["emb"], name="embed"),
            helper.make_node("OneHot", ["hot", "depth", "values"], ["onehot"], name="onehot"),
            helper.make_node("Identity", ["attention_mask"], ["mask_out"]),
        ],
        [
            ("ids", TensorProto.INT32, ["batch", "seq"]),
            ("hot", TensorProto.INT64, ["batch", 3]),
            ("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [("emb", TensorProto.FLOAT, None), ("onehot", TensorProto.FLOAT, None), ("mask_out", TensorProto.INT64, None)],
        [table, depth, values],
    )


def test_integer_inputs_stay_within_what_their_consumer_accepts() -> None:
    specs = _feeds.plan(_graph(_ids_model()), {"seq": 64, "batch": 8})
    assert (specs["ids"].low, specs["ids"].high) == (0, 11) and "Gather 'embed'" in specs["ids"].how
    assert (specs["hot"].low, specs["hot"].high) == (0, 5) and "OneHot 'onehot'" in specs["hot"].how
    assert specs["attention_mask"].fill == 1.0
    feed = _feeds.synthesise(specs, seed=3)
    assert feed["ids"].shape == (8, 64) and feed["ids"].dtype == np.int32
    assert feed["ids"].min() >= 0 and feed["ids"].max() < 11 and len(np.unique(feed["ids"])) > 5
    assert feed["hot"].shape == (8, 3) and feed["hot"].max() < 5
    assert feed["attention_mask"].shape == (8, 64) and (feed["attention_mask"] == 1).all()


def test_symbols_share_one_size_and_roles_choose_defaults() -> None:
    model = make_model(
        [helper.make_node("Identity", [n], [f"{n}_out"]) for n in ("image", "audio", "sr", "state", "other")],
        [
            ("image", TensorProto.FLOAT, ["N", 3, "H", "W"]),
            ("audio", TensorProto.FLOAT, ["N", "samples"]),
            ("sr", TensorProto.INT64, []),
            ("state", TensorProto.FLOAT, [2, "N", 16]),
            ("other", TensorProto.FLOAT, ["N", "k"]),
        ],
        [(f"{n}_out", TensorProto.FLOAT, None) for n in ("image", "audio", "sr", "state", "other")],
    )
    specs = _feeds.plan(_graph(model), {"N": 4})
    assert specs["image"].shape == [4, 3, 224, 224] and specs["image"].how.startswith("an image")
    assert specs["audio"].shape == [4, 512] and "16000 Hz" in specs["audio"].how
    assert specs["sr"].fill == 16000.0 and specs["state"].shape == [2, 4, 16] and specs["state"].fill == 0.0
    assert specs["other"].shape == [4, 1]
    specs = _feeds.plan(_graph(model), _feeds.parse_dims(["image:2=32", "W=48", "other:1=7"], _graph(model)))
    assert specs["image"].shape == [1, 3, 32, 48] and specs["other"].shape == [1, 7]


def test_a_zoo_model_s_constant_inputs_take_its_package_s_values() -> None:
    """swift-f0's fmin/fmax are its pitch range, not random numbers (a random range gave NaN pitch)."""
    from ep_core.tools.zoo import Conventions

    model = make_model(
        [helper.make_node("Add", ["fmin", "fmax"], ["y"])],
        [("fmin", TensorProto.FLOAT, []), ("fmax", TensorProto.FLOAT, [])],
        [("y", TensorProto.FLOAT, None)],
    )
    specs = _feeds.plan(_graph(model), {}, Conventions(values=(("fmin", 46.875), ("fmax", 2093.75))))
    assert (specs["fmin"].fill, specs["fmax"].fill) == (46.875, 2093.75)
    assert specs["fmax"].how == "2093.75, as its package sets it"
    feed = _feeds.synthesise(specs, 0)
    assert feed["fmin"] == np.float32(46.875) and feed["fmin"].dtype == np.float32


def test_dim_arguments_are_checked_against_the_model() -> None:
    graph = _graph(_ids_model())
    assert _feeds.parse_dims(["seq=9", "hot:0=2"], graph) == {"seq": 9, "hot:0": 2}
    for bad, why in [
        ("batch=x", "is not an integer"),
        ("batch=-1", "at least 1"),
        ("N=3", "symbolic dims: batch (ids:0, hot:0, attention_mask:0), seq (ids:1, attention_mask:1)"),
        ("hot:1=4", "fixed at 3"),
    ]:
        with pytest.raises(InvalidArgument, match=why.replace("(", r"\(").replace(")", r"\)")):
            _feeds.parse_dims([bad], graph)


def _png(path: Path, rgb: np.ndarray) -> None:
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


def _identity(name: str, elem: int, shape: list, extra: list | None = None) -> onnx.ModelProto:
    extra = extra or []
    nodes = [helper.make_node("Identity", [name], ["out"])] + [
        helper.make_node("Identity", [n], [f"{n}_out"]) for n, *_ in extra
    ]
    outs = [("out", elem, None)] + [(f"{n}_out", t, None) for n, t, _ in extra]
    return make_model(nodes, [(name, elem, shape), *extra], outs)


def test_images_are_decoded_resized_and_batched(tmp_path: Path, cli: Callable) -> None:
    red = np.zeros((10, 20, 3), np.uint8)
    red[..., 0] = 255
    blue = np.zeros((10, 20, 3), np.uint8)
    blue[..., 2] = 255
    _png(tmp_path / "red.png", red)
    _png(tmp_path / "blue.png", blue)
    model = _save(tmp_path, _identity("x", TensorProto.FLOAT, ["N", 3, 8, 16]))
    out = tmp_path / "out.npz"
    r = cli("run", model, "--input", f"x={tmp_path}/*.png", "--save-outputs", str(out), "--json")
    assert r.code == 0, r.err
    got = np.load(out)["out"]
    assert got.shape == (2, 3, 8, 16)  # blue.png, red.png (sorted), resized to the fixed 8 x 16
    np.testing.assert_allclose(got[0, 2], 1.0) and np.testing.assert_allclose(got[0, :2], 0.0)
    np.testing.assert_allclose(got[1, 0], 1.0) and np.testing.assert_allclose(got[1, 1:], 0.0)
    assert r.json()["rows"] == [str(tmp_path / "blue.png"), str(tmp_path / "red.png")]


def test_a_wav_file_sets_the_sample_rate_and_is_cut_into_frames(tmp_path: Path, cli: Callable) -> None:
    samples = (np.sin(np.arange(1000) / 5) * 16000).astype(np.int16)
    with wave.open(str(tmp_path / "a.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(samples.tobytes())
    model = _save(tmp_path, _identity("audio", TensorProto.FLOAT, ["N", "samples"], [("sr", TensorProto.INT64, [])]))
    whole = tmp_path / "whole"
    r = cli("run", model, "--input", f"audio={tmp_path / 'a.wav'}", "--save-outputs", str(whole), "--json")
    assert r.code == 0, r.err
    np.testing.assert_allclose(np.load(whole / "out.npy")[0], samples / 32768, atol=1e-6)
    assert int(np.load(whole / "sr_out.npy")) == 8000
    framed = tmp_path / "framed.npz"
    r = cli(
        "run", model, "--input", f"audio={tmp_path / 'a.wav'}", "--dim", "samples=300", "--save-outputs", str(framed)
    )
    assert r.code == 0, r.err
    assert np.load(framed)["out"].shape == (3, 300)  # 1000 samples: three whole 300-sample frames


def test_raw_bytes_npy_and_npz(tmp_path: Path, cli: Callable) -> None:
    (tmp_path / "a.bin").write_bytes(b"\x01\x02\x03")
    (tmp_path / "b.bin").write_bytes(bytes(range(40)))
    model = _save(tmp_path, _identity("x", TensorProto.UINT8, ["N", 16]))
    out = tmp_path / "o.npz"
    r = cli(
        "run",
        model,
        "--input",
        f"x={tmp_path / 'a.bin'}",
        "--input",
        f"x={tmp_path / 'b.bin'}",
        "--save-outputs",
        str(out),
    )
    assert r.code == 0, r.err
    got = np.load(out)["out"]
    assert got.tolist() == [[1, 2, 3] + [0] * 13, list(range(16))]  # padded and cut to the fixed 16
    arr = np.arange(32, dtype=np.uint8).reshape(2, 16)
    np.save(tmp_path / "x.npy", arr)
    np.savez(tmp_path / "feed.npz", x=arr[:1])
    for spec in (f"x={tmp_path / 'x.npy'}", f"x={tmp_path / 'feed.npz'}", str(tmp_path / "feed.npz")):
        r = cli("run", model, "--input", spec, "--save-outputs", str(out))
        assert r.code == 0, (spec, r.err)
        assert (
            np.load(out)["out"].tolist()
            == (arr if spec.startswith("x=") and spec.endswith("npy") else arr[:1]).tolist()
        )
    np.savez(tmp_path / "other.npz", y=arr)
    r = cli("run", model, "--input", str(tmp_path / "other.npz"))
    assert r.code == 2 and "arrays ['y'] are no inputs of the model" in r.err

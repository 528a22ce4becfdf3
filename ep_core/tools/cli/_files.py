"""``--input`` files as model inputs: ``.npy`` (a whole tensor), ``.npz`` (by input name, or every
array of it with ``--input FILE.npz``), images (decoded by ep-core itself, through the ONNX
ImageDecoder op), ``.wav`` audio (the standard library's ``wave``) and raw bytes of any other file.

A file that is no tensor (image, audio, bytes) is one sample: several files for one input, or the
frames of one recording, are stacked along its first (batch) axis, and their names label the rows
of the answer. The zoo's conventions apply: magika's byte features, image normalisation, the
sample rate and frame length of an audio model."""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import EpCoreError, InvalidArgument, NoSuchFile

if TYPE_CHECKING:
    import numpy as np

    from ep_core.sdk.graph import GraphView
    from ep_core.tools.cli._feeds import InputSpec
    from ep_core.tools.zoo import Conventions

IMAGE_SUFFIXES = {".png", ".bmp", ".ppm", ".pgm", ".pnm", ".tif", ".tiff", ".jpg", ".jpeg", ".webp"}
AUDIO_SUFFIXES = {".wav", ".wave"}


@dataclass
class Given:
    """What the files gave: arrays by input, how each was read, names of the rows of a batch."""

    feed: dict[str, "np.ndarray"] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)
    rows: list[str] = field(default_factory=list)
    sample_rate: int | None = None


def parse(items: list[str] | None, graph: "GraphView") -> list[tuple[str | None, list[Path]]]:
    """``NAME=FILE`` (FILE may be a glob) or ``FILE.npz``; every file must exist, every NAME be an input."""
    names = [v.name for v in graph.inputs]
    out: list[tuple[str | None, list[Path]]] = []
    for item in items or ():
        name, sep, pattern = item.partition("=")
        if not sep:
            name, pattern = "", item
            if not item.endswith(".npz"):
                raise InvalidArgument(
                    f"--input {item!r} must look like NAME=FILE (or FILE.npz holding arrays named like the inputs)"
                )
        if name and name not in names:
            raise InvalidArgument(f"--input {item!r}: the model has no input {name!r}; its inputs: {', '.join(names)}")
        if any(c in pattern for c in "*?["):
            paths = [Path(p) for p in sorted(glob.glob(pattern, recursive=True)) if Path(p).is_file()]
            if not paths:
                raise NoSuchFile(f"--input {item!r}: no file matches {pattern!r}")
        else:
            paths = [Path(pattern)]
            if not paths[0].is_file():
                raise NoSuchFile(f"--input {item!r}: file {pattern!r} does not exist")
        out.append((name or None, paths))
    return out


def load(
    parsed: list[tuple[str | None, list[Path]]],
    specs: dict[str, "InputSpec"],
    conventions: "Conventions | None",
    zoo_name: str | None,
) -> Given:
    """Read every file into the arrays of its input."""
    import numpy as np

    given = Given()
    samples: dict[str, list[Any]] = {}
    files: dict[str, list[Path]] = {}
    for name, paths in parsed:
        if name is None:
            _npz_all(paths[0], specs, given)
            continue
        spec = specs[name]
        for path in paths:
            suffix = path.suffix.lower()
            if suffix == ".npy":
                arr = _npy(path, name)
                given.feed[name] = np.concatenate([given.feed[name], arr]) if name in given.feed else arr
                given.how[name] = f"from {path}"
                continue
            if suffix == ".npz":
                given.feed[name], given.how[name] = _npz_one(path, name), f"from {path}[{name}]"
                continue
            if suffix in IMAGE_SUFFIXES:
                rows = [(_image(path, spec, conventions), str(path))]
                kind = "image"
            elif suffix in AUDIO_SUFFIXES:
                rows, rate = _audio(path, spec, conventions)
                given.sample_rate = rate
                kind = f"audio at {rate} Hz"
            else:
                rows = [(_raw(path, name, spec, zoo_name), str(path))]
                kind = "bytes"
            samples.setdefault(name, []).extend(rows)
            files.setdefault(name, []).append(path)
            count = len(files[name])
            given.how[name] = f"{kind} of {count} files" if count > 1 else f"{kind} of {path}"
    for name, rows in samples.items():
        given.feed[name] = _stack(name, [r for r, _ in rows], specs[name])
        if len(rows) > 1 or not given.rows:
            given.rows = [label for _, label in rows]
    return given


def _npy(path: Path, name: str) -> "np.ndarray":
    import numpy as np

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"--input {name}={path}: not a readable .npy file: {exc}") from None


def _npz_one(path: Path, name: str) -> "np.ndarray":
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            if name in z.files:
                return z[name]
            if len(z.files) == 1:
                return z[z.files[0]]
            raise InvalidArgument(f"--input {name}={path}: the archive has no array {name!r}; it holds {z.files}")
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"--input {name}={path}: not a readable .npz file: {exc}") from None


def _npz_all(path: Path, specs: dict[str, "InputSpec"], given: Given) -> None:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            unknown = [k for k in z.files if k not in specs]
            if unknown:
                raise InvalidArgument(
                    f"--input {path}: arrays {unknown} are no inputs of the model; its inputs: {', '.join(specs)}"
                )
            for k in z.files:
                given.feed[k], given.how[k] = z[k], f"from {path}[{k}]"
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"--input {path}: not a readable .npz file: {exc}") from None


def _sample_shape(spec: "InputSpec", batched: bool) -> list[int | None]:
    """The per-sample shape: forced sizes (fixed, --dim, conventions), None where the data decides."""
    dims = [s if f else None for s, f in zip(spec.shape, spec.forced)]
    return dims[1:] if batched else dims


def _batched(spec: "InputSpec") -> bool:
    return spec.declared is not None and len(spec.declared) >= 2


def _stack(name: str, rows: list["np.ndarray"], spec: "InputSpec") -> "np.ndarray":
    import numpy as np

    if not _batched(spec):
        if len(rows) > 1:
            raise InvalidArgument(f"--input {name}: input {name!r} has no batch axis, so it takes one file")
        return rows[0]
    shapes = {r.shape for r in rows}
    if len(shapes) > 1:
        longest = max(r.shape[-1] for r in rows)  # bytes of different lengths: pad to the longest
        rows = [np.pad(r, [(0, 0)] * (r.ndim - 1) + [(0, longest - r.shape[-1])]) for r in rows]
        if len({r.shape for r in rows}) > 1:
            raise InvalidArgument(f"--input {name}: the files give samples of shapes {sorted(shapes)}; make them alike")
    return np.ascontiguousarray(np.stack(rows))


def _raw(path: Path, name: str, spec: "InputSpec", zoo_name: str | None) -> "np.ndarray":
    """A file's bytes as one sample: the zoo model's own features, else the bytes as values."""
    import numpy as np

    data = path.read_bytes()
    if zoo_name is not None:
        from ep_core.tools import zoo

        read = zoo.reader(zoo_name, name)
        if read is not None:
            return np.asarray(read(data)).astype(spec.dtype)
    target = _sample_shape(spec, _batched(spec))
    if len(target) != 1:
        raise InvalidArgument(
            f"--input {name}={path}: raw bytes make a 1-d sample, but input {name!r} takes samples of shape "
            f"{spec.declared[1:] if spec.declared and _batched(spec) else spec.declared}; give it as .npy"
        )
    arr = np.frombuffer(data, np.uint8)
    length = target[0]
    if length is not None:
        arr = np.pad(arr[:length], (0, max(0, length - len(arr))))
    if np.issubdtype(spec.dtype, np.floating):
        return (arr / 255.0).astype(spec.dtype)
    return arr.astype(spec.dtype)


def decode_image(path: Path) -> "np.ndarray":
    """H x W x 3 uint8 RGB, decoded by an ep-core session running the ONNX ImageDecoder op."""
    import numpy as np
    from onnx import TensorProto, helper

    from ep_core.runtime.session import InferenceSession

    node = helper.make_node("ImageDecoder", ["encoded"], ["image"], pixel_format="RGB")
    graph = helper.make_graph(
        [node],
        "decode",
        [helper.make_tensor_value_info("encoded", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [None, None, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    try:
        sess = InferenceSession(model.SerializeToString())
        return np.asarray(sess.run(None, {"encoded": np.frombuffer(path.read_bytes(), np.uint8)})[0])
    except EpCoreError as exc:
        raise InvalidArgument(f"cannot decode the image {path}: {exc.message}") from None


def resize(img: "np.ndarray", height: int, width: int) -> "np.ndarray":
    """Bilinear resize of an H x W x C array (pixel centres aligned, as cv2.INTER_LINEAR)."""
    import numpy as np

    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img.astype(np.float32)
    ys = np.clip((np.arange(height) + 0.5) * h / height - 0.5, 0, h - 1)
    xs = np.clip((np.arange(width) + 0.5) * w / width - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    f = img.astype(np.float32)
    top = f[y0][:, x0] * (1 - fx) + f[y0][:, x1] * fx
    bottom = f[y1][:, x0] * (1 - fx) + f[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def _image(path: Path, spec: "InputSpec", conventions: "Conventions | None") -> "np.ndarray":
    """An image as one sample of a 4-d image input: resized to forced sizes, channels as the input
    has them, scaled to [0, 1] (then the model's normalisation) for a float input."""
    import numpy as np

    declared = spec.declared or ()
    if len(declared) != 4:
        raise InvalidArgument(f"--input {spec.name}={path}: an image feeds a 4-d input; {spec.name!r} is {declared}")
    nchw = declared[1] in (1, 3, 4)
    target = _sample_shape(spec, True)
    channels = (target[0] if nchw else target[2]) or 3
    height, width = (target[1], target[2]) if nchw else (target[0], target[1])
    rgb = decode_image(path)
    step = conventions.side_multiple if conventions is not None and conventions.side_multiple else 1
    height = height or max(step, round(rgb.shape[0] / step) * step)
    width = width or max(step, round(rgb.shape[1] / step) * step)
    img = resize(rgb, height, width)
    if channels == 1:
        img = img @ np.array([0.299, 0.587, 0.114], np.float32)[:, None]
    elif channels == 4:
        img = np.concatenate([img, np.full(img.shape[:2] + (1,), 255.0, np.float32)], axis=2)
    if np.issubdtype(spec.dtype, np.floating):
        img = img / 255.0
        if conventions is not None and conventions.mean is not None and conventions.std:
            img = (img - conventions.mean) / conventions.std
    else:
        img = np.rint(img)
    return (img.transpose(2, 0, 1) if nchw else img).astype(spec.dtype)


def read_wav(path: Path) -> tuple["np.ndarray", int]:
    """Mono float32 samples in [-1, 1] and the sample rate of a PCM .wav file."""
    import wave

    import numpy as np

    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError, OSError) as exc:
        raise InvalidArgument(f"{path} is not a PCM .wav file Python's wave module reads: {exc}") from None
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / 2**23
    else:
        data = np.frombuffer(raw, {2: np.int16, 4: np.int32}[width]).astype(np.float32) / 2 ** (8 * width - 1)
    return data.reshape(-1, channels).mean(axis=1), rate


def _audio(
    path: Path, spec: "InputSpec", conventions: "Conventions | None"
) -> tuple[list[tuple["np.ndarray", str]], int]:
    """A recording as rows: frames of the model's frame length (when it has one), else one row."""
    import numpy as np

    samples, rate = read_wav(path)
    want = conventions.sample_rate if conventions is not None else None
    if want and rate != want:
        n = int(round(len(samples) * want / rate))
        samples = np.interp(np.arange(n) * rate / want, np.arange(len(samples)), samples).astype(np.float32)
        rate = want
    batched = _batched(spec)
    frame = _sample_shape(spec, batched)[-1] if spec.declared else None
    if frame is None or not batched:
        return [(samples.astype(spec.dtype), str(path))], rate
    count = max(1, len(samples) // frame)
    samples = np.pad(samples, (0, max(0, count * frame - len(samples))))
    rows = []
    for k in range(count):
        label = f"{path} {k * frame / rate:.3f}-{(k + 1) * frame / rate:.3f}s"
        rows.append((samples[k * frame : (k + 1) * frame].astype(spec.dtype), label))
    return rows, rate

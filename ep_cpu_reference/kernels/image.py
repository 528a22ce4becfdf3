"""ImageDecoder. The lossless, simply-structured formats are decoded here with NumPy and zlib:
BMP (uncompressed 24/32-bit), PNM (P5/P6, 8-bit), PNG (8-bit, non-interlaced) and baseline TIFF
(uncompressed 8-bit strips). JPEG, JPEG 2000 and WebP need real codecs: they go to Pillow when
it is installed, otherwise the kernel raises naming the format and what would decode it."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


class UnsupportedImage(ValueError):
    """The bytes are an image this decoder cannot read without a codec library."""


def _bmp(data: bytes) -> np.ndarray:
    offset = struct.unpack_from("<I", data, 10)[0]
    width, height = struct.unpack_from("<ii", data, 18)
    bpp, compression = struct.unpack_from("<HI", data, 28)
    if bpp not in (24, 32) or compression not in (0, 3):
        raise UnsupportedImage(f"BMP with {bpp} bits per pixel, compression {compression}")
    nch = bpp // 8
    stride = (width * nch + 3) // 4 * 4
    rows = np.frombuffer(data, np.uint8, stride * abs(height), offset).reshape(abs(height), stride)
    px = rows[:, : width * nch].reshape(abs(height), width, nch)[:, :, 2::-1]  # BGR(A) -> RGB
    return px[::-1] if height > 0 else px  # positive height: bottom-up rows


def _pnm(data: bytes) -> np.ndarray:
    fields: list[bytes] = []
    pos = 0
    while len(fields) < 4:
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos)
            continue
        end = pos
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    magic, w, h, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic not in (b"P5", b"P6") or maxval > 255:
        raise UnsupportedImage(f"PNM {magic!r} with maxval {maxval}")
    nch = 3 if magic == b"P6" else 1
    return np.frombuffer(data, np.uint8, w * h * nch, pos + 1).reshape(h, w, nch)


def _png(data: bytes) -> np.ndarray:
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        raise UnsupportedImage("PNG without IHDR")
    w, h, depth, ctype, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace:
        raise UnsupportedImage(f"PNG with bit depth {depth}, color type {ctype}, interlace {interlace}")
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * channels)
    out = np.zeros((h, w * channels), dtype=np.int32)
    bpp = channels
    for y in range(h):  # filters depend on the previous row: sequential by nature
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        prev = out[y - 1] if y else np.zeros(w * channels, dtype=np.int32)
        if f == 0:
            row = line
        elif f == 1:  # Sub: a running sum per channel
            row = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) & 0xFF
        elif f == 2:
            row = (line + prev) & 0xFF
        else:
            row = np.zeros_like(line)
            for i in range(line.size):
                a = row[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                if f == 3:
                    pred = (a + b) // 2
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                else:
                    raise UnsupportedImage(f"PNG filter type {f}")
                row[i] = (line[i] + pred) & 0xFF
        out[y] = row
    img = out.astype(np.uint8).reshape(h, w, channels)
    return img[:, :, :3] if channels == 4 else img[:, :, :1] if channels == 2 else img


def _tiff(data: bytes) -> np.ndarray:
    end = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(end + "I", data, 4)
    (count,) = struct.unpack_from(end + "H", data, ifd)
    tags: dict[int, list[int]] = {}
    sizes = {1: 1, 3: 2, 4: 4}
    for k in range(count):
        tag, typ, n, value = struct.unpack_from(end + "HHI4s", data, ifd + 2 + 12 * k)
        size = sizes.get(typ)
        if size is None:
            continue
        fmt = {1: "B", 3: "H", 4: "I"}[typ]
        raw = value if size * n <= 4 else data[struct.unpack(end + "I", value)[0] :]
        tags[tag] = list(struct.unpack_from(end + fmt * n, raw))
    w, h = tags[256][0], tags[257][0]
    bits = tags.get(258, [1])
    compression = tags.get(259, [1])[0]
    spp = tags.get(277, [1])[0]
    if compression != 1 or any(b != 8 for b in bits) or tags.get(284, [1])[0] != 1:
        raise UnsupportedImage(f"TIFF with compression {compression}, bits {bits}")
    pixels = b"".join(data[o : o + c] for o, c in zip(tags[273], tags[279], strict=False))
    img = np.frombuffer(pixels, np.uint8, w * h * spp).reshape(h, w, spp)
    return img[:, :, :3] if spp == 4 else img


def _pillow(data: bytes, what: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedImage(f"{what} images need a codec library: install Pillow to decode them") from None
    import io

    with Image.open(io.BytesIO(data)) as im:
        return np.array(im.convert("RGB"))


def decode_rgb(data: bytes) -> np.ndarray:
    """HWC uint8 RGB (or HW1 for grayscale sources) from encoded image bytes."""
    if data[:2] == b"BM":
        return _bmp(data)
    if data[:2] in (b"P5", b"P6"):
        return _pnm(data)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _png(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff(data)
    if data[:3] == b"\xff\xd8\xff":
        return _pillow(data, "JPEG")
    if data[4:12] == b"jP  \r\n\x87\n"[:8] or data[:4] == b"\xff\x4f\xff\x51":
        return _pillow(data, "JPEG 2000")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _pillow(data, "WebP")
    raise UnsupportedImage("unrecognised image format")


def _to_format(rgb: np.ndarray, fmt: str) -> np.ndarray:
    if rgb.shape[2] == 1:
        rgb = np.repeat(rgb, 3, axis=2)
    if fmt == "RGB":
        return np.ascontiguousarray(rgb)
    if fmt == "BGR":
        return np.ascontiguousarray(rgb[:, :, ::-1])
    # ITU-R 601-2 luma in Pillow's fixed-point form, so results match Pillow's "L" mode
    r, g, b = (rgb[:, :, i].astype(np.uint32) for i in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[:, :, None]


@REGISTRY.register("ImageDecoder", since=20)
def build_image_decoder(node: NodeView, ctx: KernelContext) -> Fn:
    fmt = node.attr("pixel_format", "RGB")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise ValueError(f"{node.describe()}: pixel_format must be RGB, BGR or Grayscale, got {fmt!r}")

    def compute(encoded: Any) -> tuple[Any]:
        try:
            rgb = decode_rgb(np.asarray(encoded, dtype=np.uint8).tobytes())
        except UnsupportedImage as exc:
            raise ValueError(f"{node.describe()}: {exc}") from None
        return (_to_format(rgb, fmt),)

    return compute

"""The EP's context blob: safetensors (a JSON header plus raw tensor bytes). Tensors hold the
weights (keyed by content hash, so identical weights are stored once) and every kernel's machine
code payload (``kernels.xz``: one xz stream, uint8); the header's metadata holds versions, the plans (JSON) and the
kernel sources and signatures. Nothing here is code to evaluate: kernel sources are our own
generated text, checked against their key, and payloads are verified before use (see
``codegen``)."""

from __future__ import annotations

import hashlib
import json
import lzma
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ep_numba_cpu import CONTEXT_FORMAT, __version__
from ep_numba_cpu.compat import current_info, parse_info, versions

META_KEY = "ep_numba_cpu"
KERNELS_TENSOR = "kernels.xz"


def pack(graphs: Mapping[str, Any], kernels: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> bytes:
    """``graphs``: name -> {"plan": ..., "weights": {value name: weight key}};
    ``kernels``: key -> CompiledKernel; ``weights``: key -> array."""
    from safetensors.numpy import save

    tensors: dict[str, np.ndarray] = {}
    for key, arr in weights.items():
        tensors[f"w.{key}"] = np.ascontiguousarray(arr)
    kmeta = {}
    chunks: list[bytes] = []
    offset = 0
    for key in sorted(kernels):
        ck = kernels[key]
        kmeta[key] = {
            "source": ck.source,
            "fn": "kernel",
            "signature": ck.signature,
            "parallel": ck.parallel,
            "sha256": ck.sha256,
            "offset": offset,
            "length": len(ck.payload),
        }
        chunks.append(ck.payload)
        offset += len(ck.payload)
    if chunks:
        # one xz stream for every payload: kernels share most of their linking bitcode
        tensors[KERNELS_TENSOR] = np.frombuffer(lzma.compress(b"".join(chunks), preset=6), dtype=np.uint8)
    header = {
        "format": CONTEXT_FORMAT,
        "ep_version": __version__,
        **versions(),
        "compatibility": current_info(),
        "graphs": dict(graphs),
        "kernels": kmeta,
    }
    return save(tensors, metadata={META_KEY: json.dumps(header, sort_keys=True)})


def read_header(data: bytes, fail: Callable[[str], Exception]) -> dict[str, Any]:
    """The header of a blob, checked for format and versions before any tensor is touched."""
    if len(data) < 8:
        raise fail("the context is truncated (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise fail(f"the context is truncated (header of {n} bytes, {len(data) - 8} available)")
    try:
        head = json.loads(data[8 : 8 + n])
        meta = json.loads(head["__metadata__"][META_KEY])
    except Exception as exc:
        raise fail(f"the context header is unreadable ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != CONTEXT_FORMAT:
        raise fail(f"the context has format {meta.get('format')!r}, this EP reads {CONTEXT_FORMAT!r}")
    cur = versions()
    for key in ("numba", "llvmlite", "python"):
        if meta.get(key) != cur[key]:
            raise fail(
                f"the context was written by {key} {meta.get(key)}, this process has {key} {cur[key]}; "
                "recompile the model with this environment"
            )
    rec, host = parse_info(meta.get("compatibility", "")), parse_info(current_info())
    if rec.get("triple") != host.get("triple"):
        raise fail(f"the context targets {rec.get('triple')}, this host is {host.get('triple')}")
    lacking = {f[1:] for f in rec.get("features", "").split(",") if f.startswith("+")} - {
        f[1:] for f in host.get("features", "").split(",") if f.startswith("+")
    }
    if lacking:
        raise fail(f"the context's machine code uses CPU features this CPU lacks: {sorted(lacking)[:8]}")
    end = 8 + n
    for name, info in head.items():
        if name == "__metadata__":
            continue
        lo, hi = info.get("data_offsets", (0, 0))
        if end + hi > len(data):
            raise fail(f"the context is truncated (tensor {name} ends at byte {end + hi}, the data has {len(data)})")
    return meta


def read_tensors(data: bytes, fail: Callable[[str], Exception]) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    try:
        return load(data)
    except Exception as exc:
        raise fail(f"the context's tensors do not load ({type(exc).__name__}: {exc})") from None


def verify_weight(key: str, arr: np.ndarray) -> bool:
    from ep_numba_cpu.planner import weight_key

    return weight_key(arr) == key


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_PAYLOAD = 256 << 20


def kernel_payloads(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], fail: Callable[[str], Exception]
) -> bytes:
    """Every kernel's machine-code payload, decompressed with a size cap (each one's sha256 is
    checked before it is used)."""
    kernels = meta.get("kernels", {})
    if not kernels:
        return b""
    blob = tensors.get(KERNELS_TENSOR)
    if blob is None:
        raise fail("the context has kernels but no kernel payloads")
    expected = sum(int(k.get("length", 0)) for k in kernels.values())
    if expected > MAX_PAYLOAD:
        raise fail(f"the kernel payloads claim {expected} bytes, more than {MAX_PAYLOAD}")
    d = lzma.LZMADecompressor()
    try:
        data = d.decompress(blob.tobytes(), max_length=expected + 1)
    except lzma.LZMAError as exc:
        raise fail(f"the kernel payloads do not decompress ({exc})") from None
    if len(data) != expected:
        raise fail(f"the kernel payloads hold {len(data)} bytes, the header says {expected}")
    return data


def kernel_payload(data: bytes, meta: Mapping[str, Any], key: str, fail: Callable[[str], Exception]) -> bytes:
    k = meta["kernels"][key]
    lo, n = int(k["offset"]), int(k["length"])
    if lo < 0 or n < 0 or lo + n > len(data):
        raise fail(f"kernel {key}: payload range {lo}+{n} is outside the payloads")
    return data[lo : lo + n]

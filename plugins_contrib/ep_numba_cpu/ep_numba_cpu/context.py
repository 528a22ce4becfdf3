"""The EP's context blob: safetensors (a JSON header plus raw tensor bytes). Tensors hold the
weights (keyed by their sha256, so identical weights are stored once) and every kernel's machine
code payload (``kernels.xz``: one xz stream, uint8); the header's metadata holds versions, each
graph's declarative record (``spec``) and each kernel payload's sha256, offset and length. No
source code: kernels are regenerated from the records.

Trust: each EPContext node signs (``ep_core.sdk.epcontext.signing``) its binding (name,
partition_name, source, main_context, embed_mode, inputs, outputs) together with the digest of its
graph: the record (plan, weights' sha256, types) and the sha256 of every kernel payload the graph
uses. So the signature covers every byte that decides what the node runs, wherever the blob lives
(embedded, beside the model, or shared by several models)."""

from __future__ import annotations

import hashlib
import json
import lzma
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ep_numba_cpu import CONTEXT_FORMAT, OLD_FORMATS, __version__
from ep_numba_cpu.compat import current_info, parse_info, versions

META_KEY = "ep_numba_cpu"
KERNELS_TENSOR = "kernels.xz"


def pack(graphs: Mapping[str, Any], kernels: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> bytes:
    """``graphs``: name -> record (``spec``); ``kernels``: key -> CompiledKernel; ``weights``:
    weight key -> array."""
    from safetensors.numpy import save

    tensors: dict[str, np.ndarray] = {}
    for key, arr in weights.items():
        tensors[f"w.{key}"] = np.ascontiguousarray(arr).reshape(arr.shape)  # (0-d stays 0-d)
    kmeta = {}
    chunks: list[bytes] = []
    offset = 0
    for key in sorted(kernels):
        ck = kernels[key]
        kmeta[key] = {"sha256": ck.sha256, "offset": offset, "length": len(ck.payload)}
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
    if not isinstance(meta, dict):
        raise fail("the context header's metadata is not an object")
    fmt = meta.get("format")
    if isinstance(fmt, str) and fmt in OLD_FORMATS:
        raise fail(
            f"the context has the older format {fmt!r}, which {OLD_FORMATS[fmt]}; "
            f"this EP reads only {CONTEXT_FORMAT!r}: regenerate the context model from the source model "
            "(ep.context_enable=1)"
        )
    if meta.get("format") != CONTEXT_FORMAT:
        raise fail(f"the context has format {str(meta.get('format'))[:40]!r}, this EP reads {CONTEXT_FORMAT!r}")
    cur = versions()
    for key in ("numba", "llvmlite", "python"):
        if meta.get(key) != cur[key]:
            raise fail(
                f"the context was written by {key} {meta.get(key)}, this process has {key} {cur[key]}; "
                "recompile the model with this environment"
            )
    rec, host = parse_info(str(meta.get("compatibility", ""))), parse_info(current_info())
    if rec.get("triple") != host.get("triple"):
        raise fail(f"the context targets {rec.get('triple')}, this host is {host.get('triple')}")
    lacking = {f[1:] for f in rec.get("features", "").split(",") if f.startswith("+")} - {
        f[1:] for f in host.get("features", "").split(",") if f.startswith("+")
    }
    if lacking:
        raise fail(f"the context's machine code uses CPU features this CPU lacks: {sorted(lacking)[:8]}")
    _check_index(meta, fail)
    end = 8 + n
    for name, info in head.items():
        if name == "__metadata__":
            continue
        lo, hi = info.get("data_offsets", (0, 0)) if isinstance(info, dict) else (0, 0)
        if not isinstance(hi, int) or end + hi > len(data):
            raise fail(f"the context is truncated (tensor {name} ends at byte {end + hi}, the data has {len(data)})")
    return meta


def _check_index(meta: Mapping[str, Any], fail: Callable[[str], Exception]) -> None:
    """The header's graph table and kernel payload index (the records are checked on use)."""
    if not isinstance(meta.get("graphs"), dict) or not isinstance(meta.get("kernels"), dict):
        raise fail("the context header lacks its graph table or its kernel index")
    for key, k in meta["kernels"].items():
        ok = isinstance(k, dict) and set(k) == {"sha256", "offset", "length"} and isinstance(k["sha256"], str)
        if not ok or len(k["sha256"]) != 64 or not all(type(k[f]) is int and k[f] >= 0 for f in ("offset", "length")):
            raise fail(f"the context's kernel index entry {str(key)[:40]!r} is malformed")


def canonical(value: Any) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces, ASCII): what digests are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def graph_digest(record: Any, payloads: Mapping[str, str | None]) -> str:
    """The sha256 of a graph's record and of the sha256 of each kernel payload it uses (None for a
    kernel the context holds no machine code for): with the weights' sha256 in the record, this
    pins every byte that decides what the graph runs."""
    return hashlib.sha256(canonical({"graph": record, "payloads": dict(payloads)})).hexdigest()


def signed_parts(
    name: str,
    partition_name: str,
    source: str,
    main_context: int,
    embed_mode: int,
    n_inputs: int,
    n_outputs: int,
    digest: str,
) -> dict[str, bytes | str]:
    """What an EPContext node's signature covers: the context format, the node's binding to its
    graph (by position: the design lets users rename the edges of context nodes to merge and
    interconnect models, so the values' names are not part of it), and the graph's digest."""
    binding = {
        "name": name,
        "partition_name": partition_name,
        "source": source,
        "main_context": main_context,
        "embed_mode": embed_mode,
        "inputs": n_inputs,
        "outputs": n_outputs,
    }
    return {"format": CONTEXT_FORMAT, "binding": canonical(binding), "graph": digest}


def read_tensors(data: bytes, fail: Callable[[str], Exception]) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    try:
        return load(data)
    except Exception as exc:
        raise fail(f"the context's tensors do not load ({type(exc).__name__}: {exc})") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_PAYLOAD = 256 << 20


def kernel_payloads(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], fail: Callable[[str], Exception]
) -> bytes:
    """Every kernel's machine-code payload, decompressed with a size cap (only read for a signed
    context; each one's sha256 is checked before it is used)."""
    kernels = meta.get("kernels", {})
    if not kernels:
        return b""
    blob = tensors.get(KERNELS_TENSOR)
    if blob is None:
        raise fail("the context has kernels but no kernel payloads")
    expected = sum(k["length"] for k in kernels.values())
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
    lo, n = k["offset"], k["length"]
    if lo + n > len(data):
        raise fail(f"kernel {key}: payload range {lo}+{n} is outside the payloads")
    return data[lo : lo + n]

"""The EP's context binary ``[model_name]_NumbaCudaExecutionProvider.bin``: safetensors (a JSON
header plus raw tensor bytes), never pickle and never code.

Tensors: every constant input (initializer) of every fused group as ``w.<key>`` (``key`` is the
sha256 of dtype, shape and bytes, so identical weights are stored once, across every model of a
sharing group), and each group's PTX as ``ptx.<sha256>`` (uint8; absent when the context was
generated under the simulator). The header's metadata (``ep_cuda_numba``) holds the format, the
versions that wrote it and one *record* per graph (fused group): its fusion spec, its constants
(input index, weight key, dtype, shape) and its PTX entry (sha256, entry name, compute capability,
driver, numba-cuda and EP version) or null.

Trust: an EPContext node signs (``ep_core.sdk.epcontext.signing``) its binding to a graph together
with the graph's digest: the sha256 of the record, which names every weight and the PTX by their
sha256. So the signature pins every byte that decides what the node runs, wherever the binary
lives (embedded, beside the model, shared by several models)."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_cuda_numba import __version__

FORMAT = "ep_cuda_numba.context/3"
OLD_FORMATS = ("ep_cuda_numba.fused/1", "ep_cuda_numba.fused/2")  # per-group JSON files
META_KEY = "ep_cuda_numba"
MAX_BINARY_BYTES = 8 << 30  # the whole file is read: refuse more before reading
MAX_HEADER_BYTES = 64 << 20
MAX_PTX_BYTES = 16 << 20
MAX_GRAPHS = 4096
RECORD_KEYS = frozenset({"spec", "constants", "ptx"})
CONSTANT_KEYS = frozenset({"input", "key", "dtype", "shape"})
PTX_KEYS = frozenset({"sha256", "entry", "cc", "driver", "numba_cuda", "ep_version"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENTRY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]{0,1023}")
Fail = Callable[[str], Exception]


def weight_key(arr: np.ndarray) -> str:
    """Content key of a weight: sha256 of its dtype, shape and bytes."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}|{list(a.shape)}|".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(value: Any) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces): what digests are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def graph_digest(record: Any) -> str:
    """The sha256 of a graph record (its spec, its weights' and PTX's sha256)."""
    return hashlib.sha256(canonical(record)).hexdigest()


def signed_parts(binding: Mapping[str, Any], digest: str) -> dict[str, bytes | str]:
    """What an EPContext node's signature covers: the format, the node's binding to its graph
    (name, source, partition_name, main_context, embed_mode, context file, inputs, outputs) and the
    graph's digest."""
    return {"format": FORMAT, "binding": canonical(dict(binding)), "graph": digest}


def pack(graphs: Mapping[str, Any], weights: Mapping[str, np.ndarray], ptx: Mapping[str, bytes]) -> bytes:
    """``graphs``: name -> record; ``weights``: key -> array; ``ptx``: sha256 -> PTX bytes."""
    from safetensors.numpy import save

    tensors: dict[str, np.ndarray] = {f"w.{k}": np.ascontiguousarray(a) for k, a in weights.items()}
    tensors.update({f"ptx.{k}": np.frombuffer(v, dtype=np.uint8) for k, v in ptx.items()})
    header = {"format": FORMAT, "ep_version": __version__, "graphs": dict(graphs)}
    return save(tensors, metadata={META_KEY: json.dumps(header, sort_keys=True, allow_nan=True)})


def read(data: bytes, fail: Fail) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(header, tensors) of a binary: the header checked for format and its graph table before any
    tensor is parsed; every tensor's byte range checked against the data."""
    if len(data) > MAX_BINARY_BYTES:
        raise fail(f"the context binary is larger than {MAX_BINARY_BYTES} bytes")
    if len(data) < 8:
        raise fail("the context binary is truncated (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES or n > len(data) - 8:
        raise fail(
            f"the context binary's header claims {n} bytes ({len(data) - 8} present, at most {MAX_HEADER_BYTES})"
        )
    try:
        head = json.loads(data[8 : 8 + n])
        meta = json.loads(head["__metadata__"][META_KEY])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise fail(f"the context binary is not a {META_KEY} safetensors file ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise fail("the context binary's metadata is not an object")
    fmt = meta.get("format")
    if fmt in OLD_FORMATS:
        raise fail(f"the context has the older format {fmt!r} (one JSON file per group); this version reads {FORMAT!r}")
    if fmt != FORMAT or set(meta) != {"format", "ep_version", "graphs"}:
        raise fail(f"the context binary has format {str(fmt)[:40]!r} or unknown header keys; this EP reads {FORMAT!r}")
    graphs = meta["graphs"]
    if not isinstance(graphs, dict) or not 1 <= len(graphs) <= MAX_GRAPHS:
        raise fail(f"the context binary's graph table must hold 1 to {MAX_GRAPHS} graphs")
    end = 8 + n
    for name, info in head.items():
        if name == "__metadata__":
            continue
        offs = info.get("data_offsets") if isinstance(info, dict) else None
        if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int and o >= 0 for o in offs):
            offs = [1, 0]  # malformed: fails below
        if offs[0] > offs[1] or end + offs[1] > len(data):
            raise fail(f"the context binary is truncated or malformed at tensor {str(name)[:60]!r}")
    from safetensors.numpy import load

    try:
        tensors = load(data)
    except Exception as exc:  # noqa: BLE001 - any parse failure of a file is a bad file
        raise fail(f"the context binary's tensors do not load ({type(exc).__name__}: {str(exc)[:200]})") from None
    return meta, tensors


def check_record(rec: Any, fail: Fail) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """The record's (spec, constants, ptx entry), each field type-checked (the spec itself is
    checked by ``spec_check.validate_spec``; constants against the spec by ``bind_constants``)."""
    if not isinstance(rec, dict) or set(rec) != RECORD_KEYS:
        raise fail(f"a graph record must have exactly the keys {sorted(RECORD_KEYS)}")
    consts = rec["constants"]
    if not isinstance(consts, list) or len(consts) > 64:
        raise fail("the record's 'constants' must be a list of at most 64 entries")
    for c in consts:
        ok = isinstance(c, dict) and set(c) == CONSTANT_KEYS and type(c["input"]) is int
        ok = ok and isinstance(c["key"], str) and _HEX64.fullmatch(c["key"]) is not None
        ok = ok and isinstance(c["dtype"], str) and isinstance(c["shape"], list) and len(c["shape"]) <= 16
        if not ok or not all(type(d) is int and 0 <= d < 1 << 40 for d in c["shape"]):
            raise fail("a constant entry must be {input: int, key: sha256 hex, dtype: str, shape: [int >= 0]}")
    ptx = rec["ptx"]
    if ptx is not None:
        ok = isinstance(ptx, dict) and set(ptx) == PTX_KEYS and isinstance(ptx["sha256"], str)
        ok = ok and _HEX64.fullmatch(ptx["sha256"]) is not None and isinstance(ptx["entry"], str)
        ok = ok and _ENTRY.fullmatch(ptx["entry"]) is not None and isinstance(ptx["cc"], list) and len(ptx["cc"]) == 3
        ok = ok and all(isinstance(ptx[k], str) for k in ("driver", "numba_cuda", "ep_version"))
        if not ok or not (type(ptx["cc"][0]) is int and type(ptx["cc"][1]) is int and ptx["cc"][2] in ("", "a")):
            raise fail("the record's PTX entry is malformed")
    return rec["spec"], consts, ptx


def bind_constants(
    spec: Mapping[str, Any],
    consts: Sequence[Mapping[str, Any]],
    node_inputs: Sequence[str],
    tensors: Mapping[str, np.ndarray],
    verified: set[str],
    fail: Fail,
) -> dict[int, np.ndarray]:
    """Spec input index -> weight. The constants are exactly the spec's inputs after the node's
    own (in order); each tensor must exist with the recorded dtype and shape and hash to its key."""
    n = len(node_inputs)
    inputs = list(spec["inputs"])
    if inputs[:n] != list(node_inputs) or [c["input"] for c in consts] != list(range(n, len(inputs))):
        raise fail(
            f"the graph reads {inputs}, but the node reads {list(node_inputs)} and the binary holds constants for "
            f"inputs {[c['input'] for c in consts]}"
        )
    out: dict[int, np.ndarray] = {}
    for c in consts:
        i, key = c["input"], c["key"]
        arr = tensors.get(f"w.{key}")
        want = spec["input_dtypes"][i]
        if c["dtype"] != want:
            raise fail(f"constant input {inputs[i]!r} is recorded as {c['dtype']} but the graph reads it as {want}")
        if arr is None or str(arr.dtype) != want or list(arr.shape) != c["shape"]:
            raise fail(f"constant input {inputs[i]!r} ({key[:16]}) is missing or not {want}{c['shape']}")
        if key not in verified:
            if weight_key(arr) != key:
                raise fail(f"constant input {inputs[i]!r} ({key[:16]}) differs from its sha256")
            verified.add(key)
        out[i] = arr
    return out


def ptx_bytes(tensors: Mapping[str, np.ndarray], entry: Mapping[str, Any], fail: Fail) -> bytes:
    """The stored PTX of a record, checked against the sha256 its (signed) record names."""
    arr = tensors.get(f"ptx.{entry['sha256']}")
    if arr is None or arr.dtype != np.uint8 or arr.ndim != 1 or arr.size > MAX_PTX_BYTES:
        raise fail(f"the PTX {entry['sha256'][:16]} the record names is missing or malformed")
    data = arr.tobytes()
    if sha256(data) != entry["sha256"]:
        raise fail(f"the stored PTX does not match its sha256 {entry['sha256'][:16]} (the binary was modified)")
    return data

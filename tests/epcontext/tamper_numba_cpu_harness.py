"""Subprocess side of test_tampering_numba_cpu.py: tamper with Numba CPU context models as an
attacker would, load and run each one under an audit hook, and classify what happened.

Usage: ``python tamper_numba_cpu_harness.py ROOT OUT VARIANT... [--full] [--control]``. ROOT holds
one folder per variant (``embed0``, ``embed1``, ``shared``: the genuine context models and their
binaries, ``case.json`` naming the models, ``feed.npz`` and ``expected.npz``). For each variant the
harness enumerates its cases (edits of every field of the stored records, of the kernel index and
header, byte regions of payloads, weights and binaries, EPContext node attributes, planted Python
source and pickles), each followed by re-hashing every sha256 the files hold so a checksum-only
loader would be fooled, materialises each in a fresh folder and loads + runs it.

Audit (``sys.addaudithook``, active while a case loads and runs): every ``exec``/``compile`` whose
code or source holds MARK (planted in every injected string), every ``pickle.find_class`` of a
class no genuine payload uses, every ``marshal.loads`` of bytes holding MARK, and the side effect
of the planted code (it sets the environment variable MARK). Besides, every payload the EP hands
to ``pickle.loads`` must be one the user's key signed (a genuine payload, by sha256).

Outcomes: ``error`` (typed, naming a node or the file), ``warned-correct`` (rebuilt from a spec
that still matches), ``warned-model-change`` (the edited records are a self-consistent model: the
result equals what an independent NumPy/onnxruntime interpreter of the edited records computes),
``warned-error`` (warned, then refused with a typed error naming the node when run: the edited
model's outputs contradict the shapes the model declares, or its shapes do not fit together), ``silent-correct`` (an edit of nothing that
decides what runs); the failures: ``silent-wrong``, ``warned-wrong``, ``untyped-error``,
``unnamed-error``. A case that warned is loaded again with ep.context_require_signature=1 and must
be refused (``strict``). OUT gets one JSON record per case."""

from __future__ import annotations

import ast
import hashlib
import json
import lzma
import os
import pickle
import shutil
import struct
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

MARK = "EPCORE_TAMPER_MARK_7f3a"
PLANTED_SOURCE = f"__import__('os').environ.__setitem__('{MARK}', 'ran')  # {MARK}"
PLANTED_PICKLE = b"cbuiltins\nexec\n(V" + PLANTED_SOURCE.encode() + b"\ntR."
NUMBA = "NumbaCpuExecutionProvider"
META = "ep_numba_cpu"
RTOL, ATOL = 1e-4, 1e-5

# ------------------------------------------------------------------------------- audit
_state = {"recording": False, "warming": True}
_events: list[str] = []
_allowed_classes: set[tuple[str, str]] = set()
_unpickled: list[str] = []


def _code_text(obj: Any, depth: int = 0) -> str:
    """Every string a code object (or source, or AST) carries, for the marker search."""
    if isinstance(obj, (str, bytes, bytearray)):
        return obj.decode("latin-1") if isinstance(obj, (bytes, bytearray)) else obj
    if isinstance(obj, ast.AST):
        return ast.dump(obj)
    if hasattr(obj, "co_consts") and depth < 20:
        parts = [obj.co_filename, *obj.co_names, *obj.co_varnames]
        return "\n".join(parts + [_code_text(c, depth + 1) for c in obj.co_consts])
    return repr(obj) if isinstance(obj, (tuple, frozenset)) else ""


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "pickle.find_class" and _state["warming"]:
        _allowed_classes.add((str(args[0]), str(args[1])))
    if not _state["recording"]:
        return
    if event in ("exec", "compile") and args and MARK in _code_text(args[0]):
        _events.append(f"{event} of planted code")
    elif event == "pickle.find_class" and (str(args[0]), str(args[1])) not in _allowed_classes:
        _events.append(f"pickle.find_class {args[0]}.{args[1]}")
    elif event == "marshal.loads" and args and isinstance(args[0], (bytes, bytearray)) and MARK.encode() in args[0]:
        _events.append("marshal.loads of planted bytes")


class _PickleSpy:
    """Stands in for the ``pickle`` module inside ``ep_numba_cpu.codegen``: records the sha256 of
    every payload the EP unpickles."""

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)

    def loads(self, data: bytes, *a: Any, **k: Any) -> Any:
        _unpickled.append(hashlib.sha256(data).hexdigest())
        return pickle.loads(data, *a, **k)


# -------------------------------------------------------------------------- blob editing
def read_blob(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from safetensors.numpy import load

    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8 : 8 + n])
    return json.loads(head["__metadata__"][META]), load(data)


def write_blob(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    return save(tensors, metadata={META: json.dumps(meta)})


def payloads(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, bytes]:
    data = lzma.decompress(tensors["kernels.xz"].tobytes())
    return {k: data[e["offset"] : e["offset"] + e["length"]] for k, e in meta["kernels"].items()}


def set_payloads(meta: dict[str, Any], tensors: dict[str, np.ndarray], pays: dict[str, bytes]) -> None:
    """Store ``pays`` as the kernels' payloads, the index re-hashed to match."""
    chunks, offset = [], 0
    for key in sorted(pays):
        meta["kernels"][key] = {"sha256": hashlib.sha256(pays[key]).hexdigest(), "offset": offset}
        meta["kernels"][key]["length"] = len(pays[key])
        chunks.append(pays[key])
        offset += len(pays[key])
    tensors["kernels.xz"] = np.frombuffer(lzma.compress(b"".join(chunks)), dtype=np.uint8)


def weight_key(arr: np.ndarray) -> str:
    h = hashlib.sha256(f"{arr.dtype.str}|{arr.shape}|".encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def rehash(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
    """Recompute every sha256 the blob holds from its bytes (what a forger does)."""
    try:
        data = lzma.decompress(tensors["kernels.xz"].tobytes())
        for e in meta["kernels"].values():
            e["sha256"] = hashlib.sha256(data[e["offset"] : e["offset"] + e["length"]]).hexdigest()
    except Exception:  # noqa: BLE001 - an index the edit broke stays broken
        pass
    renamed = {}
    for name in [n for n in tensors if n.startswith("w.")]:
        new = weight_key(tensors[name])
        if new != name[2:]:
            renamed[name[2:]] = new
            tensors["w." + new] = tensors.pop(name)
    for rec in meta.get("graphs", {}).values():
        wmap = rec.get("weights") if isinstance(rec, dict) else None
        if isinstance(wmap, dict):
            for value, key in list(wmap.items()):
                if isinstance(key, str) and key in renamed:
                    wmap[value] = renamed[key]


class Case:
    """One materialised copy of a variant's context models, with the edits an attacker applies."""

    def __init__(self, variant: dict[str, Any], folder: Path) -> None:
        self.variant = variant
        self.folder = folder

    # models and EPContext nodes
    def model(self, i: int = 0) -> Any:
        import onnx

        return onnx.load(str(self.folder / self.variant["models"][i]))

    def save(self, model: Any, i: int = 0) -> None:
        import onnx

        onnx.save(model, str(self.folder / self.variant["models"][i]))

    @staticmethod
    def nodes(model: Any) -> list[Any]:
        return [n for n in model.graph.node if n.op_type == "EPContext"]

    @staticmethod
    def attr(node: Any, name: str) -> Any:
        from onnx import helper

        a = next((a for a in node.attribute if a.name == name), None)
        return None if a is None else helper.get_attribute_value(a)

    @staticmethod
    def set_attr(node: Any, name: str, value: Any) -> None:
        from onnx import helper

        for a in list(node.attribute):
            if a.name == name:
                node.attribute.remove(a)
        if value is not None:
            node.attribute.append(helper.make_attribute(name, value))

    def edit_nodes(self, fn: Callable[[list[Any]], None], i: int = 0) -> None:
        m = self.model(i)
        fn(self.nodes(m))
        self.save(m, i)

    # blobs: the binary file (embed_mode=0), else the first EPContext node's attribute
    def blob(self, slot: int = 0) -> bytes:
        if self.variant["embed"] == 0:
            return (self.folder / self.variant["binary"]).read_bytes()
        return bytes(self.attr(self.nodes(self.model())[slot], "ep_cache_context"))

    def put_blob(self, data: bytes, slot: int = 0, fix_sha: bool = True) -> None:
        """Store a blob; with ``fix_sha`` the model's recorded sha256 of it is rewritten to match."""
        sha = hashlib.sha256(data).hexdigest()
        if self.variant["embed"] == 0:
            (self.folder / self.variant["binary"]).write_bytes(data)
            targets = [(i, None) for i in range(len(self.variant["models"]))]
        else:
            targets = [(0, slot)]
        for i, only in targets:
            m = self.model(i)
            for k, n in enumerate(self.nodes(m)):
                if only is not None and k != only:
                    continue
                if only is not None:
                    self.set_attr(n, "ep_cache_context", data)
                notes = json.loads(self.attr(n, "notes") or b"{}")
                if fix_sha and "blob_sha256" in notes:
                    notes["blob_sha256"] = sha
                    self.set_attr(n, "notes", json.dumps(notes))
            self.save(m, i)

    def edit_meta(self, fn: Callable[[dict[str, Any], dict[str, np.ndarray]], None], slot: int = 0, fix: bool = True):
        meta, tensors = read_blob(self.blob(slot))
        fn(meta, tensors)
        if fix:
            rehash(meta, tensors)
        self.put_blob(write_blob(meta, tensors), slot, fix_sha=fix)

    def edit_bytes(self, fn: Callable[[bytearray], None], slot: int = 0, fix: bool = True) -> None:
        data = bytearray(self.blob(slot))
        fn(data)
        if fix:
            try:  # re-hash what still parses
                meta, tensors = read_blob(bytes(data))
                rehash(meta, tensors)
                data = bytearray(write_blob(meta, tensors))
            except Exception:  # noqa: BLE001
                pass
        self.put_blob(bytes(data), slot, fix_sha=fix)


# ------------------------------------------------------------------------------ the cases
def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _leaves(value[k], path + (k,))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, (dict, list)):
        yield path, value
        items = sorted(value.items()) if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            yield from _containers(v, path + (k,))


def _set(root: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        root = root[k]
    root[path[-1]] = value


_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def _mutations(value: Any, names: list[str], full: bool) -> list[tuple[str, Any]]:
    """What an attacker writes instead of ``value`` (a leaf of a stored record)."""
    from ep_numba_cpu.ops import ARITY

    injected = f"{value}'); {PLANTED_SOURCE}"
    if isinstance(value, bool):
        out = [("flip", not value)] + ([("int", int(value))] if full else [])
    elif isinstance(value, int):
        out = [("+1", value + 1)] + ([("-1", value - 1), ("huge", 10**12), ("str", injected)] if full else [])
    elif isinstance(value, float):
        out = [("+0.5", value + 0.5)] + ([("nan", float("nan")), ("str", injected)] if full else [])
    elif value is None:
        out = [("float", 1.5)] + ([("str", injected)] if full else [])
    elif isinstance(value, str) and value in ARITY:
        lo, hi = ARITY[value]
        other = next((op for op, ar in ARITY.items() if ar == (lo, hi) and op != value), "Max")
        out = [(f"op {other}", other), ("inject", injected)]
    elif isinstance(value, str) and value in _DTYPES:
        out = [("dtype", "float64" if value != "float64" else "float32"), ("inject", injected)]
    elif isinstance(value, str) and value in ("a", "v", "c"):
        out = [("ref tag", "v" if value == "a" else "a")] + ([("inject", injected)] if full else [])
    elif isinstance(value, str):
        other = next((n for n in names if n != value), value + "_x")
        out = [("inject", injected)] + ([("rename", other)] if full else [])
    else:
        out = [("inject", injected)]
    return out


def record_cases(case_meta: dict[str, Any], full: bool) -> list[tuple[str, Callable[[Case], None]]]:
    """Every leaf of every stored graph record, edited (then every sha256 re-hashed); with
    ``full``, also every container emptied, shortened, extended and given a ``source`` key."""
    cases: list[tuple[str, Callable[[Case], None]]] = []
    for gname, rec in sorted(case_meta["graphs"].items()):
        names = list(rec["plan"]["inputs"]) + list(rec["plan"]["outputs"])
        for path, value in _leaves(rec):
            for label, new in _mutations(value, names, full):

                def edit(c: Case, g: str = gname, p: tuple[Any, ...] = path, v: Any = new) -> None:
                    c.edit_meta(lambda meta, t: _set(meta["graphs"][g], p, v))

                cases.append((f"record {gname[-6:]}:{'.'.join(map(str, path))} {label}", edit))
        if not full:
            continue
        for path, value in _containers(rec):
            if isinstance(value, dict):
                variants = [("add source", {**value, "source": PLANTED_SOURCE})]
            else:
                variants = [("drop last", value[:-1]), ("dup last", value + value[-1:])] if value else []
            for label, new in variants:

                def edit(c: Case, g: str = gname, p: tuple[Any, ...] = path, v: Any = new) -> None:
                    if p:
                        c.edit_meta(lambda meta, t: _set(meta["graphs"][g], p, v))
                    else:
                        c.edit_meta(lambda meta, t: meta["graphs"].__setitem__(g, v))

                cases.append((f"record {gname[-6:]}:{'.'.join(map(str, path)) or '<root>'} {label}", edit))
    return cases


def _flip(offset: Callable[[int], int]) -> Callable[[bytearray], None]:
    def fn(data: bytearray) -> None:
        data[offset(len(data))] ^= 0x5A

    return fn


def blob_cases(meta: dict[str, Any], full: bool) -> list[tuple[str, Callable[[Case], None]]]:
    """The header, the kernel index, payload bytes, weights and raw byte regions of the blob."""
    key = sorted(meta["kernels"])[0]
    other = sorted(meta["kernels"])[-1]
    cases: list[tuple[str, Callable[[Case], None]]] = []

    def meta_edit(label: str, fn: Callable[[dict[str, Any], dict[str, np.ndarray]], None], fix: bool = True) -> None:
        cases.append((label, lambda c: c.edit_meta(fn, fix=fix)))

    for field, value in (("format", "ep_numba_cpu/2"), ("numba", "0.1.0"), ("python", "2.7"), ("ep_version", "9")):
        meta_edit(f"header {field}", lambda m, t, f=field, v=value: m.__setitem__(f, v))
    meta_edit("header format injected", lambda m, t: m.__setitem__("format", PLANTED_SOURCE))
    meta_edit("header compatibility triple", lambda m, t: m.__setitem__("compatibility", "triple=mips"))
    meta_edit("header graphs dropped", lambda m, t: m.__setitem__("graphs", {}))
    meta_edit(
        "old format with planted kernel source",
        lambda m, t: (
            m.__setitem__("format", "ep_numba_cpu/2"),
            m["kernels"][key].update({"source": PLANTED_SOURCE, "fn": "kernel"}),
        ),
    )
    meta_edit("index: planted source field", lambda m, t: m["kernels"][key].__setitem__("source", PLANTED_SOURCE))
    for f in ("sha256", "offset", "length"):
        meta_edit(f"index {f} (re-hashed)", lambda m, t, f=f: m["kernels"][key].__setitem__(f, m["kernels"][other][f]))
        meta_edit(
            f"index {f} (not re-hashed)",
            lambda m, t, f=f: m["kernels"][key].__setitem__(f, m["kernels"][other][f]),
            False,
        )

    def payload_edit(label: str, fn: Callable[[dict[str, bytes]], None]) -> None:
        def edit(m: dict[str, Any], t: dict[str, np.ndarray]) -> None:
            pays = payloads(m, t)
            fn(pays)
            set_payloads(m, t, pays)

        meta_edit(label, edit)

    def flip_payload(pays: dict[str, bytes], where: float) -> None:
        p = bytearray(pays[key])
        p[int(where * (len(p) - 1))] ^= 0x5A
        pays[key] = bytes(p)

    for where in (0.0, 0.5, 1.0) if full else (0.5,):
        payload_edit(f"payload byte at {where:.0%} (re-hashed)", lambda p, w=where: flip_payload(p, w))
    payload_edit("payload: planted pickle (re-hashed)", lambda p: p.__setitem__(key, PLANTED_PICKLE))
    payload_edit(
        "payload: every one a planted pickle (re-hashed)", lambda p: p.update(dict.fromkeys(p, PLANTED_PICKLE))
    )
    payload_edit("payload: two kernels swapped (re-hashed)", lambda p: p.update({key: p[other], other: p[key]}))
    meta_edit(
        "kernels.xz replaced by a planted pickle",
        lambda m, t: t.__setitem__("kernels.xz", np.frombuffer(PLANTED_PICKLE, np.uint8)),
        False,
    )

    def weight_edit(m: dict[str, Any], t: dict[str, np.ndarray]) -> None:
        name = sorted(n for n in t if n.startswith("w."))[0]
        arr = t[name].copy()
        arr.reshape(-1)[0] += 1
        t[name] = arr

    meta_edit("weight value (re-hashed)", weight_edit)
    meta_edit("weight value (not re-hashed)", weight_edit, False)
    meta_edit("weights swapped between two values (re-hashed)", _swap_weights)
    # raw byte regions of the blob: header JSON, tensor data (start, middle, end)
    for label, off in (("header", lambda n: 100), ("data start", lambda n: n // 3), ("middle", lambda n: n // 2)):
        cases.append((f"raw byte in {label} (re-hashed)", lambda c, o=off: c.edit_bytes(_flip(o))))
        if full:
            cases.append((f"raw byte in {label} (not re-hashed)", lambda c, o=off: c.edit_bytes(_flip(o), fix=False)))
    cases.append(("raw byte at the end (re-hashed)", lambda c: c.edit_bytes(_flip(lambda n: n - 3))))
    cases.append(("blob truncated", lambda c: c.edit_bytes(lambda d: d.__delitem__(slice(len(d) // 2, None)))))
    return cases


def _swap_weights(m: dict[str, Any], t: dict[str, np.ndarray]) -> None:
    for rec in m["graphs"].values():
        same: dict[tuple[Any, ...], list[str]] = {}
        for value, key in rec["weights"].items():
            arr = t["w." + key]
            same.setdefault((arr.dtype.str, arr.shape), []).append(value)
        for values in same.values():
            if len(values) > 1:
                a, b = values[:2]
                rec["weights"][a], rec["weights"][b] = rec["weights"][b], rec["weights"][a]
                return


def node_cases(variant: dict[str, Any]) -> list[tuple[str, Callable[[Case], None]]]:
    """Edits of the EPContext nodes' attributes and binding."""
    cases: list[tuple[str, Callable[[Case], None]]] = []

    def on_nodes(label: str, fn: Callable[[list[Any]], None], i: int = 0) -> None:
        cases.append((label, lambda c: c.edit_nodes(fn, i)))

    A, S = Case.attr, Case.set_attr

    def swap(attr: str, i: int = 0, j: int = 1) -> Callable[[list[Any]], None]:
        def fn(ns: list[Any]) -> None:
            a, b = A(ns[i], attr), A(ns[j], attr)
            S(ns[i], attr, b)
            S(ns[j], attr, a)

        return fn

    on_nodes("partition_name swapped between two nodes", swap("partition_name"))
    on_nodes("notes (signatures) swapped between two nodes", swap("notes"))
    on_nodes("partition_name and notes swapped", lambda ns: (swap("partition_name")(ns), swap("notes")(ns)))
    on_nodes("partition_name of node 1 := node 0's", lambda ns: S(ns[1], "partition_name", A(ns[0], "partition_name")))
    on_nodes("partition_name unknown", lambda ns: S(ns[0], "partition_name", "no_such_graph"))
    on_nodes("partition_name injected", lambda ns: S(ns[0], "partition_name", PLANTED_SOURCE))
    on_nodes("partition_name removed (falls back to the name)", lambda ns: S(ns[0], "partition_name", None))
    on_nodes("node renamed", lambda ns: setattr(ns[0], "name", ns[0].name + "_renamed"))
    on_nodes("source: alias", lambda ns: [S(n, "source", "NumbaCpu") for n in ns])
    on_nodes("source: foreign", lambda ns: S(ns[0], "source", "QnnExecutionProvider"))
    on_nodes("source: injected", lambda ns: S(ns[0], "source", PLANTED_SOURCE))
    on_nodes("main_context 1 -> 0", lambda ns: S(ns[0], "main_context", 1 - A(ns[0], "main_context")))
    on_nodes("main_context of node 1 flipped", lambda ns: S(ns[1], "main_context", 1 - A(ns[1], "main_context")))
    on_nodes("embed_mode flipped", lambda ns: S(ns[0], "embed_mode", 1 - A(ns[0], "embed_mode")))
    on_nodes("notes: signature removed", lambda ns: S(ns[0], "notes", json.dumps({})))
    on_nodes("notes: signature injected", lambda ns: S(ns[0], "notes", json.dumps({"signature": PLANTED_SOURCE})))
    on_nodes("notes: not JSON", lambda ns: S(ns[0], "notes", "{" + PLANTED_SOURCE))
    on_nodes("notes: planted source key", lambda ns: S(ns[0], "notes", _with(A(ns[0], "notes"), source=PLANTED_SOURCE)))
    on_nodes("notes: blob_sha256 edited", lambda ns: S(ns[0], "notes", _with(A(ns[0], "notes"), blob_sha256="0" * 64)))
    on_nodes("node input rewired to another value", lambda ns: ns[1].input.__setitem__(0, ns[0].output[0]))
    on_nodes("node outputs swapped", lambda ns: _swap_outputs(ns[1]))
    on_nodes(
        "hardware_architecture, ep_sdk_version edited",
        lambda ns: [S(ns[0], k, "x") for k in ("ep_sdk_version", "hardware_architecture")],
    )
    if variant["embed"] == 0:
        on_nodes("ep_cache_context: missing file", lambda ns: S(ns[0], "ep_cache_context", b"nope.bin"))
        on_nodes(
            "ep_cache_context: outside the folder",
            lambda ns: S(ns[0], "ep_cache_context", b"../" + A(ns[0], "ep_cache_context")),
        )
        cases.append(("ep_cache_context: a copy in a sub-folder", _moved_binary))
        on_nodes("main_context=1 and the binary given to node 1", _second_primary)
    else:
        on_nodes("ep_cache_context swapped between two nodes", swap("ep_cache_context"))
        on_nodes("ep_cache_context and notes swapped", lambda ns: (swap("ep_cache_context")(ns), swap("notes")(ns)))
        cases.append(("embedded blob: byte flipped (re-hashed)", lambda c: c.edit_bytes(_flip(lambda n: n // 2))))
        cases.append(
            ("embedded blob: byte flipped (not re-hashed)", lambda c: c.edit_bytes(_flip(lambda n: n // 2), fix=False))
        )
    if variant["share"]:
        cases.append(("partition_name swapped across the two models", _swap_across_models))
    return cases


def _with(notes: Any, **kw: Any) -> str:
    value = json.loads(notes or b"{}")
    value.update(kw)
    return json.dumps(value)


def _swap_outputs(node: Any) -> None:
    if len(node.output) > 1:
        node.output[0], node.output[1] = node.output[1], node.output[0]
    else:
        node.output[0] = node.input[0]


def _moved_binary(c: Case) -> None:
    (c.folder / "sub").mkdir()
    (c.folder / c.variant["binary"]).rename(c.folder / "sub" / c.variant["binary"])
    for i in range(len(c.variant["models"])):
        c.edit_nodes(
            lambda ns: [
                Case.set_attr(n, "ep_cache_context", b"sub/" + Case.attr(n, "ep_cache_context"))
                for n in ns
                if Case.attr(n, "main_context") == 1
            ],
            i,
        )


def _second_primary(ns: list[Any]) -> None:
    Case.set_attr(ns[1], "main_context", 1)
    Case.set_attr(ns[1], "ep_cache_context", Case.attr(ns[0], "ep_cache_context"))


def _swap_across_models(c: Case) -> None:
    m0, m1 = c.model(0), c.model(1)
    a, b = Case.nodes(m0)[-1], Case.nodes(m1)[-1]
    pa, pb = Case.attr(a, "partition_name"), Case.attr(b, "partition_name")
    Case.set_attr(a, "partition_name", pb)
    Case.set_attr(b, "partition_name", pa)
    c.save(m0, 0)
    c.save(m1, 1)


def cases_for(variant: dict[str, Any], genuine: Case, full: bool) -> list[tuple[str, Callable[[Case], None]]]:
    meta, _ = read_blob(genuine.blob())
    out = node_cases(variant) + blob_cases(meta, full)
    if variant["sweep"] or full:
        out += record_cases(meta, full)
    else:  # the case: one plan step of the (shared) binary edited, and a few more fields
        out += [
            c for c in record_cases(meta, full) if any(k in c[0] for k in (".attrs.", ".params.", ".full.0", "[2]"))
        ]
    return out


# --------------------------------------------------------------------------- the oracle
def _np_item(op: str, p: dict[str, Any], a: list[Any], dtype: str) -> Any:
    """One elementwise item in NumPy, as ONNX defines the op (independent of the EP's code)."""
    import math

    x = a[0]
    f = {
        "Add": lambda: a[0] + a[1],
        "Sub": lambda: a[0] - a[1],
        "Mul": lambda: a[0] * a[1],
        "Div": lambda: a[0] / a[1],
        "Pow": lambda: x * x if p["square"] else np.power(x, a[1]),
        "Max": lambda: _reduce(np.maximum, a),
        "Min": lambda: _reduce(np.minimum, a),
        "Sum": lambda: _reduce(np.add, a),
        "Neg": lambda: -x,
        "Abs": lambda: np.abs(x),
        "Sqrt": lambda: np.sqrt(x),
        "Exp": lambda: np.exp(x),
        "Log": lambda: np.log(x),
        "Tanh": lambda: np.tanh(x),
        "Floor": lambda: np.floor(x),
        "Ceil": lambda: np.ceil(x),
        "Reciprocal": lambda: 1 / x,
        "Sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "Relu": lambda: np.maximum(x, 0),
        "Softplus": lambda: np.log1p(np.exp(x)),
        "Erf": lambda: np.vectorize(math.erf)(x),
        "Clip": lambda: _clip(p, a),
        "LeakyRelu": lambda: np.where(x >= 0, x, x * p["alpha"]),
        "HardSigmoid": lambda: np.clip(p["alpha"] * x + p["beta"], 0, 1),
        "HardSwish": lambda: x * np.clip(x / 6 + 0.5, 0, 1),
        "Cast": lambda: (x != 0) if dtype == "bool" else x,
        "Equal": lambda: a[0] == a[1],
        "Less": lambda: a[0] < a[1],
        "Greater": lambda: a[0] > a[1],
        "LessOrEqual": lambda: a[0] <= a[1],
        "GreaterOrEqual": lambda: a[0] >= a[1],
        "Where": lambda: np.where(a[0], a[1], a[2]),
        "Identity": lambda: x,
        "ScaleShift": lambda: a[0] * a[1] + a[2],
        "BiasAdd": lambda: a[0] + a[1],
    }[op]()
    return np.asarray(f).astype(dtype)


def _reduce(fn: Any, a: list[Any]) -> Any:
    out = a[0]
    for x in a[1:]:
        out = fn(out, x)
    return out


def _clip(p: dict[str, Any], a: list[Any]) -> Any:
    lo, hi = (p["min"], p["max"]) if p["legacy"] else ((a + [None, None])[1], (a + [None, None])[2])
    out = a[0]
    if lo is not None:
        out = np.maximum(out, lo)
    if hi is not None:
        out = np.minimum(out, hi)
    return out


def _ort_node(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    import onnxruntime as ort
    from onnx import helper

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), None)
        for n, v in zip(names, inputs)
        if n
    ]
    out = helper.make_value_info("y", helper.TypeProto())  # typed by onnxruntime (an If's output is not its input's)
    g = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], "g", ins, [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: v for n, v in zip(names, inputs) if n})[0]


def _ort_delegated(step: dict[str, Any], inputs: list[Any], env: dict[str, Any]) -> list[Any]:
    """A delegated node of a record (op, domain, opset, typed attributes) run by onnxruntime."""
    import onnxruntime as ort
    from onnx import AttributeProto, helper, numpy_helper

    codes = {"int": AttributeProto.INT, "float": AttributeProto.FLOAT, "string": AttributeProto.STRING}
    codes.update(ints=AttributeProto.INTS, floats=AttributeProto.FLOATS, strings=AttributeProto.STRINGS)
    codes["tensor"] = AttributeProto.TENSOR
    attrs = []
    for name, (kind, v) in step["attrs"].items():
        if kind == "tensor":
            v = numpy_helper.from_array(np.asarray(env[v]), name)
        elif kind in ("string", "strings"):
            v = v.encode() if kind == "string" else [x.encode() for x in v]
        attrs.append(helper.make_attribute(name, v, attr_type=codes[kind]))
    node = helper.make_node(step["op"], step["inputs"], step["outputs"], domain=step["domain"])
    node.attribute.extend(attrs)
    feed = {n: v for n, v in zip(step["inputs"], inputs) if n}
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), None)
        for n, v in feed.items()
    ]
    outs = [helper.make_value_info(n, helper.TypeProto()) for n in step["outputs"] if n]
    g = helper.make_graph([node], "g", ins, outs)
    opsets = {step["domain"]: step["opset"]}
    opsets.setdefault("", 17)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()], ir_version=9)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([n for n in step["outputs"] if n], sess.run(None, feed)))
    return [got.get(n) for n in step["outputs"]]


def interpret(rec: dict[str, Any], tensors: dict[str, np.ndarray], inputs: list[Any]) -> list[Any]:
    """What a stored record says to compute, evaluated step by step with NumPy and onnxruntime."""
    env = {v: tensors["w." + k] for v, k in rec["weights"].items()}
    env.update(zip(rec["plan"]["inputs"], inputs, strict=True))
    for step in rec["plan"]["steps"]:
        kind = step["kind"]
        if kind == "kernel":
            arrays = [env[n] for n in step["inputs"]]
            vals: list[Any] = []
            for it in step["items"]:
                args = []
                for ref in it["args"]:
                    if ref is None:
                        args.append(None)
                    elif ref[0] == "a":
                        args.append(arrays[ref[1]])
                    elif ref[0] == "v":
                        args.append(vals[ref[1]])
                    else:
                        args.append(np.asarray(ref[2], dtype=ref[1]))
                vals.append(_np_item(it["op"], it["params"], args, it["dtype"]))
            for name, t, r in zip(step["outputs"], step["exports"], step["out_ranks"], strict=True):
                v = vals[t]
                env[name] = v.reshape((1,) * (r - v.ndim) + v.shape) if r > v.ndim else v
        elif kind == "matmul":
            env[step["outputs"][0]] = np.matmul(env[step["inputs"][0]], env[step["inputs"][1]])
        elif kind == "node":
            outs = _ort_delegated(step, [env[n] if n else None for n in step["inputs"]], env)
            env.update((n, v) for n, v in zip(step["outputs"], outs) if n)
        else:
            ins = [env[n] if n else None for n in step["inputs"]]
            while ins and ins[-1] is None:
                ins.pop()
            env[step["outputs"][0]] = _ort_node(kind.capitalize(), ins, step["attrs"])
    return [env[o] for o in rec["plan"]["outputs"]]


def oracle(c: Case, i: int, feed: dict[str, np.ndarray]) -> list[Any]:
    """The tampered context model ``i`` evaluated from what its files say: EPContext nodes by
    ``interpret`` of the record their partition_name names, other nodes by onnxruntime."""
    from onnx import numpy_helper

    model = c.model(i)
    env: dict[str, Any] = dict(feed)
    env.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    nodes = Case.nodes(model)
    for node in model.graph.node:
        if node.op_type == "EPContext":
            main = (
                node
                if Case.attr(node, "main_context") != 0
                else next(n for n in nodes if Case.attr(n, "main_context") == 1)
            )
            cache = bytes(Case.attr(main, "ep_cache_context"))
            data = (c.folder / cache.decode()).read_bytes() if Case.attr(main, "embed_mode") == 0 else cache
            meta, tensors = read_blob(data)
            rec = meta["graphs"][(Case.attr(node, "partition_name") or node.name.encode()).decode()]
            outs = interpret(rec, tensors, [env[n] for n in node.input])
        else:
            attrs = {a.name: _attr(a) for a in node.attribute}
            outs = [_ort_node(node.op_type, [env[n] for n in node.input], attrs)]
        env.update(zip(node.output, outs, strict=True))
    return [env[o.name] for o in model.graph.output]


def _attr(a: Any) -> Any:
    from onnx import helper

    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


# --------------------------------------------------------------------------- running
def _close(got: list[Any], want: list[Any]) -> bool:
    try:
        return len(got) == len(want) and all(
            np.shape(g) == np.shape(w)
            and np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=RTOL, atol=ATOL, equal_nan=True)
            for g, w in zip(got, want, strict=True)
        )
    except Exception:  # noqa: BLE001 - incomparable results are different results
        return False


def load_and_run(c: Case, feed: dict[str, np.ndarray], strict: bool = False) -> list[list[Any]]:
    from ep_core import InferenceSession, SessionOptions
    from ep_core.sdk.epcontext.sharing import reset_workspaces

    reset_workspaces()
    so = SessionOptions()
    if c.variant["share"]:
        so.add_session_config_entry("ep.share_ep_contexts", "1")
    if strict:
        so.add_session_config_entry("ep.context_require_signature", "1")
    # the per-machine kernel cache off: what loads is what the context holds (a kernel a tampered
    # record makes is compiled, and another case's compile is never a cache hit here)
    providers = [(NUMBA, {"kernel_cache": "0"})]
    sessions = [InferenceSession(str(c.folder / m), so, providers=providers) for m in c.variant["models"]]
    try:
        return [s.run(None, feed) for s in sessions]
    finally:
        for s in sessions:
            s.close()
        reset_workspaces()


def classify(
    c: Case, label: str, feed: dict[str, np.ndarray], expected: list[list[Any]], genuine: set[str]
) -> dict[str, Any]:
    from ep_core.sdk.errors import EpCoreError

    os.environ.pop(MARK, None)
    _events.clear()
    _unpickled.clear()
    error: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _state["recording"] = True
        try:
            got = load_and_run(c, feed)
        except Exception as exc:  # noqa: BLE001 - classified below
            error, got = exc, []
        finally:
            _state["recording"] = False
    warned = [str(w.message) for w in caught if "not loading its machine code" in str(w.message)]
    events = list(_events)
    if os.environ.get(MARK):
        events.append("planted code ran")
    events += [f"unpickled an unsigned payload {h[:12]}" for h in _unpickled if h not in genuine]
    rec: dict[str, Any] = {"case": label, "variant": c.variant["name"], "warned": bool(warned), "events": events}
    if error is not None:
        msg = getattr(error, "message", str(error))
        named = any(n.name in msg for i in range(len(c.variant["models"])) for n in Case.nodes(c.model(i)))
        named = named or any(f in msg for f in [c.variant.get("binary") or "", *c.variant["models"]] if f)
        if not isinstance(error, EpCoreError):
            outcome = "untyped-error"
        elif not named:
            outcome = "unnamed-error"
        else:
            outcome = "warned-error" if warned else "error"
        rec.update(
            outcome=outcome,
            status=getattr(getattr(error, "code", None), "value", type(error).__name__),
            detail=msg[:300],
        )
        return rec
    if all(_close(g, e) for g, e in zip(got, expected, strict=True)):
        rec["outcome"] = "warned-correct" if warned else "silent-correct"
        return rec
    if not warned:
        rec["outcome"] = "silent-wrong"
        return rec
    try:
        want = [oracle(c, i, feed) for i in range(len(c.variant["models"]))]
        ok = all(_close(g, w) for g, w in zip(got, want, strict=True))
    except Exception as exc:  # noqa: BLE001 - an edited model the oracle cannot evaluate
        ok, rec["detail"] = False, f"oracle: {type(exc).__name__}: {exc}"[:300]
    rec["outcome"] = "warned-model-change" if ok else "warned-wrong"
    return rec


def strict_refuses(c: Case, feed: dict[str, np.ndarray]) -> str:
    """Under ep.context_require_signature=1 a context that warned must be refused: '' when it is,
    else what happened."""
    from ep_core.sdk.errors import InvalidGraph

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_and_run(c, feed, strict=True)
    except InvalidGraph as exc:
        return "" if "ep.context_require_signature=1" in exc.message or "regenerate" in exc.message else exc.message
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"[:200]
    return "loaded"


def control(root: Path) -> list[str]:
    """Positive control: the hook sees planted code when it does run."""
    _state["warming"] = False
    _events.clear()
    _state["recording"] = True
    try:
        try:
            pickle.loads(PLANTED_PICKLE)
        except Exception:  # noqa: BLE001
            pass
        exec(compile(PLANTED_SOURCE, "<planted>", "exec"), {})  # noqa: S102 - the control plants it on purpose
    finally:
        _state["recording"] = False
    return list(_events) + (["planted code ran"] if os.environ.get(MARK) else [])


def main(argv: list[str]) -> None:
    root, out = Path(argv[0]), Path(argv[1])
    full = "--full" in argv
    if "--control" in argv:
        sys.addaudithook(_hook)
        out.write_text(json.dumps(control(root)))
        return
    sys.addaudithook(_hook)
    import ep_numba_cpu.codegen as codegen

    codegen.pickle = _PickleSpy()  # type: ignore[assignment]
    records = []
    for name in [a for a in argv[2:] if not a.startswith("--")]:
        src = root / name
        variant = json.loads((src / "case.json").read_text())
        feed = dict(np.load(src / "feed.npz"))
        exp = np.load(src / "expected.npz")
        expected = [[exp[f"{i}_{k}"] for k in range(variant["n_outputs"][i])] for i in range(len(variant["models"]))]
        genuine = Case(variant, src)
        meta, tensors = read_blob(genuine.blob())
        signed = {hashlib.sha256(p).hexdigest() for p in payloads(meta, tensors).values()}
        if variant["embed"] == 1:
            for k in range(len(Case.nodes(genuine.model()))):
                m, t = read_blob(genuine.blob(k))
                signed |= {hashlib.sha256(p).hexdigest() for p in payloads(m, t).values()}
        _state["warming"] = True
        load_and_run(genuine, feed)  # warm-up: imports done, the classes genuine payloads use recorded
        _state["warming"] = False
        work = Path(tempfile.mkdtemp(prefix=f"tamper_{name}_"))
        try:
            for k, (label, edit) in enumerate(cases_for(variant, genuine, full)):
                folder = work / f"c{k}"
                shutil.copytree(src, folder)
                c = Case(variant, folder)
                try:
                    edit(c)
                except Exception as exc:  # noqa: BLE001 - an edit that does not apply to this variant
                    records.append(
                        {
                            "case": label,
                            "variant": name,
                            "outcome": "not-applicable",
                            "detail": repr(exc)[:200],
                            "events": [],
                        }
                    )
                    continue
                rec = classify(c, label, feed, expected, signed)
                if rec["warned"] and rec["outcome"] != "error":
                    rec["strict"] = strict_refuses(c, feed)
                records.append(rec)
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    out.write_text(json.dumps(records))


if __name__ == "__main__":
    main(sys.argv[1:])

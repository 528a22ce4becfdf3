"""Context files are data: a context model written by this EP, tampered with as an attacker would,
never makes loading run code from the file and never gives a silently wrong result.

The context is ONE binary (safetensors: a JSON header with one record per graph, the constants
and PTX as tensors), embedded in the first EPContext node or beside the model; the second node is
a main_context=0 node finding its graph in it. An attacker edits every field of every graph record
(spec entries, constants, PTX entry), adds source-like fields, edits the EPContext nodes'
attributes (the signature lives in ``notes``), swaps partition names, records and binaries between
nodes, flips and truncates bytes, and "re-hashes": re-signs with a key of their own, or forges the
trusted key's id. Each case loads and runs in a subprocess (``tamper_harness.py``) under an audit
hook recording exec/compile of the planted marker, ``pickle.find_class`` and ``marshal.loads``.
Every outcome must be a typed error naming the node or file (or the core's model checks refusing
the edited graph), a result with a warning that is either correct or exactly what the edited file
says (the reference EP running the edited spec as plain ONNX), or a correct result (edits of
attributes that decide nothing, e.g. ``hardware_architecture``)."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import REF, session

SHAPE = [2, 3, 4]
MARK = "PWNED_" + uuid.uuid4().hex[:12]
INJECT = [
    f"__import__('os').environ.__setitem__('{MARK}', '1')",
    f"x0) or __import__('os').environ.__setitem__('{MARK}', '1') or (x0",
    f"0\n        __import__('os').environ['{MARK}'] = '1'\n",
]
CORE_CHECKS = ("INVALID_GRAPH: the model is invalid", "INVALID_GRAPH: the compiled model cannot run on")
HARNESS = Path(__file__).with_name("tamper_harness.py")
SAME_FAMILY = {"Add": "Sub", "Sub": "Add", "Mul": "Div", "Sigmoid": "Tanh", "Gelu": "Sigmoid", "Clip": "HardSigmoid"}
SAME_FAMILY |= {"LeakyRelu": "Elu", "Cast": "Identity"}


def source_model() -> onnx.ModelProto:
    """Two fused groups around a Transpose: A = Clip(Sigmoid((x + b) * c)); B = Cast(Where(m,
    LeakyRelu(Gelu(u - d)), u)) with LeakyRelu's output also a graph output."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.2), ("hi", 0.7))]
    rng = np.random.default_rng(3)  # b and d are constants: the context binary stores them
    inits.append(numpy_helper.from_array(rng.normal(size=[4]).astype(np.float32), "b"))
    inits.append(numpy_helper.from_array(np.array([0.1, 0.5, 0.9], np.float32), "d"))  # u - d of both signs
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a0"], name="add"),
        helper.make_node("Mul", ["a0", "c"], ["a1"], name="mul"),
        helper.make_node("Sigmoid", ["a1"], ["a2"], name="sigmoid"),
        helper.make_node("Clip", ["a2", "lo", "hi"], ["a3"], name="clip"),
        helper.make_node("Transpose", ["a3"], ["u"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Sub", ["u", "d"], ["b0"], name="sub"),
        helper.make_node("Gelu", ["b0"], ["b1"], name="gelu", approximate="tanh"),
        helper.make_node("LeakyRelu", ["b1"], ["g"], name="leaky", alpha=0.3),
        helper.make_node("Where", ["m", "g", "u"], ["b3"], name="where"),
        helper.make_node("Cast", ["b3"], ["y"], name="cast", to=TensorProto.DOUBLE),
    ]
    t = [2, 4, 3]
    graph = helper.make_graph(
        nodes,
        "two_groups",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 1]),
            helper.make_tensor_value_info("m", TensorProto.BOOL, t),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.DOUBLE, t),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, t),
        ],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.normal(size=SHAPE).astype(np.float32),
        "c": rng.normal(size=[3, 1]).astype(np.float32),
        "m": rng.random(size=[2, 4, 3]) > 0.4,
    }


def generate(folder: Path, embed: int) -> Path:
    from ep_core import SessionOptions

    folder.mkdir()
    src = folder / "model.onnx"
    onnx.save(source_model(), src)
    opts = SessionOptions()
    opts.add_session_config_entry("ep.context_enable", "1")
    opts.add_session_config_entry("ep.context_embed_mode", str(embed))
    return Path(session(str(src), sess_options=opts).context_model_path)


# ----------------------------------------------------------------------------- tampering


class Ctx:
    """A context model being tampered with: its proto and its side files (name -> bytes). Node i's
    "payload" is its graph's record in the one context binary; editing one rewrites the binary and
    drops the primary's (unsigned) ``binary_sha256`` note, as an attacker would."""

    def __init__(self, model: onnx.ModelProto, files: dict[str, bytes]) -> None:
        self.model, self.files = model, files
        self.graphs = [self.graph_name(n) for n in self.nodes]

    @property
    def nodes(self) -> list[Any]:
        return [n for n in self.model.graph.node if n.op_type == "EPContext"]

    @staticmethod
    def attr(node: Any, name: str) -> Any:
        return next((a for a in node.attribute if a.name == name), None)

    @classmethod
    def graph_name(cls, node: Any) -> str:
        a = cls.attr(node, "partition_name")
        return a.s.decode() if a is not None and a.s else node.name

    def binary(self) -> bytes:
        node = self.nodes[0]
        raw = self.attr(node, "ep_cache_context").s
        return self.files[raw.decode()] if self.attr(node, "embed_mode").i == 0 else raw

    def set_binary(self, data: bytes, keep_sha: bool = False) -> None:
        node = self.nodes[0]
        a = self.attr(node, "ep_cache_context")
        if self.attr(node, "embed_mode").i == 0:
            self.files[a.s.decode()] = data
        else:
            a.s = data
        if not keep_sha:  # the unsigned size and sha256 notes, made to agree with the edit
            notes = self.notes(0)
            notes.pop("binary_sha256", None)
            self.set_notes(0, notes)
            size = self.attr(node, "max_size")
            if size is not None:
                size.i = len(data)

    def notes(self, i: int) -> dict[str, Any]:
        return json.loads(self.attr(self.nodes[i], "notes").s)

    def set_notes(self, i: int, notes: dict[str, Any]) -> None:
        self.attr(self.nodes[i], "notes").s = json.dumps(notes).encode()

    def meta(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from ep_cuda_numba import context_binary

        return context_binary.read(self.binary(), AssertionError)

    def set_meta(self, meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        from ep_cuda_numba import context_binary

        weights = {k[2:]: v for k, v in tensors.items() if k.startswith("w.")}
        ptx = {k[4:]: v.tobytes() for k, v in tensors.items() if k.startswith("ptx.")}
        self.set_binary(context_binary.pack(meta["graphs"], weights, ptx))

    def payload(self, i: int) -> dict[str, Any]:
        return copy.deepcopy(self.meta()[0]["graphs"][self.graphs[i]])

    def set_payload(self, i: int, p: Any) -> None:
        meta, tensors = self.meta()
        meta["graphs"][self.graphs[i]] = p
        self.set_meta(meta, tensors)


def own_key() -> bytes:
    from ep_core.sdk.epcontext import signing

    return signing.own_key()


def resign(ctx: Ctx, i: int, key: bytes, forge_id: bool = False) -> None:
    """Sign node ``i``'s binding and (edited) graph record as an attacker can: with a key of their
    own, or with the trusted key's id and their own digest."""
    from ep_core.sdk.epcontext import signing
    from ep_cuda_numba import context_binary
    from ep_cuda_numba.epcontext import _binding

    node = ctx.nodes[i]
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    attrs = {k: v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for k, v in a.items()}
    main, embed = attrs.get("main_context", 1), attrs.get("embed_mode", 1)
    attrs["context_file"] = attrs.get("ep_cache_context", "") if main == 1 and embed == 0 else ""
    attrs.setdefault("partition_name", "")
    attrs["main_context"], attrs["embed_mode"] = main, embed
    graphs = ctx.meta()[0]["graphs"]
    record = graphs.get(Ctx.graph_name(node), ctx.payload(i))
    parts = context_binary.signed_parts(
        _binding(node.name, attrs, list(node.input), list(node.output)), context_binary.graph_digest(record)
    )
    digest = hmac.new(key, signing.canonical(parts), hashlib.sha256).hexdigest()
    kid = signing.key_id(signing.own_key()) if forge_id else signing.key_id(key)
    notes = ctx.notes(i)
    notes["signature"] = f"{signing.SCHEME}:{kid}:{digest}"
    ctx.set_notes(i, notes)


def leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, (*path, k))
    elif isinstance(obj, list) and obj:
        for k, v in enumerate(obj):
            yield from leaves(v, (*path, k))
    else:
        yield path, obj


def set_at(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def leaf_values(path: tuple[Any, ...], value: Any) -> list[tuple[str, Any]]:
    """(label, new value) an attacker tries for one leaf: injected code, wrong types, out-of-range
    and plausible-but-different values."""
    out: list[tuple[str, Any]] = [("inject", INJECT[len(path) % len(INJECT)])]
    if isinstance(value, bool) or value is None:
        return [*out, ("flip", not value), ("int", 7)]
    if isinstance(value, int):
        return [
            *out,
            ("-1", -1),
            ("big", 10**12),
            ("bool", True),
            ("float", value + 0.5),
            ("null", None),
            ("+1", value + 1),
        ]
    if isinstance(value, float):
        return [*out, ("nan", float("nan")), ("inf", float("inf")), ("x2", value * 2 - 0.25), ("str", str(value))]
    if isinstance(value, str):
        key = path[-1]
        if key == "op":
            out += [("same-family", SAME_FAMILY.get(value, "Add")), ("unknown", "Einsum")]
        elif key in ("dtype", "out_dtype") or (len(path) > 1 and path[-2] == "input_dtypes"):
            out += [("other", "float64" if value != "float64" else "float32"), ("object", "O"), ("struct", "i4,f4")]
        elif key == "approximate":
            out += [("none", "none"), ("bad", "exact")]
        elif key == 0 and value in ("x", "t"):
            out += [("kind", "t" if value == "x" else "x"), ("other", "p")]
        else:
            out += [("empty", ""), ("other", value + "_")]
        return [*out, ("int", 3)]
    return out


Case = tuple[str, Callable[[Ctx], None], bool]  # (id, edit, strict)


def spec_cases(base: Ctx) -> Iterator[Case]:
    """Every leaf of every graph record, edited; the plausible edits also re-signed with an
    attacker's key and with a forged key id; injected strings also in a strict session. Then the
    binary as a whole: old formats, deep JSON, flipped and truncated bytes."""
    key = os.urandom(32)
    for i in range(len(base.nodes)):
        yield f"n{i}.signature.inject", lambda c, i=i: _note(c, i, "signature", INJECT[0]), False
        yield f"n{i}.signature.drop", lambda c, i=i: _note(c, i, "signature", None), False
        for path, value in list(leaves(base.payload(i))):
            for label, new in leaf_values(path, value):
                cid = f"n{i}.{'.'.join(map(str, path))}={label}"

                def edit(c: Ctx, i: int = i, path: tuple[Any, ...] = path, new: Any = new) -> None:
                    _edit(c, i, path, new)

                yield cid, edit, False
                if label in ("same-family", "x2", "+1", "none", "other", "kind"):
                    yield cid + "+resigned", lambda c, e=edit, i=i: (e(c), resign(c, i, key)), False
                    yield cid + "+forged-id", lambda c, e=edit, i=i: (e(c), resign(c, i, key, True)), False
                if label in ("inject", "same-family"):
                    yield cid + "+strict", edit, True
                if label == "inject":  # validation does not lean on the signature
                    yield cid + "+trusted-key", lambda c, e=edit, i=i: (e(c), resign(c, i, own_key())), False
        for extra in ("source", "code", "cubin", "graph"):
            yield f"n{i}.+{extra}", lambda c, i=i, k=extra: _edit(c, i, (k,), INJECT[0]), False
            yield (
                f"n{i}.+{extra}+resigned",
                lambda c, i=i, k=extra: (_edit(c, i, (k,), INJECT[0]), resign(c, i, key)),
                False,
            )
        yield f"n{i}.ptx=inject", lambda c, i=i: _edit(c, i, ("ptx",), {"sha256": INJECT[0]}), False
        yield f"n{i}.ptx=fake+resigned", lambda c, i=i: (_fake_ptx(c, i), resign(c, i, key)), False
        yield f"n{i}.ptx=fake+trusted-key", lambda c, i=i: (_fake_ptx(c, i), resign(c, i, own_key())), False
        yield f"n{i}.spec.+expr", lambda c, i=i: _edit(c, i, ("spec", "nodes", 0, "expr"), INJECT[1]), False
        yield f"n{i}.spec.+source", lambda c, i=i: _edit(c, i, ("spec", "source"), INJECT[0]), False
        for key_ in ("spec", "constants", "ptx"):
            yield f"n{i}.-{key_}", lambda c, i=i, k=key_: _drop(c, i, (k,)), False
        yield f"n{i}.spec.nodes=[]", lambda c, i=i: _edit(c, i, ("spec", "nodes"), []), False
        yield f"n{i}.spec.nodes.dup", lambda c, i=i: _dup_node(c, i), False
        yield f"n{i}.spec.nodes.reverse", lambda c, i=i: _reverse(c, i), False
        yield f"n{i}.spec.nodes.attrs+", lambda c, i=i: _edit(c, i, ("spec", "nodes", 0, "attrs", "to"), 11), False
        yield f"n{i}.dup-key-graph", lambda c, i=i: _dup_key(c, i), False
        yield f"n{i}.constants.weight-swapped", lambda c, i=i: _swap_weight(c, i), False
    yield "binary.old-format", lambda c: _old_format(c), False
    yield "binary.header-format", lambda c: _header(c, "format", "ep_cuda_numba.fused/2"), False
    yield "binary.header+source", lambda c: _header(c, "source", INJECT[0]), False
    yield "binary.deep-json", lambda c: c.set_binary(b"[" * 200000 + b"]" * 200000), False
    yield "binary.not-utf8", lambda c: c.set_binary(b"\xff\xfe" + c.binary()), False
    yield "binary.huge-header", lambda c: c.set_binary((1 << 40).to_bytes(8, "little") + c.binary()[8:]), False
    yield "binary.edit+keep-sha", lambda c: _flip(c, 0.9, 1, keep_sha=True), False
    rng = random.Random(0)
    for j in range(24):
        yield f"binary.bytes{j}", lambda c, s=rng.random(), v=rng.randrange(256): _flip(c, s, v), False
    for frac in (0.1, 0.5, 0.99):
        yield f"binary.truncate{frac}", lambda c, f=frac: c.set_binary(c.binary()[: int(f * len(c.binary()))]), False


def _note(c: Ctx, i: int, key: str, value: Any) -> None:
    notes = c.notes(i)
    if value is None:
        notes.pop(key, None)
    else:
        notes[key] = value
    c.set_notes(i, notes)


def _fake_ptx(c: Ctx, i: int) -> None:
    """A PTX entry for a device like this one's, with bytes of the attacker's choosing."""
    from ep_cuda_numba import context_binary, context_ptx

    meta, tensors = c.meta()
    ptx = f"// {INJECT[0]}\n.visible .entry _Z12fused_kernel()\n{{\n}}\n".encode()
    sha = context_binary.sha256(ptx)
    info = {"cc": [8, 0, ""], "driver": "12.4", "numba_cuda": context_ptx.numba_cuda_version(), "ep_version": "0.2.0"}
    meta["graphs"][c.graphs[i]]["ptx"] = {"sha256": sha, "entry": "_Z12fused_kernel", **info}
    tensors[f"ptx.{sha}"] = np.frombuffer(ptx, dtype=np.uint8)
    c.set_meta(meta, tensors)


def _swap_weight(c: Ctx, i: int) -> None:
    """Replace graph i's first constant's bytes (same key, dtype and shape) with other values."""
    meta, tensors = c.meta()
    consts = meta["graphs"][c.graphs[i]]["constants"]
    if consts:
        k = f"w.{consts[0]['key']}"
        tensors[k] = (tensors[k] * 2 + 1).astype(tensors[k].dtype)
    c.set_meta(meta, tensors)


def _header(c: Ctx, key: str, value: Any) -> None:
    meta, tensors = c.meta()
    meta[key] = value
    from safetensors.numpy import save

    c.set_binary(save(dict(tensors), metadata={"ep_cuda_numba": json.dumps(meta)}))


def _edit(c: Ctx, i: int, path: tuple[Any, ...], new: Any) -> None:
    p = c.payload(i)
    set_at(p, path, new)
    c.set_payload(i, p)


def _drop(c: Ctx, i: int, path: tuple[Any, ...]) -> None:
    p = c.payload(i)
    obj = p
    for k in path[:-1]:
        obj = obj[k]
    del obj[path[-1]]
    c.set_payload(i, p)


def _dup_node(c: Ctx, i: int) -> None:
    p = c.payload(i)
    p["spec"]["nodes"].append(copy.deepcopy(p["spec"]["nodes"][-1]))
    c.set_payload(i, p)


def _reverse(c: Ctx, i: int) -> None:
    p = c.payload(i)
    p["spec"]["nodes"].reverse()
    c.set_payload(i, p)


def _old_format(c: Ctx) -> None:
    """The previous layout's per-group JSON payload (with kernel source) in place of the binary."""
    p = {"format": "ep_cuda_numba.fused/1", "graph": c.graphs[0], "spec": c.payload(0)["spec"]}
    p["source"], p["ptx"] = f"def fused_kernel(o0):\n    {INJECT[0]}\n", None
    c.set_binary(json.dumps(p).encode())


def _dup_key(c: Ctx, i: int) -> None:
    """Graph i's record twice in the header's graph table (JSON parsers keep the last), the second
    with an edited op."""
    from safetensors.numpy import save

    meta, tensors = c.meta()
    edited = copy.deepcopy(meta["graphs"][c.graphs[i]])
    edited["spec"]["nodes"][0]["op"] = SAME_FAMILY.get(edited["spec"]["nodes"][0]["op"], "Add")
    table = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta["graphs"].items())
    table += f", {json.dumps(c.graphs[i])}: {json.dumps(edited)}"
    text = f'{{"ep_version": {json.dumps(meta["ep_version"])}, "format": {json.dumps(meta["format"])}, '
    text += f'"graphs": {{{table}}}}}'
    c.set_binary(save(dict(tensors), metadata={"ep_cuda_numba": text}))


def _flip(c: Ctx, where: float, value: int, keep_sha: bool = False) -> None:
    data = bytearray(c.binary())
    data[int(where * len(data))] ^= value or 1
    c.set_binary(bytes(data), keep_sha=keep_sha)


def _set_attr(node: Any, name: str, value: Any) -> None:
    a = next((x for x in node.attribute if x.name == name), None)
    if a is not None:
        node.attribute.remove(a)
    if value is not None:
        node.attribute.append(helper.make_attribute(name, value))


def _swap_attr(c: Ctx, name: str) -> None:
    n0, n1 = c.nodes[0], c.nodes[1]
    a0, a1 = Ctx.attr(n0, name), Ctx.attr(n1, name)
    v0 = None if a0 is None else helper.get_attribute_value(a0)
    v1 = None if a1 is None else helper.get_attribute_value(a1)
    _set_attr(n0, name, v1)
    _set_attr(n1, name, v0)


def node_cases() -> Iterator[Case]:
    """The EPContext nodes' attributes, inputs and outputs, and swaps between the two nodes."""
    for i in (0, 1):
        for name, values in {
            "partition_name": ["", "other", INJECT[0]],
            "source": ["CpuReferenceExecutionProvider", INJECT[0]],
            "main_context": [0, 2],
            "embed_mode": [0, 2],
            "notes": [INJECT[0]],
            "hardware_architecture": ["sm_90", INJECT[0]],
            "ep_sdk_version": [INJECT[0]],
            "onnx_model_filename": [INJECT[0]],
            "max_size": [10**9],
            "ep_cache_context": [INJECT[0].encode(), b"", b"../../etc/passwd", b"/etc/passwd"],
        }.items():
            for v in values:
                yield f"node{i}.{name}={str(v)[:20]!r}", lambda c, i=i, n=name, v=v: _set_attr(c.nodes[i], n, v), False
            yield f"node{i}.-{name}", lambda c, i=i, n=name: _set_attr(c.nodes[i], n, None), False
        yield f"node{i}.name={INJECT[0][:10]!r}", lambda c, i=i: setattr(c.nodes[i], "name", INJECT[0]), False
        yield f"node{i}.inputs.reversed", lambda c, i=i: _reverse_io(c.nodes[i].input), False
        yield f"node{i}.outputs.renamed", lambda c, i=i: _rename_output(c, i), False
        yield f"node{i}.domain", lambda c, i=i: setattr(c.nodes[i], "domain", ""), False
    yield "swap.partition_name", lambda c: _swap_attr(c, "partition_name"), False
    yield "swap.ep_cache_context", lambda c: _swap_attr(c, "ep_cache_context"), False
    yield "swap.names+partition_name", lambda c: (_swap_attr(c, "partition_name"), _swap_names(c)), False
    yield (
        "swap.payload+partition",
        lambda c: (_swap_attr(c, "ep_cache_context"), _swap_attr(c, "partition_name")),
        False,
    )
    yield "swap.all-attributes", lambda c: _swap_all(c), False
    yield "relabel.partition_name+graph", lambda c: _swap_graphs(c), False  # own spec, new labels
    yield "copy.payload0->1", lambda c: c.set_payload(1, c.payload(0)), False
    yield "metadata.compat", lambda c: _compat(c, lambda v: v.replace("target=sim", "target=sm_90")), False
    yield "metadata.compat-inject", lambda c: _compat(c, lambda v: INJECT[0]), False
    yield "metadata.compat-drop", lambda c: _compat(c, None), False


def _reverse_io(field: Any) -> None:
    items = list(field)[::-1]
    del field[:]
    field.extend(items)


def _rename_output(c: Ctx, i: int) -> None:
    """Rename an output of node i and its uses (a consistent graph edit)."""
    old = c.nodes[i].output[0]
    for n in c.model.graph.node:
        for j, v in enumerate(n.input):
            if v == old:
                n.input[j] = old + "_r"
    for o in c.model.graph.output:
        if o.name == old:
            o.name = old + "_r"
    c.nodes[i].output[0] = old + "_r"


def _swap_names(c: Ctx) -> None:
    c.nodes[0].name, c.nodes[1].name = c.nodes[1].name, c.nodes[0].name


def _swap_all(c: Ctx) -> None:
    a0, a1 = list(c.nodes[0].attribute), list(c.nodes[1].attribute)
    del c.nodes[0].attribute[:]
    del c.nodes[1].attribute[:]
    c.nodes[0].attribute.extend(a1)
    c.nodes[1].attribute.extend(a0)
    _swap_names(c)


def _swap_graphs(c: Ctx) -> None:
    """Swap partition names and the records' names in the binary: each node still finds its own
    graph, under the other's label."""
    meta, tensors = c.meta()
    g0, g1 = c.graphs
    meta["graphs"][g0], meta["graphs"][g1] = meta["graphs"][g1], meta["graphs"][g0]
    c.set_meta(meta, tensors)
    _swap_attr(c, "partition_name")


def _compat(c: Ctx, change: Callable[[str], str] | None) -> None:
    for p in list(c.model.metadata_props):
        if p.key.startswith("ep_compatibility_info"):
            if change is None:
                c.model.metadata_props.remove(p)
            else:
                p.value = change(p.value)


def file_cases() -> Iterator[Case]:
    """embed_mode=0: the binary file swapped, replaced, redirected."""
    key = os.urandom(32)
    yield "file.swap-names", lambda c: _swap_attr(c, "ep_cache_context"), False
    yield "file.swap-records", lambda c: _swap_records(c), False
    yield "file.swap-records+resigned", lambda c: (_swap_records(c), resign(c, 0, key), resign(c, 1, key)), False
    yield "file.missing", lambda c: c.files.pop(Ctx.attr(c.nodes[0], "ep_cache_context").s.decode()), False
    yield "file.edit-op", lambda c: _edit(c, 0, ("spec", "nodes", 0, "op"), "Sub"), False
    yield "file.edit-op+resigned", lambda c: (_edit(c, 0, ("spec", "nodes", 0, "op"), "Sub"), resign(c, 0, key)), False
    yield "file.inject-op", lambda c: _edit(c, 1, ("spec", "nodes", 0, "op"), INJECT[0]), False
    yield "file.+source", lambda c: _edit(c, 0, ("source",), INJECT[0]), False
    yield "file.huge", lambda c: c.set_binary(b" " * (2 << 20) + c.binary()), False
    yield "file.max_size", lambda c: _set_attr(c.nodes[0], "max_size", 64), False
    yield "file.to-model", lambda c: _set_attr(c.nodes[0], "ep_cache_context", b"model_ctx.onnx"), False
    yield "file.outside", lambda c: _set_attr(c.nodes[0], "ep_cache_context", b"../outside.bin"), False
    yield "file.symlink-out", lambda c: c.files.__setitem__("@symlink", b"/etc/hostname"), False
    yield "file.embed1-with-path", lambda c: _set_attr(c.nodes[0], "embed_mode", 1), False


def _swap_records(c: Ctx) -> None:
    meta, tensors = c.meta()
    g0, g1 = c.graphs
    meta["graphs"][g0], meta["graphs"][g1] = meta["graphs"][g1], meta["graphs"][g0]
    c.set_meta(meta, tensors)


def write_case(base: Ctx, edit: Callable[[Ctx], None], folder: Path) -> Path:
    c = Ctx(copy.deepcopy(base.model), dict(base.files))
    edit(c)
    folder.mkdir()
    target = c.files.pop("@symlink", None)
    for rel, data in c.files.items():
        (folder / rel).write_bytes(data)
    if target is not None:  # the first node's context file becomes a link out of the folder
        rel = Ctx.attr(c.nodes[0], "ep_cache_context").s.decode()
        (folder / rel).unlink()
        (folder / rel).symlink_to(target.decode())
    path = folder / "model_ctx.onnx"
    path.write_bytes(c.model.SerializeToString())
    return path


# ------------------------------------------------------------------------------------ test


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tamper")
    out: dict[str, Any] = {"root": root}
    for embed in (1, 0):
        ctx_path = generate(root / f"gen{embed}", embed)
        model = onnx.load(str(ctx_path))
        files = {p.name: p.read_bytes() for p in ctx_path.parent.glob("*.bin")}
        out[embed] = (ctx_path, Ctx(model, files))
    f = feeds()
    expected = session(source_model(), [REF]).run(None, f)
    np.savez(
        root / "data.npz",
        **{f"feed_{k}": v for k, v in f.items()},
        **{f"expected_{i}": v for i, v in enumerate(expected)},
    )
    out["source"] = root / "gen1" / "model.onnx"
    return out


def test_the_generated_contexts_are_two_fused_groups_that_run_correctly(contexts: dict[str, Any]) -> None:
    for embed in (1, 0):
        ctx_path, ctx = contexts[embed]
        assert len(ctx.nodes) == 2 and [n.op_type for n in ctx.model.graph.node].count("Transpose") == 1
        assert [Ctx.attr(n, "main_context").i for n in ctx.nodes] == [1, 0]
        assert len(ctx.files) == (1 if embed == 0 else 0) and len(ctx.meta()[0]["graphs"]) == 2
        assert len([k for k in ctx.meta()[1] if k.startswith("w.")]) == 2  # b and d


def test_tampered_contexts_never_run_file_code_and_never_give_silent_wrong_results(contexts: dict[str, Any]) -> None:
    root: Path = contexts["root"]
    _, base1 = contexts[1]
    _, base0 = contexts[0]
    cases: list[dict[str, Any]] = [
        {"id": "untampered.embed1", "model": str(contexts[1][0]), "strict": False, "names": []},
        {"id": "untampered.embed0", "model": str(contexts[0][0]), "strict": False, "names": []},
        {"id": "untampered.embed1+strict", "model": str(contexts[1][0]), "strict": True, "names": []},
    ]
    groups = [(base1, spec_cases(base1)), (base1, node_cases()), (base0, file_cases()), (base0, node_cases())]
    for k, (base, gen) in enumerate(groups):
        for j, (cid, edit, strict) in enumerate(gen):
            folder = root / f"case{k}_{j}"
            path = write_case(base, edit, folder)
            names = [str(folder), *(n.name for n in onnx.load(str(path)).graph.node if n.op_type == "EPContext")]
            cases.append(
                {
                    "id": f"{'embed0.' if base is base0 else ''}{cid}",
                    "model": str(path),
                    "strict": strict,
                    "names": names,
                }
            )
    batches = [cases[i::2] for i in range(2)]
    records: list[dict[str, Any]] = []
    for b, batch in enumerate(batches):
        manifest = root / f"manifest{b}.json"
        result = root / f"result{b}.json"
        manifest.write_text(
            json.dumps(
                {
                    "data": str(root / "data.npz"),
                    "warmup": [str(contexts[1][0]), str(contexts[0][0])],
                    "source": str(contexts["source"]),
                    "cases": batch,
                }
            )
        )
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        proc = subprocess.run(
            [sys.executable, str(HARNESS), str(manifest), str(result), MARK],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        got = json.loads(result.read_text())
        assert got["self_check"] == [
            "compile",
            "exec",
            "pickle.find_class ('collections', 'OrderedDict')",
            "marshal.loads",
        ]
        records += got["records"]
    by_id = {r["id"]: r for r in records}
    outcomes: Counter[str] = Counter()
    failures = []
    for r in records:
        kind = _classify(r)
        outcomes[kind] += 1
        if kind.startswith("FAIL"):
            failures.append(f"{r['id']}: {kind}: {json.dumps(r)[:600]}")
    print(f"\ncontext tampering ({len(records)} cases): " + ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items())))
    assert not failures, "\n".join(failures[:30])
    for untouched in ("untampered.embed1", "untampered.embed0", "untampered.embed1+strict"):
        assert _classify(by_id[untouched]) == "correct", by_id[untouched]
    assert len(records) >= 400
    # the suite can fail: edits are refused, edited computations run with a warning, strict refuses
    assert outcomes["typed error naming node/file"] >= 200 and outcomes["warning + edited computation"] >= 10
    assert "which this user does not trust" in by_id["n0.spec.nodes.0.op=same-family+resigned"]["warning"]
    assert "modified after signing" in by_id["n0.spec.nodes.0.op=same-family+forged-id"]["warning"]
    assert "context_require_signature=1 refuses" in by_id["n0.spec.nodes.0.op=same-family+strict"]["error"]
    assert "not an elementwise op" in by_id["n0.spec.nodes.0.op=inject+trusted-key"]["error"]
    assert "differs from its sha256" in by_id["n0.constants.weight-swapped"]["error"]
    assert "corrupt or was replaced" in by_id["binary.edit+keep-sha"]["error"]
    assert "main_context=0 but an ep_cache_context" in by_id[f"node1.ep_cache_context={str(b'/etc/passwd')!r}"]["error"]
    # PTX the attacker stored and signed with their key is never loaded; with the trusted key it is
    # hash-checked, then (no real device here, or not this one) the kernel is rebuilt from the spec
    assert _classify(by_id["n0.ptx=fake+resigned"]) == "warning + correct result"
    assert _classify(by_id["n0.ptx=fake+trusted-key"]) == "correct"
    swaps = [r for r in records if "swap" in r["id"] or "copy." in r["id"]]
    assert len(swaps) >= 15 and all(r.get("error", "").startswith("INVALID_GRAPH") for r in swaps), swaps


def _classify(r: dict[str, Any]) -> str:
    if r["executed"]:
        return "FAIL: file-provided code ran"
    if "untyped" in r:
        return "FAIL: untyped error"
    if "error" in r:
        msg = r["error"]
        if any(name and name in msg for name in r["names"]):
            return "typed error naming node/file"
        if msg.startswith(CORE_CHECKS):  # the graph no longer passes the core's model checks
            return "typed error from the core's model checks"
        return "FAIL: error names neither the node nor the file"
    result = r.get("result")
    if r["warning"]:
        return {"correct": "warning + correct result", "edited": "warning + edited computation"}.get(
            result, "FAIL: wrong result despite warning"
        )
    return "correct" if result == "correct" else "FAIL: silent wrong result"

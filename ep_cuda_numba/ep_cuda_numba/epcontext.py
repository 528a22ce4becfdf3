"""The EP side of EPContext, per the EP Context design: ONE context binary per model (or per
sharing group), ``[model_name]_NumbaCudaExecutionProvider.bin`` beside the context model
(``ep.context_embed_mode=0``) or embedded in the first node (``=1``).

Writing: the first EPContext node is the primary (``main_context=1``, ``ep_cache_context`` = the
binary or its relative path); every other node has ``main_context=0`` and no ``ep_cache_context``:
it finds its graph in the model's primary by ``partition_name``. Every node carries every design
attribute (``ep_sdk_version``, ``onnx_model_filename``, ``hardware_architecture``,
``partition_name``, ``source``, ``notes`` with its signature; ``max_size`` = the binary's size on
the primary where it is known). With ``ep.share_ep_contexts=1`` the sessions of a group add their
graphs, constants (stored once by content hash) and PTX to one workspace and the last one
(``ep.stop_share_ep_contexts=1``) writes the binary named after the first model.

Loading: the binary is data (``context_binary``: safetensors + JSON, never pickle or code), read
once per session, or once per sharing group (the first session parks the other models' graphs).
Each graph's spec is validated (``spec_check``), bound to the node (inputs, outputs, declared
dtypes, constants by hash) and the kernel regenerated from it; its stored PTX is used only when
``context_ptx.decide`` allows. Every failed check is ``InvalidGraph`` naming the node and the file.
A node not signed by a trusted key loads with a warning (what runs is what the file says) or is
refused under ``ep.context_require_signature=1``."""

from __future__ import annotations

import json
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.epcontext import signing
from ep_core.sdk.epcontext.sharing import is_last_sharing_session, sharing_enabled, workspace
from ep_core.sdk.errors import ConfigError, InvalidGraph
from ep_cuda_numba import EP_NAME, __version__, context_binary, context_ptx
from ep_cuda_numba.spec_check import SPEC_FORMAT, validate_spec

if TYPE_CHECKING:
    from ep_core.sdk.devices import HardwareDevice
    from ep_core.sdk.epcontext.output import ContextOutput
    from ep_core.sdk.epcontext.payload import ContextNode
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelContext
    from ep_cuda_numba.fusion import CompiledGroup

SOURCES = (EP_NAME, "NumbaCuda")
COMPAT_PREFIX = "ep_cuda_numba"
READS: Counter[str] = Counter()  # context binary location -> times read and parsed (tests, profiling)


# ------------------------------------------------------------------------- compatibility
def _target(device_id: int = 0) -> str:
    info = context_ptx.here(device_id)
    return "sim" if info is None else f"sm_{info['cc'][0]}{info['cc'][1]}"


def compatibility_info(device_id: int = 0) -> str:
    """``ep_cuda_numba=<ver>;spec=<n>;numba_cuda=<ver>;target=<sm_XY|sim>;driver=<x.y|none>``."""
    info = context_ptx.here(device_id)
    driver = "none" if info is None else info["driver"]
    return (
        f"{COMPAT_PREFIX}={__version__};spec={SPEC_FORMAT};numba_cuda={context_ptx.numba_cuda_version()};"
        f"target={_target(device_id)};driver={driver}"
    )


def _parse(info: str) -> dict[str, str]:
    out = {}
    for part in info.split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def validate_compatibility(devices: Sequence["HardwareDevice"], info: str) -> str:
    rec = _parse(info)
    if COMPAT_PREFIX not in rec or "spec" not in rec:
        return f"UNSUPPORTED: {info!r} was not written by {EP_NAME}"
    if rec["spec"] != str(SPEC_FORMAT):
        return f"UNSUPPORTED: fusion spec format {rec['spec']} but this {EP_NAME} reads format {SPEC_FORMAT}"
    here = "sim" if any(d.metadata.get("simulated") == "1" for d in devices) else None
    if here is None:
        ccs = {d.metadata.get("compute_capability", "") for d in devices}
        here = ",".join(sorted("sm_" + c.replace(".", "") for c in ccs if c)) or "unknown"
    if rec.get("target") != here:
        return (
            f"SUPPORTED_PREFER_RECOMPILATION: compiled for {rec.get('target')}, running on {here}; kernels are "
            "regenerated from the recorded specs (stored PTX is used only on the device it was built for)"
        )
    if rec.get(COMPAT_PREFIX) != __version__:
        return f"SUPPORTED_PREFER_RECOMPILATION: compiled by {EP_NAME} {rec.get(COMPAT_PREFIX)}, this is {__version__}"
    driver = "none" if here == "sim" else context_ptx.driver_version()
    if "driver" in rec and rec["driver"] != driver:
        return (
            f"SUPPORTED_PREFER_RECOMPILATION: compiled with CUDA driver {rec['driver']}, this is {driver}; the stored "
            "PTX is not used, kernels are regenerated from the recorded specs"
        )
    return "SUPPORTED_OPTIMAL"


# ------------------------------------------------------------------------------- writing
@dataclass
class _Generated:
    """What one session contributes to a binary."""

    records: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    ptx: dict[str, bytes] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # graph -> what was stored of its PTX


def _generate(groups: Sequence["CompiledGroup"], device_id: int) -> _Generated:
    gen = _Generated()
    for g in groups:
        consts = []
        for i in sorted(g.constants):
            arr = g.constants[i]
            key = context_binary.weight_key(arr)
            gen.weights.setdefault(key, arr)
            consts.append({"input": i, "key": key, "dtype": str(arr.dtype), "shape": [int(d) for d in arr.shape]})
        entry, ptx, note = context_ptx.generate(g, device_id)
        if entry is not None:
            gen.ptx[entry["sha256"]] = ptx
        # the record exactly as a loader reads it back (JSON round trip)
        rec = json.loads(json.dumps({"spec": g.spec, "constants": consts, "ptx": entry}, allow_nan=True))
        gen.records[g.name] = rec
        gen.notes[g.name] = note
    return gen


def _share(gen: _Generated, output: "ContextOutput", options: Any) -> str:
    """Add this session's graphs to the sharing group's workspace; the last session writes the
    binary. Returns the binary's path relative to the context model."""
    ws = workspace(EP_NAME)
    with ws.lock:
        rel = ws.binary_relative_to(output)
        for name, rec in gen.records.items():
            old = ws.graphs.get(name)
            if old is not None and old != rec:
                raise ConfigError(
                    f"{EP_NAME}: two models of the sharing group have a fused group named {name!r} with different "
                    "content; give each model its own ep.context_node_name_prefix"
                )
            ws.graphs[name] = rec
        for key, arr in gen.weights.items():
            ws.add_weight(key, arr)
        ws.extra.setdefault("ptx", {}).update(gen.ptx)
        _write_if_last(output, options)
    return rel


def _write_if_last(output: "ContextOutput", options: Any) -> None:
    """The last session of a sharing group writes the binary of every graph the group gathered,
    also when its own model gave this EP nothing to compile."""
    ws = workspace(EP_NAME)
    with ws.lock:
        if not is_last_sharing_session(options):
            return
        if ws.binary_path is not None and ws.graphs:
            output.write_absolute(ws.binary_path, context_binary.pack(ws.graphs, ws.weights, ws.extra.get("ptx", {})))
        ws.clear_generation()


def make_context_nodes(ep: Any, output: "ContextOutput") -> list[Any]:
    """The EPContext nodes of every main-graph group this session compiled (first main_context=1);
    groups inside subgraphs (If branches) get none: the core keeps their ONNX nodes."""
    groups = [g for g in ep.compiled if g.in_main_graph]
    shared = sharing_enabled(ep.session_options)
    if not groups:
        if shared:
            _write_if_last(output, ep.session_options)
        return []
    gen = _generate(groups, ep.options.device_id)
    embed = int(output.embed_mode)
    if embed not in (0, 1):
        raise ConfigError(f"ep.context_embed_mode={embed}: use 0 (a context binary beside the model) or 1 (embedded)")
    blob: bytes | None = None
    if shared:
        if embed == 1:
            raise ConfigError(
                f"{EP_NAME}: ep.share_ep_contexts=1 shares one context binary file between models: set "
                "ep.context_embed_mode=0"
            )
        cache = _share(gen, output, ep.session_options).encode()
    else:
        blob = context_binary.pack(gen.records, gen.weights, gen.ptx)
        if embed == 1:
            cache = blob
        else:
            rel = output.binary_name(EP_NAME)
            output.write_file(rel, blob)
            cache = rel.encode()
    nodes = []
    for k, g in enumerate(groups):
        main = 1 if k == 0 else 0
        nodes.append(_node(ep, g, gen, output, main, embed, cache if main else b"", blob if main else None))
    return nodes


def _binding(name: str, cn_like: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str]) -> dict[str, Any]:
    """What a signature binds a node by: everything that decides which graph it runs, and where
    the binary is (for the primary of an external binary)."""
    return {
        "name": name,
        "source": cn_like["source"],
        "partition_name": cn_like["partition_name"],
        "main_context": int(cn_like["main_context"]),
        "embed_mode": int(cn_like["embed_mode"]),
        "context_file": cn_like["context_file"],
        "inputs": list(inputs),
        "outputs": list(outputs),
    }


def _node(
    ep: Any,
    g: "CompiledGroup",
    gen: _Generated,
    output: "ContextOutput",
    main: int,
    embed: int,
    cache: bytes,
    blob: bytes | None,
) -> Any:
    from onnx import helper

    rec = gen.records[g.name]
    n_in = len(rec["spec"]["inputs"]) - len(rec["constants"])
    inputs, outputs = rec["spec"]["inputs"][:n_in], rec["spec"]["outputs"]
    attrs: dict[str, Any] = {
        "main_context": main,
        "embed_mode": embed,
        "ep_sdk_version": f"{EP_NAME} {__version__}; numba-cuda {context_ptx.numba_cuda_version()}",
        "hardware_architecture": _target(ep.options.device_id),
        "partition_name": g.name,
        "source": EP_NAME,
    }
    context_file = cache.decode() if main and embed == 0 else ""
    parts = context_binary.signed_parts(
        _binding(g.name, {**attrs, "context_file": context_file}, inputs, outputs),
        context_binary.graph_digest(rec),
    )
    notes: dict[str, Any] = {"signature": signing.sign(parts), "ptx": gen.notes[g.name]}
    if blob is not None:
        notes["binary_sha256"] = context_binary.sha256(blob)
        attrs["max_size"] = len(blob)
    attrs["notes"] = json.dumps(notes, sort_keys=True)
    if main:
        attrs["ep_cache_context"] = cache
    if output.source_model_filename:
        attrs["onnx_model_filename"] = output.source_model_filename
    return helper.make_node("EPContext", inputs, outputs, name=g.name, domain="com.microsoft", **attrs)


# ------------------------------------------------------------------------------- loading
_LOADED: "weakref.WeakKeyDictionary[Any, dict[str, LoadedBinary]]" = weakref.WeakKeyDictionary()
_LOADED_LOCK = threading.Lock()


def _accepts(source: str) -> bool:
    return source in SOURCES


def _location(node: "ContextNode", base: Path | None) -> str:
    """How errors name a primary's binary: its resolved path, the raw path (at most 60
    characters: an embedded binary read as a path) or the node that embeds it."""
    from ep_core.sdk.epcontext.payload import resolve_context_file

    if node.embed_mode != 0:
        return f"<embedded in node {node.name!r}>"
    try:
        return str(resolve_context_file(node, base))
    except (InvalidGraph, ValueError, OSError):
        return repr(node.relative_path[:60])


def load_group(node: "NodeView", ctx: "KernelContext") -> "CompiledGroup":
    """The group one of our EPContext nodes runs, rebuilt from its validated record."""
    from ep_core.sdk.epcontext.payload import ContextNode, context_base_dir, context_nodes, primary_for

    cn = ContextNode.from_node(node)
    base = context_base_dir(ctx.model_path, ctx.session_options)
    gname = cn.graph_name
    if cn.main_context not in (0, 1) or cn.embed_mode not in (0, 1):
        raise InvalidGraph(
            f"EPContext node {cn.name!r}: main_context={cn.main_context}, embed_mode={cn.embed_mode}; both must be 0 "
            "or 1; regenerate the context model"
        )
    if cn.main_context == 1:
        primaries = [cn]
    else:
        if cn.ep_cache_context:
            raise InvalidGraph(
                f"EPContext node {cn.name!r} has main_context=0 but an ep_cache_context: this EP's secondary nodes "
                "take their graph from the model's main_context=1 node; regenerate the context model"
            )
        primaries = primary_for(cn, context_nodes(node.graph, _accepts))
        if not primaries:
            raise InvalidGraph(
                f"EPContext node {cn.name!r} has main_context=0 but the model has no main_context=1 node of source "
                f"{cn.source!r} holding its graph {gname!r}; regenerate the context model"
            )
    share = sharing_enabled(ctx.session_options)
    for p in primaries:
        loc = _location(p, base)
        ws = workspace(EP_NAME) if share and p.embed_mode == 0 else None  # an embedded binary is one model's
        loaded = ws.take(loc, gname) if ws is not None else None
        if loaded is None:
            loaded = _load_primary(ctx.ep, p, cn, base, loc)
            if ws is not None:  # the first session of a sharing group parks the other models' graphs
                mine = {c.graph_name for c in context_nodes(node.graph, _accepts)}
                for other in loaded.graph_names - mine:
                    ws.park(loc, other, loaded)
        if gname in loaded.graph_names:
            return loaded.group(gname, cn, node, ctx)
    raise InvalidGraph(
        f"EPContext node {cn.name!r}: its graph {gname!r} (partition_name) is in none of the context binaries "
        f"{[_location(p, base) for p in primaries]}; regenerate the context model"
    )


def _load_primary(ep: Any, p: "ContextNode", cn: "ContextNode", base: Path | None, loc: str) -> "LoadedBinary":
    """Read and parse one primary's binary (once per EP and location)."""
    from ep_core.sdk.epcontext.payload import read_context_payload, resolve_context_file

    with _LOADED_LOCK:
        cache = _LOADED.setdefault(ep, {})
        if loc in cache:
            return cache[loc]
    who = f"EPContext node {cn.name!r}" + (f" (primary node {p.name!r})" if p.name != cn.name else "")

    def fail(msg: str) -> InvalidGraph:
        return InvalidGraph(f"{who}, context {loc}: {msg}; regenerate the context model")

    limit = min(p.max_size, context_binary.MAX_BINARY_BYTES) if p.max_size > 0 else context_binary.MAX_BINARY_BYTES
    try:
        if p.embed_mode == 0:
            path = resolve_context_file(p, base)
            size = path.stat().st_size if path.is_file() else 0
        else:
            size = len(p.ep_cache_context)
        sha = p.notes_json().get("binary_sha256")
        if size <= limit:
            data = read_context_payload(p, base, expected_sha256=sha if isinstance(sha, str) else None)
    except InvalidGraph as exc:
        raise InvalidGraph(f"{who}, context {loc}: {exc.message}") from None
    except (ValueError, OSError) as exc:  # a path with a NUL byte, a name too long for the OS
        raise fail(f"its ep_cache_context names no readable file ({type(exc).__name__}: {exc})") from None
    if size > limit:
        raise fail(f"the context binary has {size} bytes, more than its node's max_size / this EP's limit {limit}")
    meta, tensors = context_binary.read(data, fail)
    READS[loc] += 1
    loaded = LoadedBinary(loc, meta, tensors)
    with _LOADED_LOCK:
        _LOADED.setdefault(ep, {})[loc] = loaded
    return loaded


class LoadedBinary:
    """One parsed context binary. A graph is checked when a node asks for it; each node's binding
    and signature are checked on every request."""

    def __init__(self, loc: str, meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
        self.loc = loc
        self.meta = meta
        self.tensors = tensors
        self.graph_names = frozenset(meta["graphs"])
        self.decisions: dict[str, str] = {}  # graph -> whether its stored PTX was used, and why
        self._verified: set[str] = set()
        self._lock = threading.Lock()

    def group(self, gname: str, cn: "ContextNode", node: "NodeView", ctx: "KernelContext") -> "CompiledGroup":
        from ep_cuda_numba.fusion import compile_spec

        where = f"EPContext node {cn.name!r} ({self.loc})"

        def fail(msg: str) -> InvalidGraph:
            return InvalidGraph(f"{where}: graph {gname!r}: {msg}; regenerate the context model")

        rec = self.meta["graphs"][gname]
        spec, consts, entry = context_binary.check_record(rec, fail)
        validate_spec(spec, where)
        if spec["outputs"] != list(cn.outputs):
            raise fail(f"the graph writes {spec['outputs']} but the node writes {list(cn.outputs)}")
        with self._lock:
            constants = context_binary.bind_constants(spec, consts, cn.inputs, self.tensors, self._verified, fail)
            ptx = context_binary.ptx_bytes(self.tensors, entry, fail) if entry is not None else b""
        _check_declared_types(node, spec, len(cn.inputs), where)
        trusted = _check_signature(cn, rec, ctx, where)
        group = compile_spec(spec, cn.name, ctx.ep)
        group.constants = constants
        use, why = context_ptx.decide(entry, context_ptx.here(ctx.ep.options.device_id), trusted)
        if use:
            assert entry is not None
            try:
                context_ptx.install(group, ptx, entry)
            except Exception as exc:  # not a security check (the hash was checked above): rebuild, and say why
                use, why = False, f"its stored PTX does not load on this device ({type(exc).__name__}: {exc})"
                warnings.warn(
                    f"{where}: graph {gname!r}: {why}; its kernel is rebuilt from the validated spec",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.decisions[gname] = ("stored PTX: " if use else "rebuilt from the spec: ") + why
        return group


def _check_declared_types(node: "NodeView", spec: dict[str, Any], n_inputs: int, where: str) -> None:
    """The spec's dtypes of the node's inputs and outputs must be those the model declares."""
    nodes = spec["nodes"]
    wanted = [("input", i, dt) for i, dt in enumerate(spec["input_dtypes"][:n_inputs])]
    wanted += [("output", j, nodes[k]["out_dtype"]) for j, k in enumerate(spec["output_nodes"])]
    for kind, i, dt in wanted:
        vi = node.input_info(i) if kind == "input" else node.output_info(i)
        declared = None if vi is None else vi.np_dtype
        if declared is not None and str(declared) != dt:
            raise InvalidGraph(
                f"{where}: the spec's {kind} {i} is {dt} but the model declares {str(declared)}; regenerate the "
                "context model"
            )


def _check_signature(cn: "ContextNode", rec: Any, ctx: "KernelContext", where: str) -> bool:
    """Whether a trusted key signed the node's binding and its graph; untrusted: a warning, or
    refused under ``ep.context_require_signature=1``."""
    context_file = cn.relative_path if cn.main_context == 1 and cn.embed_mode == 0 else ""
    binding = _binding(
        cn.name,
        {
            "source": cn.source,
            "partition_name": cn.partition_name,
            "main_context": cn.main_context,
            "embed_mode": cn.embed_mode,
            "context_file": context_file,
        },
        cn.inputs,
        cn.outputs,
    )
    signature = cn.notes_json().get("signature")
    parts = context_binary.signed_parts(binding, context_binary.graph_digest(rec))
    verdict = signing.verify(parts, signature if isinstance(signature, str) else None)
    if verdict.trusted:
        return True
    if signing.require_signature(ctx.session_options):
        raise InvalidGraph(
            f"{where}: not loaded: {verdict.reason}; {signing.REQUIRE_SIGNATURE_KEY}=1 refuses contexts no trusted "
            "key signed"
        )
    warnings.warn(
        f"{where}: {verdict.reason}. Its kernel is regenerated from the validated spec exactly as the binary records "
        f"it (no stored PTX is loaded from an untrusted context); set {signing.REQUIRE_SIGNATURE_KEY}=1 to refuse "
        "such contexts",
        RuntimeWarning,
        stacklevel=2,
    )
    return False

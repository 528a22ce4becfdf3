"""The EP object: claims fusable groups, compiles them into Numba kernels, writes and reads its
EPContext nodes. EPContext nodes are served by a kernel (not ``ep_compile``), so a session created
from a context model this user (or a machine this user trusts) signed runs no compilation at all.

Loading treats the context as data: every graph record is checked field by field (``spec``), its
kernel sources are regenerated (``generate``), the graph must declare exactly the node's inputs
and outputs, and its machine code is unpickled only when the node's signature verifies; otherwise
the kernels are compiled from the regenerated sources, with a warning, or the session is refused
under ``ep.context_require_signature=1``."""

from __future__ import annotations

import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ep_core.sdk.compute import FusedNode, NodeComputeInfo
from ep_core.sdk.epcontext import signing
from ep_core.sdk.epcontext.output import ContextOutput
from ep_core.sdk.epcontext.payload import (
    ContextNode,
    context_base_dir,
    context_nodes,
    payload_location,
    primary_for,
    read_context_payload,
)
from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN, register_ep_context_schema
from ep_core.sdk.epcontext.sharing import is_last_sharing_session, sharing_enabled, workspace
from ep_core.sdk.errors import ConfigError, InvalidArgument, InvalidGraph
from ep_core.sdk.kernels import KernelContext, KernelDef, KernelRegistry
from ep_numba_cpu import EP_NAME, codegen, compile_pool, context, generate, kernel_cache, spec
from ep_numba_cpu.delegate import GroupRegistry, Host
from ep_numba_cpu.lazy import LazyKernel, lazy_keys
from ep_numba_cpu.planner import build_plan, choose_groups, pays_a_runner, weight_key
from ep_numba_cpu.runtime import GraphRunner

SOURCES = (EP_NAME, "NumbaCpu")
Fail = Callable[[str], InvalidGraph]  # builds the error naming the node and the context file


class NumbaCpuEp:
    def __init__(
        self, ep_options: Mapping[str, str], session_options: Any, logger: logging.Logger | None = None
    ) -> None:
        register_ep_context_schema()
        self.name = EP_NAME
        self.logger = logger if logger is not None else logging.getLogger(f"ep_core.{EP_NAME}")
        self._left: set[str] = set()  # notes already logged (capability is asked again per optimizer round)
        self.session_options = session_options
        self.parallel_mode = ep_options.get("parallel", "auto")
        if self.parallel_mode not in ("auto", "0", "1"):
            raise ConfigError(f"{EP_NAME} option parallel={self.parallel_mode!r}: use one of ['auto', '0', '1']")
        self.kernel_cache = kernel_cache.from_options(ep_options)  # None: kernel_cache=0
        self.compile_workers = compile_pool.workers_option(ep_options)
        self.graphs: dict[str, dict[str, Any]] = {}  # fused node name -> {"record": spec record, "kernels": keys}
        self.kernels: dict[str, codegen.CompiledKernel] = {}
        self.weights: dict[str, np.ndarray] = {}
        self._loaded: dict[str, LoadedContext] = {}  # context location -> parsed blob
        self._warned: set[tuple[str, str]] = set()  # (context location, reason) already warned about
        self.registry = GroupRegistry(EP_NAME)  # has_op: what the graph optimizer may make for this EP
        self.registry.add(KernelDef(EP_CONTEXT_OP, domain=MS_DOMAIN, since_version=1), self._build_context_kernel)

    # ----------------------------------------------------------------------------- hooks
    def ep_get_kernel_registry(self) -> KernelRegistry:
        return self.registry

    def ep_get_context_sources(self) -> tuple[str, ...]:
        return SOURCES

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        for node in graph.nodes:
            if node.op_type == EP_CONTEXT_OP and node.domain == MS_DOMAIN:
                support.add_single_node(node)
        compute = [n for n in graph.nodes if n.op_type != "Constant"]
        for group in choose_groups(graph, self._leave):
            # a group that is not the whole main graph (one beside an If or inside its bodies, one
            # of a graph split by a node no EP here compiles) and has no compiled float node only
            # adds a runner's call and a boundary on every run: its nodes are left to the next EP,
            # which runs them with the same kernels (silero: 2x -> 1.05x the reference EP's latency)
            whole = graph.parent is None and sum(n.op_type != "Constant" for n in group) >= len(compute)
            if not whole and not any(pays_a_runner(n) for n in group):
                continue
            support.add_nodes_to_fuse(group, drop_constant_initializers=True)

    def _leave(self, note: str) -> None:
        """Logs (once) a node this EP could run but leaves to the next EP, and why: a silent
        fallback would only show as a slower session."""
        if note not in self._left:
            self._left.add(note)
            self.logger.warning("%s: %s", EP_NAME, note)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[FusedNode]) -> list[NodeComputeInfo]:
        built = []
        for view, fused in zip(graphs, fused_nodes, strict=True):
            gp = build_plan(view, fused.inputs, fused.outputs, self._parallel, self._one_thread())
            wmap = {}
            for name, arr in gp.weights.items():
                key = weight_key(arr)
                self.weights.setdefault(key, arr)
                wmap[name] = key
            # the record exactly as a loader will read it back, checked as a loader checks it
            record = json.loads(json.dumps({"plan": gp.plan, "weights": wmap, "types": gp.types}))
            spec.check_record(record)
            spec.check_types(record, gp.weights)
            plan, sources = generate.expand(record["plan"], gp.weights)
            built.append((view, fused, gp, record, plan, sources, lazy_keys(plan)))
        # every group's eager kernels in one batch: the compile workers share them all
        eager = {k: ks for *_, sources, lazy in built for k, ks in sources.items() if k not in lazy}
        compiled = compile_pool.compile_all(eager, self.compile_workers, self.kernel_cache)
        self.kernels.update(compiled)
        infos = []
        for view, fused, gp, record, plan, sources, lazy in built:
            if view.parent is None:  # EPContext nodes replace main-graph groups only; a subgraph's recompile
                self.graphs[fused.name] = {"record": record, "kernels": sorted(sources)}
            fns: dict[str, Any] = {k: compiled[k].dispatcher for k in sources if k not in lazy}
            fns.update({k: LazyKernel(k, _compiler(sources[k], self.kernel_cache)) for k in lazy})
            exposed = {v.name for v in view.outputs}
            runner = GraphRunner(plan, fns, gp.weights, self.host(), [o for o in fused.outputs if o in exposed])
            infos.append(NodeComputeInfo(compute=_compute(runner), metadata={"kernels": len(sources) - len(lazy)}))
        return infos

    def ep_get_ep_context_nodes(self, output: ContextOutput) -> list[Any]:
        names = list(self.graphs)
        if not names:
            return []
        nodes = []
        if output.embed_mode == 1:
            if sharing_enabled(self.session_options):
                raise ConfigError("ep.share_ep_contexts=1 shares one context binary: set ep.context_embed_mode=0")
            for name in names:
                blob = self._pack([name])
                nodes.append(self._node(name, 1, 1, blob, context.sha256(blob), output.source_model_filename))
            return nodes
        if sharing_enabled(self.session_options):
            ws = workspace(EP_NAME)
            with ws.lock:
                rel = ws.binary_relative_to(output)
                shared_kernels = ws.extra.setdefault("kernels", {})
                for name in names:
                    ws.graphs[name] = self.graphs[name]
                    for k in self.graphs[name]["kernels"]:
                        if k in self.kernels:
                            shared_kernels[k] = self.kernels[k]
                    for wkey in self.graphs[name]["record"]["weights"].values():
                        ws.add_weight(wkey, self.weights[wkey])
                if is_last_sharing_session(self.session_options):
                    records = {n: g["record"] for n, g in ws.graphs.items()}
                    blob = context.pack(records, shared_kernels, ws.weights)
                    output.write_file(rel, blob)
                    ws.clear_generation()
            blob_sha = None
        else:
            blob = self._pack(names)
            rel = output.binary_name(EP_NAME)
            output.write_file(rel, blob)
            blob_sha = context.sha256(blob)
        src = output.source_model_filename
        for k, name in enumerate(names):
            main = 1 if k == 0 else 0
            nodes.append(self._node(name, main, 0, rel.encode() if main else b"", blob_sha if main else None, src))
        return nodes

    def ep_get_compiled_model_compatibility_info(self, graph: Any) -> str:
        from ep_numba_cpu.compat import current_info

        return current_info()

    # ---------------------------------------------------------------------- generation
    def _parallel(self, numel: int | None) -> bool:
        if self.parallel_mode != "auto":
            return self.parallel_mode == "1"
        import numba

        # threads pay only with cores to spare and enough elements per call (numba.config fills its
        # settings into globals() at import: its py.typed package cannot declare them)
        threads: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
        return threads >= 4 and (numel is None or numel >= 1 << 16)

    def _one_thread(self) -> bool:
        """Whether the session asks for one thread (``intra_op_num_threads=1``): only then is the
        serial direct convolution planned (a plan follows the option, not the CPUs of the process
        that compiled it), and every run of the plan takes it (``runtime._conv_plan``)."""
        return int(getattr(self.session_options, "intra_op_num_threads", 0) or 0) == 1

    def host(self) -> Host:
        """The kernel context of delegated nodes, the same when compiling and when loading a context."""
        return Host(self, self.session_options, None)

    def _pack(self, names: Sequence[str]) -> bytes:
        kernels = {k: self.kernels[k] for n in names for k in self.graphs[n]["kernels"] if k in self.kernels}
        weights = {w: self.weights[w] for n in names for w in self.graphs[n]["record"]["weights"].values()}
        return context.pack({n: self.graphs[n]["record"] for n in names}, kernels, weights)

    def _node(self, name: str, main: int, embed: int, cache: bytes, blob_sha: str | None, model_file: str) -> Any:
        import numba
        from onnx import helper

        from ep_numba_cpu.compat import host_target

        rec = self.graphs[name]
        plan = rec["record"]["plan"]
        # lazily compiled kernels (never called yet) have no machine code in the context: None, as a loader sees them
        payloads = {k: (self.kernels[k].sha256 if k in self.kernels else None) for k in rec["kernels"]}
        digest = context.graph_digest(rec["record"], payloads)
        parts = context.signed_parts(
            name, name, EP_NAME, main, embed, len(plan["inputs"]), len(plan["outputs"]), digest
        )
        notes: dict[str, Any] = {"signature": signing.sign(parts)}
        if blob_sha:
            notes["blob_sha256"] = blob_sha
        attrs: dict[str, Any] = {
            "main_context": main,
            "embed_mode": embed,
            "ep_sdk_version": f"numba {numba.__version__}",
            "hardware_architecture": host_target()[1],
            "partition_name": name,
            "source": EP_NAME,
            "notes": json.dumps(notes, sort_keys=True),
        }
        if cache:
            attrs["ep_cache_context"] = cache
        if model_file:
            attrs["onnx_model_filename"] = model_file
        return helper.make_node(EP_CONTEXT_OP, plan["inputs"], plan["outputs"], name=name, domain=MS_DOMAIN, **attrs)

    # ------------------------------------------------------------------------- loading
    def _accepts(self, source: str) -> bool:
        return source in SOURCES

    def _build_context_kernel(self, node: Any, ctx: KernelContext) -> Any:
        cn = ContextNode.from_node(node)
        base = context_base_dir(ctx.model_path, ctx.session_options)
        runner, types = self._runner_for(cn, node.graph, base)
        return _checked_compute(runner, types, cn.inputs)

    def _runner_for(self, cn: ContextNode, graph: Any, base: Path | None) -> tuple[GraphRunner, list[Any]]:
        gname = cn.graph_name
        if cn.main_context == 1:
            primaries = [cn]
        else:
            primaries = primary_for(cn, context_nodes(graph, self._accepts))
            if not primaries:
                raise InvalidGraph(
                    f"EPContext node {cn.name!r} has main_context=0 but the model has no main_context=1 node of source "
                    f"{cn.source!r} holding its graph {gname!r}; regenerate the context model"
                )
        share = sharing_enabled(self.session_options)
        ws = workspace(EP_NAME) if share else None
        for p in primaries:
            loc = _location(p, base)
            loaded = ws.take(loc, gname) if ws is not None else None
            if loaded is None:
                loaded = self._load_primary(p, cn, base, loc)
                if ws is not None:
                    # the first session of a sharing group parks the graphs other models will ask for
                    mine = {c.graph_name for c in context_nodes(graph, self._accepts)}
                    for other in loaded.graph_names:
                        if other not in mine:
                            ws.park(loc, other, loaded)
            if gname in loaded.graph_names:
                return loaded.runner(gname, cn, graph, self)
        raise InvalidGraph(
            f"EPContext node {cn.name!r}: its graph {gname!r} is in none of the contexts "
            f"{[_location(p, base) for p in primaries]}; regenerate the context model"
        )

    def _load_primary(self, p: ContextNode, cn: ContextNode, base: Path | None, loc: str) -> "LoadedContext":
        """Parse (never unpickle) a primary context; each graph is checked and its kernels built
        when a node asks for it."""
        cached = self._loaded.get(loc)
        if cached is not None:
            return cached
        who = f"EPContext node {cn.name!r}" + (f" (primary context node {p.name!r})" if p.name != cn.name else "")

        def fail(msg: str) -> InvalidGraph:
            return InvalidGraph(f"{who}, context {loc}: {msg}; regenerate the context model")

        blob_sha = p.notes_json().get("blob_sha256")
        try:
            data = read_context_payload(p, base, expected_sha256=blob_sha if isinstance(blob_sha, str) else None)
        except (ValueError, OSError) as exc:  # a path with a NUL byte, a name too long for the OS
            raise fail(f"its ep_cache_context does not name a readable file ({type(exc).__name__}: {exc})") from None
        meta = context.read_header(data, fail)
        tensors = context.read_tensors(data, fail)
        loaded = LoadedContext(loc, meta, tensors)
        self._loaded[loc] = loaded
        return loaded

    def untrusted(self, cn: ContextNode, loc: str, reason: str) -> None:
        """A node whose signature does not verify: refused under ``ep.context_require_signature=1``,
        else a warning (once per context and reason) before its kernels are compiled."""
        how = (
            "regenerate the context model on this machine, or if a machine you trust wrote it, trust its key "
            "(`ep-core trust-key FILE` with that machine's context-signing.key)"
        )
        if signing.require_signature(self.session_options):
            raise InvalidGraph(
                f"EPContext node {cn.name!r}, context {loc}: its machine code is not signed by a key this user trusts "
                f"({reason}) and the session requires signed contexts (ep.context_require_signature=1); {how}"
            )
        if (loc, reason) not in self._warned:
            self._warned.add((loc, reason))
            warnings.warn(
                f"{EP_NAME}: EPContext node {cn.name!r}, context {loc}: not loading its machine code: {reason}. Its "
                "kernels are compiled from the context's declarative plan instead (slow; the session computes what "
                f"that plan says). To load it without compiling, {how}; to refuse unsigned contexts, set "
                "ep.context_require_signature=1",
                RuntimeWarning,
                stacklevel=2,
            )


@dataclass
class _Graph:
    """One checked graph record: the runner's plan, its kernels' sources, its verified weights and
    the digest its nodes' signatures cover."""

    record: dict[str, Any]
    plan: dict[str, Any]
    sources: dict[str, generate.KernelSource]
    weights: dict[str, np.ndarray]
    digest: str


class LoadedContext:
    """One parsed context blob. A graph is checked (``spec``) and expanded when a node first asks
    for it; each node's binding and signature are checked on every request; a kernel is rebuilt
    from its machine code only for a node whose signature verifies, else compiled from source."""

    def __init__(self, loc: str, meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
        self.loc = loc
        self.meta = meta
        self.tensors = tensors
        self.graph_names = frozenset(meta["graphs"])
        self._graphs: dict[str, _Graph] = {}
        self._verified: set[str] = set()  # weight keys whose tensor matched
        self._dispatchers: dict[str, Any] = {}
        self._runners: dict[str, GraphRunner] = {}
        self._payloads: bytes | None = None
        self._lock = threading.Lock()

    def runner(self, gname: str, cn: ContextNode, graph: Any, ep: NumbaCpuEp) -> tuple[GraphRunner, list[Any]]:
        """The graph's runner and its recorded input types ([dtype | None, [dim | None] | None])."""

        def fail(msg: str) -> InvalidGraph:
            return InvalidGraph(f"EPContext node {cn.name!r}, context {self.loc}: {msg}; regenerate the context model")

        with self._lock:
            g = self._graph(gname, fail)
            _check_binding(g, gname, cn, graph, fail)
            signature = cn.notes_json().get("signature")
            parts = context.signed_parts(
                cn.name, cn.partition_name, cn.source, cn.main_context, cn.embed_mode, len(cn.inputs), len(cn.outputs),
                g.digest,
            )  # fmt: skip
            verdict = signing.verify(parts, signature if isinstance(signature, str) else None)
            if not verdict.trusted:
                ep.untrusted(cn, self.loc, self._why_untrusted(verdict.reason))
            runner = self._runners.get(gname)
            if runner is None:
                lazy = lazy_keys(g.plan)
                for key, ks in g.sources.items():
                    if key in self._dispatchers:
                        continue
                    if key in lazy and not (verdict.trusted and key in self.meta["kernels"]):
                        # to be compiled, and called only when shapes break the static pattern: on first call
                        self._dispatchers[key] = LazyKernel(key, _compiler(ks, ep.kernel_cache))
                    else:
                        self._dispatchers[key] = self._kernel(key, ks, verdict.trusted, fail, ep.kernel_cache)
                try:
                    runner = GraphRunner(g.plan, {k: self._dispatchers[k] for k in g.sources}, g.weights, ep.host())
                except spec.SpecError as exc:  # a delegated node the reference kernels do not serve as stored
                    raise fail(f"graph {gname!r} is not one this EP accepts: {exc}") from None
                self._runners[gname] = runner
            return runner, g.record["types"]["inputs"]

    def _why_untrusted(self, reason: str) -> str:
        """The verdict's reason, and where the context names another build of this EP (whose plan
        can expand to other kernels, so its digest differs with no byte modified), that too."""
        from ep_numba_cpu.compat import build, parse_info

        written = parse_info(str(self.meta.get("compatibility", ""))).get("build")
        if written == build():
            return reason
        return f"{reason}, or it was written by another build of this EP ({written or 'one that records none'}, this is {build()})"

    def _graph(self, gname: str, fail: Fail) -> _Graph:
        g = self._graphs.get(gname)
        if g is None:
            rec = self.meta["graphs"][gname]
            try:
                spec.check_record(rec)
                weights = self._weights(rec["weights"], fail)
                spec.check_types(rec, weights)
                plan, sources = generate.expand(rec["plan"], weights)
            except spec.SpecError as exc:
                raise fail(f"graph {gname!r} is not one this EP accepts: {exc}") from None
            payloads = {k: (self.meta["kernels"].get(k) or {}).get("sha256") for k in sources}
            g = self._graphs[gname] = _Graph(rec, plan, sources, weights, context.graph_digest(rec, payloads))
        return g

    def _weights(self, wmap: Mapping[str, str], fail: Fail) -> dict[str, np.ndarray]:
        out = {}
        for value, wkey in wmap.items():
            arr = self.tensors.get(f"w.{wkey}")
            if arr is None or (wkey not in self._verified and weight_key(arr) != wkey):
                raise fail(f"weight {value!r} ({wkey[:16]}) is missing or differs from its sha256")
            self._verified.add(wkey)
            out[value] = arr
        return out

    def _kernel(
        self, key: str, ks: generate.KernelSource, trusted: bool, fail: Fail, cache: kernel_cache.KernelCache | None
    ) -> Any:
        entry = self.meta["kernels"].get(key)
        if trusted and entry is not None:
            if self._payloads is None:
                self._payloads = context.kernel_payloads(self.tensors, self.meta, fail)
            payload = context.kernel_payload(self._payloads, self.meta, key, fail)
            return codegen.rebuild_kernel(key, ks.source, ks.parallel, payload, entry["sha256"], fail)
        try:
            return codegen.compile_kernel(ks.source, ks.signature, ks.parallel, cache).dispatcher
        except Exception as exc:
            raise fail(f"kernel {key} does not compile: {type(exc).__name__}: {str(exc)[:300]}") from exc


def _location(node: ContextNode, base: Path | None) -> str:
    """``payload_location``, also for a path no OS accepts (a NUL byte: the embedded blob of a node
    whose embed_mode was flipped to 0), which reading it then reports as INVALID_GRAPH."""
    try:
        return payload_location(node, base)
    except (ValueError, OSError):
        return repr(node.relative_path[:60])


def _check_binding(g: _Graph, gname: str, cn: ContextNode, graph: Any, fail: Fail) -> None:
    """The graph a node resolves to must take as many inputs and make as many outputs as the node,
    bound by position, with the types and shapes the model declares for the node's values (where
    both are known): a ``partition_name`` pointing at another node's graph is an error, never a
    wrong result. The values' names may differ from those the context was written with (the
    design lets users rename edges to merge and interconnect context models)."""
    plan = g.record["plan"]
    if len(plan["inputs"]) != len(cn.inputs) or len(plan["outputs"]) != len(cn.outputs):
        raise fail(
            f"its graph {gname!r} takes {len(plan['inputs'])} inputs and makes {len(plan['outputs'])} outputs, but the "
            f"node has inputs {list(cn.inputs)} and outputs {list(cn.outputs)} (its partition_name names another "
            "node's graph?)"
        )
    for side, names in (("inputs", cn.inputs), ("outputs", cn.outputs)):
        for name, (dtype, shape) in zip(names, g.record["types"][side], strict=True):
            vi = graph.value_info(name)
            have = None if vi is None else vi.np_dtype
            have_name = None if have is None else ("bool" if have == np.bool_ else str(np.dtype(have)))
            if dtype is not None and have_name is not None and dtype != have_name:
                raise fail(f"its graph's {side[:-1]} for {name!r} is {dtype}, the model declares {have_name}")
            dims = None if vi is None else vi.shape
            if (
                shape is not None
                and dims is not None
                and (
                    len(shape) != len(dims)
                    or any(a is not None and isinstance(b, int) and a != b for a, b in zip(shape, dims, strict=True))
                )
            ):
                raise fail(f"its graph's {side[:-1]} for {name!r} has shape {shape}, the model declares {list(dims)}")


def _compiler(ks: generate.KernelSource, cache: kernel_cache.KernelCache | None) -> Callable[[], Any]:
    """What a ``LazyKernel`` calls to compile ``ks`` (or load it from the kernel cache) on its first call."""
    return lambda: codegen.compile_kernel(ks.source, ks.signature, ks.parallel, cache).dispatcher


def _compute(runner: GraphRunner) -> Any:
    def compute(state: Any, *inputs: Any) -> tuple[Any, ...]:
        return tuple(runner(*inputs))

    return compute


def _checked_compute(runner: GraphRunner, types: Sequence[Any], names: Sequence[str]) -> Any:
    """An EPContext node's compute: its inputs are bound by position, and the values a (merged or
    rewired) model feeds it are checked against the types its graph was written for (dtype, rank,
    fixed dims) before any kernel sees them; a view is made contiguous, as the kernels take it."""
    wants = [
        (name, None if dtype is None else np.dtype(dtype), None if shape is None else tuple(shape), dtype, shape)
        for name, (dtype, shape) in zip(names, types, strict=True)
    ]

    def compute(*inputs: Any) -> tuple[Any, ...]:
        args = []
        for x, (name, dt, shape, dtype_name, shape_list) in zip(inputs, wants, strict=True):
            a = np.asarray(x)
            if (dt is not None and a.dtype != dt) or (
                shape is not None
                and (a.ndim != len(shape) or any(d is not None and d != n for d, n in zip(shape, a.shape, strict=True)))
            ):
                written = "" if shape_list is None else str([d if d is not None else "?" for d in shape_list])
                raise InvalidArgument(
                    f"input {name!r} is {a.dtype}{list(a.shape)}, but the context graph was written for {dtype_name}"
                    f"{written}"
                )
            args.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        return tuple(runner(*args))

    return compute

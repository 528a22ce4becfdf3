"""The EP object: claims fusable groups, compiles them into Numba kernels, writes and reads its
EPContext nodes. EPContext nodes are served by a kernel (not ``ep_compile``), so a session created
from a context model runs no compilation at all."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ep_core.sdk.compute import FusedNode, NodeComputeInfo
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
from ep_core.sdk.errors import ConfigError, InvalidGraph
from ep_core.sdk.kernels import KernelContext, KernelDef, KernelRegistry
from ep_numba_cpu import EP_NAME, codegen, context
from ep_numba_cpu.planner import build_plan, choose_groups, weight_key
from ep_numba_cpu.runtime import GraphRunner

SOURCES = (EP_NAME, "NumbaCpu")


class NumbaCpuEp:
    def __init__(self, ep_options: Mapping[str, str], session_options: Any) -> None:
        register_ep_context_schema()
        self.name = EP_NAME
        self.session_options = session_options
        self.parallel_mode = ep_options.get("parallel", "auto")
        if self.parallel_mode not in ("auto", "0", "1"):
            raise ConfigError(f"{EP_NAME} option parallel={self.parallel_mode!r}: use one of ['auto', '0', '1']")
        self.graphs: dict[str, dict[str, Any]] = {}  # fused node name -> record (plan, weights, kernels)
        self.kernels: dict[str, codegen.CompiledKernel] = {}
        self.weights: dict[str, np.ndarray] = {}
        self._loaded: dict[str, LoadedContext] = {}  # context location -> parsed blob
        self.registry = KernelRegistry(EP_NAME)
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
        for group in choose_groups(graph):
            support.add_nodes_to_fuse(group, drop_constant_initializers=True)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[FusedNode]) -> list[NodeComputeInfo]:
        infos = []
        for view, fused in zip(graphs, fused_nodes, strict=True):
            gp = build_plan(view, fused.inputs, fused.outputs, self._parallel)
            compiled = {
                k: codegen.compile_kernel(v["source"], v["fn"], v["signature"], v["parallel"])
                for k, v in gp.kernels.items()
            }
            wmap = {}
            for name, arr in gp.weights.items():
                key = weight_key(arr)
                self.weights.setdefault(key, arr)
                wmap[name] = key
            self.kernels.update(compiled)
            self.graphs[fused.name] = {"plan": gp.plan, "weights": wmap, "kernels": sorted(compiled)}
            runner = GraphRunner(gp.plan, {k: c.dispatcher for k, c in compiled.items()}, gp.weights)
            infos.append(NodeComputeInfo(compute=_compute(runner), metadata={"kernels": len(compiled)}))
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
                if ws.binary_path is None:
                    assert output.folder is not None
                    ws.binary_path = output.folder / output.binary_name(EP_NAME)
                rel = output.relative(ws.binary_path)
                shared_kernels = ws.extra.setdefault("kernels", {})
                for name in names:
                    ws.graphs[name] = self.graphs[name]
                    for k in self.graphs[name]["kernels"]:
                        shared_kernels[k] = self.kernels[k]
                    for wkey in self.graphs[name]["weights"].values():
                        ws.add_weight(wkey, self.weights[wkey])
                if is_last_sharing_session(self.session_options):
                    blob = context.pack(ws.graphs, shared_kernels, ws.weights)
                    output.write_absolute(ws.binary_path, blob)
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

    def _pack(self, names: Sequence[str]) -> bytes:
        kernels = {k: self.kernels[k] for n in names for k in self.graphs[n]["kernels"]}
        weights = {w: self.weights[w] for n in names for w in self.graphs[n]["weights"].values()}
        return context.pack({n: self.graphs[n] for n in names}, kernels, weights)

    def _node(self, name: str, main: int, embed: int, cache: bytes, blob_sha: str | None, model_file: str) -> Any:
        import numba
        from onnx import helper

        from ep_numba_cpu.compat import host_target

        rec = self.graphs[name]
        notes: dict[str, Any] = {"graph": name, "kernels": {k: self.kernels[k].sha256 for k in rec["kernels"]}}
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
        return helper.make_node(
            EP_CONTEXT_OP, rec["plan"]["inputs"], rec["plan"]["outputs"], name=name, domain=MS_DOMAIN, **attrs
        )

    # ------------------------------------------------------------------------- loading
    def _accepts(self, source: str) -> bool:
        return source in SOURCES

    def _build_context_kernel(self, node: Any, ctx: KernelContext) -> Any:
        cn = ContextNode.from_node(node)
        base = context_base_dir(ctx.model_path, ctx.session_options)
        runner = self._runner_for(cn, node.graph, base)
        if len(runner.inputs) != len(cn.inputs) or len(runner.outputs) != len(cn.outputs):
            raise InvalidGraph(
                f"EPContext node {cn.name!r} has {len(cn.inputs)} inputs and {len(cn.outputs)} outputs, its graph "
                f"{cn.graph_name!r} has {len(runner.inputs)} and {len(runner.outputs)}"
            )
        return _compute_kernel(runner)

    def _runner_for(self, cn: ContextNode, graph: Any, base: Path | None) -> GraphRunner:
        notes = cn.notes_json()
        gname = notes.get("graph") or cn.graph_name
        vouched = notes.get("kernels")
        if not isinstance(vouched, dict):
            raise InvalidGraph(
                f"EPContext node {cn.name!r}: its notes do not record the sha256 of its kernels, so its machine code "
                "cannot be trusted; regenerate the context model"
            )
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
            loc = payload_location(p, base)
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
                return loaded.runner(gname, vouched, cn)
        raise InvalidGraph(
            f"EPContext node {cn.name!r}: its graph {gname!r} is in none of the contexts "
            f"{[payload_location(p, base) for p in primaries]}; regenerate the context model"
        )

    def _load_primary(self, p: ContextNode, cn: ContextNode, base: Path | None, loc: str) -> "LoadedContext":
        """Parse (never unpickle) a primary context; kernels are rebuilt per graph, once a node of the
        model vouches for their sha256."""
        cached = self._loaded.get(loc)
        if cached is not None:
            return cached
        who = f"EPContext node {cn.name!r}" + (f" (primary context node {p.name!r})" if p.name != cn.name else "")

        def fail(msg: str) -> InvalidGraph:
            return InvalidGraph(f"{who}, context {loc}: {msg}; regenerate the context model")

        blob_sha = p.notes_json().get("blob_sha256")
        data = read_context_payload(p, base, expected_sha256=blob_sha)
        meta = context.read_header(data, fail)
        tensors = context.read_tensors(data, fail)
        loaded = LoadedContext(loc, meta, tensors)
        self._loaded[loc] = loaded
        return loaded


class LoadedContext:
    """One parsed context blob: graphs are built on request, each kernel rebuilt (unpickled) only
    after the requesting EPContext node's recorded sha256 matched it."""

    def __init__(self, loc: str, meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
        self.loc = loc
        self.meta = meta
        self.tensors = tensors
        self.graph_names = frozenset(meta.get("graphs", {}))
        self._dispatchers: dict[str, Any] = {}
        self._runners: dict[str, GraphRunner] = {}
        self._payloads: bytes | None = None
        self._lock = threading.Lock()

    def runner(self, gname: str, vouched: Mapping[str, str], cn: ContextNode) -> GraphRunner:
        def fail(msg: str) -> InvalidGraph:
            return InvalidGraph(f"EPContext node {cn.name!r}, context {self.loc}: {msg}; regenerate the context model")

        with self._lock:
            rec = self.meta["graphs"][gname]
            kernels = self.meta.get("kernels", {})
            for key in rec["kernels"]:
                k = kernels.get(key)
                if k is None:
                    raise fail(f"graph {gname!r} needs kernel {key}, which the context lacks")
                if vouched.get(key) != k.get("sha256"):
                    raise fail(f"kernel {key} differs from the one recorded in the model (corrupt or replaced context)")
            if gname in self._runners:
                return self._runners[gname]
            for key in rec["kernels"]:
                if key not in self._dispatchers:
                    k = kernels[key]
                    if self._payloads is None:
                        self._payloads = context.kernel_payloads(self.tensors, self.meta, fail)
                    payload = context.kernel_payload(self._payloads, self.meta, key, fail)
                    self._dispatchers[key] = codegen.rebuild_kernel(
                        key, k["source"], k["fn"], k["signature"], bool(k["parallel"]), payload, k["sha256"], fail
                    )
            weights = {}
            for value, wkey in rec["weights"].items():
                arr = self.tensors.get(f"w.{wkey}")
                if arr is None or not context.verify_weight(wkey, arr):
                    raise fail(f"weight {wkey} of graph {gname!r} is missing or corrupt")
                weights[value] = arr
            runner = GraphRunner(rec["plan"], {k: self._dispatchers[k] for k in rec["kernels"]}, weights)
            self._runners[gname] = runner
            return runner


def _compute(runner: GraphRunner) -> Any:
    def compute(state: Any, *inputs: Any) -> tuple[Any, ...]:
        return tuple(runner(*inputs))

    return compute


def _compute_kernel(runner: GraphRunner) -> Any:
    def compute(*inputs: Any) -> tuple[Any, ...]:
        return tuple(runner(*inputs))

    return compute

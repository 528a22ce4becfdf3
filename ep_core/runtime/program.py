"""The compile step: one graph made runnable. Its partition's single-node claims get their kernels
built, its fused groups are compiled by their EPs, and the resulting units are put in topological
order; If/Loop/Scan bodies become nested programs. Plans for it are made by ``plan.py`` (cached
per input placement) and run by ``execute.py``."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ep_core.host.model_files import INLINE_LIMIT, read_back
from ep_core.runtime.discover import hook_error
from ep_core.runtime.execute import execute_subplan
from ep_core.runtime.partition import Partition, fused_inputs_outputs, partition_graph, require_complete
from ep_core.runtime.plan import Plan, build_plan
from ep_core.runtime.units import SessionContext, Unit
from ep_core.sdk.compute import ComputeContext, FusedNode, NodeComputeInfo
from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN
from ep_core.sdk.errors import EpCoreError, EpFail, Fail, InvalidArgument, ModelRequiresCompilation
from ep_core.sdk.graph import GraphView, NodeView, topo_order
from ep_core.sdk.memory import MemoryInfo

if TYPE_CHECKING:
    from pathlib import Path

    from ep_core.runtime.eps import EpInstance
    from ep_core.sdk.config import SessionConfig

DISABLE_COMPILE_KEY = "session.disable_compile"


class _KernelCtx:
    """Exactly ``ep_core.sdk.kernels.KernelContext``: ``ep`` is the EP's own object, never the
    core's ``EpInstance``."""

    __slots__ = ("_program", "node", "ep", "memory_info", "stream", "allocator", "session_options", "model_path")

    def __init__(self, program: "GraphProgram", node: NodeView, ep: "EpInstance") -> None:
        self._program = program
        self.node = node
        self.ep: Any = ep.ep
        self.memory_info: MemoryInfo = ep.memory_info
        self.stream: Any = ep.stream
        self.allocator: Any = ep.allocator
        self.session_options: SessionConfig = program.session.options
        self.model_path: Path | None = program.session.model_path  # where EPContext files are found

    def constant(self, name: str) -> Any:
        return self.node.graph.constant_value(name) if name else None

    def subgraph(self, attr_name: str) -> "SubgraphRunner":
        return self._program.subgraph_runner(self.node, attr_name)


class SubgraphRunner:
    """Runs a subgraph's own program with its inputs and outer-scope values."""

    def __init__(self, program: "GraphProgram") -> None:
        self.program = program
        self.input_names = tuple(v.name for v in program.graph.inputs)
        self.output_names = tuple(v.name for v in program.graph.outputs)
        self.outer_names = program.graph.outer_scope_inputs
        self._plan: Plan | None = None

    def run(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]:
        plan = self._plan
        if plan is None:  # built on first use: the body may never run
            plan = self._plan = self.program.plan()
        vals = plan.template.copy()
        slots = plan.input_slots
        for name, value in zip(self.input_names, inputs):
            if name in slots:
                vals[slots[name]] = value
        for name in self.outer_names:
            if name in slots:
                vals[slots[name]] = outer[name]
        execute_subplan(plan, vals)
        return plan.outputs(vals)


class GraphProgram:
    def __init__(
        self, graph: GraphView, session: SessionContext, path: str = "", partition: Partition | None = None
    ) -> None:
        """``partition``: the graph's partition when the caller already made it (the layout
        transformer's second pass); otherwise this program partitions its graph itself."""
        self.graph = graph
        self.session = session
        self.path = path
        self._subprograms: dict[tuple[int, str], GraphProgram] = {}
        self._plans: dict[Any, Plan] = {}
        self._constant_copies: dict[tuple[str, MemoryInfo], Any] = {}  # shared by every plan variant
        self._folded: dict[str, tuple[Any, ...]] = {}  # unit name -> outputs computed at creation
        t0 = time.perf_counter_ns()
        if partition is None:
            partition = partition_graph(graph, session.eps)
        require_complete(partition, session.eps)
        self.partition: Partition = partition
        self._trace("partition", t0)
        t0 = time.perf_counter_ns()
        self.units: list[Unit] = self._build_units()
        self._trace("build_kernels_and_compile", t0)
        self.order = self._topological_units()

    # ------------------------------------------------------------------------------ build
    def _trace(self, phase: str, t0: int) -> None:
        prof = self.session.profiler
        if prof is not None:
            prof.phase(f"{phase}{'(' + self.path + ')' if self.path else ''}", t0)

    def _build_units(self) -> list[Unit]:
        eps = self.session.eps
        units: list[Unit] = []
        graph = self.graph
        for idx, (ep_i, kdef) in self.partition.singles.items():
            node = graph.all_nodes[idx]
            ep = eps[ep_i]
            ctx = _KernelCtx(self, node, ep)
            assert ep.kernel_registry is not None
            entry = ep.kernel_registry.lookup(node).entry
            if entry is None or entry.kernel_def != kdef:
                raise EpFail(
                    f"{ep.name}: the kernel registry changed between capability and build for {node.describe()}"
                )
            try:
                compute = entry.builder(node, ctx)
            except EpCoreError as exc:
                raise type(exc)(f"{node.describe()} on {ep.name}: {exc.message}") from exc
            except Exception as exc:
                raise Fail(
                    f"building the kernel for {node.describe()} on {ep.name} failed: {type(exc).__name__}: {exc}"
                ) from exc
            hosts = frozenset(kdef.host_inputs), frozenset(kdef.host_outputs)
            reads, name = tuple(node.inputs) + node.implicit_inputs, self.qualified(node.name)
            units.append(Unit(name, node.op_type, ep_i, reads, tuple(node.outputs), idx, compute, *hosts))
        # fused groups: one ep_compile call per EP with all of its groups
        by_ep: dict[int, list[tuple[Any, FusedNode, GraphView]]] = {}
        prefix = self.session.options.get_session_config_entry("ep.context_node_name_prefix", "") or ""
        for ep_i, claim in self.partition.groups:
            ins, outs = fused_inputs_outputs(graph, claim.nodes, claim.drop_constant_initializers)
            k = self.session.fused_counter
            self.session.fused_counter += 1
            name = f"{prefix}{eps[ep_i].name}_{self.session.model_hash}_{k}"
            fused = FusedNode(name, ins, outs, tuple(n.name for n in claim.nodes))
            view = graph.subset(n.index for n in claim.nodes)
            view.name = name
            by_ep.setdefault(ep_i, []).append((claim, fused, view))
        for ep_i, items in by_ep.items():
            ep = eps[ep_i]
            if self.session.options.flag(DISABLE_COMPILE_KEY):
                _refuse_compiling(ep.name, items)
            infos = ep.call("ep_compile", graphs=[v for _, _, v in items], fused_nodes=[f for _, f, _ in items])
            if infos is None or len(infos) != len(items):
                raise EpFail(
                    f"{ep.name}.ep_compile returned {0 if infos is None else len(infos)} compute infos for "
                    f"{len(items)} fused nodes"
                )
            for (claim, fused, view), info in zip(items, infos):
                if not isinstance(info, NodeComputeInfo):
                    raise EpFail(
                        f"{ep.name}.ep_compile returned {type(info).__name__} for {fused.name}, not NodeComputeInfo"
                    )
                state = None
                if info.create_state is not None:
                    try:
                        state = info.create_state(ComputeContext(fused.name, ep.memory_info, ep.stream, ep.allocator))
                    except Exception as exc:
                        for made in units:  # states already created would otherwise never be released
                            if made.release is not None:
                                with contextlib.suppress(Exception):
                                    made.release(made.state)
                        raise hook_error(ep.name, f"create_state of {fused.name}", exc) from exc
                self.session.compiled.append((ep_i, fused, view))
                key, compute = min(n.index for n in claim.nodes), functools.partial(info.compute, state)
                unit = Unit(self.qualified(fused.name), "FusedNode", ep_i, fused.inputs, fused.outputs, key, compute)
                unit.fused_nodes, unit.state, unit.release = fused.node_names, state, info.release_state
                units.append(unit)
        units.sort(key=lambda u: u.order_key)
        return units

    def qualified(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def _topological_units(self) -> list[Unit]:
        producer = {o: i for i, u in enumerate(self.units) for o in u.outputs if o}
        edges: list[set[int]] = [set() for _ in self.units]
        for j, u in enumerate(self.units):
            for name in u.inputs:
                src = producer.get(name)
                if src is not None and src != j:
                    edges[src].add(j)
        return [self.units[i] for i in topo_order(len(self.units), [sorted(e) for e in edges])]

    def subgraph_runner(self, node: Any, attr_name: str) -> SubgraphRunner:
        key = (node.index, attr_name)
        if key not in self._subprograms:
            sub = node.subgraphs[attr_name]
            self._subprograms[key] = GraphProgram(sub, self.session, self.qualified(f"{node.name}/{attr_name}"))
        return SubgraphRunner(self._subprograms[key])

    def subprograms(self) -> list["GraphProgram"]:
        return list(self._subprograms.values())

    # ------------------------------------------------------------------------------- plan
    def plan(
        self,
        input_memory: Mapping[str, MemoryInfo] | None = None,
        outputs_to_host: bool = True,
        fetches: tuple[str, ...] = (),
    ) -> Plan:
        """The plan for this placement of inputs and, if given, these outputs only (made once, then cached)."""
        key = (tuple(sorted((input_memory or {}).items(), key=lambda kv: kv[0])), outputs_to_host, fetches)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = build_plan(
                self.graph,
                self.order,
                self.session,
                self._constant_copies,
                self._folded,
                dict(input_memory or {}),
                outputs_to_host,
                fetches,
            )
        return plan

    def save_optimized(self, model: Any, path: str, declared: Any) -> None:
        """``optimized_model_filepath``: ``model`` as this main program runs it, folded nodes turned
        into initializers (nodes making graph outputs stay), what no output needs dropped; its
        outputs as ``declared`` (``Built.declared``), as onnxruntime writes them."""
        import onnx
        from onnx import numpy_helper

        if path.lower().endswith(".ort"):
            raise InvalidArgument(f"optimized_model_filepath {path!r}: ep-core writes ONNX models, not ORT format")
        plan, src, out = self.plan(), model.graph, onnx.ModelProto.FromString(model.SerializeToString())
        outputs = {v.name for v in src.output}
        folded = {u.order_key: u.outputs for u in self.order if u.name in plan.folded and outputs.isdisjoint(u.outputs)}
        needed, kept = outputs | {v.name for v in src.input}, list[Any]()  # an initializer that is an input too stays
        for n in reversed(self.graph.all_nodes):
            if n.index not in folded and needed.intersection(n.outputs):
                kept.insert(0, n.proto)
                needed.update(n.inputs + n.implicit_inputs)
        inits = [t for t in src.initializer if t.name in needed]
        inits += [
            numpy_helper.from_array(plan.template[plan.slots[o]], o) for f in folded.values() for o in f if o in needed
        ]
        infos = [v for v in src.value_info if v.name in needed]
        outs = ("output", declared.output)
        for field, items in (("node", kept), ("initializer", inits), ("value_info", infos), outs):
            out.graph.ClearField(field)
            getattr(out.graph, field).extend(items)
        try:  # past protobuf's reach, tensors go to <file>.data beside it (also those left in the source's)
            read_back(out.graph.initializer)
            big = out.ByteSize() > INLINE_LIMIT
            onnx.save_model(out, path, save_as_external_data=big, location=os.path.basename(path) + ".data")
        except (OSError, ValueError) as exc:
            raise Fail(f"optimized_model_filepath {path!r}: the optimized model cannot be written: {exc}") from exc

    def release(self) -> list[EpCoreError]:
        """Release every unit's compiled state (``release_state``) and every subprogram's; one that
        raises does not stop the others. Returns the failures, typed and naming EP and fused node."""
        errors: list[EpCoreError] = []
        for u in self.units:
            if u.release is not None:
                try:
                    u.release(u.state)
                except Exception as exc:  # noqa: BLE001 - collected, reported by the caller
                    ep = self.session.eps[u.ep_index].name
                    error = hook_error(ep, f"release_state of {u.name}", exc)
                    error.__cause__ = exc
                    errors.append(error)
                u.state = None
        for sub in self._subprograms.values():
            errors.extend(sub.release())
        return errors


def _refuse_compiling(ep_name: str, items: list[tuple[Any, FusedNode, GraphView]]) -> None:
    """``session.disable_compile=1``: an EP may load precompiled EPContext nodes (also through
    ``ep_compile``) but compile nothing else; a group that would be compiled fails the session."""
    fresh = [
        f for claim, f, _ in items if not all(n.op_type == EP_CONTEXT_OP and n.domain == MS_DOMAIN for n in claim.nodes)
    ]
    if fresh:
        groups = "; ".join(f"{f.name} (nodes {list(f.node_names)})" for f in fresh[:5])
        more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
        nested = any(g.parent is not None for claim, f, g in items if f in fresh)  # no EPContext node there
        way = (
            "Groups inside If/Loop/Scan bodies get no EPContext node (context models hold main-graph groups), "
            f"so they compile on every load: unset {DISABLE_COMPILE_KEY}"
            if nested
            else f"Compile the model once (ep.context_enable=1 or `ep-core compile`) and load the _ctx.onnx model, "
            f"or unset {DISABLE_COMPILE_KEY}"
        )
        raise ModelRequiresCompilation(
            f"{ep_name} needs to compile {len(fresh)} fused group(s), but {DISABLE_COMPILE_KEY}=1 allows only "
            f"precompiled EPContext nodes: {groups}{more}. {way}"
        )

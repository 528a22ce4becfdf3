"""One graph made runnable: partitioned, its kernels built, its fused groups compiled, and a plan
of steps (kernels, fused nodes, device copies) with every value's slot and last use known.

The per-run loop touches only a list of ``Step`` tuples and checks every result against the EP
contract (``contract.py``), so framework cost per node stays under a microsecond."""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ep_core.runtime.contract import OutputSpec, check_all, check_result, expect
from ep_core.runtime.partition import Partition, fused_inputs_outputs, partition_graph, require_complete
from ep_core.sdk.compute import ComputeContext, FusedNode, NodeComputeInfo
from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN
from ep_core.sdk.errors import EpCoreError, EpFail, Fail, InvalidGraph, ModelRequiresCompilation
from ep_core.sdk.graph import GraphView, NodeView, topo_order
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo

if TYPE_CHECKING:
    from pathlib import Path

    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.profiling import Profiler
    from ep_core.sdk.config import SessionConfig

# ops whose output must not be computed once: random draws, and ops with side effects on state
NON_FOLDABLE_OPS = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",
        "If",
        "Loop",
        "Scan",
        "SequenceMap",
        "EPContext",
    }
)
DISABLE_COMPILE_KEY = "session.disable_compile"
NONE_SLOT = 0  # always None: missing optional inputs
SINK_SLOT = 1  # written by missing optional outputs, never read


@dataclass
class Unit:
    """A node or fused group as one runnable step."""

    name: str
    op_type: str
    ep_index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    order_key: int
    compute: Callable[..., Sequence[Any]] | None = None
    host_inputs: frozenset[int] = frozenset()
    host_outputs: frozenset[int] = frozenset()
    fused_nodes: tuple[str, ...] = ()
    state: Any = None
    release: Callable[[Any], None] | None = None


# (compute, input getter, output slots, slots to free, output specs): all the run loop reads
Step = tuple[
    Callable[..., Any],
    Callable[[list[Any]], Sequence[Any]],
    tuple[int, ...],
    tuple[int, ...],
    tuple[OutputSpec | None, ...],
]


@dataclass(frozen=True)
class StepInfo:
    kind: str  # "node" | "fused" | "copy"
    name: str
    op_type: str
    ep: str
    detail: str = ""
    outputs: tuple[str, ...] = ()  # the step's output names, for contract errors


@dataclass
class Plan:
    slots: dict[str, int]
    template: list[Any]
    steps: list[Step]
    infos: list[StepInfo]
    input_slots: dict[str, int]
    output_slots: list[int]
    output_memory: list[MemoryInfo]
    folded: list[str] = field(default_factory=list)  # units computed once at creation
    copy_outputs: tuple[int, ...] = ()  # outputs that are plan constants: copied per run

    def outputs(self, vals: list[Any]) -> list[Any]:
        out = [vals[s] for s in self.output_slots]
        for i in self.copy_outputs:  # never hand out a plan constant: a caller could mutate it
            out[i] = _fresh(out[i])
        return out

    def describe(self) -> list[str]:
        return [
            f"{i:4d} {s.kind:5s} {s.name} ({s.op_type}) on {s.ep}{' ' + s.detail if s.detail else ''}"
            for i, s in enumerate(self.infos)
        ]


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
        # inside a profiled run, the subgraph's steps are traced into the same run
        self.program.execute(plan, vals, getattr(_PROFILING, "events", None))
        return plan.outputs(vals)


_PROFILING = threading.local()  # the events list of the profiled run on this thread, if any


class SessionContext:
    """What a program needs from its session (kept small so programs nest)."""

    def __init__(self, options: Any, eps: "list[EpInstance]", model_hash: str, profiler: "Profiler | None") -> None:
        self.options = options
        self.eps = eps
        self.model_hash = model_hash
        self.profiler = profiler
        self.compiled: list[tuple[int, FusedNode, GraphView]] = []  # for EPContext generation
        self.model_path: Any = None  # the model file's path (None for bytes), set by the session
        self.fused_counter = 0

    def transfer_for(self, src: MemoryInfo, dst: MemoryInfo) -> tuple[Any, Any]:
        """(data transfer, stream of the device side) able to copy src -> dst."""
        for ep in self.eps:
            dt = ep.data_transfer
            if dt is not None and dt.can_copy(src, dst):
                stream = None
                for e in self.eps:
                    if e.stream is not None and (e.memory_info == src or e.memory_info == dst):
                        stream = e.stream
                        break
                return dt, stream
        raise Fail(
            f"no data transfer can copy from {src} to {dst}: the EPs selected are "
            f"{[e.name for e in self.eps]} and none of their factories provides one"
        )


def model_hash(model_bytes: bytes) -> str:
    return hashlib.sha256(model_bytes).hexdigest()[:8]


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
            units.append(
                Unit(
                    name=self.qualified(node.name),
                    op_type=node.op_type,
                    ep_index=ep_i,
                    inputs=tuple(node.inputs) + node.implicit_inputs,
                    outputs=tuple(node.outputs),
                    order_key=idx,
                    compute=compute,
                    host_inputs=frozenset(kdef.host_inputs),
                    host_outputs=frozenset(kdef.host_outputs),
                )
            )
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
                    state = info.create_state(ComputeContext(fused.name, ep.memory_info, ep.stream, ep.allocator))
                self.session.compiled.append((ep_i, fused, view))
                units.append(
                    Unit(
                        name=self.qualified(fused.name),
                        op_type="FusedNode",
                        ep_index=ep_i,
                        inputs=fused.inputs,
                        outputs=fused.outputs,
                        order_key=min(n.index for n in claim.nodes),
                        compute=functools.partial(info.compute, state),
                        fused_nodes=fused.node_names,
                        state=state,
                        release=info.release_state,
                    )
                )
        units.sort(key=lambda u: u.order_key)
        return units

    def qualified(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def _topological_units(self) -> list[Unit]:
        producer: dict[str, int] = {}
        for i, u in enumerate(self.units):
            for o in u.outputs:
                if o:
                    producer[o] = i
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
    def plan(self, input_memory: Mapping[str, MemoryInfo] | None = None, outputs_to_host: bool = True) -> Plan:
        key = (tuple(sorted((input_memory or {}).items(), key=lambda kv: kv[0])), outputs_to_host)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._build_plan(dict(input_memory or {}), outputs_to_host)
            self._plans[key] = plan
        return plan

    def _build_plan(self, input_memory: dict[str, MemoryInfo], outputs_to_host: bool) -> Plan:
        eps = self.session.eps
        graph = self.graph
        slots: dict[str, int] = {}
        template: list[Any] = [None, None]
        loc: dict[str, MemoryInfo] = {}
        constants: set[str] = set()

        def slot(name: str) -> int:
            s = slots.get(name)
            if s is None:
                s = slots[name] = len(template)
                template.append(None)
            return s

        input_slots: dict[str, int] = {}
        for name in list(graph.input_names) + list(graph.outer_scope_inputs):
            input_slots[name] = slot(name)
            loc[name] = input_memory.get(name, HOST_MEMORY)
        for name in graph.initializer_protos:
            s = slot(name)
            if name not in graph.input_names:
                template[s] = graph.initializer(name)
            else:
                template[s] = graph.initializer(name)  # default, a feed may override
            loc[name] = HOST_MEMORY
            constants.add(name)

        # (compute, input slots, output slots, output specs): made into ``Step``s once frees are known
        steps: list[tuple[Any, tuple[int, ...], tuple[int, ...], tuple[OutputSpec | None, ...]]] = []
        infos: list[StepInfo] = []

        def moved(name: str, need: MemoryInfo) -> int:
            have = loc.get(name, HOST_MEMORY)
            if have == need or (have.is_host and need.is_host):
                return slot(name)
            key = f"{name}@{need}"
            if key in slots:
                return slots[key]
            dt, stream = self.session.transfer_for(have, need)
            dst = slot(key)
            if name in constants:
                cached = self._constant_copies.get((name, need))
                if cached is None:
                    cached = self._constant_copies[(name, need)] = dt.copy(template[slots[name]], have, need, stream)
                template[dst] = cached
                constants.add(key)
            else:
                steps.append((_copy_fn(dt, have, need, stream), (slot(name),), (dst,), (None,)))
                infos.append(StepInfo("copy", key, "MemcpyTransfer", "core", f"{have} -> {need}", (key,)))
            loc[key] = need
            return dst

        folded: list[str] = []
        for u in self.order:
            ep = eps[u.ep_index]
            mem = ep.memory_info
            if self._foldable(u, mem, constants):
                outputs = self._folded.get(u.name)
                if outputs is None:
                    assert u.compute is not None  # every unit is built with one
                    try:
                        res = u.compute(*[template[slots[n]] if n else None for n in u.inputs])
                        outputs = self._folded[u.name] = check_all(expect(graph, u.outputs), res, u.outputs)
                    except Exception as exc:
                        raise _unit_error(u, ep.name, exc) from exc
                for name, value in zip(u.outputs, outputs):
                    if name:
                        template[slot(name)] = value
                        loc[name] = HOST_MEMORY
                        constants.add(name)
                folded.append(u.name)
                continue
            ins = []
            for i, name in enumerate(u.inputs):
                if not name:
                    ins.append(NONE_SLOT)
                    continue
                if name not in slots and name not in loc:
                    raise InvalidGraph(
                        f"{u.name} ({u.op_type}) reads {name!r}, which no node, input or initializer provides"
                    )
                need = HOST_MEMORY if (mem.is_host or i in u.host_inputs) else mem
                ins.append(moved(name, need))
            outs = []
            for j, name in enumerate(u.outputs):
                if not name:
                    outs.append(SINK_SLOT)
                    continue
                outs.append(slot(name))
                loc[name] = HOST_MEMORY if (mem.is_host or j in u.host_outputs) else mem
            steps.append((u.compute, tuple(ins), tuple(outs), expect(graph, u.outputs)))
            infos.append(StepInfo("fused" if u.fused_nodes else "node", u.name, u.op_type, ep.name, "", u.outputs))

        output_slots: list[int] = []
        output_memory: list[MemoryInfo] = []
        for v in graph.outputs:
            if v.name not in slots:
                raise InvalidGraph(f"graph output {v.name!r} of graph {graph.name!r} is produced by no node")
            if outputs_to_host:
                output_slots.append(moved(v.name, HOST_MEMORY))
                output_memory.append(HOST_MEMORY)
            else:
                output_slots.append(slots[v.name])
                output_memory.append(loc[v.name])

        # free every slot after its last reader (never constants, inputs or outputs)
        keep = {NONE_SLOT, SINK_SLOT, *output_slots, *(slots[c] for c in constants)}
        last: dict[int, int] = {}
        for k, (_, ins_, outs_, _) in enumerate(steps):
            for s in outs_:
                last.setdefault(s, k)
            for s in ins_:
                last[s] = k
        frees: list[list[int]] = [[] for _ in steps]
        for s, k in last.items():
            if s not in keep:
                frees[k].append(s)
        run_steps: list[Step] = [
            (fn, _getter(ins_), outs_, tuple(frees[k]), want) for k, (fn, ins_, outs_, want) in enumerate(steps)
        ]
        constant_slots = frozenset(slots[c] for c in constants)
        copy_outputs = tuple(i for i, s_ in enumerate(output_slots) if s_ in constant_slots)
        return Plan(slots, template, run_steps, infos, input_slots, output_slots, output_memory, folded, copy_outputs)

    def _foldable(self, u: Unit, mem: MemoryInfo, constants: set[str]) -> bool:
        """Deterministic host nodes whose every input is known at creation (ORT's constant
        folding): computed once, their outputs become constants of the plan."""
        return (
            mem.is_host
            and not u.fused_nodes
            and u.op_type not in NON_FOLDABLE_OPS
            and len(u.outputs) > 0
            and all((not n) or n in constants for n in u.inputs)
            and not (not u.inputs and u.op_type != "Constant")
        )

    # -------------------------------------------------------------------------------- run
    def execute(self, plan: Plan, vals: list[Any], events: list[dict[str, Any]] | None) -> None:
        if events is not None:
            return self._execute_profiled(plan, vals, events)
        k = -1
        try:
            for k, (fn, get, outs, frees, want) in enumerate(plan.steps):  # noqa: B007 - k names the failing step
                res = fn(*get(vals))
                # the EP contract (contract.py): compares only; messages are built on failure
                if res.__class__ is not tuple or len(res) != len(outs):
                    res = check_result(res, plan.infos[k].outputs)
                for o, r, w in zip(outs, res, want):
                    vals[o] = r
                    if w is not None and (r.__class__ is not w.cls or r.dtype is not w.dtype or r.shape != w.shape):
                        w.accept(r)
                for f in frees:
                    vals[f] = None
        except Exception as exc:
            raise _step_error(plan, k, exc) from exc

    def _execute_profiled(self, plan: Plan, vals: list[Any], events: list[dict[str, Any]]) -> None:
        clock = time.perf_counter_ns
        k = -1
        outer_events = getattr(_PROFILING, "events", None)
        _PROFILING.events = events
        try:
            for k, (fn, get, outs, frees, want) in enumerate(plan.steps):
                t0 = clock()
                res = fn(*get(vals))
                t1 = clock()
                if res.__class__ is not tuple or len(res) != len(outs):
                    res = check_result(res, plan.infos[k].outputs)
                for o, r, w in zip(outs, res, want):
                    vals[o] = r
                    if w is not None and (r.__class__ is not w.cls or r.dtype is not w.dtype or r.shape != w.shape):
                        w.accept(r)
                for f in frees:
                    vals[f] = None
                info = plan.infos[k]
                events.append(
                    {
                        "name": info.name,
                        "cat": "Copy" if info.kind == "copy" else "Node",
                        "ts_ns": t0,
                        "dur_ns": t1 - t0,
                        "args": {
                            "op_type": info.op_type,
                            "provider": info.ep,
                            "kind": info.kind,
                            "detail": info.detail,
                        },
                    }
                )
        except Exception as exc:
            raise _step_error(plan, k, exc) from exc
        finally:
            _PROFILING.events = outer_events

    def release(self) -> None:
        for u in self.units:
            if u.release is not None:
                u.release(u.state)
        for sub in self._subprograms.values():
            sub.release()


def _refuse_compiling(ep_name: str, items: list[tuple[Any, FusedNode, GraphView]]) -> None:
    """``session.disable_compile=1``: an EP may load precompiled EPContext nodes (also through
    ``ep_compile``) but compile nothing else; a group that would be compiled fails the session."""
    fresh = [
        f for claim, f, _ in items if not all(n.op_type == EP_CONTEXT_OP and n.domain == MS_DOMAIN for n in claim.nodes)
    ]
    if fresh:
        groups = "; ".join(f"{f.name} (nodes {list(f.node_names)})" for f in fresh[:5])
        more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
        raise ModelRequiresCompilation(
            f"{ep_name} needs to compile {len(fresh)} fused group(s), but {DISABLE_COMPILE_KEY}=1 allows only "
            f"precompiled EPContext nodes: {groups}{more}. Compile the model once (ep.context_enable=1 or "
            f"`ep-core compile`) and load the _ctx.onnx model, or unset {DISABLE_COMPILE_KEY}"
        )


def _getter(slots: tuple[int, ...]) -> Callable[[list[Any]], Sequence[Any]]:
    """Reads a step's inputs from the value list in one C call (a comprehension costs ~0.1 us)."""
    if len(slots) == 1:
        return itemgetter(slice(slots[0], slots[0] + 1))  # itemgetter(i) would return the bare value
    return itemgetter(*slots) if slots else itemgetter(slice(0, 0))


def _copy_fn(dt: Any, src: MemoryInfo, dst: MemoryInfo, stream: Any) -> Callable[[Any], tuple[Any]]:
    copy = dt.copy

    def run(value: Any) -> tuple[Any]:
        return (copy(value, src, dst, stream),)

    return run


def _unit_error(u: Unit, ep_name: str, exc: Exception) -> EpCoreError:
    where = f"node {u.name!r} (op {u.op_type}) on {ep_name}, folded at session creation"
    if isinstance(exc, EpCoreError):
        return type(exc)(f"{where}: {exc.message}")
    return Fail(f"{where} failed: {type(exc).__name__}: {exc}")


def _step_error(plan: Plan, k: int, exc: Exception) -> EpCoreError:
    if k < 0 or k >= len(plan.infos):
        return exc if isinstance(exc, EpCoreError) else Fail(f"{type(exc).__name__}: {exc}")
    info = plan.infos[k]
    where = f"{info.kind} {info.name!r} (op {info.op_type}) on {info.ep}"
    if isinstance(exc, EpCoreError):
        if exc.message.startswith(where):
            return exc
        return type(exc)(f"{where}: {exc.message}")
    return Fail(f"{where} failed: {type(exc).__name__}: {exc}")


def _fresh(value: Any) -> Any:
    copy = getattr(value, "copy", None)
    return copy() if callable(copy) else value

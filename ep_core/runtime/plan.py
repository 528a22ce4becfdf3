"""The plan step: from a program's units (in topological order) to the steps that run them for
one placement of inputs — each value's slot and memory device, copies where an edge crosses
devices, constants folded and copied once, slots freed after their last reader, and every step's
output expectations (``contract.py``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from ep_core.runtime.contract import OutputSpec, check_all, expect
from ep_core.runtime.load import materialise_budget
from ep_core.runtime.units import NONE_SLOT, SINK_SLOT, SessionContext, Step, StepInfo, Unit
from ep_core.sdk.errors import EpCoreError, Fail, InvalidGraph
from ep_core.sdk.graph import GraphView, ValueInfo
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo

# ops whose output must not be computed once: random draws, and ops with side effects on state
NON_FOLDABLE_OPS = frozenset(
    "RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial Bernoulli Dropout If Loop Scan "
    "SequenceMap EPContext".split()
)
FOLD_NODE_LIMIT = 1 << 30  # onnxruntime's default cap on what folding one node may produce
CONSUMED: tuple[Any, ...] = ("folded, and read only by folded nodes: freed",)  # a ``folded_outputs`` entry


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
        return [np.asarray(v) if isinstance(v, np.generic) else v for v in out]  # a NumPy scalar: a 0-d array

    def describe(self) -> list[str]:
        return [
            f"{i:4d} {s.kind:5s} {s.name} ({s.op_type}) on {s.ep}{' ' + s.detail if s.detail else ''}"
            for i, s in enumerate(self.infos)
        ]


def build_plan(
    graph: GraphView,
    order: Sequence[Unit],
    session: SessionContext,
    constant_copies: dict[tuple[str, MemoryInfo], Any],
    folded_outputs: dict[str, tuple[Any, ...]],
    input_memory: Mapping[str, MemoryInfo],
    outputs_to_host: bool,
    fetches: tuple[str, ...] = (),
) -> Plan:
    """The steps that run ``order`` for one placement of the inputs. ``constant_copies`` and
    ``folded_outputs`` are the program's caches, shared by all its plans: weights are copied to a
    device once, and a foldable unit is computed once (not at ORT_DISABLE_ALL; fusions come with
    the graph optimizer). With ``fetches``, only the units they need run; other outputs are None."""
    eps = session.eps
    if fetches:  # walk back from the fetches: keep a unit that makes a value still wanted
        wanted, kept = set(fetches), list[Unit]()
        for u in reversed(order):
            if wanted.intersection(u.outputs):
                kept.insert(0, u)
                wanted.update(u.inputs)
        order = kept
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
        template[slot(name)] = graph.initializer(name)
        loc.setdefault(name, HOST_MEMORY)
        if name not in graph.input_names:  # else a default a feed may override: never folded or cached
            constants.add(name)

    # (compute, input slots, output slots, output specs): made into ``Step``s once frees are known
    steps: list[tuple[Any, tuple[int, ...], tuple[int, ...], tuple[OutputSpec | None, ...]]] = []
    infos: list[StepInfo] = []
    made_on: dict[int, Any] = {}  # slot -> the sync stream its value was made on

    def moved(name: str, need: MemoryInfo) -> int:
        have = loc.get(name, HOST_MEMORY)
        if have == need or (have.is_host and need.is_host):
            return slot(name)
        key = f"{name}@{need}"
        if key in slots:
            return slots[key]
        dt, stream = session.transfer_for(have, need)
        dst = slot(key)
        if name in constants:
            cached = constant_copies.get((name, need))
            if cached is None:
                cached = constant_copies[(name, need)] = dt.copy(template[slots[name]], have, need, stream)
            template[dst] = cached
            constants.add(key)
        else:
            fn = _waiting(_copy_fn(dt, have, need, stream), [slot(name)], stream, made_on)
            steps.append((fn, (slot(name),), (dst,), (None,)))
            infos.append(StepInfo("copy", key, "MemcpyTransfer", "core", f"{have} -> {need}", (key,)))
        loc[key], made_on[dst] = need, stream
        return dst

    folded: list[str] = []
    budget, fold = _fold_budget(graph), session.options.graph_optimization_level > 0
    # a folded value whose every reader folds too is freed and its bytes go back to the budget (int8
    # weights dequantized by Cast -> Mul become float weights once, without keeping the Cast's copy);
    # only in a plan of the whole graph: a plan for some fetches does not see every reader
    uses, made_by, graph_outs = (
        Counter(n for u in order for n in u.inputs if n),
        dict[str, str](),
        {v.name for v in graph.outputs},
    )
    for u in order:
        ep = eps[u.ep_index]
        mem = ep.memory_info
        outputs = folded_outputs.get(u.name) if fold and _foldable(u, mem, constants) else ()
        if outputs is CONSUMED:
            folded.append(u.name)
            continue
        if outputs is None:
            values = [template[slots[n]] if n else None for n in u.inputs]
            size = _output_bytes(graph, u, values)
            outputs = ()  # not folded: too big, or of a size nothing tells before computing it
            if size is not None and size <= min(FOLD_NODE_LIMIT, budget[0]):
                assert u.compute is not None  # every unit is built with one
                try:
                    outputs = check_all(expect(graph, u.outputs), u.compute(*values), u.outputs)
                except Exception as exc:
                    raise _unit_error(u, ep.name, exc) from exc
                budget[0] -= sum(getattr(v, "nbytes", 0) for v in outputs)
            folded_outputs[u.name] = outputs
        if outputs:
            for name, value in zip(u.outputs, outputs):
                if name:
                    template[slot(name)] = value
                    loc[name] = HOST_MEMORY
                    constants.add(name)
            for name in u.inputs:
                uses[name] -= 1
                if not fetches and name in made_by and uses[name] == 0 and name not in graph_outs:
                    budget[0] += getattr(template[slots[name]], "nbytes", 0)
                    template[slots[name]], folded_outputs[made_by.pop(name)] = None, CONSUMED
            if len(u.outputs) == 1:
                made_by[u.outputs[0]] = u.name
            folded.append(u.name)
            continue
        size = getattr(template[slots[u.inputs[0]]], "size", 1) if u.op_type == "If" and u.inputs[0] in constants else 1
        if size != 1:  # as onnxruntime, which folds it too
            raise InvalidGraph(f"{u.name} (If): its condition is a constant of {size} elements, not one")
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
            host = mem.is_host or j in u.host_outputs  # complete on return (KernelDef): no stream made it
            loc[name], made_on[outs[-1]] = (HOST_MEMORY, None) if host else (mem, ep.stream)
        steps.append((_waiting(u.compute, ins, ep.stream, made_on), tuple(ins), tuple(outs), expect(graph, u.outputs)))
        infos.append(StepInfo("fused" if u.fused_nodes else "node", u.name, u.op_type, ep.name, "", u.outputs))

    output_slots: list[int] = []
    output_memory: list[MemoryInfo] = []
    for v in graph.outputs:
        if fetches and v.name not in fetches:
            output_slots.append(NONE_SLOT)
            output_memory.append(HOST_MEMORY)
        elif v.name not in slots:
            raise InvalidGraph(f"graph output {v.name!r} of graph {graph.name!r} is produced by no node")
        elif outputs_to_host:
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


def _foldable(u: Unit, mem: MemoryInfo, constants: set[str]) -> bool:
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


def _fold_budget(graph: GraphView) -> list[int]:
    """Bytes folding may still materialise, shared by every plan of the model (kept on its root
    graph view): what ``materialise_budget`` allows for its stored tensors."""
    root = graph
    while root.parent is not None:
        root = root.parent
    budget: list[int] = root.__dict__.setdefault("_fold_budget", [materialise_budget(root.proto)])
    return budget


def _output_bytes(graph: GraphView, u: Unit, ins: list[Any]) -> int | None:
    """Bytes a foldable node will produce: from the model's inferred shapes or, where those are
    not all known (a shape computed by another folded node), from shape inference of the node
    alone with its constant inputs. None when even that does not tell (never folded then)."""
    infos = [graph.value_info(n) for n in u.outputs if n]
    if not all(_sized(i) for i in infos):
        import onnx
        from onnx import helper, numpy_helper

        node = graph.all_nodes[u.order_key].proto
        try:
            inits = [numpy_helper.from_array(v, n) for n, v in zip(node.input, ins) if n]
            g = helper.make_graph([node], "fold", [], [], initializer=inits)
            opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets.items() if d != "ai.onnx"]
            inferred = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=opsets))
        except Exception:  # noqa: BLE001 - a sequence input, or a node onnx cannot infer: not folded
            return None
        alone = GraphView(inferred.graph, graph.opsets)
        infos = [alone.value_info(n) for n in u.outputs if n]
        if not all(_sized(i) for i in infos):
            return None
    return sum(int(math.prod(i.shape)) * i.np_dtype.itemsize for i in infos)  # type: ignore[arg-type, misc, union-attr]


def _sized(info: ValueInfo | None) -> bool:
    """Whether a value's bytes are known from its type: never a string's (its elements' lengths are
    data: a chain of StringConcat(x, x) doubles them per node), so strings are not folded."""
    return (
        info is not None
        and info.np_dtype is not None
        and info.np_dtype.kind != "O"
        and info.shape is not None
        and all(isinstance(d, int) and d >= 0 for d in info.shape)
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


def _waiting(fn: Any, ins: Sequence[int], stream: Any, made_on: dict[int, Any]) -> Any:
    """``fn`` on ``stream`` (None: the host), after a notification from each other stream its inputs came from."""
    others = {id(p): p for i in ins if (p := made_on.get(i)) is not None and p is not stream}.values()

    def run(*args: Any) -> Any:
        for p in others:
            (note := p.create_notification()).activate()
            note.wait_on_device(stream) if stream is not None else note.wait_on_host()
        return fn(*args)

    return run if others else fn


def _unit_error(u: Unit, ep_name: str, exc: Exception) -> EpCoreError:
    where = f"node {u.name!r} (op {u.op_type}) on {ep_name}, folded at session creation"
    if isinstance(exc, EpCoreError):
        return type(exc)(f"{where}: {exc.message}")
    return Fail(f"{where} failed: {type(exc).__name__}: {exc}")


def _fresh(value: Any) -> Any:
    return value.copy() if callable(getattr(value, "copy", None)) else value

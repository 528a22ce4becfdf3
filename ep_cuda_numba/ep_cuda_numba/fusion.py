"""Compiling chains of elementwise ops into ONE generated CUDA kernel per fused group.

``find_groups`` picks connected elementwise nodes; ``compile_group`` turns a group into a
spec (plain data: ops, wiring, params, dtypes), checks it (``spec_check``), generates the kernel
source from it (``codegen``) and returns a ``NodeComputeInfo``. The spec is all an EPContext node
stores, so loading a compiled model never executes text read from a file: the kernel is
regenerated from the validated spec by this package's own generator.

Every intermediate of a group is computed per element of the group's broadcast shape. That is
exact for pointwise ops; the only hazard is a group output whose true shape is smaller than the
group's, which ``compute`` checks per run (it then evaluates node by node)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.compute import ComputeContext, NodeComputeInfo
from ep_core.sdk.errors import EpFail
from ep_cuda_numba.codegen import (
    ALL_OPS,
    BF16,
    Program,
    bf16_positions,
    compile_program,
    compute_dtype,
    op_statement,
    run_program,
    single_op_program,
)
from ep_cuda_numba.spec_check import (
    GELU_APPROXIMATE,
    MAX_GROUP_INPUTS,
    SPEC_FORMAT,
    is_param,
    type_problem,
    typed_param,
    validate_spec,
)

if TYPE_CHECKING:
    from ep_core.sdk.compute import FusedNode
    from ep_core.sdk.graph import GraphView, NodeView


class _Attrs:
    """Attribute access for op_expression from a spec's stored attributes."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        self._a = attrs

    def attr(self, name: str, default: Any = None) -> Any:
        return self._a.get(name, default)


def _dtype(node: "NodeView", i: int, output: bool = False) -> np.dtype | None:
    vi = node.output_info(i) if output else node.input_info(i)
    return None if vi is None else vi.np_dtype


def _params(node: "NodeView") -> list[float] | None:
    """Scalar params of a node, or None when they are not known at compile time."""
    op = ALL_OPS[node.op_type]
    if node.op_type == "Clip" and node.opset >= 11:
        vals = []
        dt = _dtype(node, 0)
        for j, default in ((1, -np.inf), (2, np.inf)):
            name = node.inputs[j] if j < len(node.inputs) else ""
            if not name:
                if dt is not None and dt.kind in "iu":
                    ii = np.iinfo(dt)
                    default = ii.min if j == 1 else ii.max
                vals.append(float(default))
                continue
            c = node.graph.constant_value(name)
            if c is None:
                return None
            vals.append(float(np.asarray(c).reshape(-1)[0]))
        return vals
    if node.op_type == "Clip":
        return [float(node.attr("min", -np.inf)), float(node.attr("max", np.inf))]
    return list(op.params(node)) if op.params is not None else []


def fusable_ops() -> list[tuple[str, str, int, None]]:
    """``(domain, op_type, since, end)`` of every elementwise op the fusion generator supports
    (``codegen.ALL_OPS``), from the op's first ONNX schema version on: ``fusable`` checks no
    opset. Read by the parity report (``ep_core.tools.parity.introspect``)."""
    import onnx.defs

    first: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx") and schema.name in ALL_OPS:
            first[schema.name] = min(first.get(schema.name, schema.since_version), schema.since_version)
    return [("", op, first[op], None) for op in sorted(ALL_OPS) if op in first]


def fusable(node: "NodeView") -> bool:
    """Whether ``node`` can join a generated kernel: an op of the table, dtypes known and valid
    for it (the same rules ``spec_check`` applies to a spec read back), params known."""
    if node.op_type not in ALL_OPS or node.domain not in ("", "ai.onnx") or len([o for o in node.outputs if o]) != 1:
        return False
    data = [i for i, name in enumerate(node.inputs[:1] if node.op_type == "Clip" else node.inputs) if name]
    dts = [_dtype(node, i) for i in data]
    out, dt = _dtype(node, 0, output=True), _dtype(node, 1 if node.op_type == "Where" else 0)
    if out is None or dt is None or any(d is None for d in dts):
        return False
    if type_problem(node.op_type, [str(d) for d in dts], str(dt), str(out)) is not None:
        return False
    if node.op_type == "Gelu" and node.attr("approximate", "none") not in GELU_APPROXIMATE:
        return False
    params = _params(node)
    return params is not None and all(is_param(p) for p in params)


def find_groups(
    graph: "GraphView", device_nodes: Sequence["NodeView"], max_nodes: int, host: set[int] | None = None
) -> list[list["NodeView"]]:
    """Convex groups of connected fusable device nodes (size >= 2), built in topological order.

    A node joins the group of one of its producers unless some path has already left that group
    and arrives at the node: ``left[v]`` holds the groups a path to ``v`` has left, so joining
    never makes a group non-convex (the core would reject it)."""
    cand = {n.index for n in device_nodes if fusable(n)}
    group_of: dict[int, int] = {}
    members: list[list["NodeView"]] = []
    left: dict[int, set[int]] = {}
    # groups each group depends on, transitively (kept closed), and groups each node depends on: a
    # node may not join a group that one of its upstream groups depends on, or the two groups would
    # each wait for the other (YOLOv8's box head, a - b and a + b each feeding the other's sum and
    # difference, made such a pair, and the session failed with "the graph has a cycle")
    above: list[set[int]] = []
    upstream: dict[int, set[int]] = {}
    for n in graph.all_nodes:
        producers = [p for p in (graph.producer(i) for i in tuple(n.inputs) + n.implicit_inputs if i) if p is not None]
        arrived: set[int] = set()
        needs: set[int] = set()
        for p in producers:
            arrived |= left.get(p.index, set())
            needs |= upstream.get(p.index, set())
            if p.index in group_of:
                needs.add(group_of[p.index])
        for h in list(needs):
            needs |= above[h]
        chosen: int | None = None
        if n.index in cand:
            data = n.inputs[:1] if n.op_type == "Clip" else n.inputs
            for name in data:
                prod = graph.producer(name) if name else None
                g = group_of.get(prod.index) if prod is not None else None
                if g is None or g in arrived or len(members[g]) >= max_nodes:
                    continue
                if any(g in above[h] for h in needs if h != g):
                    continue
                chosen = g
                break
            if chosen is None:
                chosen = len(members)
                members.append([])
                above.append(set())
            group_of[n.index] = chosen
            members[chosen].append(n)
            gained = needs - {chosen} - above[chosen]
            if gained:
                above[chosen] |= gained
                for other in above:
                    if chosen in other:
                        other |= above[chosen]
        upstream[n.index] = needs
        mine: set[int] = set(arrived)
        for p in producers:
            g = group_of.get(p.index)
            if g is not None and g != chosen:
                mine.add(g)
        left[n.index] = mine
    groups = [g for g in members if len(g) >= 2 and _external_inputs(g) <= MAX_GROUP_INPUTS]
    for group in groups:
        _absorb_clip_bounds(graph, group, host or set())
    return groups


def _absorb_clip_bounds(graph: "GraphView", group: list["NodeView"], host: set[int]) -> None:
    """Pull into ``group`` the Constant nodes that only give its Clips their bounds. The bounds
    are baked into the kernel's params, so this removes an input the kernel never reads, and a
    host-to-device copy of it on every run."""
    inside = {n.index for n in group}
    for n in list(group):
        if n.op_type != "Clip" or n.opset < 11:
            continue
        for name in n.inputs[1:3]:
            p = graph.producer(name) if name else None
            if p is None or p.op_type != "Constant" or p.index in inside or p.index not in host:
                continue
            uses = graph.consumers(name)
            if all(c.index in inside and c.op_type == "Clip" and name not in c.inputs[:1] for c in uses):
                group.append(p)
                inside.add(p.index)
    group.sort(key=lambda n: n.index)


def _external_inputs(nodes: Sequence["NodeView"]) -> int:
    produced = {o for n in nodes for o in n.outputs}
    return len({i for n in nodes for i in n.inputs if i and i not in produced})


# ------------------------------------------------------------------------------ specs


def spec_from_group(view: "GraphView", fused: "FusedNode") -> dict[str, Any]:
    """The data an EPContext node needs to rebuild the group's kernel."""
    nodes = sorted(view.nodes, key=lambda n: n.index)
    where: dict[str, tuple[str, int]] = {name: ("x", i) for i, name in enumerate(fused.inputs)}
    entries = []
    n_params = 0
    nodes = [n for n in nodes if n.op_type != "Constant"]  # absorbed Clip bounds: baked into params
    for k, n in enumerate(nodes):
        data_inputs = n.inputs[:1] if n.op_type == "Clip" else tuple(i for i in n.inputs if i)
        args = []
        for name in data_inputs:
            if name not in where:
                raise EpFail(
                    f"fused group {fused.name}: input {name!r} of {n.describe()} is neither outside nor produced inside"
                )
            args.append(list(where[name]))
        params = _params(n) or []
        in_dt = _dtype(n, 1 if n.op_type == "Where" else 0)
        out_dt = _dtype(n, 0, output=True)
        attrs = {"approximate": n.attr("approximate")} if n.op_type == "Gelu" and n.attr("approximate") else {}
        entries.append(
            {
                "name": n.name,
                "op": n.op_type,
                "attrs": attrs,
                "args": args,
                "params": params,
                "param_base": n_params,
                "dtype": str(in_dt),
                "out_dtype": str(out_dt),
            }
        )
        n_params += len(params)
        where[n.outputs[0]] = ("t", k)
    outputs = []
    for name in fused.outputs:
        kind, k = where[name]
        if kind != "t":
            raise EpFail(f"fused group {fused.name}: output {name!r} is not produced inside the group")
        outputs.append(k)
    in_dtypes = []
    for name in fused.inputs:
        vi = view.value_info(name)
        in_dtypes.append(str(vi.np_dtype) if vi is not None and vi.np_dtype is not None else "float32")
    return {
        "format": SPEC_FORMAT,
        "inputs": list(fused.inputs),
        "input_dtypes": in_dtypes,
        "outputs": list(fused.outputs),
        "nodes": entries,
        "output_nodes": outputs,
    }


def program_from_spec(spec: dict[str, Any]) -> tuple[Program, list[Any], list[np.dtype], list[set[int]]]:
    """(program, typed params, output dtypes, external inputs each output depends on) of a spec
    that ``spec_check.validate_spec`` accepted."""
    statements = []
    params: list[Any] = []
    deps: list[set[int]] = []
    for e in spec["nodes"]:
        op = e["op"]
        dt, out = np.dtype(e["dtype"]), np.dtype(e["out_dtype"])
        names: list[str] = []
        dep: set[int] = set()
        for kind, idx in e["args"]:
            names.append(f"{kind}{idx}")
            dep |= {idx} if kind == "x" else deps[idx]
        compute = compute_dtype(op, dt, out)
        pnames = [f"p{e['param_base'] + m}" for m in range(len(e["params"]))]
        params.extend(typed_param(p, compute.name) for p in e["params"])
        # placeholders {p0}.. of the template map to this node's global param names
        statements.append(op_statement(op, names, _arg_dtypes(spec, e), dt, out, _Attrs(e["attrs"]), pnames))
        deps.append(dep)
    out_dtypes = [np.dtype(spec["nodes"][k]["out_dtype"]) for k in spec["output_nodes"]]
    program = Program(
        len(spec["inputs"]),
        len(params),
        tuple(statements),
        tuple(spec["output_nodes"]),
        bf16_positions([np.dtype(d) for d in spec["input_dtypes"]]),
        bf16_positions(out_dtypes),
    )
    return program, params, out_dtypes, [deps[k] for k in spec["output_nodes"]]


def _arg_dtypes(spec: dict[str, Any], entry: dict[str, Any]) -> list[np.dtype]:
    """The dtype of each argument of a spec entry (an input's, or the producing node's output)."""
    return [
        np.dtype(spec["input_dtypes"][i] if kind == "x" else spec["nodes"][i]["out_dtype"]) for kind, i in entry["args"]
    ]


@dataclass
class CompiledGroup:
    """One fused node: its validated spec and the kernel source generated from it (all inputs full-shape)."""

    name: str
    spec: dict[str, Any]
    program: Program
    params: list[Any]
    out_dtypes: list[np.dtype]
    deps: list[set[int]]
    tpb: int
    simulated: bool
    source: str = ""
    launches: dict[str, int] = field(default_factory=lambda: {"fused": 0, "fallback": 0})
    ep: Any = field(default=None, repr=False, compare=False)  # the NumbaCudaEp that built it
    # spec input index -> initializer baked into the group (uploaded once; stored in the context binary)
    constants: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    in_main_graph: bool = True  # the core writes EPContext nodes for main-graph groups only

    def kernel_argtypes(self) -> tuple[Any, ...]:
        """The numba types of the full-shape kernel's arguments (outputs, inputs, params): one
        definition for compiling PTX and for binding stored PTX, so both agree on every dtype
        (bfloat16 travels as its uint16 bits; numba has no bfloat16 array type)."""
        from numba import from_dtype, types

        def array(dt: np.dtype) -> types.Type:
            return types.Array(from_dtype(np.dtype(np.uint16) if dt == BF16 else dt), 1, "C")

        sig: list[types.Type] = [array(dt) for dt in self.out_dtypes]
        sig += [array(self._input_dtype(i)) for i in range(self.program.n_inputs)]
        sig += [from_dtype(np.dtype(type(p))) for p in self.params]
        return tuple(sig)

    def compile_ptx(self, cc: tuple[int, ...]) -> str:
        """PTX of the kernel with every input at the group's full shape, for compute capability ``cc``
        (what a context generated on a real device stores, ``context_ptx``; also a build check,
        ``test_ptx_dry_run``). A context's PTX is only loaded under a trusted signature on a
        matching device; otherwise the kernel is regenerated from the spec."""
        from numba import cuda

        kernel, _ = compile_program(self.program, ("full",) * self.program.n_inputs, len(self.out_dtypes))
        ptx, _ = cuda.compile_ptx(kernel.py_func, self.kernel_argtypes(), cc=(int(cc[0]), int(cc[1])))
        return ptx

    def _input_dtype(self, i: int) -> np.dtype:
        recorded = self.spec.get("input_dtypes")
        if recorded and i < len(recorded):
            return np.dtype(recorded[i])
        for e in self.spec["nodes"]:
            for j, (kind, idx) in enumerate(e["args"]):
                if kind == "x" and idx == i:
                    if e["op"] == "Where" and j == 0:
                        return np.dtype(np.bool_)
                    return np.dtype(e["dtype"])
        return np.dtype(np.float32)  # an input no statement reads (a Clip bound baked into the params)

    def compute_info(self) -> NodeComputeInfo:
        from ep_cuda_numba.launch import Runtime

        group = self

        def create_state(ctx: ComputeContext) -> Any:
            return Runtime(group.ep, ctx.memory_info, ctx.stream, ctx.allocator)

        def compute(rt: Any, *inputs: Any) -> tuple[Any, ...]:
            shapes = [tuple(int(s) for s in x.shape) for x in inputs]
            try:
                full = tuple(np.broadcast_shapes(*shapes)) if shapes else ()
            except ValueError:
                raise EpFail(f"fused group {group.name}: inputs with shapes {shapes} do not broadcast") from None
            if all(tuple(np.broadcast_shapes(*[shapes[i] for i in d])) == full for d in group.deps if d):
                group.launches["fused"] += 1
                return tuple(run_program(rt, group.program, inputs, group.params, group.out_dtypes))
            group.launches["fallback"] += 1
            return tuple(group.run_unfused(rt, inputs))

        return NodeComputeInfo(compute=compute, create_state=create_state, metadata={"source": self.source})

    def run_unfused(self, rt: Any, inputs: Sequence[Any]) -> list[Any]:
        """Node by node (exact shapes); used when a group output is smaller than the group."""

        temps: list[Any] = []
        for e in self.spec["nodes"]:
            args = [inputs[i] if kind == "x" else temps[i] for kind, i in e["args"]]
            base = e["param_base"]
            dt, out = np.dtype(e["dtype"]), np.dtype(e["out_dtype"])
            arg_dtypes = [np.dtype(a.dtype) for a in args]
            prog = single_op_program(e["op"], arg_dtypes, len(e["params"]), dt, out, _Attrs(e["attrs"]))
            temps.append(run_program(rt, prog, args, self.params[base : base + len(e["params"])], [out])[0])
        return [temps[k] for k in self.spec["output_nodes"]]


def _build(spec: dict[str, Any], name: str, ep: Any) -> CompiledGroup:
    program, params, out_dtypes, deps = program_from_spec(spec)  # spec checked by the caller
    _, source = compile_program(program, ("full",) * program.n_inputs, len(out_dtypes))
    return CompiledGroup(
        name, spec, program, params, out_dtypes, deps, ep.options.max_threads_per_block, ep.simulated, source, ep=ep
    )


def compile_group(view: "GraphView", fused: "FusedNode", ep: Any) -> CompiledGroup:
    spec = spec_from_group(view, fused)
    validate_spec(spec, f"{ep.name}: fused group {fused.name!r}")
    return _build(spec, fused.name, ep)


def compile_spec(spec: dict[str, Any], name: str, ep: Any) -> CompiledGroup:
    """Rebuild a group from an EPContext node's spec, which ``epcontext.load_group`` has
    validated and bound to the node (nothing from the payload is executed)."""
    return _build(spec, name, ep)

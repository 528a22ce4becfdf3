"""float16 nodes run as onnxruntime's CPU EP runs them: a node it has no float16 kernel for
(most math: Add, MatMul, Softmax, Conv, Erf, ...; ``onnxruntime_fp16_kernels.toml`` lists the
ones it has) computes in float32 between Casts its loader inserts (InsertCastTransformer), and a
value passing from one such node to another stays float32. So a float16 model's results are
float32 arithmetic rounded where a node with a float16 kernel (data movement, Cast, LayerNorm...)
or a graph output takes the value, not float16 arithmetic rounded at every node as the ONNX spec
computes it: BERT/ViT/T5 float16 exports were 7e-4 to 1e-3 of their scale from onnxruntime, a
masked Softmax(s - 65504) 4x. onnxruntime does this at every optimization level (its kernels need
it), for its CPU EP: ep-core does it when the session's first EP runs on the host.

The main graph only (nodes inside If/Loop/Scan bodies keep float16); a node whose attributes
name a type (Cast, RandomNormal's dtype, ...) is left as it is. ``python -m ep_core.optimizer.fp16
--write`` writes the kernel table from the installed onnxruntime."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from ep_core.sdk.config import toml_loads

TABLE = Path(__file__).with_name("onnxruntime_fp16_kernels.toml")
_F16, _F32 = 10, 1  # TensorProto.FLOAT16, FLOAT
_TYPED_ATTRS = {"to", "dtype", "output_datatype", "value", "saturate"}


@functools.cache
def _kernels() -> dict[tuple[str, str], list[tuple[int, int, frozenset[str]]]]:
    """(domain, op) -> [(since, end, constraints that take float16)] of onnxruntime's CPU EP."""
    out: dict[tuple[str, str], list[tuple[int, int, frozenset[str]]]] = {}
    for domain, op, since, end, names in toml_loads(TABLE.read_text(encoding="utf-8"))["kernels"]:
        out.setdefault((domain, op), []).append((since, end or 1 << 30, frozenset(names)))
    return out


def _native(node: Any, opsets: dict[str, int], f16: set[str]) -> bool:
    """Whether onnxruntime's CPU EP has a kernel for ``node`` with its float16 values."""
    from onnx import defs

    domain = node.domain or "ai.onnx"
    try:
        schema = defs.get_schema(node.op_type, opsets.get(domain, 1), "" if domain == "ai.onnx" else domain)
    except Exception:  # noqa: BLE001 - an op onnx has no schema for: left as it is
        return True
    bound = set()
    for names, params in ((node.input, schema.inputs), (node.output, schema.outputs)):
        for i, name in enumerate(names):
            if name in f16 and params:
                bound.add(params[min(i, len(params) - 1)].type_str)
    version = schema.since_version
    return any(
        since <= version <= end and {b for b in bound if not b.startswith("tensor(")} <= names
        for since, end, names in _kernels().get((domain, node.op_type), [])
    )


def upcast_float16(model: Any) -> Any:
    """``model`` (inferred) with its float16 nodes computing in float32 where onnxruntime's CPU EP
    computes them so; the very object when there are none. As its InsertCastTransformer: a node it
    has no float16 kernel for, and a node it has one for sitting alone between such nodes (every
    float16 input from another node and every consumer of its float16 outputs is one, none of
    them a graph output: ``IsIsolatedFp16NodeOnCpu``, decided in graph order). Between two such
    nodes a value stays float32 (its RemoveDuplicateCastTransformer drops the Casts it inserted);
    a Cast reads the float32 value directly."""
    from onnx import helper

    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    f16 = {n for n, t in types.items() if t == _F16}
    if not f16:
        return model
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    outputs = {v.name for v in graph.output}
    producer = {v: i for i, n in enumerate(graph.node) for v in n.output if v}
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(graph.node):
        for v in n.input:
            consumers.setdefault(v, []).append(i)
    plain = [not any(a.name in _TYPED_ATTRS or a.g.node or a.graphs for a in n.attribute) for n in graph.node]
    mine = [any(v in f16 for v in (*n.input, *n.output)) for n in graph.node]
    fallback = [p and m and not _native(n, opsets, f16) for n, p, m in zip(graph.node, plain, mine)]
    up = list(fallback)
    for i, n in enumerate(graph.node):
        if up[i] or not (plain[i] and mine[i]) or any(v in outputs for v in n.output):
            continue
        fed = [producer[v] for v in n.input if v in producer]
        ins16 = [producer[v] for v in n.input if v in f16 and v in producer]
        outs16 = [c for v in n.output if v in f16 for c in consumers.get(v, [])]
        if fed and ins16 and outs16 and all(up[j] for j in ins16) and all(fallback[c] for c in outs16):
            up[i] = True
    if not any(up):
        return model
    made = {v for n, u in zip(graph.node, up) if u for v in n.output if v in f16}
    inner = {
        v
        for n in graph.node
        for a in n.attribute
        for g in ([a.g] if a.HasField("g") else list(a.graphs))
        for v in _reads(g)
    }
    keep16 = {v.name for v in graph.output} | inner
    for n, u in zip(graph.node, up):
        if not u:
            keep16.update(v for v in n.input if v in made and n.op_type != "Cast")
    wide: dict[str, str] = {}  # float16 value -> its float32 twin
    nodes = []
    for n, u in zip(graph.node, up):
        if not u:
            if n.op_type == "Cast" and n.input and n.input[0] in made:  # casts the float32 value itself
                n = helper.make_node("Cast", [wide[n.input[0]]], list(n.output), name=n.name, to=n.attribute[0].i)
            nodes.append(n)
            continue
        ins = []
        for v in n.input:
            if v in f16 and v not in wide:
                wide[v] = f"{v}__ep_core_fp32"
                nodes.append(helper.make_node("Cast", [v], [wide[v]], to=_F32, name=f"{wide[v]}_cast"))
            ins.append(wide[v] if v in f16 else v)
        outs = []
        for v in n.output:
            if v in f16:
                wide[v] = f"{v}__ep_core_fp32"
            outs.append(wide.get(v, v) if v in f16 else v)
        copy = helper.make_node(n.op_type, ins, outs, name=n.name, domain=n.domain)
        copy.attribute.extend(n.attribute)
        nodes.append(copy)
        nodes += [
            helper.make_node("Cast", [wide[v]], [v], to=_F16, name=f"{v}_cast")
            for v in n.output
            if v in keep16 and v in wide
        ]
    out = type(model)()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return _reinferred(out)


def _reads(graph: Any) -> set[str]:
    """Every value a subgraph (and the subgraphs in it) reads."""
    names = {v for n in graph.node for v in n.input}
    for n in graph.node:
        for a in n.attribute:
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                names |= _reads(g)
    return names


def _reinferred(model: Any) -> Any:
    import onnx

    kept = [v for v in model.graph.value_info if not v.name.endswith("__ep_core_fp32")]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - the model was inferred before: keep what it had
        return model


def write_table() -> None:
    """The kernel table from the installed onnxruntime (a development step)."""
    import onnxruntime.capi._pybind_state as ort_state  # type: ignore[import-untyped]

    rows = set()
    for d in ort_state.get_all_opkernel_def():
        names = sorted(k for k, v in d.type_constraints.items() if "tensor(float16)" in v)
        if d.provider == "CPUExecutionProvider" and names:
            since, end = d.version_range
            rows.add((d.domain or "ai.onnx", d.op_name, since, end if end < 2**31 - 1 else 0, tuple(names)))
    head = TABLE.read_text(encoding="utf-8").split("kernels = [")[0]
    body = "".join(
        f'  ["{r[0]}", "{r[1]}", {r[2]}, {r[3]}, [{", ".join(f"{chr(34)}{n}{chr(34)}" for n in r[4])}]],\n'
        for r in sorted(rows)
    )
    TABLE.write_text(f"{head}kernels = [\n{body}]\n", encoding="utf-8")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_table()

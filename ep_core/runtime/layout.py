"""The layout transformer: NCHW nodes become NHWC nodes for EPs that prefer NHWC.

After a first capability pass, every layout-sensitive node claimed by an EP whose
``ep_get_preferred_data_layout`` is ``NHWC`` (and for which ``ep_should_convert_data_layout_for_op``
does not say no) moves to the internal domain ``com.ms.internal.nhwc`` with a Transpose into
NHWC before its activation input and one back after its output. Transpose pairs that undo each
other cancel, and transposes are pushed through unary elementwise ops, so a chain of convolutions
stays in NHWC. ``build`` then partitions the rewritten graph (the second capability pass); a
rewritten node its EP does not claim makes it fall back to the original graph and say why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ep_core.sdk.layout import LAYOUT_AGNOSTIC_UNARY, LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN

if TYPE_CHECKING:
    import onnx

    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.partition import Partition
    from ep_core.sdk.graph import GraphView


def to_nhwc_perm(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


def to_nchw_perm(rank: int) -> list[int]:
    return [0, rank - 1, *range(1, rank - 1)]


@dataclass
class LayoutResult:
    model: "onnx.ModelProto"
    converted: dict[str, str] = field(default_factory=dict)  # node name -> EP that asked
    transposes: int = 0


def _wants(ep: "EpInstance", node: Any) -> bool:
    if node.op_type not in LAYOUT_SENSITIVE_OPS or node.domain not in ("", "ai.onnx"):
        return False
    answer = ep.call(
        "ep_should_convert_data_layout_for_op", domain=node.domain, op_type=node.op_type, target_layout="NHWC"
    )
    return answer is not False


def _convertible(graph: "GraphView", node: Any) -> int | None:
    """The activation rank if the node can be rewritten, else None."""
    info = node.input_info(0)
    if info is None or info.shape is None or len(info.shape) < 3:
        return None
    # extra outputs (MaxPool indices, BatchNormalization training stats) stay NCHW-only: skip
    if any(o for o in node.outputs[1:]):
        return None
    if node.op_type == "Resize":
        for i in (1, 2, 3):  # roi, scales, sizes are in NCHW order: must be constants to permute
            if i < len(node.inputs) and node.inputs[i] and graph.constant_value(node.inputs[i]) is None:
                return None
    return len(info.shape)


def nhwc_eps(eps: "list[EpInstance]") -> frozenset[int]:
    """Indices of the EPs whose preferred data layout is NHWC."""
    return frozenset(i for i, ep in enumerate(eps) if ep.call("ep_get_preferred_data_layout") == "NHWC")


def transform_to_nhwc(
    model: "onnx.ModelProto", graph: "GraphView", eps: "list[EpInstance]", first: "Partition"
) -> LayoutResult | None:
    """The rewritten model, or None when nothing qualifies. ``first`` is the first capability pass
    (made with the NHWC EPs as ``layout_trial``): only nodes it gave an NHWC EP are rewritten."""
    wanting = nhwc_eps(eps)
    chosen: dict[int, tuple[int, str]] = {}
    for idx, (ep_i, _) in first.singles.items():
        if ep_i in wanting:
            node = graph.all_nodes[idx]
            rank = _convertible(graph, node)
            if rank is not None and _wants(eps[ep_i], node):
                chosen[idx] = (rank, eps[ep_i].name)
    return _rewrite(model, graph, chosen) if chosen else None


def _rewrite(model: "onnx.ModelProto", graph: "GraphView", chosen: dict[int, tuple[int, str]]) -> LayoutResult:
    import onnx
    from onnx import helper

    new = onnx.ModelProto()
    new.CopyFrom(model)
    g = new.graph
    del g.node[:]
    extra_vi: list[onnx.ValueInfoProto] = []
    result = LayoutResult(new)

    def vi_like(src: str, dst: str, perm: list[int]) -> None:
        info = graph.value_info(src)
        if info is not None and info.kind == "tensor" and info.elem_type:
            shape = [info.shape[p] for p in perm] if info.shape is not None else None
            extra_vi.append(helper.make_tensor_value_info(dst, info.elem_type, shape))

    for node in graph.all_nodes:
        if node.index not in chosen:
            g.node.append(node.proto)
            continue
        rank, ep_name = chosen[node.index]
        fwd, back = to_nhwc_perm(rank), to_nchw_perm(rank)
        x, y = node.inputs[0], node.outputs[0]
        x_nhwc, y_nhwc = f"{x}__nhwc__{node.name}", f"{y}__nhwc"
        g.node.append(helper.make_node("Transpose", [x], [x_nhwc], name=f"{node.name}/to_nhwc", perm=fwd))
        vi_like(x, x_nhwc, fwd)
        inputs = [x_nhwc, *node.inputs[1:]]
        if node.op_type == "Resize":
            inputs = _permute_resize_inputs(graph, node, inputs, fwd, g)
        rewritten = helper.make_node(
            node.op_type, inputs, [y_nhwc, *node.outputs[1:]], name=node.name, domain=NHWC_DOMAIN
        )
        rewritten.attribute.extend(node.proto.attribute)
        g.node.append(rewritten)
        vi_like(y, y_nhwc, fwd)
        g.node.append(helper.make_node("Transpose", [y_nhwc], [y], name=f"{node.name}/to_nchw", perm=back))
        result.converted[node.name] = ep_name
    g.value_info.extend(extra_vi)
    if not any(o.domain == NHWC_DOMAIN for o in new.opset_import):
        version = next((o.version for o in new.opset_import if o.domain in ("", "ai.onnx")), 1)
        new.opset_import.append(helper.make_opsetid(NHWC_DOMAIN, version))
    _optimize_transposes(g)
    result.transposes = sum(1 for n in g.node if n.op_type == "Transpose" and n.name.endswith(("/to_nhwc", "/to_nchw")))
    return result


def _permute_resize_inputs(graph: Any, node: Any, inputs: list[str], fwd: list[int], g: Any) -> list[str]:
    """Resize's roi/scales/sizes follow the data's axis order: permute the constants."""
    import numpy as np
    from onnx import numpy_helper

    out = list(inputs)
    for i in (1, 2, 3):
        if i < len(node.inputs) and node.inputs[i]:
            value = np.asarray(graph.constant_value(node.inputs[i]))
            if value.size == 0:
                continue
            if i == 1:  # roi: starts then ends
                r = len(fwd)
                value = np.concatenate([value[:r][fwd], value[r:][fwd]])
            else:
                value = value[fwd]
            name = f"{node.inputs[i]}__nhwc__{node.name}"
            g.initializer.append(numpy_helper.from_array(value, name))
            out[i] = name
    return out


def _perm(node: Any) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _optimize_transposes(g: Any) -> None:
    """Cancel back-to-back inverse layout transposes and push them through unary elementwise ops."""
    graph_outputs = {o.name for o in g.output}
    changed = True
    while changed:
        changed = False
        nodes = list(g.node)
        consumers: dict[str, list[Any]] = {}
        for n in nodes:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        for back in nodes:
            if back.op_type != "Transpose" or not back.name.endswith("/to_nchw"):
                continue
            mid = back.output[0]
            users = consumers.get(mid, [])
            if mid in graph_outputs or not users:
                continue
            perm_back = _perm(back)
            if perm_back is None:
                continue
            rank = len(perm_back)
            # 1. back -> (only) forward transposes: the forward ones read back's input directly
            if _all_forward(users, rank):
                _bypass(g, nodes, back, users, back.input[0])
                changed = True
                break
            # 2. back -> unary op whose every consumer is a forward transpose: run the op in NHWC
            if (
                len(users) == 1
                and users[0].op_type in LAYOUT_AGNOSTIC_UNARY
                and users[0].domain in ("", "ai.onnx")
                and len([i for i in users[0].input if i]) == 1
            ):
                op = users[0]
                out_users = consumers.get(op.output[0], [])
                if op.output[0] not in graph_outputs and _all_forward(out_users, rank):
                    op.input[0] = back.input[0]
                    op.output[0] = f"{op.output[0]}__nhwc"  # a new name: the old one's shape info is NCHW
                    _bypass(g, nodes, back, out_users, op.output[0])
                    changed = True
                    break


def _all_forward(users: list[Any], rank: int) -> bool:
    """True when ``users`` is non-empty and every one is a Transpose into NHWC."""
    return bool(users) and all(u.op_type == "Transpose" and _perm(u) == to_nhwc_perm(rank) for u in users)


def _bypass(g: Any, nodes: list[Any], back: Any, forwards: list[Any], source: str) -> None:
    """Remove ``back`` and the ``forwards`` transposes; their readers read ``source`` instead."""
    for fwd in forwards:
        _rename_input(nodes, fwd.output[0], source)
        g.node.remove(fwd)
    g.node.remove(back)


def _rename_input(nodes: list[Any], old: str, new: str) -> None:
    for n in nodes:
        for k, name in enumerate(n.input):
            if name == old:
                n.input[k] = new

"""Ops served by ``onnx.reference``, for the rare ops where a native kernel adds nothing.

Each node gets its own single-node ``ReferenceEvaluator`` built at session creation, typed from the
session's inferred value infos (function-bodied ops need them). Registered with
``delegated=True`` so coverage reports show which ops are not native. Imported last: an op gets
a delegated kernel only if no native kernel registered it."""

from __future__ import annotations

from typing import Any, Sequence

from ep_core.kernels import KernelContext

from ep_cpu_reference.registry import REGISTRY

# Ops onnx.reference gets wrong for our purposes (see the issue tracker and tests); never delegated.
NEVER_DELEGATE = frozenset({"If", "Loop", "Scan", "SequenceMap"})
DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview")


def _value_info(node: Any, name: str) -> Any:
    from onnx import helper

    info = node.graph.value_info(name)
    if info is not None and info.kind == "tensor" and info.elem_type:
        return helper.make_tensor_value_info(name, info.elem_type, None)
    return helper.make_value_info(name, helper.TypeProto())


def build_delegate(node: Any, ctx: KernelContext) -> Any:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.inputs if n]
    outs = [o for o in node.outputs]
    graph = helper.make_graph(
        [node.proto],
        f"delegate_{node.name}",
        [_value_info(node, n) for n in dict.fromkeys(names)],
        [_value_info(node, o) if o else helper.make_value_info("", helper.TypeProto()) for o in outs if o],
    )
    opsets = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in node.graph.opsets.items() if d != "ai.onnx"]
    model = helper.make_model(graph, opset_imports=opsets)
    evaluator = ReferenceEvaluator(model)
    feed_names = list(node.inputs)
    present = [o for o in outs if o]

    def compute(*inputs: Any) -> Sequence[Any]:
        feed = {n: v for n, v in zip(feed_names, inputs) if n and v is not None}
        results = evaluator.run(None, feed)
        by_name = dict(zip(present, results))
        return [by_name.get(o) for o in outs]

    return compute


def _register_all() -> None:
    from onnx import defs
    from onnx.reference.ops._op_list import load_op

    first: dict[tuple[str, str], int] = {}
    for schema in defs.get_all_schemas_with_history():
        key = (schema.domain, schema.name)
        first[key] = min(first.get(key, schema.since_version), schema.since_version)
    for schema in defs.get_all_schemas_with_history():
        domain = schema.domain
        if domain not in DOMAINS or schema.deprecated:
            continue
        op = schema.name
        if op in NEVER_DELEGATE or REGISTRY.has_op(op, domain):
            continue
        if domain == "":
            try:
                load_op("", op, schema.since_version)
            except Exception:
                if not schema.has_function and not schema.has_context_dependent_function:
                    continue
        REGISTRY.add(
            _delegated_def(op, domain, first[(domain, op)]),
            build_delegate,
        )


def _delegated_def(op: str, domain: str, since: int) -> Any:
    """One open-ended def from the op's first schema version (onnx.reference handles versions)."""
    from ep_core.kernels import KernelDef

    return KernelDef(op_type=op, domain=domain, since_version=since, end_version=None, delegated=True)


_register_all()

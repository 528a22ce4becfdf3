"""Ops served by ``onnx.reference``, for the rare ops where a native kernel adds nothing.

Each node gets its own single-node ``ReferenceEvaluator`` built at session creation, typed from the
session's inferred value infos (function-bodied ops need them). Registered with
``delegated=True`` so coverage reports show which ops are not native. ``families`` calls
``register_all()`` after every native family: an op gets a delegated kernel only if no native
kernel registered it (importing this module registers nothing, so its place does not depend on
who imports it first)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

# Ops never delegated, with why: control flow must run its bodies through the session (nested
# partitioning, outer-scope values).
NEVER_DELEGATE: dict[str, str] = {
    "If": "control flow runs natively (bodies are planned by the session)",
    "Loop": "control flow runs natively (bodies are planned by the session)",
    "Scan": "control flow runs natively (bodies are planned by the session)",
    "SequenceMap": "control flow runs natively (bodies are planned by the session)",
}
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
    opsets = [
        helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in node.graph.opsets.items() if d != "ai.onnx"
    ]
    model = helper.make_model(graph, opset_imports=opsets)
    evaluator = ReferenceEvaluator(model)
    feed_names = list(node.inputs)
    present = [o for o in outs if o]

    def compute(*inputs: Any) -> Sequence[Any]:
        feed = {n: v for n, v in zip(feed_names, inputs, strict=False) if n and v is not None}
        results = evaluator.run(None, feed)
        assert isinstance(results, list)  # a dict only for run(..., intermediate=True)
        # onnx.reference returns str arrays ('<U'); an ONNX string tensor is an object array
        results = [r.astype(object) if isinstance(r, np.ndarray) and r.dtype.kind == "U" else r for r in results]
        by_name = dict(zip(present, results, strict=False))
        return tuple(by_name.get(o) for o in outs)

    return compute


def register_all() -> None:
    """Delegate every op of DOMAINS that onnx.reference can run (natively or through the
    schema's function body) and no native kernel serves; for an op whose native kernels start
    at a later opset, delegate only the older versions, so old models still run."""
    from onnx import defs

    versions: dict[tuple[str, str], list[Any]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain in DOMAINS and schema.name not in NEVER_DELEGATE:
            versions.setdefault((schema.domain, schema.name), []).append(schema)
    natives: dict[tuple[str, str], list[int]] = {}
    for e in REGISTRY:
        natives.setdefault((e.kernel_def.domain_key, e.kernel_def.op_type), []).append(e.kernel_def.since_version)
    for (domain, op), schemas in sorted(versions.items()):
        schemas.sort(key=lambda s: s.since_version)
        first = schemas[0]
        if all(s.deprecated for s in schemas):
            continue
        native = natives.get(("ai.onnx" if domain == "" else domain, op), [])
        end = None
        if native:
            if first.since_version >= min(native):
                continue
            end = min(native) - 1
        try:
            _loader(domain)(domain, op, first.since_version)
        except Exception:
            # no Python implementation: onnx.reference can still expand a function body
            if not first.has_function and not first.has_context_dependent_function:
                continue
        REGISTRY.add(_delegated_def(op, domain, first.since_version, end), build_delegate)


def _loader(domain: str) -> Any:
    """onnx.reference's ``load_op`` for ``domain``, imported only when an op gets this far: its op
    tables import every implementation module (~60 ms per process), and every op of the pinned
    onnx has a native kernel, so a session normally never asks."""
    if domain == "ai.onnx.ml":
        from onnx.reference.ops.aionnxml._op_list import load_op as load_ml_op

        return load_ml_op
    if domain == "ai.onnx.preview":
        from onnx.reference.ops.aionnx_preview._op_list import load_op as load_preview_op

        return load_preview_op
    from onnx.reference.ops._op_list import load_op

    return load_op


def _delegated_def(op: str, domain: str, since: int, end: int | None) -> Any:
    """One def from the op's first schema version up to ``end`` (onnx.reference handles the
    versions in between)."""
    from ep_core.sdk.kernels import KernelDef

    return KernelDef(op_type=op, domain=domain, since_version=since, end_version=end, delegated=True)

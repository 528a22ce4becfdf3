"""The operator schemas that checking, inferring and optimizing a model read, registered with onnx
before the model is checked: each EP's custom op domains (``ep_factory_get_custom_op_domains``),
and the schemas of the model's contrib ops (com.microsoft ...), which an EP registers as it loads
their kernels. The reference EP loads one op's kernels when asked about that op, so each EP is
asked about the model's contrib ops here: a model-local function named like a contrib op then
stays the op, and float16 contrib ops are upcast as onnxruntime does, in every session."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def register_schemas(proto: Any, eps: Sequence[Any]) -> None:
    """Register what ``eps`` (each with ``handle`` and ``kernel_registry``) declare for ``proto``."""
    from onnx import defs

    for ep in eps:
        for schema in ep.handle.call("ep_factory_get_custom_op_domains", default=None) or ():
            if not defs.has(schema.name, schema.since_version, schema.domain):
                # onnx.reference builds its op table at import and refuses a name in two domains
                # (a custom Gelu beside ai.onnx's): import it first, or the reference EP's kernels
                # (which import it when they load) could not load later in this process
                import onnx.reference  # noqa: F401

                defs.register_schema(schema)
    registries = [ep.kernel_registry for ep in eps if ep.kernel_registry is not None]
    for domain, op in sorted({(n.domain, n.op_type) for n in _nodes(proto) if not _onnx_domain(n.domain)}):
        any(registry.has_op(op, domain) for registry in registries)  # the first that serves it registers it


def _onnx_domain(domain: str) -> bool:
    return domain in ("", "ai.onnx") or domain.startswith("ai.onnx.")


def _nodes(proto: Any) -> Iterator[Any]:
    """Every node of the main graph, of its subgraphs and of the model's functions."""
    stack = [list(proto.graph.node)] + [list(f.node) for f in proto.functions]
    while stack:
        for node in stack.pop():
            yield node
            for a in node.attribute:
                stack.extend([list(a.g.node)] if a.HasField("g") else [list(g.node) for g in a.graphs])

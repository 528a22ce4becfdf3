"""The EP side of NHWC (design 5.3.1). The layout transformer rewrites the ops this EP agrees to
convert into the internal domain ``com.ms.internal.nhwc``; the EP must then claim every rewritten
node. So the one allowlist is the registry itself: an op is converted only if it has an
internal-domain kernel (``kernels/nhwc.py`` mirrors each NCHW registration there, same opsets and
types), and NHWC is advertised only when at least one op can convert. A rewritten node the EP
cannot serve is declined with its domain, op, opset and types named (``nhwc_miss``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# the ops the core's layout transformer may rewrite (ep_core/runtime/layout.py)
from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN

if TYPE_CHECKING:
    from ep_core.sdk.kernels import KernelRegistry

__all__ = [
    "LAYOUT_SENSITIVE_OPS",
    "NHWC_DOMAIN",
    "missing_nhwc_kernels",
    "nhwc_miss",
    "nhwc_ops",
    "preferred_layout",
    "should_convert",
]


def nhwc_ops(registry: "KernelRegistry") -> tuple[str, ...]:
    """The NHWC allowlist: layout-sensitive ops with an internal-domain kernel in ``registry``."""
    return tuple(op for op in LAYOUT_SENSITIVE_OPS if registry.has_op(op, NHWC_DOMAIN))


def missing_nhwc_kernels(registry: "KernelRegistry") -> list[str]:
    return [op for op in LAYOUT_SENSITIVE_OPS if not registry.has_op(op, NHWC_DOMAIN)]


def preferred_layout(prefer_nhwc: bool, registry: "KernelRegistry") -> tuple[str, str]:
    """(layout, reason): NHWC when asked for and some layout-sensitive op has an NHWC kernel."""
    if not prefer_nhwc:
        return "NCHW", "prefer_nhwc=0"
    ops = nhwc_ops(registry)
    if not ops:
        return "NCHW", f"prefer_nhwc=1 but there is no {NHWC_DOMAIN} kernel for any of {list(LAYOUT_SENSITIVE_OPS)}"
    missing = missing_nhwc_kernels(registry)
    rest = f"; {missing} stay NCHW (no {NHWC_DOMAIN} kernel)" if missing else ""
    return "NHWC", f"{list(ops)} convert to {NHWC_DOMAIN}{rest}"


def should_convert(
    prefer_nhwc: bool, registry: "KernelRegistry", domain: str, op_type: str, target: str
) -> bool | None:
    if target != "NHWC":
        return None
    if not prefer_nhwc or domain not in ("", "ai.onnx"):
        return False
    return op_type in nhwc_ops(registry)


def _actual_types(node: Any) -> dict[str, set[str]] | None:
    """Constraint name -> type strings on a rewritten node, read through the ONNX-domain schema
    (the internal schema is ONNX's with input 0 and output 0 in NHWC), or None if none exists."""
    from onnx import defs

    try:
        schema = defs.get_schema(node.op_type, node.opset, "")
    except Exception:
        return None
    found: dict[str, set[str]] = {}
    for names, params, info in (
        (node.inputs, schema.inputs, node.input_info),
        (node.outputs, schema.outputs, node.output_info),
    ):
        for i, name in enumerate(names):
            vi = info(i) if name and params else None
            if vi is not None and vi.kind == "tensor" and vi.elem_type:
                found.setdefault(params[min(i, len(params) - 1)].type_str, set()).add(vi.type_str)
    return found


def nhwc_miss(registry: "KernelRegistry", node: Any) -> str | None:
    """Why ``registry`` has no kernel for the rewritten internal-domain ``node`` (domain, op,
    opset and types named), or None when one serves it. The core's lookup cannot check types
    here (onnx has no schemas for the internal domain), so this does."""
    where = f"{NHWC_DOMAIN}::{node.op_type} (node {node.name!r}, opset {node.opset})"
    defs = [e.kernel_def for e in registry if e.kernel_def.domain_key == NHWC_DOMAIN]
    defs = [d for d in defs if d.op_type == node.op_type]
    if not defs:
        return f"{registry.ep_name} has no kernel for {where}; its NHWC ops are {list(nhwc_ops(registry))}"
    in_range = [d for d in defs if d.covers(node.opset)]
    if not in_range:
        ranges = sorted({d.version_range() for d in defs})
        return f"{registry.ep_name}'s {NHWC_DOMAIN}::{node.op_type} kernels cover opsets {ranges}, not {where}"
    seen = _actual_types(node)
    if seen is None:
        return f"{registry.ep_name}: onnx has no schema for {node.op_type} at opset {node.opset} to type-check {where}"
    misses = []
    for d in in_range:
        bad = {c: sorted(seen[c]) for c, ok in d.type_constraints.items() if c in seen and not seen[c] <= set(ok)}
        if not bad:
            return None
        misses.append(", ".join(f"{c}={t} (registered {list(d.type_constraints[c])})" for c, t in bad.items()))
    return f"{registry.ep_name} has no kernel for {where} with types " + "; ".join(misses)

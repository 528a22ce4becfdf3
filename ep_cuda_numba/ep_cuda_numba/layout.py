"""The EP side of NHWC: the layout transformer rewrites these ops to the internal NHWC domain, so
the EP may ask for NHWC only if it has an NHWC kernel for every one of them. Advertising NHWC with
a gap would leave rewritten nodes that nobody can run (or bounce tensors between layouts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

# one source of truth: the ops the core's layout transformer rewrites (ep_core/runtime/layout.py)
from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN

if TYPE_CHECKING:
    from ep_core.sdk.kernels import KernelRegistry

__all__ = ["LAYOUT_SENSITIVE_OPS", "NHWC_DOMAIN", "missing_nhwc_kernels", "preferred_layout", "should_convert"]


def missing_nhwc_kernels(registry: "KernelRegistry") -> list[str]:
    return [op for op in LAYOUT_SENSITIVE_OPS if not registry.has_op(op, NHWC_DOMAIN)]


def preferred_layout(prefer_nhwc: bool, registry: "KernelRegistry") -> tuple[str, str]:
    """(layout, reason): NHWC only when asked for and every rewritten op has an NHWC kernel."""
    if not prefer_nhwc:
        return "NCHW", "prefer_nhwc=0"
    missing = missing_nhwc_kernels(registry)
    if missing:
        return "NCHW", (
            f"prefer_nhwc=1 but there is no {NHWC_DOMAIN} kernel for {missing}; staying NCHW so no rewritten "
            "node is left without a kernel"
        )
    return "NHWC", "every layout-sensitive op has an NHWC kernel"


def should_convert(
    prefer_nhwc: bool, registry: "KernelRegistry", domain: str, op_type: str, target: str
) -> bool | None:
    if target != "NHWC":
        return None
    if not prefer_nhwc or domain not in ("", "ai.onnx"):
        return False
    return registry.has_op(op_type, NHWC_DOMAIN)

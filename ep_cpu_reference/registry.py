"""The reference EP's kernel registry. Kernel modules in ``ep_cpu_reference.kernels`` register
into ``REGISTRY`` on import: a query about one op imports the families that register it
(``family_index.load_op``), ``registry()`` imports them all, once, in order (``families``)."""

from __future__ import annotations

from ep_core.sdk.kernels import KernelRegistry
from ep_cpu_reference import EP_NAME
from ep_cpu_reference.family_index import load_op

REGISTRY = KernelRegistry(EP_NAME, kernel_package="ep_cpu_reference.families", load_op=load_op)


def registry() -> KernelRegistry:
    return REGISTRY.ensure_loaded()

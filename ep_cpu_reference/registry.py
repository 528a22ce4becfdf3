"""The reference EP's kernel registry. Kernel modules in ``ep_cpu_reference.kernels`` register
into ``REGISTRY`` on import; ``registry()`` imports them once, in order (``families``)."""

from __future__ import annotations

from ep_core.sdk.kernels import KernelRegistry
from ep_cpu_reference import EP_NAME

REGISTRY = KernelRegistry(EP_NAME, kernel_package="ep_cpu_reference.families")
LOAD_FAILURE = ""  # set by ``families`` when a load fails part-way (see there): later queries raise it


def registry() -> KernelRegistry:
    return REGISTRY.ensure_loaded()

"""The reference EP's kernel registry. Kernel modules register into ``REGISTRY`` on import;
``registry()`` imports them all once."""

from __future__ import annotations

import threading

from ep_core.kernels import KernelRegistry

from ep_cpu_reference import EP_NAME

REGISTRY = KernelRegistry(EP_NAME)
_loaded = False
_lock = threading.Lock()


def registry() -> KernelRegistry:
    global _loaded
    if not _loaded:
        with _lock:
            if not _loaded:
                from ep_cpu_reference import kernels  # noqa: F401  (registers every op family)

                _loaded = True
    return REGISTRY

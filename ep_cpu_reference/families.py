"""Every kernel family of ``ep_cpu_reference.kernels``, imported once in a fixed order (the
registry's ``kernel_package``): the native families in name order, then the delegations to
``onnx.reference`` for ops no native kernel serves (``delegated.register_all``).

A load that fails part-way (an interrupt, a strict-mode refusal) cannot be retried: the families
imported before the failure stay imported, and re-running the one that failed would register its
kernels twice. Every later query then raises the first failure instead of a misleading error."""

import importlib
import pkgutil

from ep_core.sdk.errors import EpFail
from ep_cpu_reference import EP_NAME, kernels, registry

if registry.LOAD_FAILURE:
    raise EpFail(
        f"{EP_NAME}: its kernels failed to load earlier in this process ({registry.LOAD_FAILURE}); "
        "start a new process to use it"
    )
try:
    for _info in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda m: m.name):
        if _info.name != "delegated" and not _info.name.startswith("_"):
            importlib.import_module(f"{kernels.__name__}.{_info.name}")
    importlib.import_module(f"{kernels.__name__}.delegated").register_all()
except BaseException as exc:
    registry.LOAD_FAILURE = f"{type(exc).__name__}: {exc}"
    raise

"""Every kernel family of ``ep_cpu_reference.kernels``, imported once in a fixed order (the
registry's ``kernel_package``): the native families in name order, then the delegations to
``onnx.reference`` for ops no native kernel serves (``delegated.register_all``)."""

import importlib
import pkgutil

from ep_cpu_reference import kernels

for _info in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda m: m.name):
    if _info.name != "delegated" and not _info.name.startswith("_"):
        importlib.import_module(f"{kernels.__name__}.{_info.name}")
importlib.import_module(f"{kernels.__name__}.delegated").register_all()

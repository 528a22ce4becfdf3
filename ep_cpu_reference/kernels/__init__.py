"""Every module in this package is an op family that registers its kernels on import. Native
families load first, in name order; ``delegated`` loads last so it only covers ops that no
native kernel serves.

``onnx.reference`` is imported before any family: its op table requires op names to be unique
across domains, so importing it after a family registers extra schemas (e.g. com.microsoft's
Gelu) would fail."""

import importlib
import pkgutil

import onnx.reference  # noqa: F401  (see the docstring: must precede schema registration)

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name != "delegated" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
importlib.import_module(f"{__name__}.delegated")

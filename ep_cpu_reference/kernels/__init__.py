"""Every module in this package is an op family that registers its kernels on import. Native
families load first, in name order; ``delegated`` loads last so it only covers ops that no
native kernel serves."""

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name != "delegated" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
importlib.import_module(f"{__name__}.delegated")

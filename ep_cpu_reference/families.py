"""Every kernel family of ``ep_cpu_reference.kernels``, imported once in a fixed order (the
registry's ``kernel_package``): the native families in name order, then the delegations to
``onnx.reference`` for ops no native kernel serves (``delegated.register_all``). A query about one
op imports only the families that register it (``family_index``); importing this loads the rest.

A load that fails part-way (an interrupt, a strict-mode refusal) cannot be retried: the families
imported before the failure stay imported, and re-running the one that failed would register its
kernels twice. Every later query then raises the first failure instead of a misleading error."""

from ep_cpu_reference import registry
from ep_cpu_reference.family_index import DELEGATED, family_modules, import_family

for _name in family_modules():
    import_family(_name)
try:
    import_family(DELEGATED).register_all()
except BaseException as exc:
    registry.LOAD_FAILURE = registry.LOAD_FAILURE or f"{type(exc).__name__}: {exc}"
    raise

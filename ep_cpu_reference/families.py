"""Every kernel family of ``ep_cpu_reference.kernels``, imported once in a fixed order (the
registry's ``kernel_package``): the native families in name order, then the delegations to
``onnx.reference`` for ops no native kernel serves (``delegated.register_all``). A query about one
op imports only the families that register it (``family_index``); importing this loads the rest.
A load that fails part-way is not retried: the registry raises it on every later query."""

from ep_cpu_reference.family_index import DELEGATED, family_modules, import_family

for _name in family_modules():
    import_family(_name)
import_family(DELEGATED).register_all()

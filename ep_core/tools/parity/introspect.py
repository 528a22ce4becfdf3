"""What an EP declares it can run: its kernel registry and, for compile-based EPs, the ops it
can fuse.

The fusable-ops protocol (``fusable_ops``)
------------------------------------------
A compile-based EP has no per-node kernel registry, so the parity report cannot see its coverage.
It may declare it with an optional method ``fusable_ops()`` on the **EP object** (checked first)
or on its **factory**, returning either

* an iterable of ``(domain, op_type, since_version, end_version)`` tuples (``end_version`` None
  means "up to the newest opset"; ``domain`` "" or "ai.onnx" is the default domain), or of
  :class:`~ep_core.sdk.kernels.KernelDef` (type constraints are then checked like kernels'), or
* a :class:`~ep_core.sdk.kernels.KernelRegistry` of compile-only defs (the builders are never called).

The name has no ``ep_`` prefix on purpose: it is not a hook the session calls, only a
declaration the report reads. An EP without it is reported as declaring no fusable ops; its
runtime results still count (what actually ran is taken from the session's node assignment)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ep_core.sdk.errors import EpCoreError
from ep_core.sdk.kernels import KernelDef, KernelRegistry
from ep_core.runtime.discover import PluginRegistry, get_registry

FUSABLE_ATTR = "fusable_ops"


class EpLoadFailure(Exception):
    """The EP under test (or the reference EP) could not be loaded or created."""

    def __init__(self, ep_name: str, reason: str) -> None:
        super().__init__(f"execution provider {ep_name!r} could not be used: {reason}")
        self.ep_name = ep_name
        self.reason = reason


class FusableOpsError(ValueError):
    """An EP's ``fusable_ops()`` answer does not follow the protocol."""


@dataclass
class EpDescription:
    """One EP as the parity report sees it."""

    name: str
    version: str
    vendor: str
    devices: list[str]
    kernel_registry: KernelRegistry | None
    fusable: list[KernelDef] = field(default_factory=list)
    fusable_declared: bool = False
    is_cpu_fallback: bool = False

    @property
    def kernel_defs(self) -> list[KernelDef]:
        return self.kernel_registry.kernel_defs() if self.kernel_registry is not None else []

    @property
    def kind(self) -> str:
        """``kernels``, ``compile``, ``kernels+compile`` or ``undeclared`` (nothing declared)."""
        has_k = bool(self.kernel_defs)
        has_f = bool(self.fusable)
        if has_k and has_f:
            return "kernels+compile"
        if has_k:
            return "kernels"
        if has_f:
            return "compile"
        return "undeclared"


def normalize_fusable(ep_name: str, declared: Any) -> list[KernelDef]:
    """The ``fusable_ops()`` answer as KernelDefs, or a ``FusableOpsError`` naming the bad item."""
    if declared is None:
        return []
    if isinstance(declared, KernelRegistry):
        return declared.kernel_defs()
    out: list[KernelDef] = []
    items: Iterable[Any]
    try:
        items = list(declared)
    except TypeError:
        raise FusableOpsError(
            f"{ep_name}.fusable_ops() returned {type(declared).__name__}; return tuples "
            "(domain, op_type, since, end), KernelDefs or a KernelRegistry (see ep_core.tools.parity.introspect)"
        ) from None
    for item in items:
        if isinstance(item, KernelDef):
            out.append(item)
            continue
        ok = isinstance(item, (tuple, list)) and len(item) == 4
        if ok:
            domain, op, since, end = item
            ok = (
                isinstance(domain, str)
                and isinstance(op, str)
                and isinstance(since, int)
                and (end is None or isinstance(end, int))
            )
        if not ok:
            raise FusableOpsError(
                f"{ep_name}.fusable_ops() item {item!r} is not (domain: str, op_type: str, since: int, "
                "end: int | None) nor a KernelDef"
            )
        out.append(KernelDef(op_type=op, domain=domain, since_version=since, end_version=end))
    return out


def _fusable_from(ep_name: str, *owners: Any) -> tuple[list[KernelDef], bool]:
    for owner in owners:
        attr = getattr(owner, FUSABLE_ATTR, None)
        if attr is None:
            continue
        declared = attr() if callable(attr) else attr
        return normalize_fusable(ep_name, declared), True
    return [], False


def describe_ep(name: str, registry: PluginRegistry | None = None) -> EpDescription:
    """Create the EP once (as a session would, on its first supported device), read its kernel
    registry and fusable ops, and release it. Raises ``EpLoadFailure`` with the reason."""
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.select import SelectedEp, ep_devices_for, hardware_devices, incompatibility_reasons

    registry = registry or get_registry()
    try:
        handle = registry.handle(name)
    except EpCoreError as exc:
        raise EpLoadFailure(name, str(exc)) from None
    if handle.load() is None:
        raise EpLoadFailure(name, f"{handle.load_error} (run `ep-core providers` for details)")
    try:
        devices = hardware_devices(registry)
        supported = ep_devices_for(handle, devices)
        if not supported:
            why = "; ".join(incompatibility_reasons(handle, devices)) or "it reports no supported device"
            raise EpLoadFailure(name, f"no usable device: {why}")
        instance = EpInstance(SelectedEp(handle, supported[:1], {}), SessionOptions(), registry)
    except EpLoadFailure:
        raise
    except Exception as exc:  # a plugin may raise anything while creating its EP
        raise EpLoadFailure(
            name,
            f"creating the EP failed: {type(exc).__name__}: {exc} (check its installation and devices with "
            "`ep-core providers` and `ep-core devices`)",
        ) from exc
    try:
        kernels = instance.kernel_registry
        try:
            fusable, declared = _fusable_from(name, instance.ep, handle.factory)
        except FusableOpsError as exc:
            raise EpLoadFailure(name, str(exc)) from None
        return EpDescription(
            name=name,
            version=str(handle.call("ep_factory_version", default="")),
            vendor=str(handle.call("ep_factory_vendor", default="")),
            devices=[d.device.key for d in supported[:1]],
            kernel_registry=kernels,
            fusable=fusable,
            fusable_declared=declared,
            is_cpu_fallback=bool(handle.call("ep_factory_is_cpu_fallback", default=False)),
        )
    finally:
        instance.close()


def reference_ep_name(registry: PluginRegistry | None = None) -> str:
    """The oracle: the installed CPU fallback EP (the reference EP), by name."""
    registry = registry or get_registry()
    handle = registry.cpu_fallback()
    if handle is None:
        raise EpLoadFailure(
            "CpuReferenceExecutionProvider",
            "no CPU fallback (reference) EP is installed or loadable; reinstall ep-core (`pip install -e .`)",
        )
    return handle.name

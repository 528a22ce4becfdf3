"""What an EP declares it can run: its kernel registry and, for compile-based EPs, the ops it
can fuse.

Fusable ops (the ``ep_factory_get_fusable_ops`` hook)
-----------------------------------------------------
A compile-based EP has no per-node kernel registry, so the parity report cannot see its coverage.
It declares it with the optional factory hook ``ep_factory_get_fusable_ops`` (contract version 2,
see ``ep_core.sdk.hookspecs``), returning either

* an iterable of ``(domain, op_type, since_version, end_version)`` tuples (``end_version`` None
  means "up to the newest opset"; ``domain`` "" or "ai.onnx" is the default domain), or of
  :class:`~ep_core.sdk.kernels.KernelDef` (type constraints are then checked like kernels'), or
* a :class:`~ep_core.sdk.kernels.KernelRegistry` of compile-only defs (the builders are never called).

It is a factory hook because the answer describes the EP package, not one session. An EP without
it (or answering None) is reported as declaring no fusable ops; its runtime results still count
(what actually ran is taken from the session's node assignment)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ep_core.runtime.discover import FactoryHandle, PluginRegistry, get_registry
from ep_core.sdk.errors import EpCoreError
from ep_core.sdk.hookspecs import HOOK_API_VERSIONS
from ep_core.sdk.kernels import KernelDef, KernelRegistry

FUSABLE_HOOK = "ep_factory_get_fusable_ops"


class EpLoadFailure(Exception):
    """The EP under test (or the reference EP) could not be loaded or created."""

    def __init__(self, ep_name: str, reason: str) -> None:
        super().__init__(f"execution provider {ep_name!r} could not be used: {reason}")
        self.ep_name = ep_name
        self.reason = reason


class FusableOpsError(ValueError):
    """An EP's ``ep_factory_get_fusable_ops`` answer does not follow the protocol."""


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
    """The ``ep_factory_get_fusable_ops`` answer as KernelDefs, or a ``FusableOpsError`` naming the
    bad item."""
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
            f"{ep_name}.{FUSABLE_HOOK}() returned {type(declared).__name__}; return tuples "
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
                f"{ep_name}.{FUSABLE_HOOK}() item {item!r} is not (domain: str, op_type: str, since: int, "
                "end: int | None) nor a KernelDef"
            )
        out.append(KernelDef(op_type=op, domain=domain, since_version=since, end_version=end))
    return out


def declared_fusable(handle: FactoryHandle) -> tuple[list[KernelDef], bool]:
    """(fusable ops, whether the EP declares any answer) from the factory hook. A factory that
    implements the hook but declares an API version older than the hook's is refused, not ignored."""
    since = HOOK_API_VERSIONS[FUSABLE_HOOK]
    if handle.api_version < since and callable(getattr(handle.factory, FUSABLE_HOOK, None)):
        raise FusableOpsError(
            f"{handle.name} implements {FUSABLE_HOOK} (ep_core API version {since}) but its factory declares "
            f"version {handle.api_version}; return {since} from ep_factory_api_version"
        )
    declared = handle.call(FUSABLE_HOOK)
    if declared is None:
        return [], False
    return normalize_fusable(handle.name, declared), True


def describe_ep(name: str, registry: PluginRegistry | None = None) -> EpDescription:
    """Create the EP once (as a session would, on its first supported device), read its kernel
    registry and fusable ops, and release it. Raises ``EpLoadFailure`` with the reason."""
    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.options import SessionOptions
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
            fusable, declared = declared_fusable(handle)
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
            "reference (CPU fallback) EP",
            "no installed EP declares itself the CPU fallback (ep_factory_is_cpu_fallback), or it does not load; "
            "reinstall ep-core (`pip install -e .`) or name the oracle with `ep-core parity-report --reference EP`",
        )
    return handle.name

"""Finding, loading, validating and calling execution-provider plugins.

Entry points are listed without importing anything. A factory loads on first use (or when the
CLI lists providers); a failure becomes a recorded ``PluginLoadError`` instead of breaking the
other plugins, unless ``EP_CORE_STRICT_PLUGINS=1`` makes it fatal. The factory's facts are checked
on load: its name ends in ``ExecutionProvider`` and equals the entry-point name, it names a vendor,
its version is SemVer (no base class supplies any of them). ``EP_CORE_DISABLE_PLUGIN_AUTOLOAD=1``
skips entry points entirely (only ``register_execution_provider_library`` adds EPs then).

Any attribute named ``ep_*`` on a plugin is a hook implementation (like pytest's ``pytest_*``),
so EP authors need no decorator; ``@hookimpl`` is needed only for options such as ``wrapper``."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from ep_core.sdk import hookspecs
from ep_core.sdk.errors import STRICT_ENV, EpCoreError, EpFail, PluginError, UnknownProviderError, strict_mode

AUTOLOAD_ENV = "EP_CORE_DISABLE_PLUGIN_AUTOLOAD"
REQUIRED_FACTORY_HOOKS = (
    "ep_factory_name",
    "ep_factory_vendor",
    "ep_factory_version",
    "ep_factory_get_supported_devices",
    "ep_factory_create_ep",
)
REQUIRED_EP_HOOKS = ("ep_get_capability",)
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_SPEC_NAMES = frozenset(hookspecs.HOOK_API_VERSIONS)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class PluginLoadError:
    """Why a plugin could not be used: shown by ``ep-core providers`` and the API."""

    name: str
    entry_point: str
    distribution: str | None
    summary: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        dist = f" (distribution {self.distribution})" if self.distribution else ""
        return f"{self.name} = {self.entry_point}{dist}: {self.summary}"


class _Manager(pluggy.PluginManager):
    """Treats every ``ep_*`` callable as a hook implementation, and reports names that match
    no spec (a misspelled hook must not be silently ignored)."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        return {} if opts is None and name.startswith("ep_") and _callable_attr(plugin, name) else opts


def _callable_attr(plugin: Any, name: str) -> bool:
    """Whether ``plugin.name`` is a function or method (an attribute that raises is not)."""
    try:
        attr = getattr(plugin, name)
    except Exception:
        return False
    return callable(attr) and not inspect.isclass(attr)


def hook_problems(plugin: Any, required: tuple[str, ...]) -> list[str]:
    """``ep_*`` names on ``plugin`` that are not hooks (each with a suggestion), and the
    ``required`` hooks it lacks."""
    problems = []
    for name in dir(plugin):
        if name.startswith("ep_") and name not in _SPEC_NAMES and _callable_attr(plugin, name):
            close = difflib.get_close_matches(name, _SPEC_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown hook {name!r}{hint}")
    missing = [h for h in required if not callable(getattr(plugin, h, None))]
    if missing:
        problems.append("missing required hooks " + ", ".join(missing))
    return problems


def _rank(name: str, candidates: list[str]) -> list[str]:
    """Up to two names like ``name``: one containing the other's core ('CUDA' in 'NumbaCuda') first,
    then by similarity of the cores (the shared 'ExecutionProvider' says nothing)."""

    def core(n: str) -> str:
        return n.removesuffix("ExecutionProvider").lower()

    q = core(name)
    scored = [
        ((q in core(c) or core(c) in q), difflib.SequenceMatcher(None, q, core(c)).ratio(), c) for c in candidates
    ]
    return [c for within, ratio, c in sorted(scored, reverse=True) if within or ratio >= 0.6][:2]


def hook_error(ep_name: str, hook: str, exc: Exception) -> EpCoreError:
    """The one place an exception crossing the EP contract is attributed: typed errors keep their
    type (and code) with the EP and hook prepended; anything else becomes EP_FAIL. The caller
    raises it ``from exc`` so the original stays the ``__cause__``."""
    if isinstance(exc, EpCoreError):
        if exc.message.startswith(ep_name):
            return exc
        try:
            return type(exc)(f"{ep_name}.{hook}: {exc.message}")
        except TypeError:  # a subclass with another constructor: keep the code, not the class
            return EpFail(f"{ep_name}.{hook}: [{exc.code.value}] {exc.message}")
    return EpFail(f"{ep_name}.{hook} failed: {type(exc).__name__}: {exc}")


class FactoryHandle:
    """One EP package: its entry point, and the factory once loaded."""

    def __init__(
        self,
        registry: "PluginRegistry",
        name: str,
        target: str | Any,
        distribution: str | None,
        loader: Callable[[], Any],
    ) -> None:
        self._registry = registry
        self.name = name
        self.target = target if isinstance(target, str) else f"<object {type(target).__name__}>"
        self.distribution = distribution
        self._loader = loader
        self._factory: Any = None
        self.load_error: PluginLoadError | None = None
        self._loaded = False
        self._lock = threading.Lock()
        self.api_version = hookspecs.API_VERSION

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> Any | None:
        """The factory plugin, loading it once; None (and ``load_error`` set) on failure."""
        if self._loaded:
            return self._factory
        with self._lock:
            if not self._loaded:
                self._factory = self._registry._load_handle(self)
                self._loaded = True
        if self.load_error is not None and strict_mode():
            raise PluginError(f"plugin {self.load_error} ({STRICT_ENV}=1 makes this fatal)")
        return self._factory

    @property
    def factory(self) -> Any:
        factory = self.load()
        if factory is None:
            raise PluginError(f"execution provider {self.name!r} failed to load: {self.load_error}")
        return factory

    def call(self, hook: str, default: Any = None, **kwargs: Any) -> Any:
        """Call one factory hook on this factory only (observers may wrap it)."""
        factory = self.factory
        if hookspecs.HOOK_API_VERSIONS.get(hook, 1) > self.api_version:
            return default
        try:
            result = self._registry.call_plugin(factory, hook, factory=factory, **kwargs)
        except Exception as exc:
            raise hook_error(self.name, hook, exc) from exc
        return default if result is None else result


class PluginRegistry:
    """All EP factories known to this process, and the pluggy manager that calls them."""

    def __init__(self, autoload: bool | None = None) -> None:
        self.pm = _Manager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._lock = threading.RLock()
        self._handles: dict[str, FactoryHandle] = {}
        self._targets: set[int] = set()  # id() of every factory and EP plugin (not observers)
        self._generation = 0
        self._callers: dict[tuple[str, int], tuple[int, Any]] = {}
        self.duplicate_warnings: list[str] = []
        if autoload is None:
            autoload = not _truthy(os.environ.get(AUTOLOAD_ENV))
        if autoload:
            self._discover_entry_points()

    # -------------------------------------------------------------------------- discovery
    def _discover_entry_points(self) -> None:
        for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = getattr(getattr(ep, "dist", None), "name", None)
            if ep.name in self._handles:
                prev = self._handles[ep.name]
                msg = (
                    f"execution provider {ep.name!r} is registered twice: by "
                    f"{prev.distribution or prev.target} and by {dist or ep.value}; using the first"
                )
                self.duplicate_warnings.append(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
                continue
            self._handles[ep.name] = FactoryHandle(self, ep.name, ep.value, dist, ep.load)

    def _load_handle(self, handle: FactoryHandle) -> Any | None:
        def fail(summary: str, exc: BaseException | None = None) -> Any:  # None, for `return fail(...)`
            handle.load_error = PluginLoadError(handle.name, handle.target, handle.distribution, summary, exc)
            return None

        try:
            obj = handle._loader()
        except BaseException as exc:  # a plugin's import may raise anything; keep the others alive
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return fail(f"import failed: {type(exc).__name__}: {exc}", exc)
        try:
            plugin = obj() if inspect.isclass(obj) else obj
        except Exception as exc:
            return fail(f"constructing the factory failed: {type(exc).__name__}: {exc}", exc)
        problems = hook_problems(plugin, REQUIRED_FACTORY_HOOKS)
        if problems:
            return fail("; ".join(problems))
        with self._lock:
            try:
                self.pm.register(plugin, name=f"factory:{handle.name}")
            except Exception as exc:  # pluggy validates argument names against the specs
                return fail(f"hook validation failed: {exc}", exc)
            self._targets.add(id(plugin))
            self._bump()
        try:
            problems = self._fact_problems(plugin, handle.name)
            api = self.call_plugin(plugin, "ep_factory_api_version", factory=plugin) or 1
        except Exception as exc:
            self._unregister(plugin)
            return fail(f"factory hook raised: {type(exc).__name__}: {exc}", exc)
        if problems:
            self._unregister(plugin)
            return fail("; ".join(problems))
        if int(api) > hookspecs.API_VERSION:
            self._unregister(plugin)
            return fail(
                f"needs ep_core API version {api}, this ep_core provides {hookspecs.API_VERSION}: upgrade ep-core"
            )
        handle.api_version = int(api)
        return plugin

    def _fact_problems(self, plugin: Any, entry_name: str) -> list[str]:
        """What is wrong with the factory's name, vendor and version (each asked once)."""
        facts: dict[str, Any] = {}
        problems: list[str] = []
        for hook in ("ep_factory_name", "ep_factory_vendor", "ep_factory_version"):
            try:
                facts[hook] = self.call_plugin(plugin, hook, factory=plugin)
            except Exception as exc:  # a missing fact on HostEpFactory raises PluginError naming it
                detail = exc.message if isinstance(exc, EpCoreError) else str(exc)
                problems.append(f"{hook}() raised {type(exc).__name__}: {detail}")
        if "ep_factory_name" in facts:
            name = facts["ep_factory_name"]
            if not isinstance(name, str) or not name.endswith("ExecutionProvider") or name == "ExecutionProvider":
                problems.append(
                    f"ep_factory_name() returned {name!r}: an EP name must end in 'ExecutionProvider' "
                    "(like 'AcmeNpuExecutionProvider')"
                )
            elif name != entry_name:
                problems.append(f"ep_factory_name() returned {name!r} but the entry point is named {entry_name!r}")
        vendor = facts.get("ep_factory_vendor", "?")
        if not isinstance(vendor, str) or not vendor.strip():
            problems.append(f"ep_factory_vendor() returned {vendor!r}: a factory must name its vendor")
        version = facts.get("ep_factory_version", "0.0.0")
        if not isinstance(version, str) or not _SEMVER.match(version):
            problems.append(f"ep_factory_version() returned {version!r}, which is not SemVer (like '1.2.3')")
        return problems

    def _unregister(self, plugin: Any) -> None:
        with self._lock:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._targets.discard(id(plugin))
            self._bump()

    def _bump(self) -> None:
        """The plugin set changed: every cached caller is stale. They are dropped, not just marked
        stale, because each holds the plugins it excludes: a closed session's EP objects would stay
        reachable through the callers of every other target."""
        self._generation += 1
        self._callers.clear()

    # ---------------------------------------------------------------------------- queries
    def names(self) -> list[str]:
        return list(self._handles)

    def handles(self) -> list[FactoryHandle]:
        return list(self._handles.values())

    def aliases(self) -> dict[str, str]:
        """Alias -> EP name, from the factories that load (``ep_factory_get_provider_aliases``)."""
        out: dict[str, str] = {}
        for h in self.handles():
            if h.load() is None:
                continue
            for alias in h.call("ep_factory_get_provider_aliases", default=()) or ():
                if isinstance(alias, str) and alias.endswith("ExecutionProvider") and alias not in self._handles:
                    out.setdefault(alias, h.name)
        return out

    def handle(self, name: str) -> FactoryHandle:
        """The EP registered as ``name``, or the one that declares ``name`` as an alias."""
        if name in self._handles:
            return self._handles[name]
        aliases = self.aliases()
        if name in aliases:
            return self._handles[aliases[name]]
        usable = [h.name for h in self.handles() if h.load_error is None] + list(aliases)
        close = _rank(name, usable)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise UnknownProviderError(
            f"unknown execution provider {name!r}.{hint} Available: {sorted(usable) or 'none'}. "
            "Run `ep-core providers` to see every installed EP and why any is unusable."
        )

    def cpu_fallback(self) -> FactoryHandle | None:
        """The first loadable factory that offers itself as the CPU fallback."""
        for h in self.handles():
            if h.load() is not None and h.call("ep_factory_is_cpu_fallback", default=False):
                return h
        return None

    # -------------------------------------------------------------------- manual registry
    def register_library(self, name: str, target: str | Any) -> FactoryHandle:
        """Add an EP by hand: ``"module:attr"`` or the factory object itself."""
        with self._lock:
            if name in self._handles:
                raise PluginError(
                    f"execution provider {name!r} is already registered (by "
                    f"{self._handles[name].distribution or self._handles[name].target}); unregister it first"
                )
            if isinstance(target, str):
                if ":" not in target:
                    raise PluginError(f"library target {target!r} must look like 'package.module:attribute'")
                mod, _, attr = target.partition(":")

                def loader() -> Any:
                    obj: Any = importlib.import_module(mod)
                    for part in attr.split("."):
                        obj = getattr(obj, part)
                    return obj

            else:

                def loader() -> Any:
                    return target

            handle = FactoryHandle(self, name, target, None, loader)
            self._handles[name] = handle
        factory = handle.load()
        if factory is None:
            with self._lock:
                del self._handles[name]
            raise PluginError(f"could not register {name!r}: {handle.load_error}")
        return handle

    def unregister_library(self, name: str) -> None:
        with self._lock:
            handle = self.handle(name)
            if handle.loaded and handle._factory is not None:
                self._unregister(handle._factory)
            del self._handles[name]

    def register_observer(self, plugin: Any, name: str | None = None) -> None:
        """A plugin that is not an EP (tracer, profiler) and wraps hooks of every EP."""
        with self._lock:
            self.pm.register(plugin, name=name)
            self._bump()

    def unregister_observer(self, plugin: Any) -> None:
        with self._lock:
            self.pm.unregister(plugin)
            self._bump()

    # ------------------------------------------------------------------------- EP objects
    def register_ep(self, ep: Any, ep_name: str) -> None:
        problems = hook_problems(ep, REQUIRED_EP_HOOKS)
        if problems:
            raise EpFail(f"the EP object {ep_name} created is invalid: " + "; ".join(problems))
        with self._lock:
            try:
                self.pm.register(ep, name=f"ep:{ep_name}:{id(ep)}")
            except Exception as exc:
                raise EpFail(f"the EP object {ep_name} created is invalid: {exc}") from exc
            self._targets.add(id(ep))
            self._bump()

    def unregister_ep(self, ep: Any) -> None:
        self._unregister(ep)

    # ---------------------------------------------------------------------------- calling
    def _caller(self, target: Any, hook: str) -> Any:
        key = (hook, id(target))
        cached = self._callers.get(key)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        with self._lock:
            others = [p for p in self.pm.get_plugins() if id(p) in self._targets and p is not target]
            caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
            self._callers[key] = (self._generation, caller)
            return caller

    def call_plugin(self, target: Any, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on ``target`` (a factory or EP) alone, plus observer wrappers."""
        return self._caller(target, hook)(**kwargs)

    def implements(self, target: Any, hook: str) -> bool:
        return callable(getattr(target, hook, None)) or any(
            id(i.plugin) not in self._targets for i in self._caller(target, hook).get_hookimpls()
        )


_registry: PluginRegistry | None = None
_registry_lock = threading.Lock()


def get_registry() -> PluginRegistry:
    """The process-wide plugin registry (discovered on first use)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = PluginRegistry()
    return _registry


def reset_registry(autoload: bool | None = None) -> PluginRegistry:
    """Forget every plugin and discover again (tests, and after a ``pip install`` at run time)."""
    global _registry
    with _registry_lock:
        _registry = PluginRegistry(autoload=autoload)
    return _registry


def register_execution_provider_library(name: str, target: str | Any) -> None:
    """Add an execution provider by hand, like ORT's ``register_execution_provider_library``."""
    get_registry().register_library(name, target)


def unregister_execution_provider_library(name: str) -> None:
    get_registry().unregister_library(name)

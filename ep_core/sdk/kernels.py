"""The one kernel-registry format every EP uses.

A ``KernelDef`` says which nodes a kernel serves (domain, op, opset range, allowed types per
type constraint, which inputs/outputs live in host memory). A ``KernelRegistry`` maps defs to
kernel *builders*: ``builder(node, ctx) -> compute`` runs once per node at session creation
(parse attributes, fold constants), and ``compute(*inputs) -> sequence of outputs`` runs per
inference with nothing left to decide. Lookup picks the newest def whose range contains the
node's opset and whose type constraints admit the node's input types; a miss says what exists.
Defs are checked against onnx's schemas when registered (see ``KernelRegistry``)."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ep_core.sdk.errors import STRICT_ENV, EpFail, NotImplementedByAnyEp, strict_mode

if TYPE_CHECKING:
    from pathlib import Path

    from ep_core.sdk.config import SessionConfig
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.memory import MemoryInfo

Compute = Callable[..., Sequence[Any]]

# Type-string groups as ONNX schemas spell them; kernels declare subsets of these.
FLOATS = ("tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)")
FLOATS_NO_BF16 = ("tensor(float16)", "tensor(float)", "tensor(double)")
SIGNED_INTS = ("tensor(int8)", "tensor(int16)", "tensor(int32)", "tensor(int64)")
UNSIGNED_INTS = ("tensor(uint8)", "tensor(uint16)", "tensor(uint32)", "tensor(uint64)")
INTS = SIGNED_INTS + UNSIGNED_INTS
NUMERIC = FLOATS + INTS
ALL_TENSORS = NUMERIC + ("tensor(bool)", "tensor(string)", "tensor(complex64)", "tensor(complex128)")


class KernelContext(Protocol):
    """Everything a kernel builder may ask beyond the node itself; nothing else crosses. Read the
    attributes directly: the core sets every one of them (``None`` where the doc says so)."""

    @property
    def node(self) -> "NodeView":
        """The node being built (the builder's first argument)."""

    @property
    def ep(self) -> Any:
        """The EP object this kernel belongs to: what ``ep_factory_create_ep`` returned."""

    @property
    def memory_info(self) -> "MemoryInfo":
        """The memory the EP's kernels read and write (host memory for host EPs)."""

    @property
    def stream(self) -> Any:
        """The EP's sync stream for this session, or None (not stream-aware, or host memory)."""

    @property
    def allocator(self) -> Any:
        """The factory's allocator for ``memory_info``, or None (host memory from NumPy)."""

    @property
    def session_options(self) -> "SessionConfig":
        """The session's configuration, read-only."""

    @property
    def model_path(self) -> "Path | None":
        """The model file the session was created from (EPContext files resolve against its
        folder), or None for a model given as bytes."""

    def constant(self, name: str) -> Any:
        """The value of an input known at session creation (initializer or Constant), or None."""

    def subgraph(self, attr_name: str) -> "SubgraphRunner":
        """A runner for a subgraph attribute, partitioned and planned like the main graph."""


class SubgraphRunner(Protocol):
    """Runs one subgraph: ``run(inputs, outer)`` with the subgraph's formal inputs in order and
    the outer-scope values by name; returns the subgraph outputs in order."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    def run(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]: ...


KernelBuilder = Callable[["NodeView", KernelContext], Compute]
OpLoader = Callable[[tuple[str, str]], bool]  # (domain key, op) -> whether it loaded all that serves the op


@dataclass(frozen=True)
class KernelDef:
    """Which nodes a kernel serves. ``since_version`` is the first opset served; without
    ``end_version`` the kernel serves every later schema version too (a def with a higher ``since``
    for the same op takes over from there), so an EP declares ``since`` only, and ``end_version``
    where semantics changed. ``type_constraints`` maps a schema type-constraint name (``T``, ``T1``
    ...) to the type strings the kernel accepts; constraints not named accept whatever the schema
    allows. ``host_inputs``/``host_outputs`` list positions that live in host memory whatever the
    EP's device is (shape tensors, axes), so the planner copies only what must move; a host output
    is complete when ``compute`` returns (no stream waits for it). ``delegated`` marks kernels that
    forward to ``onnx.reference`` so reports can show it."""

    op_type: str
    domain: str = ""
    since_version: int = 1
    end_version: int | None = None
    type_constraints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    host_inputs: tuple[int, ...] = ()
    host_outputs: tuple[int, ...] = ()
    delegated: bool = False

    @property
    def domain_key(self) -> str:
        return _domain_key(self.domain)

    def covers(self, opset: int) -> bool:
        return self.since_version <= opset and (self.end_version is None or opset <= self.end_version)

    def version_range(self) -> str:
        """``14+``, ``7-12`` or ``13``."""
        return _range_text(self.since_version, self.end_version)


@dataclass(frozen=True)
class KernelEntry:
    kernel_def: KernelDef
    builder: KernelBuilder


@dataclass(frozen=True)
class LookupResult:
    """A found kernel, or ``None`` entry with the reason the lookup missed."""

    entry: KernelEntry | None
    reason: str = ""

    def __bool__(self) -> bool:
        return self.entry is not None


def _domain_key(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def _range_text(since: int, end: int | None) -> str:
    if end is None:
        return f"{since}+"
    return str(since) if end == since else f"{since}-{end}"


def _merged_ranges(defs: Iterable[KernelDef]) -> str:
    """The opsets some defs cover, overlapping and adjacent ranges merged: ``1-10, 13+``."""
    unbounded = 1 << 30
    merged: list[list[int]] = []
    for s, e in sorted((d.since_version, unbounded if d.end_version is None else d.end_version) for d in defs):
        if merged and s <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return ", ".join(_range_text(s, None if e == unbounded else e) for s, e in merged)


def _schema(op_type: str, version: int, domain: str) -> Any:
    from onnx import defs

    try:
        return defs.get_schema(op_type, version, "" if domain in ("", "ai.onnx") else domain)
    except Exception:
        return None


@dataclass(frozen=True)
class SchemaVersion:
    """One version of an op's ONNX schema: the opsets it is in effect for and its type constraints."""

    since: int
    end: int | None  # the opset before the next version; None for the newest
    constraints: Mapping[str, frozenset[str]]


def _versions(schemas: list[Any]) -> tuple[SchemaVersion, ...]:
    schemas.sort(key=lambda s: s.since_version)
    ends = [n.since_version - 1 for n in schemas[1:]] + [None][: len(schemas)]
    return tuple(
        SchemaVersion(
            s.since_version, end, {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints}
        )
        for s, end in zip(schemas, ends, strict=True)
    )


def schema_history(domain_key: str, op: str) -> tuple[SchemaVersion, ...]:
    """One op's versions in one of ONNX's domains, oldest first, walked back from its newest (~30 us,
    where walking every schema costs ~10 ms); cached once found (a schema may be registered later)."""
    from onnx import defs

    if found := _HISTORIES.get((domain_key, op)):
        return found
    domain, schemas, version = "" if domain_key == "ai.onnx" else domain_key, [], 1 << 30
    while version > 0 and defs.has(op, version, domain):
        schemas.append(defs.get_schema(op, version, domain))
        version = schemas[-1].since_version - 1
    return _HISTORIES.setdefault((domain_key, op), _versions(schemas)) if schemas else ()


_HISTORIES: dict[tuple[str, str], tuple[SchemaVersion, ...]] = {}


@functools.cache
def _onnx_domains() -> frozenset[str]:
    """ONNX's own domains (``ai.onnx.*``): a contrib domain's schemas come at run time, unchecked."""
    from onnx import defs

    return frozenset(["ai.onnx"] + [d for d in defs.C.schema_version_map() if d.startswith("ai.onnx")])


def schema_versions(kernel_def: KernelDef) -> tuple[SchemaVersion, ...] | None:
    """The ONNX schema versions ``kernel_def`` serves: its ``since`` (and ``end``, if any) expanded
    over the op's history, each version's opset range derived from the schema. Empty when the op or
    its ``since`` names no schema; None for a domain onnx has no schemas for (custom ops)."""
    key = (kernel_def.domain_key, kernel_def.op_type)
    if key[0] not in _onnx_domains():
        return None
    history = schema_history(*key)
    if not history or history[0].since > kernel_def.since_version:
        return ()
    end = kernel_def.end_version
    return tuple(
        v for v in history if (v.end is None or v.end >= kernel_def.since_version) and (end is None or v.since <= end)
    )


_ALL_REGISTRIES: "weakref.WeakSet[KernelRegistry]" = weakref.WeakSet()


def registry_problems(ep_name: str) -> list[str]:
    """Kernels refused so far by every registry of ``ep_name`` in this process (``ep-core providers``)."""
    return list(dict.fromkeys(p for r in list(_ALL_REGISTRIES) if r.ep_name == ep_name for p in r.problems))


class KernelRegistry:
    """Kernels of one EP, keyed by (domain, op_type). Each def is checked against onnx's schemas as
    it is added: one whose op or ``since`` names no schema, or whose type constraints name one that
    no schema version it serves has, is refused with a recorded problem (``problems``; lookups of
    that op say why), or ``EpFail`` in strict mode (``EP_CORE_STRICT_PLUGINS=1``)."""

    def __init__(self, ep_name: str, kernel_package: str | None = None, load_op: OpLoader | None = None) -> None:
        """``kernel_package`` names a package whose modules register kernels on import; it is
        imported once, on the first query, so an EP's heavy imports (numba, its kernel families)
        wait until a session asks it about a node. ``load_op((domain key, op))`` imports only what
        registers one op and says if that was all (False: the package loads)."""
        self.ep_name, self.kernel_package = ep_name, kernel_package
        self._ops: dict[tuple[str, str], list[KernelEntry]] = {}  # (domain, op) -> entries, oldest since first
        self._refused: dict[tuple[str, str], list[str]] = {}
        self._type_cache: dict[tuple[str, str, int], Any] = {}
        self._loaded = kernel_package is None
        self._load_op, self._ops_loaded, self._failed = load_op, set[tuple[str, str]](), ""
        self._load_lock = threading.RLock()  # held while loading: other threads wait for all of it
        _ALL_REGISTRIES.add(self)

    def ensure_loaded(self, key: tuple[str, str] | None = None) -> "KernelRegistry":
        """``kernel_package`` (or what ``load_op`` loads for ``key``) imported, thread-safe; a module asking
        while it loads sees what has registered so far. A failed load raises again on every later query."""
        with self._load_lock:
            if self._failed:  # its modules stay imported: loading again would register kernels twice
                raise EpFail(
                    f"{self.ep_name}: its kernels failed to load ({self._failed}); start a new process to use it"
                )
            if self._loaded or key in self._ops_loaded:
                return self
            try:
                if key is not None and self._load_op is not None and self._load_op(key):
                    self._ops_loaded.add(key)
                    return self
                self._loaded = True
                __import__(str(self.kernel_package))
            except BaseException as exc:
                self._failed = f"{type(exc).__name__}: {exc}"
                raise
        return self

    @property
    def problems(self) -> list[str]:
        """Every kernel refused at registration, with why."""
        return [p for ps in self.ensure_loaded()._refused.values() for p in ps]

    # --------------------------------------------------------------------- registration
    def _refusal(self, d: KernelDef) -> str | None:
        """Why ``d`` cannot be registered, or None."""
        where = f"{self.ep_name}: kernel {d.domain_key}::{d.op_type} for opsets {d.version_range()}"
        if d.end_version is not None and d.end_version < d.since_version:
            return f"{where}: end {d.end_version} is before since {d.since_version}"
        versions = schema_versions(d)
        if versions is None:
            return None  # a domain onnx has no schemas for: nothing to check against
        if not versions:
            if not (history := schema_history(d.domain_key, d.op_type)):
                return f"{where}: onnx has no op {d.op_type!r} in domain {d.domain_key!r}"
            return (
                f"{where}: no schema at opset {d.since_version}; {d.op_type} versions begin at opsets "
                f"{[v.since for v in history]}, so register it with since={history[0].since} or later"
            )
        names = sorted({c for v in versions for c in v.constraints})
        if unknown := [c for c in d.type_constraints if c not in names]:
            return (
                f"{where}: type constraint {', '.join(map(repr, unknown))} does not exist in its schema "
                f"(versions {[v.since for v in versions]} have {names})"
            )
        return None

    def add(self, kernel_def: KernelDef, builder: KernelBuilder) -> None:
        problem = self._refusal(kernel_def)
        if problem is not None:
            problem += "; the kernel is not registered"
            self._refused.setdefault((kernel_def.domain_key, kernel_def.op_type), []).append(problem)
            if strict_mode():
                raise EpFail(f"{problem} ({STRICT_ENV}=1 makes this fatal)")
            return
        entries = self._ops.setdefault((kernel_def.domain_key, kernel_def.op_type), [])
        for e in entries:
            d = e.kernel_def
            if d.since_version == kernel_def.since_version and d.type_constraints == kernel_def.type_constraints:
                raise EpFail(
                    f"{self.ep_name}: kernel {kernel_def.domain_key}::{kernel_def.op_type} "
                    f"since {kernel_def.since_version} registered twice"
                )
        entries.append(KernelEntry(kernel_def, builder))
        entries.sort(key=lambda e: e.kernel_def.since_version)

    def register(
        self,
        op_type: str,
        since: int = 1,
        end: int | None = None,
        *,
        domain: str = "",
        types: Mapping[str, Iterable[str]] | None = None,
        host_inputs: Iterable[int] = (),
        host_outputs: Iterable[int] = (),
        delegated: bool = False,
    ) -> Callable[[KernelBuilder], KernelBuilder]:
        """Decorator form of :meth:`add` for a kernel builder."""

        def deco(builder: KernelBuilder) -> KernelBuilder:
            constraints = {k: tuple(v) for k, v in (types or {}).items()}
            hosts = tuple(host_inputs), tuple(host_outputs)
            self.add(KernelDef(op_type, domain, since, end, constraints, *hosts, delegated), builder)
            return builder

        return deco

    # --------------------------------------------------------------------------- queries
    def __iter__(self) -> Iterator[KernelEntry]:
        for entries in self.ensure_loaded()._ops.values():
            yield from entries

    def kernel_defs(self, op_type: str | None = None, domain: str = "") -> list[KernelDef]:
        """Every def, or only ``op_type``'s in ``domain`` (loading only what serves it)."""
        key = (_domain_key(domain), op_type or "")
        return [e.kernel_def for e in (self.ensure_loaded(key)._ops.get(key, ()) if op_type else self)]

    def has_op(self, op_type: str, domain: str = "") -> bool:
        key = (_domain_key(domain), op_type)
        return key in self.ensure_loaded(key)._ops

    def _formal_types(self, node: "NodeView") -> Any:
        """(input type_strs, output type_strs) per schema formal parameter, cached per op version."""
        key = (node.domain_key, node.op_type, node.opset)
        if key not in self._type_cache:
            schema = _schema(node.op_type, node.opset, node.domain)
            self._type_cache[key] = None
            if schema is not None:
                self._type_cache[key] = tuple([p.type_str for p in ps] for ps in (schema.inputs, schema.outputs))
        return self._type_cache[key]

    def _constraint_values(self, node: "NodeView") -> dict[str, set[str]]:
        """Constraint name -> actual type strings seen on the node's inputs and outputs."""
        formal = self._formal_types(node)
        found: dict[str, set[str]] = {}
        if formal is None:
            return found
        ins, outs = formal
        for values, params, info in ((node.inputs, ins, node.input_info), (node.outputs, outs, node.output_info)):
            for i, name in enumerate(values):
                vi = info(i) if name and params else None
                if vi is None or vi.kind != "tensor" or not vi.elem_type:
                    continue
                # variadic parameters repeat the last formal parameter
                found.setdefault(params[min(i, len(params) - 1)], set()).add(vi.type_str)
        return found

    def lookup(self, node: "NodeView", domain: str | None = None) -> LookupResult:
        """The kernel for ``node``, or why there is none (versions and types that exist).
        ``domain`` looks the node up as if it were in another domain (the layout transformer
        asks whether an NCHW node has an NHWC kernel)."""
        key = node.domain_key if domain is None else _domain_key(domain)
        entries = self.ensure_loaded((key, node.op_type))._ops.get((key, node.op_type))
        refused = self._refused.get((key, node.op_type))
        why_refused = f" (refused at registration: {'; '.join(refused)})" if refused else ""
        if entries is None:
            return LookupResult(None, f"{self.ep_name} has no kernel for {key}::{node.op_type}{why_refused}")
        in_range = [e for e in entries if e.kernel_def.covers(node.opset)]
        if not in_range:
            kernels = "kernel covers" if len(entries) == 1 else "kernels cover"
            return LookupResult(
                None,
                f"{self.ep_name}'s {key}::{node.op_type} {kernels} opsets "
                f"{_merged_ranges(e.kernel_def for e in entries)}, but the model imports {key} opset "
                f"{node.opset}{why_refused}",
            )
        seen = self._constraint_values(node)
        misses = []
        for e in reversed(in_range):
            bad = [
                f"{c}={sorted(seen[c])} (allowed {list(allowed)})"
                for c, allowed in e.kernel_def.type_constraints.items()
                if c in seen and not seen[c] <= set(allowed)
            ]
            if not bad:
                return LookupResult(e)
            misses.extend(bad)
        return LookupResult(None, f"{self.ep_name} {node.op_type}: unsupported types " + "; ".join(misses))

    def build(self, node: "NodeView", ctx: KernelContext) -> tuple[KernelDef, Compute]:
        """Look up and build the kernel for ``node`` or raise ``NOT_IMPLEMENTED`` with the reason."""
        found = self.lookup(node)
        if found.entry is None:
            raise NotImplementedByAnyEp(f"{node.describe()}: {found.reason}")
        return found.entry.kernel_def, found.entry.builder(node, ctx)

    # ------------------------------------------------------------------------ validation
    def validate(self) -> list[str]:
        """Problems with the registry against the pinned onnx's schemas: the kernels refused at
        registration, and type strings that no schema version a kernel serves allows."""
        problems: list[str] = self.problems
        for entry in self:
            d = entry.kernel_def
            allowed: dict[str, set[str]] = {}
            for v in schema_versions(d) or ():  # None: a custom domain, nothing to check against
                for name, schema_types in v.constraints.items():
                    allowed.setdefault(name, set()).update(schema_types)
            for name, types in d.type_constraints.items():
                extra = set(types) - allowed.get(name, set(types))
                if extra:
                    problems.append(
                        f"{d.domain_key}::{d.op_type} {d.version_range()}: {name} lists {sorted(extra)}, which no "
                        "schema version it serves allows"
                    )
        return problems

"""The one kernel-registry format every EP uses.

A ``KernelDef`` says which nodes a kernel serves (domain, op, opset range, allowed types per
type constraint, which inputs/outputs live in host memory). A ``KernelRegistry`` maps defs to
kernel *builders*: ``builder(node, ctx) -> compute`` runs once per node at session creation
(parse attributes, fold constants), and ``compute(*inputs) -> sequence of outputs`` runs per
inference with nothing left to decide. Lookup picks the newest def whose range contains the
node's opset and whose type constraints admit the node's input types; a miss says what exists."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ep_core.sdk.errors import NotImplementedByAnyEp

if TYPE_CHECKING:
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
    """What a kernel builder may ask about its node beyond the node itself."""

    @property
    def memory_info(self) -> "MemoryInfo": ...

    @property
    def stream(self) -> Any: ...

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


@dataclass(frozen=True)
class KernelDef:
    """Which nodes a kernel serves.

    ``type_constraints`` maps a schema type-constraint name (``T``, ``T1`` ...) to the type strings
    the kernel accepts; constraints not named accept whatever the schema allows.
    ``host_inputs``/``host_outputs`` list positions that live in host memory whatever the EP's
    device is (shape tensors, axes), so the planner copies only what must move.
    ``delegated`` marks kernels that forward to ``onnx.reference`` so reports can show it."""

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
        return "ai.onnx" if self.domain in ("", "ai.onnx") else self.domain

    def covers(self, opset: int) -> bool:
        return self.since_version <= opset and (self.end_version is None or opset <= self.end_version)

    def version_range(self) -> str:
        end = "" if self.end_version is None else str(self.end_version)
        return f"{self.since_version}-{end}" if end != str(self.since_version) else str(end)


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


def _schema(op_type: str, version: int, domain: str) -> Any:
    from onnx import defs

    try:
        return defs.get_schema(op_type, version, "" if domain in ("", "ai.onnx") else domain)
    except Exception:
        return None


@dataclass
class _OpSlot:
    entries: list[KernelEntry] = field(default_factory=list)


class KernelRegistry:
    """Kernels of one EP, keyed by (domain, op_type)."""

    def __init__(self, ep_name: str, kernel_package: str | None = None) -> None:
        """``kernel_package`` names a package whose modules register kernels on import; it is
        imported once, on the first ``ensure_loaded()``, so an EP's heavy imports (numba) wait
        until the EP is actually used."""
        self.ep_name = ep_name
        self.kernel_package = kernel_package
        self._ops: dict[tuple[str, str], _OpSlot] = {}
        self._type_cache: dict[tuple[str, str, int], Any] = {}
        self._loaded = kernel_package is None
        self._load_lock = threading.Lock()

    def ensure_loaded(self) -> "KernelRegistry":
        """This registry with every kernel module of ``kernel_package`` imported (thread-safe)."""
        if not self._loaded:
            with self._load_lock:
                if not self._loaded:
                    import importlib

                    assert self.kernel_package is not None
                    importlib.import_module(self.kernel_package)
                    self._loaded = True
        return self

    # --------------------------------------------------------------------- registration
    def add(self, kernel_def: KernelDef, builder: KernelBuilder) -> None:
        slot = self._ops.setdefault((kernel_def.domain_key, kernel_def.op_type), _OpSlot())
        for e in slot.entries:
            d = e.kernel_def
            if d.since_version == kernel_def.since_version and d.type_constraints == kernel_def.type_constraints:
                raise ValueError(
                    f"{self.ep_name}: kernel {kernel_def.domain_key}::{kernel_def.op_type} "
                    f"since {kernel_def.since_version} registered twice"
                )
        slot.entries.append(KernelEntry(kernel_def, builder))
        slot.entries.sort(key=lambda e: e.kernel_def.since_version)

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
            self.add(
                KernelDef(
                    op_type=op_type,
                    domain=domain,
                    since_version=since,
                    end_version=end,
                    type_constraints={k: tuple(v) for k, v in (types or {}).items()},
                    host_inputs=tuple(host_inputs),
                    host_outputs=tuple(host_outputs),
                    delegated=delegated,
                ),
                builder,
            )
            return builder

        return deco

    # --------------------------------------------------------------------------- queries
    def __iter__(self) -> Iterator[KernelEntry]:
        for slot in self._ops.values():
            yield from slot.entries

    def kernel_defs(self) -> list[KernelDef]:
        return [e.kernel_def for e in self]

    def has_op(self, op_type: str, domain: str = "") -> bool:
        return (("ai.onnx" if domain in ("", "ai.onnx") else domain), op_type) in self._ops

    def _formal_types(self, node: "NodeView") -> Any:
        """(input type_strs, output type_strs) per schema formal parameter, cached per op version."""
        key = (node.domain_key, node.op_type, node.opset)
        if key not in self._type_cache:
            schema = _schema(node.op_type, node.opset, node.domain)
            if schema is None:
                self._type_cache[key] = None
            else:
                ins = [(p.type_str, int(p.option)) for p in schema.inputs]
                outs = [(p.type_str, int(p.option)) for p in schema.outputs]
                self._type_cache[key] = (ins, outs)
        return self._type_cache[key]

    def _constraint_values(self, node: "NodeView") -> dict[str, set[str]]:
        """Constraint name -> actual type strings seen on the node's inputs and outputs."""
        formal = self._formal_types(node)
        found: dict[str, set[str]] = {}
        if formal is None:
            return found
        for values, params, info in (
            (node.inputs, formal[0], node.input_info),
            (node.outputs, formal[1], node.output_info),
        ):
            for i, name in enumerate(values):
                if not name:
                    continue
                # variadic parameters (option 2) repeat the last formal parameter
                p = min(i, len(params) - 1) if params else None
                if p is None:
                    continue
                type_param = params[p][0]
                vi = info(i)
                if vi is None or vi.kind != "tensor" or not vi.elem_type:
                    continue
                found.setdefault(type_param, set()).add(vi.type_str)
        return found

    def lookup(self, node: "NodeView", domain: str | None = None) -> LookupResult:
        """The kernel for ``node``, or why there is none (versions and types that exist).
        ``domain`` looks the node up as if it were in another domain (the layout transformer
        asks whether an NCHW node has an NHWC kernel)."""
        key = node.domain_key if domain is None else ("ai.onnx" if domain in ("", "ai.onnx") else domain)
        slot = self._ops.get((key, node.op_type))
        if slot is None:
            return LookupResult(None, f"{self.ep_name} has no kernel for {key}::{node.op_type}")
        in_range = [e for e in slot.entries if e.kernel_def.covers(node.opset)]
        if not in_range:
            have = ", ".join(e.kernel_def.version_range() for e in slot.entries)
            return LookupResult(
                None,
                f"{self.ep_name} has {node.op_type} for opsets {have} but the node is opset {node.opset}",
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
        """Problems with the registry against the pinned onnx's schemas: unknown ops, type
        constraint names that do not exist, type strings the schema does not allow."""
        problems: list[str] = []
        for entry in self:
            d = entry.kernel_def
            schema = _schema(d.op_type, d.end_version or d.since_version, d.domain)
            if schema is None:
                if d.domain_key in ("ai.onnx", "ai.onnx.ml"):
                    problems.append(f"{d.domain_key}::{d.op_type} opset {d.since_version}: no such ONNX schema")
                continue
            allowed = {tc.type_param_str: set(tc.allowed_type_strs) for tc in schema.type_constraints}
            for name, types in d.type_constraints.items():
                if name not in allowed:
                    problems.append(
                        f"{d.domain_key}::{d.op_type} since {d.since_version}: type constraint {name!r} "
                        f"does not exist (schema has {sorted(allowed)})"
                    )
                    continue
                extra = set(types) - allowed[name]
                if extra:
                    problems.append(
                        f"{d.domain_key}::{d.op_type} since {d.since_version}: {name} lists {sorted(extra)} "
                        "which the schema does not allow"
                    )
        return problems

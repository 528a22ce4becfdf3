"""Compiling generated kernel sources with Numba, and turning compiled kernels into bytes and back.

Sources come from ``generate`` only (this EP's templates filled from a checked declarative spec),
never from a file. The bytes are exactly what Numba's own on-disk cache stores for a function
(``CompileResult._reduce`` serialised by ``numba.core.serialize.dumps``: the object code of the
kernel, the bitcode needed for linking, the function descriptor and signature). That format is a
pickle, so ``rebuild_kernel`` is only ever called for a payload whose context carries a valid
signature from a key the user trusts (``ep.LoadedContext``), after its sha256 matched the signed
one, or (``compile_kernel`` with a cache) for an entry of this machine's kernel cache that
``kernel_cache`` verified the same way; only object-code payloads are accepted, so rebuilding never
runs LLVM's optimiser or code generator."""

from __future__ import annotations

import hashlib
import pickle
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ep_numba_cpu import kernel_cache

_lock = threading.Lock()
# source sha256 + signature -> compiled kernel: identical kernels of one model compile once
_compiled: dict[str, "CompiledKernel"] = {}
# (kernel key, payload sha256) -> dispatcher rebuilt from a signed payload. Numba never frees JIT
# code, so rebuilding a kernel for every session of a context model would grow the process by its
# machine code each time (hundreds of MB over a few dozen sessions): one rebuild serves them all.
_rebuilt: dict[tuple[str, str], Any] = {}
# counters the tests and the benchmark read
# (cached: rebuilt from this machine's kernel cache, ``kernel_cache``)
STATS = {"compiled": 0, "rebuilt": 0, "cached": 0}


@dataclass
class CompiledKernel:
    """A kernel ready to call, with the bytes that rebuild it in another process."""

    key: str
    dispatcher: Any
    payload: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.payload).hexdigest()


def kernel_key(source: str, signature: str, parallel: bool) -> str:
    return hashlib.sha256(f"{signature}|{int(parallel)}|{source}".encode()).hexdigest()[:24]


def _module_for(key: str, source: str) -> types.ModuleType:
    """The kernel's source executed as a module of its own (Numba's environment objects find their
    globals through ``sys.modules`` by module name, at compile and at rebuild time)."""
    name = f"ep_numba_cpu._kernels.k_{key}"
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__dict__["__builtins__"] = __builtins__
        code = compile(source, f"<ep_numba_cpu kernel {key}>", "exec")
        exec(code, mod.__dict__)  # source written by ``generate`` from a checked spec, never read from a file
        sys.modules[name] = mod
    return mod


def _parse_signature(signature: str) -> tuple[Any, ...]:
    """Argument types from our own signature spelling: ``float32:4:C:w,float32:4:A:r`` (dtype,
    ndim, layout, writable or readonly) -- parsed, never evaluated."""
    from numba.core import types as nbtypes

    args = []
    for part in signature.split(","):
        dtype, ndim, layout, access = part.split(":")
        if dtype not in ("float32", "float64", "int32", "int64", "boolean", "uint8", "int8", "int16") or layout not in (
            "C",
            "A",
        ):
            raise ValueError(f"bad kernel signature part {part!r}")
        contiguous: Literal["C", "A"] = "C" if layout == "C" else "A"
        args.append(nbtypes.Array(getattr(nbtypes, dtype), int(ndim), contiguous, readonly=access == "r"))
    return tuple(args)


def compile_kernel(
    source: str, signature: str, parallel: bool, cache: "kernel_cache.KernelCache | None" = None
) -> CompiledKernel:
    """Compile (once per process) and serialise one generated kernel; with a ``cache``, a verified
    entry of this machine's kernel cache is rebuilt instead (``STATS["cached"]``), and a kernel
    compiled here is stored in it."""
    key = kernel_key(source, signature, parallel)
    with _lock:
        hit = _compiled.get(key)
        if hit is not None:
            return hit
        ck = _from_cache(cache, key, source, signature, parallel) if cache is not None else None
        if ck is None:
            ck = _compile(key, source, signature, parallel)
            if cache is not None:
                cache.store(key, ck.payload)
        _compiled[key] = ck
        return ck


def lookup(
    source: str, signature: str, parallel: bool, cache: "kernel_cache.KernelCache | None" = None
) -> CompiledKernel | None:
    """The kernel when this process has it or ``cache`` holds a verified entry; None (nothing
    compiled) otherwise. ``compile_pool`` asks before sharing the rest out."""
    key = kernel_key(source, signature, parallel)
    with _lock:
        hit = _compiled.get(key)
        if hit is None and cache is not None:
            hit = _from_cache(cache, key, source, signature, parallel)
            if hit is not None:
                _compiled[key] = hit
        return hit


def adopt(
    source: str, signature: str, parallel: bool, payload: bytes, cache: "kernel_cache.KernelCache | None" = None
) -> CompiledKernel:
    """A kernel one of this process's compile workers (``compile_pool``) compiled from ``source``:
    its payload came over the worker's pipe, never from a file. Rebuilt, counted as compiled, and
    stored in ``cache`` as a kernel compiled here would be."""
    key = kernel_key(source, signature, parallel)
    with _lock:
        hit = _compiled.get(key)
        if hit is not None:
            return hit
        disp = _rebuild(key, source, parallel, payload, RuntimeError)
        STATS["compiled"] += 1
        ck = CompiledKernel(key, disp, payload)
        _compiled[key] = ck
        if cache is not None:
            cache.store(key, payload)
        return ck


def compile_payload(key: str, source: str, signature: str, parallel: bool) -> bytes:
    """The machine-code payload of a kernel compiled here (what a compile worker sends back)."""
    with _lock:
        return _compile(key, source, signature, parallel).payload


def _compile(key: str, source: str, signature: str, parallel: bool) -> CompiledKernel:
    import numba
    from numba.core.serialize import dumps

    mod = _module_for(key, source)
    py_func = mod.kernel
    args = _parse_signature(signature)
    disp = numba.njit(args, parallel=parallel, nogil=True, error_model="numpy", cache=False)(py_func)
    STATS["compiled"] += 1
    cres = disp.overloads[args]
    # numba's CompileResult is a namedtuple of a runtime field list (CR_FIELDS): mypy cannot see its fields
    if cres.lifted or cres.library.has_dynamic_globals:  # type: ignore[attr-defined]
        raise RuntimeError(f"kernel {key} cannot be serialised (lifted code or dynamic globals)")
    reduced = cres._reduce()
    # the 7th field is the type-annotated source listing, only read by inspect_types(): drop it
    payload = dumps(reduced[:6] + ("",) + reduced[7:])
    return CompiledKernel(key, disp, payload)


class _BadEntry(Exception):
    pass


def _from_cache(
    cache: "kernel_cache.KernelCache", key: str, source: str, signature: str, parallel: bool
) -> CompiledKernel | None:
    """Kernel ``key`` rebuilt from its cache entry (verified by ``cache.load``), or None."""
    payload = cache.load(key)
    if payload is None:
        return None
    try:
        disp = _rebuild(key, source, parallel, payload, _BadEntry)
        if [tuple(s) for s in disp.signatures] != [_parse_signature(signature)]:
            raise _BadEntry(f"kernel {key}: its machine code takes {disp.signatures}, not {signature}")
    except _BadEntry as exc:
        cache.reject(cache.path(key), str(exc))
        return None
    STATS["cached"] += 1
    _rebuilt[(key, hashlib.sha256(payload).hexdigest())] = disp
    return CompiledKernel(key, disp, payload)


def rebuild_kernel(
    key: str, source: str, parallel: bool, payload: bytes, sha256: str, fail: Callable[[str], Exception]
) -> Any:
    """A dispatcher serving kernel ``key`` (``source`` from ``generate``) from its serialised
    machine code, with compilation disabled (a call with other types raises instead of compiling).
    Only for a payload whose signed sha256 is ``sha256``; ``fail(msg)`` builds the error raised."""
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise fail(f"kernel {key}: its machine code differs from its signed sha256")
    with _lock:
        hit = _rebuilt.get((key, sha256))
        if hit is not None:
            return hit
        disp = _rebuild(key, source, parallel, payload, fail)
        STATS["rebuilt"] += 1
        _rebuilt[(key, sha256)] = disp
        return disp


def _rebuild(key: str, source: str, parallel: bool, payload: bytes, fail: Callable[[str], Exception]) -> Any:
    """The one way a dispatcher is made from a payload (a signed context's or a verified cache
    entry's; the caller checked it and holds ``_lock``)."""
    import numba
    from numba.core import compiler

    mod = _module_for(key, source)
    py_func = mod.kernel
    try:
        data = pickle.loads(payload)  # signed by a trusted key, sha256 checked (see module docstring)
    except Exception as exc:
        raise fail(f"kernel {key}: payload does not load: {type(exc).__name__}: {exc}") from exc
    if not (
        isinstance(data, tuple) and data and isinstance(data[0], tuple) and len(data[0]) == 3 and data[0][1] == "object"
    ):
        raise fail(f"kernel {key}: payload is not a Numba object-code library")
    disp = numba.njit(parallel=parallel, nogil=True, error_model="numpy")(py_func)
    ctx = disp.targetctx
    _ready_to_link(ctx, payload)
    try:
        cres = compiler.CompileResult._rebuild(ctx, *data)
    except Exception as exc:
        raise fail(f"kernel {key}: Numba could not rebuild it: {type(exc).__name__}: {exc}") from exc
    disp.add_overload(cres)
    disp.disable_compile()
    return disp


def _ready_to_link(ctx: Any, payload: bytes) -> None:
    """What linking stored machine code needs of Numba's CPU target: its runtime (NRT), once per
    process, and the hash-secret symbols if the code names them (defining them imports
    ``numba.cpython.hashing``, ~17 ms, and only a kernel that hashes strings uses them). Not
    ``ctx.refresh()`` (what Numba's own cache loader calls): it imports every lowering registry,
    about 0.3 s per process that only compiling needs (and any compile refreshes the target)."""
    global _linkable
    if not _linkable:
        from numba.core.runtime import rtsys

        rtsys.initialize(ctx)
        _linkable = True
    if b"_numba_hashsecret_" in payload:
        import numba.cpython.hashing  # noqa: F401  (defines the _numba_hashsecret_* symbols)


_linkable = False


def clear_process_cache() -> None:
    """Forget kernels compiled in this process (benchmarks measure cold compiles with it)."""
    with _lock:
        _compiled.clear()
        _rebuilt.clear()

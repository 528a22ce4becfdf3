"""Which kernel families register each op, so that a query about one op imports only those.

Importing all ~50 families of ``ep_cpu_reference.kernels`` takes ~70 ms, and a session asks about
few ops: a session from an EPContext model of the Numba CPU EP, about the handful it delegates.
The index is data (``family_index.json``, never executed), made by a full load in a fresh process:

    .venv/bin/python -m ep_cpu_reference.family_index --write

It names, for every (domain, op), the families whose import registers a kernel or a schema for it
(``delegated``: ``onnx.reference`` serves it, which needs every native family first). It is used
only while the family sources and onnx are the ones it was made from (their sha256 and version
are in it): otherwise every query loads every family, slower and never wrong, and
``tests/cpu_reference/test_family_index.py`` fails until it is regenerated."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

INDEX_FILE = Path(__file__).with_name("family_index.json")
KERNELS = "ep_cpu_reference.kernels"
DELEGATED = "delegated"  # the family that registers last: ``register_all`` delegates what no native one serves


def _kernel_modules() -> list[str]:
    """Every module (and subpackage) of the kernels package, helpers included."""
    return [m.name for m in pkgutil.iter_modules(importlib.import_module(KERNELS).__path__)]


def family_modules() -> list[str]:
    """The native families in load order: name order (``delegated`` and ``_`` helpers apart)."""
    return sorted(n for n in _kernel_modules() if n != DELEGATED and not n.startswith("_"))


def import_family(name: str) -> ModuleType:
    """Import one family (once). A failure part-way is not retried: the registry raises it on every
    later query (``KernelRegistry.ensure_loaded``), since importing the family again would register
    its kernels twice."""
    return importlib.import_module(f"{KERNELS}.{name}")


def sources_sha256() -> str:
    """The sha256 over every Python file below the kernels package (path and bytes; subpackages'
    too, a family may be one), ~2 ms."""
    digest, root = hashlib.sha256(), Path(importlib.import_module(KERNELS).__path__[0])
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _onnx_version() -> str:
    import onnx

    return str(onnx.__version__)


@functools.cache
def _index() -> dict[str, list[str]] | None:
    """The index's op table, or None when it is missing, malformed or made from other sources."""
    try:
        data = json.loads(INDEX_FILE.read_text(encoding="utf-8"))
    except Exception:  # unreadable, not JSON, nested too deep to parse (RecursionError): not used
        return None
    if not isinstance(data, dict) or data.get("onnx") != _onnx_version():
        return None
    ops, known = data.get("ops"), set(_kernel_modules())
    if not isinstance(ops, dict) or not all(
        isinstance(v, list) and v and all(isinstance(m, str) and m in known for m in v) for v in ops.values()
    ):
        return None
    return ops if data.get("sources_sha256") == sources_sha256() else None


def load_op(key: tuple[str, str]) -> bool:
    """``KernelRegistry``'s per-op loader: import the families the index names for ``key`` (domain
    key, op). True when that is all a full load would give the op (none for an op no family
    registers); False, so everything loads, without a usable index or for a delegated op."""
    index = _index()
    if index is None:
        return False
    families = index.get(f"{key[0]}::{key[1]}", [])
    if DELEGATED in families:
        return False
    for name in families:
        import_family(name)
    return True


def build() -> dict[str, Any]:
    """The index, from a full load that records, for each kernel and schema registered, the family
    whose import ran the registration (the innermost module being imported: a family importing
    another leaves the other's to it). Only in a process that has imported no family (``main``)."""
    from onnx import defs

    from ep_cpu_reference.registry import REGISTRY

    ops: dict[str, list[str]] = {}
    add, register_schema = REGISTRY.add, defs.register_schema

    def note(domain: str, op: str) -> None:
        frame = sys._getframe(2)
        while not _is_family_frame(frame):
            assert frame.f_back is not None, f"{domain}::{op} was registered outside the kernel families"
            frame = frame.f_back
        owners = ops.setdefault(f"{'ai.onnx' if domain in ('', 'ai.onnx') else domain}::{op}", [])
        if (family := frame.f_globals["__name__"].rsplit(".", 1)[1]) not in owners:
            owners.append(family)

    def recording_add(kernel_def: Any, builder: Any) -> None:
        note(kernel_def.domain_key, kernel_def.op_type)
        add(kernel_def, builder)

    def recording_register_schema(schema: Any) -> None:
        note(schema.domain, schema.name)
        register_schema(schema)

    REGISTRY.add = recording_add  # type: ignore[method-assign]
    defs.register_schema = recording_register_schema
    try:
        for name in family_modules():
            import_family(name)
        import_family(DELEGATED).register_all()
    finally:
        del REGISTRY.add
        defs.register_schema = register_schema
    return {"onnx": _onnx_version(), "sources_sha256": sources_sha256(), "ops": {k: ops[k] for k in sorted(ops)}}


def _render(index: dict[str, Any]) -> str:
    """The index as JSON, one op a line (reviewable diffs)."""
    ops = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in index["ops"].items())
    head = {k: v for k, v in index.items() if k != "ops"}
    return json.dumps(head, indent=1)[:-2] + f',\n "ops": {{\n{ops}\n }}\n}}\n'


def _is_family_frame(frame: Any) -> bool:
    """A family module's top-level code, or ``delegated.register_all`` (called after every import)."""
    module = frame.f_globals.get("__name__", "")
    return module.startswith(f"{KERNELS}.") and (frame.f_code.co_name == "<module>" or module.endswith(DELEGATED))


def main(argv: list[str]) -> int:
    """``--write``: regenerate the index file; ``--check``: exit 1 if it differs from a fresh build."""
    if any(m.startswith(f"{KERNELS}.") for m in sys.modules):
        raise SystemExit("build the index in a fresh process (a kernel family is already imported)")
    fresh = _render(build())
    if "--write" in argv:
        INDEX_FILE.write_text(fresh, encoding="utf-8")
        return 0
    current = INDEX_FILE.read_text(encoding="utf-8") if INDEX_FILE.exists() else ""
    if current != fresh:
        print(f"{INDEX_FILE} is stale: run `python -m ep_cpu_reference.family_index --write`")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

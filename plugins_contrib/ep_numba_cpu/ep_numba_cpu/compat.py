"""The compatibility string recorded as ``ep_compatibility_info.NumbaCpuExecutionProvider`` and
its verdict: machine code depends on the Numba/llvmlite/Python versions and on the CPU (target
triple, CPU name, CPU features) it was generated for; which kernels a stored plan expands to
depends on this EP's own code (``build``: its sources' sha256, which a version number does not
follow between releases)."""

from __future__ import annotations

import functools
import hashlib
import platform
from collections.abc import Mapping
from pathlib import Path


@functools.cache
def build() -> str:
    """The sha256 (16 hex digits) of this package's Python sources: another build may generate
    other kernels from the same plan, so a context's machine code no longer matches its plan."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def host_target() -> tuple[str, str, str]:
    """(triple, cpu name, features) exactly as Numba's codegen keys its own cache."""
    from numba.core.registry import cpu_target

    triple, cpu, features = cpu_target.target_context.codegen().magic_tuple()
    return str(triple), str(cpu), str(features)


def versions() -> dict[str, str]:
    import llvmlite
    import numba

    return {
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "python": platform.python_version()[:4].rstrip("."),
    }


def current_info() -> str:
    triple, cpu, features = host_target()
    v = versions()
    return (
        f"numba={v['numba']};llvmlite={v['llvmlite']};python={v['python']};triple={triple};cpu={cpu};"
        f"features={features};build={build()}"
    )


def parse_info(info: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in info.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _enabled(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


@functools.cache
def host_has(*features: str) -> bool:
    """Whether Numba compiles for a CPU with every one of ``features`` (its own target features:
    the ones a context records and a loading CPU is checked against); asked once per process."""
    return set(features) <= _enabled(host_target()[2])


def verdict(info: str, host: Mapping[str, str] | None = None) -> str:
    """``VERDICT: reason`` for a recorded compatibility string on this host."""
    rec = parse_info(info)
    cur = dict(host) if host is not None else parse_info(current_info())
    missing = [k for k in ("numba", "llvmlite", "python", "triple", "cpu", "features") if k not in rec]
    if missing:
        return f"UNSUPPORTED: the compatibility info lacks {missing}; recompile the model"
    for key in ("numba", "llvmlite", "python"):
        if rec[key] != cur[key]:
            return (
                f"UNSUPPORTED: compiled with {key} {rec[key]}, this process has {key} {cur[key]}; "
                "Numba machine code only loads in the versions that produced it -- recompile the model"
            )
    if rec["triple"] != cur["triple"]:
        return f"UNSUPPORTED: compiled for target {rec['triple']}, this host is {cur['triple']}"
    need, have = _enabled(rec["features"]), _enabled(cur["features"])
    lacking = sorted(need - have)
    if lacking:
        return (
            f"UNSUPPORTED: compiled for CPU {rec['cpu']} using features this CPU lacks: {lacking[:8]}; "
            "recompile on this machine"
        )
    if rec.get("build") != cur.get("build"):  # one recording none predates the record: another build too
        return (
            f"SUPPORTED_PREFER_RECOMPILATION: written by another build of this EP ({rec.get('build', 'unrecorded')}, "
            f"this one is {cur.get('build')}): it may generate other kernels from the stored plan, which then "
            "compile at load"
        )
    extra = sorted(have - need)
    if extra or rec["cpu"] != cur["cpu"]:
        return (
            f"SUPPORTED_PREFER_RECOMPILATION: compiled for CPU {rec['cpu']}; this CPU ({cur['cpu']}) also has "
            f"{extra[:8]} that recompiling would use"
        )
    return "SUPPORTED_OPTIMAL"

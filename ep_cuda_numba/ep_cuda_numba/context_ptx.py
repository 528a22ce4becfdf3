"""Stored PTX in the context binary: what is recorded at generation, when it is used at load.

At generation on a real device each fused group's kernel (every input at the group's full shape:
the common launch) is compiled to PTX for the device's compute capability through NVVM, and the
record notes the compute capability, driver, numba-cuda and EP version. Under the simulator no PTX
can be compiled in-process (``numba.cuda`` is the simulator there), so none is stored and the
nodes' ``notes`` say so.

At load (``decide``) the stored PTX is used only when the node's signature is trusted, a real
device runs, and every recorded item matches this process: then the PTX is linked and bound to the
group's kernel dispatcher as its full-shape overload (numba-cuda's own cache mechanism:
``CUDACodeLibrary`` rebuilt from PTX, ``_Kernel`` rebuilt around it), so no NVVM compile runs.
Otherwise the kernel is regenerated from the validated spec. PTX whose bytes differ from the
sha256 in its (signed) record is refused outright (``context_binary.ptx_bytes``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ep_cuda_numba import __version__
from ep_cuda_numba.device import simulator_requested

if TYPE_CHECKING:
    from ep_cuda_numba.fusion import CompiledGroup

NO_PTX_SIM = "no PTX stored: generated under the CUDA simulator (the kernel is regenerated from the spec on load)"
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)\s*\(")


def numba_cuda_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "unknown"


def device_cc(device_id: int) -> list[Any]:
    """``[major, minor, suffix]``: the key numba-cuda caches PTX under ("a" from sm_90 on)."""
    from numba import cuda

    major, minor = cuda.gpus[device_id].compute_capability
    return [int(major), int(minor), "a" if (major, minor) >= (9, 0) else ""]


def driver_version() -> str:
    from numba.cuda.cudadrv.driver import driver

    major, minor = driver.get_version()
    return f"{major}.{minor}"


def here(device_id: int) -> dict[str, Any] | None:
    """This process's PTX compatibility (None under the simulator: no PTX can run here)."""
    if simulator_requested():
        return None
    return {
        "cc": device_cc(device_id),
        "driver": driver_version(),
        "numba_cuda": numba_cuda_version(),
        "ep_version": __version__,
    }


def generate(group: "CompiledGroup", device_id: int) -> tuple[dict[str, Any] | None, bytes, str]:
    """(PTX record entry or None, PTX bytes, a note for the node) for one fused group."""
    info = here(device_id)
    if info is None:
        return None, b"", NO_PTX_SIM
    return compile_entry(group, info)


def compile_entry(group: "CompiledGroup", info: dict[str, Any]) -> tuple[dict[str, Any] | None, bytes, str]:
    """The group's full-shape kernel compiled to PTX through NVVM for ``info['cc']`` (no GPU
    needed), with its record entry."""
    from ep_cuda_numba.context_binary import sha256

    ptx = group.compile_ptx(tuple(info["cc"][:2])).encode()
    m = _ENTRY.search(ptx.decode("ascii", errors="replace"))
    if m is None:
        return None, b"", "no PTX stored: NVVM's output has no kernel entry"
    entry = {"sha256": sha256(ptx), "entry": m.group(1), **info}
    cc = info["cc"]
    return entry, ptx, f"PTX stored for sm_{cc[0]}{cc[1]}{cc[2]} (driver {info['driver']})"


def decide(entry: dict[str, Any] | None, current: dict[str, Any] | None, trusted: bool) -> tuple[bool, str]:
    """(use the stored PTX?, why). ``current``: ``here()`` of the loading process."""
    if entry is None:
        return False, "the context stores no PTX"
    if current is None:
        return False, "running under the CUDA simulator, which runs no PTX"
    if not trusted:
        return False, "its signature is not trusted, and native code is only loaded from trusted contexts"
    keys = ("cc", "driver", "numba_cuda", "ep_version")
    diff = [f"{k} {entry[k]} (here {current[k]})" for k in keys if entry[k] != current[k]]
    if diff:
        return False, "the PTX was recorded for " + ", ".join(diff)
    return True, "the recorded device, driver, numba-cuda and EP versions match"


def install(group: "CompiledGroup", ptx: bytes, entry: dict[str, Any]) -> None:
    """Bind stored PTX as the full-shape overload of the group's kernel dispatcher (real GPU only),
    linked now so a failure is an error at load, not at the first run."""
    from numba import types
    from numba.core import typing
    from numba.cuda.codegen import CUDACodeLibrary
    from numba.cuda.dispatcher import _Kernel

    from ep_cuda_numba.codegen import compile_program

    n_in = group.program.n_inputs
    dispatcher, _ = compile_program(group.program, ("full",) * n_in, len(group.out_dtypes))
    argtypes = group.kernel_argtypes()  # the types compile_ptx compiled it for
    cc = (int(entry["cc"][0]), int(entry["cc"][1]), str(entry["cc"][2]))
    # the states numba-cuda's own kernel cache stores (``_reduce_states``), rebuilt from PTX alone
    lib_state: dict[str, Any] = {
        "codegen": dispatcher.targetctx.codegen(),
        "name": entry["entry"],
        "entry_name": entry["entry"],
        "llvm_strs": [],
        "ptx_cache": {cc: [ptx.decode("ascii")]},
        "cubin_cache": {},
        "linkerinfo_cache": {},
        "max_registers": None,
        "nvvm_options": {},
        "needs_cudadevrt": False,
        "nrt": False,
        "use_cooperative": False,
        "lto": False,
    }
    lib = CUDACodeLibrary._rebuild(**lib_state)
    kernel_state: dict[str, Any] = {
        "cooperative": False,
        "name": entry["entry"],
        "signature": typing.signature(types.none, *argtypes),
        "codelibrary": lib,
        "debug": False,
        "lineinfo": False,
        "call_helper": None,
        "extensions": [],
    }
    kernel = _Kernel._rebuild(**kernel_state)
    kernel.bind()  # links the PTX for this device now
    dispatcher.add_overload(kernel, argtypes)

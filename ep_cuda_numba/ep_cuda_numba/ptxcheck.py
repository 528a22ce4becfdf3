"""Check, without a GPU, that every kernel a workload launches compiles for a real device.

The simulator runs kernels as Python, so it never type-checks them; NVVM does. ``record()``
(simulator only) wraps kernel launches and notes each kernel with its argument types, optionally
skipping execution (a *dry run*: shapes still flow, since every shape is known on the host).
``compile_records()`` (a process WITHOUT the simulator, libNVVM/NVRTC installed, no driver needed)
compiles each recorded (kernel, signature) to PTX for a compute capability.

    NUMBA_ENABLE_CUDASIM=1 python -c "...with record(path, execute=False): session.run(...)"
    python -m ep_cuda_numba.ptxcheck path --cc 8.0
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np

from ep_cuda_numba.device import simulator_requested


def _arg_type(a: Any) -> list[Any]:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    if isinstance(a, FakeCUDAArray):
        a = a._ary
    if isinstance(a, np.ndarray):
        return ["array", a.dtype.str, a.ndim]
    if isinstance(a, (bool, np.bool_)):
        return ["bool"]
    if isinstance(a, tuple):
        return ["tuple", len(a)]
    if isinstance(a, np.generic):
        return ["scalar", a.dtype.str]
    if isinstance(a, int):
        return ["int"]
    if isinstance(a, float):
        return ["float"]
    raise TypeError(f"cannot record a kernel argument of type {type(a).__name__}")


@contextlib.contextmanager
def record(path: str, execute: bool = True) -> Iterator[list[dict[str, Any]]]:
    """Record every kernel launch made inside the block (simulator only) and write them as JSON."""
    if not simulator_requested():
        raise RuntimeError("ptxcheck.record needs NUMBA_ENABLE_CUDASIM=1 (it wraps the simulator's launches)")
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from ep_cuda_numba import codegen

    seen: dict[str, dict[str, Any]] = {}
    programs: dict[int, dict[str, Any]] = {}
    orig_compile = codegen.compile_program
    orig_getitem = FakeCUDAKernel.__getitem__

    def compile_program(program: Any, pattern: Any, n_outputs: int) -> Any:
        kernel, src = orig_compile(program, pattern, n_outputs)
        programs[id(kernel.fn)] = {
            "n_inputs": program.n_inputs,
            "n_params": program.n_params,
            "statements": [[s.expr, s.compute_dtype] for s in program.statements],
            "outputs": list(program.outputs),
            "bf16": [list(program.bf16_inputs), list(program.bf16_outputs)],
            "pattern": list(pattern),
            "n_outputs": n_outputs,
        }
        return kernel, src

    def getitem(self: Any, cfg: Any) -> Any:
        launcher = orig_getitem(self, cfg)

        def call(*args: Any) -> Any:
            fn = self.fn
            if id(fn) in programs:
                ident: dict[str, Any] = {"kind": "codegen", "program": programs[id(fn)]}
            elif fn.__name__ == "matmul_tiled":
                ident = {"kind": "matmul"}
            else:
                ident = {"kind": "module", "module": fn.__module__, "name": fn.__name__}
            entry = {**ident, "args": [_arg_type(a) for a in args]}
            seen[json.dumps(entry, sort_keys=True)] = entry
            return launcher(*args) if execute else None

        return call

    out: list[dict[str, Any]] = []
    with (
        mock.patch.object(codegen, "compile_program", compile_program),
        mock.patch.object(FakeCUDAKernel, "__getitem__", getitem),
    ):
        try:
            yield out
        finally:
            out.extend(seen.values())
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(out, fh)


def _numba_type(spec: list[Any]) -> Any:
    from numba import from_dtype, types

    kind = spec[0]
    if kind == "array":
        return types.Array(from_dtype(np.dtype(spec[1])), spec[2], "C")
    if kind == "tuple":
        return types.UniTuple(types.int64, spec[1])
    if kind == "scalar":
        return from_dtype(np.dtype(spec[1]))
    return {"bool": types.boolean, "int": types.int64, "float": types.float64}[kind]


class NvvmUnavailable(RuntimeError):
    """libNVVM/NVRTC cannot be loaded: nothing can be compiled here (no verdict on the kernels)."""


def _probe_nvvm(cc: tuple[int, int]) -> None:
    from numba import types
    from numba.cuda import compile_ptx

    def probe(x):  # type: ignore[no-untyped-def]
        x[0] = 1.0

    try:
        compile_ptx(probe, (types.float32[:],), cc=cc)
    except Exception as exc:
        raise NvvmUnavailable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def compile_records(path: str, cc: tuple[int, int] = (8, 0)) -> list[str]:
    """Compile every recorded launch to PTX; returns the failures (empty when all compile)."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from numba.cuda import compile_ptx

    from ep_cuda_numba import codegen
    from ep_cuda_numba.kernels import matmul

    if simulator_requested():
        raise RuntimeError("compile_records needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    # device functions compile for "the current device"; there is none, so name the target
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    _probe_nvvm(cc)
    failures = []
    with open(path, encoding="utf-8") as fh:
        entries = json.load(fh)
    for e in entries:
        sig = tuple(_numba_type(a) for a in e["args"])
        try:
            if e["kind"] == "codegen":
                p = e["program"]
                prog = codegen.Program(
                    p["n_inputs"],
                    p["n_params"],
                    tuple(codegen.Statement(x, d) for x, d in p["statements"]),
                    tuple(p["outputs"]),
                    *(tuple(int(i) for i in ix) for ix in p.get("bf16", [[], []])),
                )
                fn = codegen.compile_program(prog, tuple(p["pattern"]), p["n_outputs"])[0].py_func
            elif e["kind"] == "matmul":
                fn = matmul.kernel_for(np.dtype(e["args"][0][1])).py_func
            else:  # only this package's kernels: a records file must not pick what gets imported
                if not str(e["module"]).startswith("ep_cuda_numba.kernels.") or not str(e["name"]).isidentifier():
                    raise ValueError(f"{e['module']}.{e['name']} is not a kernel of ep_cuda_numba.kernels")
                fn = getattr(importlib.import_module(e["module"]), e["name"]).py_func
            compile_ptx(fn, sig, cc=cc)
        except Exception as exc:
            failures.append(
                f"{e.get('name') or e['kind']} {e['args']}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            )
    return failures


def main(argv: list[str]) -> int:
    path = argv[0]
    cc = (8, 0)
    if "--cc" in argv:
        major, minor = argv[argv.index("--cc") + 1].split(".")
        cc = (int(major), int(minor))
    try:
        failures = compile_records(path, cc)
    except NvvmUnavailable as exc:
        print(f"NVVM unavailable, nothing compiled: {exc}")
        return 2
    n = len(json.load(open(path, encoding="utf-8")))
    print(f"{n - len(failures)}/{n} recorded kernel launches compile to PTX for sm_{cc[0]}{cc[1]}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

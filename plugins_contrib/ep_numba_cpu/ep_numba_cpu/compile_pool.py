"""Compiling a session's kernels on several cores.

Numba compiles one function at a time per process (a global compiler lock), and a cold session of
a convolutional model compiles 15-20 kernels at 0.1-0.4 s each. With ``compile_workers`` > 0 the
kernels no cache holds are shared between this process and worker processes
(``compile_worker``), each taking the next kernel when it is free; a worker sends back the
kernel's machine code, which this process rebuilds in milliseconds (``codegen.adopt``) and stores
in the kernel cache like its own. Workers are plain subprocesses of this interpreter talking over
pipes (not ``multiprocessing``, which would re-import the user's ``__main__``); they start on the
first batch worth sharing and serve the process's later sessions, until they have been idle for
``IDLE_SECONDS`` (each holds a Python process with Numba loaded, ~200 MB) or the process exits. A
worker that fails is retired with a warning and its kernel compiled here: the same kernel."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import warnings
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import ConfigError
from ep_numba_cpu import EP_NAME, codegen
from ep_numba_cpu.compile_worker import read_frame, write_frame

MIN_SHARED = 6  # fewer kernels than this to compile: a worker's start-up (~0.5 s) would not pay
MAX_AUTO_WORKERS = 4
IDLE_SECONDS = 60.0  # workers no batch has used for this long are closed
_pool_lock = threading.Lock()
_workers: list["_Worker"] = []
_idle_timer: list[threading.Timer] = []  # the pending close of idle workers, if any


def workers_option(ep_options: Mapping[str, str]) -> int:
    """``compile_workers``: 'auto' (default: one per usable core beyond this one, at most 4), or a
    number >= 0 (0: compile in this process only); ConfigError otherwise."""
    raw = ep_options.get("compile_workers", "auto")
    if raw == "auto":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return min(MAX_AUTO_WORKERS, max(0, cores - 1))
    if raw.isdigit() and int(raw) <= 64:
        return int(raw)
    raise ConfigError(
        f"{EP_NAME} option compile_workers={raw!r}: use 'auto' (one worker process per spare core, the default), "
        "0 (compile in the session's process only) or a number of worker processes up to 64"
    )


class _Worker:
    def __init__(self) -> None:
        # `-m` would put the current directory first on the worker's sys.path (a numba.py there would
        # run, and its kernels be signed into the cache): the worker starts in the folder that holds
        # this package, with Python's safe-path mode where it exists (3.11+)
        here = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(
            [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "ep_numba_cpu.compile_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=here,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (str(here), os.environ.get("PYTHONPATH")) if p),
            },
        )

    def compile(self, ks: Any) -> bytes:
        """The payload of kernel source ``ks``; RuntimeError when the worker fails or died."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        req = json.dumps({"source": ks.source, "signature": ks.signature, "parallel": ks.parallel}).encode()
        try:
            write_frame(self.proc.stdin, req)
            reply = read_frame(self.proc.stdout)
        except (OSError, ValueError) as exc:  # a broken or closed pipe
            raise RuntimeError(f"compile worker pipe failed: {exc}") from exc
        if reply is None:
            raise RuntimeError(f"compile worker exited (code {self.proc.poll()})")
        if reply[:1] != b"\x00":
            raise RuntimeError(f"compile worker could not compile it: {reply[1:].decode(errors='replace')}")
        return reply[1:]

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:  # the worker is gone already
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:  # else a ResourceWarning at exit (an error under -W error)
            self.proc.stdout.close()


def _close_all() -> None:
    with _pool_lock:
        while _workers:
            _workers.pop().close()


def _close_when_idle() -> None:
    """(Re)start the countdown to closing the workers; a batch starting meanwhile cancels it."""
    for timer in _idle_timer:
        timer.cancel()
    timer = threading.Timer(IDLE_SECONDS, _close_all)
    timer.daemon = True
    _idle_timer[:] = [timer]
    timer.start()


atexit.register(_close_all)


def compile_all(sources: Mapping[str, Any], workers: int, cache: Any = None) -> dict[str, codegen.CompiledKernel]:
    """Every kernel of ``sources`` (key -> ``generate.KernelSource``) compiled, from this process's
    kernels or the kernel ``cache`` where they hold it, else on this process and up to ``workers``
    worker processes."""
    out: dict[str, codegen.CompiledKernel] = {}
    todo: deque[tuple[str, Any]] = deque()
    for key, ks in sources.items():
        hit = codegen.lookup(ks.source, ks.signature, ks.parallel, cache)
        if hit is not None:
            out[key] = hit
        else:
            todo.append((key, ks))
    n = min(workers, len(todo) // (MIN_SHARED // 2)) if len(todo) >= MIN_SHARED else 0
    if n == 0:
        for key, ks in todo:
            out[key] = codegen.compile_kernel(ks.source, ks.signature, ks.parallel, cache)
        return out
    with _pool_lock:  # one shared batch at a time: a worker serves one requester
        for timer in _idle_timer:
            timer.cancel()
        while len(_workers) < n:
            _workers.append(_Worker())
        payloads: dict[str, bytes] = {}
        take = threading.Lock()

        def feed(worker: _Worker) -> None:
            while True:
                with take:
                    if not todo:
                        return
                    key, ks = todo.pop()  # workers take from the end, this process from the front
                try:
                    payloads[key] = worker.compile(ks)
                except RuntimeError as exc:
                    with take:
                        todo.append((key, ks))
                    _retire(worker, str(exc))
                    return

        threads = [threading.Thread(target=feed, args=(w,), daemon=True) for w in _workers[:n]]
        for t in threads:
            t.start()
        try:
            while True:
                with take:
                    if not todo:
                        break
                    key, ks = todo.popleft()
                out[key] = codegen.compile_kernel(ks.source, ks.signature, ks.parallel, cache)
        except BaseException:
            with take:
                todo.clear()  # the workers stop after the kernel in hand
            raise
        finally:
            for t in threads:
                t.join()
        for key, ks in todo:  # what a retired worker gave back after this process had finished
            out[key] = codegen.compile_kernel(ks.source, ks.signature, ks.parallel, cache)
        _close_when_idle()
    for key, payload in payloads.items():
        ks = sources[key]
        out[key] = codegen.adopt(ks.source, ks.signature, ks.parallel, payload, cache)
    return out


def _retire(worker: _Worker, why: str) -> None:
    """Drop a failed worker (called under ``_pool_lock``, held by ``compile_all``)."""
    if worker in _workers:
        _workers.remove(worker)
    worker.close()
    warnings.warn(
        f"{EP_NAME}: a compile worker failed ({why}); its kernels are compiled in this process instead "
        "(same kernels, slower session creation). Set the EP option compile_workers=0 to compile in-process only",
        RuntimeWarning,
        stacklevel=3,
    )

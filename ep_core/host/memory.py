"""The CPU memory arena (``SessionOptions.enable_cpu_mem_arena``, on by default as in onnxruntime).

onnxruntime keeps the host memory a session frees in its own arena, so the next run reuses those
pages. ep-core's kernels allocate with NumPy, i.e. with the C library's ``malloc``: glibc serves a
block of over 128 KiB with a fresh ``mmap`` (or trims freed heap top back to the OS), and every
page of a new block costs a page fault when first written. A convolution writing a 6.5 MB plane
took 1,600 faults a run, three times the time of its arithmetic.

While at least one session with the arena on is alive, glibc is told to keep what is freed: large
blocks come from the heap (``M_MMAP_THRESHOLD`` at its 32 MiB ceiling) and up to
``ARENA_TRIM_BYTES`` of freed heap top stays mapped (``M_TRIM_THRESHOLD``). When the last such
session closes, glibc's defaults come back and ``malloc_trim`` hands the freed pages to the OS, so a
closed session's memory is freed as onnxruntime's arena is freed with its session.

The tuning is glibc's and process-wide. Where the C library is not glibc, or the user tuned malloc
already (``GLIBC_TUNABLES`` naming ``glibc.malloc``, ``MALLOC_TRIM_THRESHOLD_`` and friends), it is
left alone and the arena has no effect beyond the allocator's own: ``arena_state()`` says which."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
_GLIBC_DEFAULT = 128 * 1024  # glibc's initial value of both thresholds
ARENA_MMAP_BYTES = 32 << 20  # the largest M_MMAP_THRESHOLD glibc accepts on 64-bit hosts
ARENA_TRIM_BYTES = 256 << 20  # freed heap top kept mapped while an arena session lives
_USER_TUNING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_lock = threading.Lock()
_holders = 0
_libc: Any = None
_why_not: str | None = None


def _load_glibc() -> Any:
    """The process's glibc with ``mallopt``/``malloc_trim``, or None with the reason in _why_not."""
    global _libc, _why_not
    if _libc is not None or _why_not is not None:
        return _libc
    if not sys.platform.startswith("linux"):
        _why_not = f"the C library of {sys.platform} is not glibc"
    elif any(v in os.environ for v in _USER_TUNING) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        _why_not = "malloc is tuned by the environment (GLIBC_TUNABLES or MALLOC_*_), which wins"
    else:
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version.restype = ctypes.c_char_p
            libc.gnu_get_libc_version()
            libc.mallopt.argtypes, libc.malloc_trim.argtypes = [ctypes.c_int, ctypes.c_int], [ctypes.c_size_t]
            _libc = libc
        except (OSError, AttributeError):
            _why_not = "the C library is not glibc (no gnu_get_libc_version, mallopt or malloc_trim)"
    return _libc


def arena_state() -> str:
    """A line for the session log (info where the arena cannot be had, verbose otherwise): held by
    how many sessions, or why it cannot be."""
    with _lock:
        libc = _load_glibc()
        if libc is None:
            return f"no CPU memory arena: {_why_not}"
        return f"CPU memory arena (glibc malloc keeps freed memory) held by {_holders} session(s)"


def acquire() -> bool:
    """A session with the arena on was created; True when glibc was tuned for it."""
    global _holders
    with _lock:
        libc = _load_glibc()
        if libc is None:
            return False
        if _holders == 0:
            libc.mallopt(_M_MMAP_THRESHOLD, ARENA_MMAP_BYTES)
            libc.mallopt(_M_TRIM_THRESHOLD, ARENA_TRIM_BYTES)
        _holders += 1
        return True


def release() -> None:
    """A session that ``acquire``\\ d closed: the last one out restores glibc and frees the pages."""
    global _holders
    with _lock:
        if _libc is None or _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            _libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)
            _libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
            _libc.malloc_trim(0)

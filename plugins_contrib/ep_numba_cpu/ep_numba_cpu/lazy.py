"""Kernels compiled on their first call.

An elementwise cluster has two kernels: the flat one specialised for the broadcast pattern the
static shapes predict, and the general strided one that serves calls whose shapes do not follow
it. With static shapes the general kernel is never called, yet compiling it eagerly doubled a cold
session's compile time (PP-OCR det: 11 of 28 kernels, about 2 s). So it compiles when first
called, once, under a lock (concurrent runs wait for the one compile)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class LazyKernel:
    """A callable that obtains its dispatcher (``obtain()``: compile or rebuild) on first call."""

    __slots__ = ("key", "_obtain", "_fn", "_lock")

    def __init__(self, key: str, obtain: Callable[[], Any]) -> None:
        self.key = key
        self._obtain = obtain
        self._fn: Any = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            with self._lock:
                if self._fn is None:
                    self._fn = self._obtain()
                fn = self._fn
        return fn(*args)


def lazy_keys(plan: Mapping[str, Any]) -> set[str]:
    """Keys of the kernels a runner's plan (``generate.expand``) calls only when real shapes break
    the static pattern: each cluster's general kernel, where a specialised one exists."""
    return {s["kernel"] for s in plan["steps"] if s["kind"] == "kernel" and s.get("kernel_spec")}

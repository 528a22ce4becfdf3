"""Chrome-trace profiling: session phases, every step of every run (nodes, fused nodes, copies)
with its EP, and whatever events the EPs' own profilers add. Load the file in chrome://tracing or
Perfetto."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime
from typing import Any


class Profiler:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.epoch_ns = time.perf_counter_ns()
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ep_profilers: list[tuple[str, Any]] = []
        self.pid = os.getpid()

    def add_ep_profiler(self, ep_name: str, profiler: Any) -> None:
        profiler.start(self.epoch_ns)
        self._ep_profilers.append((ep_name, profiler))

    def _us(self, ns: int) -> float:
        return (ns - self.epoch_ns) / 1000.0

    def phase(self, name: str, t0_ns: int, **args: Any) -> None:
        t1 = time.perf_counter_ns()
        with self._lock:
            self._events.append(
                {
                    "name": name,
                    "cat": "Session",
                    "ph": "X",
                    "ts": self._us(t0_ns),
                    "dur": (t1 - t0_ns) / 1000.0,
                    "pid": self.pid,
                    "tid": threading.get_ident(),
                    "args": args,
                }
            )

    def add_run(self, run_t0: int, run_t1: int, steps: list[dict[str, Any]], tag: str) -> None:
        tid = threading.get_ident()
        out = [
            {
                "name": "model_run",
                "cat": "Session",
                "ph": "X",
                "ts": self._us(run_t0),
                "dur": (run_t1 - run_t0) / 1000.0,
                "pid": self.pid,
                "tid": tid,
                "args": {"run_tag": tag},
            }
        ]
        for e in steps:
            out.append(
                {
                    "name": e["name"],
                    "cat": e["cat"],
                    "ph": "X",
                    "ts": self._us(e["ts_ns"]),
                    "dur": e["dur_ns"] / 1000.0,
                    "pid": self.pid,
                    "tid": tid,
                    "args": e["args"],
                }
            )
        with self._lock:
            self._events.extend(out)

    def end(self) -> str:
        """Write the trace and return its path."""
        events = list(self._events)
        for ep_name, prof in self._ep_profilers:
            for e in prof.stop() or ():
                e = dict(e)
                e.setdefault("ph", "X")
                e.setdefault("pid", self.pid)
                e.setdefault("tid", 0)
                e.setdefault("cat", ep_name)
                events.append(e)
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        path = f"{self.prefix}_{stamp}.json"
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, fh)
        os.replace(tmp, path)
        return path

"""Profiling traces in onnxruntime's format, so the tools that read onnxruntime traces read ours.

The file is what onnxruntime writes: ``<profile_file_prefix>_<start date and time>.json``, a JSON
list of Chrome-trace events (microseconds since profiling started, as integers). Session events
(cat ``Session``): ``model_loading_uri`` (``model_loading_array`` for bytes),
``session_initialization`` and per run ``model_run`` around ``SequentialExecutor::Execute``. Node
events (cat ``Node``): ``<node>_kernel_time`` with onnxruntime's args ``op_name``, ``provider``,
``input_type_shape``, ``output_type_shape``, ``activation_size``, ``parameter_size`` and
``output_size``. ep-core's own information rides along where readers skip it: the creation phases
(partition, kernel building and compiling, plan, layout) as further Session events, the ``kind``
of each step (node, fused, copy) and a copy's ``detail`` as further args, copies between devices
as cat ``Copy``, and the events of the EPs' own profilers under their EP's name."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from datetime import datetime
from typing import Any

_TYPE_NAMES = {"float32": "float", "float64": "double", "object": "string"}  # numpy -> onnxruntime's


class Profiler:
    """One session's trace, from session creation until ``end``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.start_time_ns = time.time_ns()  # get_profiling_start_time_ns
        self.epoch_ns = time.perf_counter_ns()  # what event times count from
        self.active = True
        self.pid = os.getpid()
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ep_profilers: list[tuple[str, Any]] = []
        self._spans: list[tuple[int, int, int, str, str]] = []  # steps' (t0, t1, thread, node, op) for correlation

    def add_ep_profiler(self, ep_name: str, profiler: Any) -> None:
        profiler.start(self.epoch_ns)
        self._ep_profilers.append((ep_name, profiler))

    def _event(self, name: str, cat: str, t0_ns: int, t1_ns: int, args: dict[str, Any], tid: int) -> dict[str, Any]:
        ts = (t0_ns - self.epoch_ns) // 1000
        dur = (t1_ns - self.epoch_ns) // 1000 - ts
        return {"cat": cat, "pid": self.pid, "tid": tid, "dur": dur, "ts": ts, "ph": "X", "name": name, "args": args}

    def phase(self, name: str, t0_ns: int, **args: Any) -> None:
        """A session-creation phase that started at ``t0_ns`` and ends now."""
        t1_ns, tid = time.perf_counter_ns(), threading.get_native_id()
        event = self._event(name, "Session", t0_ns, t1_ns, args, tid)
        with self._lock:
            self._events.append(event)
            self._spans.append((t0_ns, t1_ns, tid, name, ""))

    def add_run(self, t0_ns: int, t1_ns: int, steps: list[dict[str, Any]], run_tag: str) -> None:
        """A run: its steps (``step_event``s), the executor's span around them and ``model_run``."""
        tid = threading.get_native_id()
        out = [self._event(e["name"], e["cat"], e["t0"], e["t1"], e["args"], tid) for e in steps]
        first = min((e["t0"] for e in steps), default=t0_ns)
        last = max((e["t1"] for e in steps), default=t1_ns)
        out.append(self._event("SequentialExecutor::Execute", "Session", first, last, {}, tid))
        out.append(self._event("model_run", "Session", t0_ns, t1_ns, {"run_tag": run_tag} if run_tag else {}, tid))
        with self._lock:
            if self.active:
                self._events.extend(out)
                self._spans.extend((e["t0"], e["t1"], tid, e["name"], e["args"].get("op_name", "")) for e in steps)

    def end(self) -> str:
        """Write the trace and return its path; '' once profiling has ended (as onnxruntime)."""
        with self._lock:
            if not self.active:
                return ""
            self.active = False
            events, spans = list(self._events), sorted(self._spans)
        starts = [sp[0] for sp in spans]
        for ep_name, prof in self._ep_profilers:
            for e in prof.stop() or ():
                e = _correlate(dict(e), spans, starts)
                e.setdefault("ph", "X")
                e.setdefault("pid", self.pid)
                e.setdefault("tid", 0)
                e.setdefault("cat", ep_name)
                e.setdefault("args", {})
                events.append(e)
        start = datetime.fromtimestamp(self.start_time_ns / 1e9)
        stem = f"{self.prefix}_{start:%Y-%m-%d_%H-%M-%S}_{start.microsecond // 1000:03d}"
        path, n = f"{stem}.json", 0
        while os.path.exists(path):  # another session started in the same millisecond
            n += 1
            path = f"{stem}_{n}.json"
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
        os.replace(tmp, path)
        return path


def _correlate(e: dict[str, Any], spans: list[tuple[int, int, int, str, str]], starts: list[int]) -> dict[str, Any]:
    """An EP event whose args carry ``enqueue_ns``/``enqueue_tid`` (the host time and thread that
    queued device work) gets the innermost step running then on that thread: ``node``, ``op_name``
    and ``parent_name`` (onnxruntime's arg naming a GPU kernel event's node event)."""
    args = e.get("args")
    if not isinstance(args, dict) or "enqueue_ns" not in args:
        return e
    at, tid = args["enqueue_ns"], args.get("enqueue_tid")
    for k in range(bisect.bisect_right(starts, at) - 1, max(-1, bisect.bisect_right(starts, at) - 257), -1):
        t0, t1, thread, name, op = spans[k]
        if thread == tid and t0 <= at <= t1:  # a step names its node; a creation phase only itself
            node = {"node": name[: -len("_kernel_time")], "op_name": op} if name.endswith("_kernel_time") else {}
            e["args"] = {**args, **node, "parent_name": name}
            break
    return e


def step_event(plan: Any, k: int, t0_ns: int, t1_ns: int, inputs: Any, outputs: Any) -> dict[str, Any]:
    """The event of step ``k`` of ``plan`` (a node, fused node or copy) with onnxruntime's args;
    inputs that are the plan's constants (weights, folded values) count as ``parameter_size``."""
    info = plan.infos[k]
    constants: set[int] | None = plan.__dict__.get("_trace_constants")
    if constants is None:
        constants = plan.__dict__["_trace_constants"] = {id(v) for v in plan.template if v is not None}
    activation = parameter = 0
    for v in inputs:
        if id(v) in constants:
            parameter += _nbytes(v)
        else:
            activation += _nbytes(v)
    args: dict[str, Any] = {
        "op_name": info.op_type,
        "provider": info.ep,
        "input_type_shape": _type_shapes(inputs),
        "output_type_shape": _type_shapes(outputs),
        "activation_size": str(activation),
        "parameter_size": str(parameter),
        "output_size": str(sum(_nbytes(v) for v in outputs)),
        "kind": info.kind,
    }
    if info.detail:
        args["detail"] = info.detail
    cat = "Copy" if info.kind == "copy" else "Node"
    return {"name": f"{info.name}_kernel_time", "cat": cat, "t0": t0_ns, "t1": t1_ns, "args": args}


def _nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or 0)


def _type_shapes(values: Any) -> list[dict[str, list[int]]]:
    """``[{"float": [1, 3]}]``: a tensor's element type as onnxruntime names it, and its shape."""
    out = []
    for v in values:
        dtype, shape = getattr(v, "dtype", None), getattr(v, "shape", None)
        if dtype is not None and shape is not None:
            name = str(getattr(dtype, "name", dtype))
            out.append({_TYPE_NAMES.get(name, "string" if name.startswith("str") else name): [int(d) for d in shape]})
    return out

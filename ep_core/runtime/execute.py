"""The execute step: running a plan's steps. The loop reads only ``Step`` tuples and checks each
result against the EP contract (comparisons only; ``contract.py`` builds a message on failure),
so framework cost per node stays under a microsecond."""

from __future__ import annotations

import threading
import time
from typing import Any

from ep_core.runtime.contract import check_result
from ep_core.runtime.plan import Plan
from ep_core.sdk.errors import EpCoreError, Fail

_PROFILING = threading.local()  # the events list of the profiled run on this thread, if any


def profiled_events() -> list[dict[str, Any]] | None:
    """The events list of the profiled run on this thread, if any: subgraph runs trace into it."""
    events: list[dict[str, Any]] | None = getattr(_PROFILING, "events", None)
    return events


def execute_plan(plan: Plan, vals: list[Any], events: list[dict[str, Any]] | None = None) -> None:
    """Run ``plan``'s steps over ``vals`` (the plan's template with the inputs filled in); with
    ``events``, each step is timed into it (and so are the steps of subgraphs it runs)."""
    if events is not None:
        return _execute_profiled(plan, vals, events)
    k = -1
    try:
        for k, (fn, get, outs, frees, want) in enumerate(plan.steps):  # noqa: B007 - k names the failing step
            res = fn(*get(vals))
            # the EP contract (contract.py): compares only; messages are built on failure
            if res.__class__ is not tuple or len(res) != len(outs):
                res = check_result(res, plan.infos[k].outputs)
            for o, r, w in zip(outs, res, want):
                vals[o] = r
                if w is not None and (r.__class__ is not w.cls or r.dtype is not w.dtype or r.shape != w.shape):
                    w.accept(r)
            for f in frees:
                vals[f] = None
    except Exception as exc:
        raise _step_error(plan, k, exc) from exc


def _execute_profiled(plan: Plan, vals: list[Any], events: list[dict[str, Any]]) -> None:
    clock = time.perf_counter_ns
    k = -1
    outer_events = getattr(_PROFILING, "events", None)
    _PROFILING.events = events
    try:
        for k, (fn, get, outs, frees, want) in enumerate(plan.steps):
            t0 = clock()
            res = fn(*get(vals))
            t1 = clock()
            if res.__class__ is not tuple or len(res) != len(outs):
                res = check_result(res, plan.infos[k].outputs)
            for o, r, w in zip(outs, res, want):
                vals[o] = r
                if w is not None and (r.__class__ is not w.cls or r.dtype is not w.dtype or r.shape != w.shape):
                    w.accept(r)
            for f in frees:
                vals[f] = None
            info = plan.infos[k]
            events.append(
                {
                    "name": info.name,
                    "cat": "Copy" if info.kind == "copy" else "Node",
                    "ts_ns": t0,
                    "dur_ns": t1 - t0,
                    "args": {
                        "op_type": info.op_type,
                        "provider": info.ep,
                        "kind": info.kind,
                        "detail": info.detail,
                    },
                }
            )
    except Exception as exc:
        raise _step_error(plan, k, exc) from exc
    finally:
        _PROFILING.events = outer_events


def _step_error(plan: Plan, k: int, exc: Exception) -> EpCoreError:
    if k < 0 or k >= len(plan.infos):
        return exc if isinstance(exc, EpCoreError) else Fail(f"{type(exc).__name__}: {exc}")
    info = plan.infos[k]
    where = f"{info.kind} {info.name!r} (op {info.op_type}) on {info.ep}"
    if isinstance(exc, EpCoreError):
        if exc.message.startswith(where):
            return exc
        return type(exc)(f"{where}: {exc.message}")
    return Fail(f"{where} failed: {type(exc).__name__}: {exc}")

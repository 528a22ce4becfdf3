"""The execute step: running a plan's steps. The loop reads only ``Step`` tuples and checks each
result against the EP contract (comparisons only; ``contract.py`` builds a message on failure),
so framework cost per node stays under a microsecond."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ep_core.host.trace import step_event
from ep_core.runtime.contract import check_result
from ep_core.runtime.plan import Plan
from ep_core.sdk.errors import EpCoreError, Fail, RunTerminated

if TYPE_CHECKING:
    from ep_core.sdk.config import RunConfig

_PROFILING = threading.local()  # this thread's run: .events (profiled runs) and .run_options


def execute_subplan(plan: Plan, vals: list[Any]) -> None:
    """A subgraph's run (If branch, Loop/Scan body) inside the run on this thread: its steps are
    traced into that run's trace, and that run's ``terminate`` stops it too."""
    execute_plan(plan, vals, getattr(_PROFILING, "events", None), getattr(_PROFILING, "run_options", None))


def run_plan(plan: Plan, vals: list[Any], events: list[dict[str, Any]] | None, run_options: "RunConfig | None") -> None:
    """A top-level run: makes ``run_options`` visible to the subgraph runs below it."""
    outer = getattr(_PROFILING, "run_options", None)
    _PROFILING.run_options = run_options
    try:
        execute_plan(plan, vals, events, run_options)
    finally:
        _PROFILING.run_options = outer


def execute_plan(
    plan: Plan, vals: list[Any], events: list[dict[str, Any]] | None = None, run_options: "RunConfig | None" = None
) -> None:
    """Run ``plan``'s steps over ``vals`` (the plan's template with the inputs filled in); with
    ``events``, each step is timed into it (and so are the steps of subgraphs it runs). A
    ``run_options.terminate`` set (from any thread) stops the run before its next step."""
    if run_options is not None and run_options.terminate:
        raise _terminated()
    if events is not None:
        return _execute_profiled(plan, vals, events, run_options)
    stop = run_options
    k = -1
    try:
        for k, (fn, get, outs, frees, want) in enumerate(plan.steps):  # noqa: B007 - k names the failing step
            if stop is not None and stop.terminate:
                raise _terminated()
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


def _execute_profiled(
    plan: Plan, vals: list[Any], events: list[dict[str, Any]], run_options: "RunConfig | None"
) -> None:
    clock = time.perf_counter_ns
    k = -1
    outer_events = getattr(_PROFILING, "events", None)
    _PROFILING.events = events
    stop = run_options
    try:
        for k, (fn, get, outs, frees, want) in enumerate(plan.steps):
            if stop is not None and stop.terminate:
                raise _terminated()
            args = get(vals)
            t0 = clock()
            res = fn(*args)
            t1 = clock()
            if res.__class__ is not tuple or len(res) != len(outs):
                res = check_result(res, plan.infos[k].outputs)
            for o, r, w in zip(outs, res, want):
                vals[o] = r
                if w is not None and (r.__class__ is not w.cls or r.dtype is not w.dtype or r.shape != w.shape):
                    w.accept(r)
            for f in frees:
                vals[f] = None
            events.append(step_event(plan, k, t0, t1, args, res))
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
        return exc if exc.message.startswith(where) else type(exc)(f"{where}: {exc.message}")
    return Fail(f"{where} failed: {type(exc).__name__}: {exc}")


def _terminated() -> RunTerminated:
    return RunTerminated(
        "Exiting due to terminate flag being set to true (RunOptions.terminate); set it back to False to run again"
    )

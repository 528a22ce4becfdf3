"""A run of a built engine: feed checks, the host (threads, logs, trace) and run hooks around
``execute_plan``, output selection. ``InferenceSession.run`` and ``IOBinding`` both come here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.runtime.contract import warn_declared
from ep_core.runtime.execute import run_plan
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import GraphView, ValueInfo

if TYPE_CHECKING:
    from ep_core.runtime.engine import Built
    from ep_core.runtime.options import RunOptions
    from ep_core.sdk.memory import MemoryInfo


def check_feed(graph: GraphView, feed: Mapping[str, Any], on_device: frozenset[str] = frozenset()) -> Mapping[str, Any]:
    """Check names, dtypes, ranks and fixed dims (of an initializer fed in place of its value too,
    against its graph input's type); an optional input may be left out. ``on_device`` inputs are
    checked through their ``shape``/``dtype`` attributes instead of being required to be arrays.
    Returns the feed to run: a one-element array fed for an input declared a scalar is viewed as one
    (onnxruntime does not check a scalar input's shape; ``If`` conditions are often fed ``[True]``),
    and NumPy ``str``/``bytes`` arrays for a string input are its objects (onnxruntime takes both)."""
    expected = {v.name: v for v in graph.inputs}
    converted = {}  # feeds taken as the engine takes them
    for name in feed:
        if name not in expected:
            if name not in graph.input_names:
                raise InvalidArgument(f"unknown input {name!r}; the model's inputs are {list(expected)}")
            _check_value(name, graph.value_info(name) or ValueInfo(name), feed[name], on_device)
    for name, info in expected.items():
        if name in feed:
            value = feed[name]
            if isinstance(value, np.ndarray) and value.dtype.kind in "US" and info.elem_type == 8:  # STRING
                value = converted[name] = (np.char.decode(value, "utf-8") if value.dtype.kind == "S" else value).astype(
                    object
                )
            if info.shape == () and isinstance(value, np.ndarray) and value.shape and value.size == 1:
                value = converted[name] = value.reshape(())
            _check_value(name, info, value, on_device)
        elif info.kind != "optional":
            raise InvalidArgument(f"missing input {name!r} (a {info.type_str} of shape {_shape_str(info.shape)})")
    return {**feed, **converted} if converted else feed


def _check_value(name: str, info: ValueInfo, value: Any, on_device: frozenset[str]) -> None:
    if info.kind != "tensor":
        return
    device = name in on_device
    if not (hasattr(value, "shape") and hasattr(value, "dtype") if device else isinstance(value, np.ndarray)):
        need = (
            "bound on a device needs a shape and dtype"
            if device
            else "must be a numpy.ndarray (ep_core.onnxruntime converts lists)"
        )
        raise InvalidArgument(f"input {name!r} {need}, got {type(value).__name__}")
    want = info.np_dtype
    if want is not None and np.dtype(value.dtype) != want:
        raise InvalidArgument(f"input {name!r} has dtype {value.dtype}, expected {want} ({info.type_str})")
    if info.shape is not None:
        s, ws = value.shape, info.shape
        bad = "" if len(s) == len(ws) else f"rank {len(s)} (shape {list(s)}), expected rank {len(ws)}"
        for axis, (got, w) in enumerate(zip(s, ws)):
            if not bad and isinstance(w, int) and w >= 0 and w != got:  # -1: a dynamic dim
                bad = f"dim {got} on axis {axis} (shape {list(s)}), expected {w}"
        if bad:
            why = "" if ws else _SCALAR_FED
            raise InvalidArgument(f"input {name!r} has {bad} (shape {_shape_str(ws)}){why}")


_SCALAR_FED = (
    ": onnxruntime runs a scalar input fed any shape, ep-core plans with the declared rank (a one-element "
    "feed is taken as the scalar)"
)


def run(
    built: "Built",
    feed: Mapping[str, Any],
    run_options: "RunOptions | None",
    input_memory: "Mapping[str, MemoryInfo] | None" = None,
    outputs_to_host: bool = True,
    fetches: Sequence[str] | None = None,
) -> list[Any]:
    """Every graph output of one run (None for those outside ``fetches`` under
    ``only_execute_path_to_fetches``); under graph capture a captured graph replays."""
    program, cap = built.program, built.capture
    if program is None:
        raise InvalidArgument("the session is closed")
    path = fetches if fetches and run_options is not None and run_options.only_execute_path_to_fetches else ()
    plan = program.plan(input_memory, outputs_to_host, tuple(sorted(set(path))))  # unknown names: select_outputs
    gid = cap.graph_id(run_options, feed, input_memory) if cap is not None else None
    if cap is not None and gid is not None and cap.captured(gid):
        return cap.replay(gid, feed)
    outputs, n = _execute(built, plan, feed, run_options), 1
    while cap is not None and gid is not None and cap.again(gid, feed, outputs, n):
        outputs, n = _execute(built, plan, feed, run_options), n + 1
    return outputs


def _execute(built: "Built", plan: Any, feed: Mapping[str, Any], run_options: "RunOptions | None") -> list[Any]:
    vals, slots = plan.template.copy(), plan.input_slots
    for name, value in feed.items():
        vals[slots[name]] = value
    record = built.host.run_start(run_options)  # thread pools sized; a record when logged or traced
    for ep in built.run_hooks:
        if ep.has_run_start:
            ep.call("ep_on_run_start", run_options=run_options)
    with np.errstate(all="ignore"):  # NumPy's float warnings from kernels (Log(0), overflow): onnxruntime gives none
        run_plan(plan, vals, record.events if record is not None else None, run_options)
    for ep in built.run_hooks:
        if ep.has_run_end:
            ep.call("ep_on_run_end", run_options=run_options, sync_stream=True)
    if record is not None:
        built.host.run_end(record, run_options)
    fed = {
        id(_owner(v)) for v in feed.values() if v is not None
    }  # an output viewing a feed is copied, as onnxruntime's are apart
    outputs: list[Any] = [o.copy() if id(_owner(o)) in fed else o for o in plan.outputs(vals)]
    warn_declared(built, outputs, run_options)  # onnxruntime's warning for an output's wrong declared shape
    return outputs


def _owner(value: Any) -> Any:
    return value if getattr(value, "base", None) is None else value.base


def select_outputs(graph: GraphView, output_names: Sequence[str] | None, values: list[Any]) -> list[Any]:
    names = [v.name for v in graph.outputs]
    for n in output_names or ():
        if n not in names:
            raise InvalidArgument(f"unknown output {n!r}; the model's outputs are {names}")
    return [values[names.index(n)] for n in output_names] if output_names else values


def _shape_str(shape: Sequence[Any] | None) -> str:
    return "unknown" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"

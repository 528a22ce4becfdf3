"""Valid inputs for any model, made up from the model itself (``ep-core run`` without ``--input``).

Read from the original model (never the EPContext one, whose nodes hide what consumes an input):

* dims: ``--dim SYMBOL=N`` or ``--dim INPUT:AXIS=N``, then the zoo model's conventions, then
  sizes already bound by given inputs, then defaults by role: 1 for a batch axis, 224 for the
  height and width of an image, one 32 ms frame (512 samples at 16 kHz) for an audio signal;
* integers: ids within what their consumer accepts (Gather/GatherElements/GatherND data size,
  OneHot depth, the values of the constant an Equal compares with), a sample rate by convention,
  masks all ones, position ids counting up, token type ids zero;
* floats: images in [0, 1), signals as quiet noise, recurrent states (h, c, state) at zero."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np

    from ep_core.sdk.graph import GraphView, ValueInfo
    from ep_core.tools.zoo import Conventions

IMAGE_SIDE = 224
SAMPLE_RATE = 16000
FRAME_SECONDS = 0.032  # silero-style VAD frame: 512 samples at 16 kHz
_RATE_NAME = re.compile(r"^(sr|sample_?rate|sampling_?rate|samplerate|fs)$", re.I)
_SIGNAL_NAME = re.compile(r"audio|wav|pcm|signal|speech|waveform|samples", re.I)
_TIME_SYMBOL = re.compile(r"seq|sample|time|len|frame|audio|wav", re.I)
_STATE_NAME = re.compile(r"^(h|c|h0|c0|state|states|hidden|cell)(_?in)?$|state|hidden|past|cache", re.I)
# ops through which an integer input keeps its values (so their consumers bound it)
_PASS_THROUGH = {"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Transpose", "Tile"}


@dataclass
class InputSpec:
    """One input as the feed will give it: its resolved shape and how its values are made."""

    name: str
    dtype: Any
    declared: tuple[int | str | None, ...] | None
    shape: list[int] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)  # per axis: fixed, --dim or the zoo's convention
    how: str = ""
    low: int = 0
    high: int = 0  # integers: values drawn from [low, high)
    fill: float | None = None  # a constant value (sample rate, mask, state)
    norm: tuple[float, float] | None = None  # images: (x - mean) / std, as the model's package feeds it


def is_symbol(d: object) -> bool:
    """A named dim ("?", as some exporters write an unknown one, is no name)."""
    return isinstance(d, str) and d not in ("", "?")


def symbols(graph: "GraphView") -> dict[str, list[str]]:
    """Symbolic dim -> where it occurs (``input axis k``), over the graph's inputs."""
    out: dict[str, list[str]] = {}
    for v in graph.inputs:
        for axis, d in enumerate(v.shape or ()):
            if is_symbol(d):
                out.setdefault(str(d), []).append(f"{v.name}:{axis}")
    return out


def parse_dims(items: list[str] | None, graph: "GraphView") -> dict[str, int]:
    """``--dim`` values checked against the model: a known symbol or ``INPUT:AXIS`` of a dim that is
    not fixed, and a positive integer size."""
    known = symbols(graph)
    shapes = {v.name: v.shape for v in graph.inputs}
    out: dict[str, int] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidArgument(f"--dim {item!r} must look like SYMBOL=N or INPUT:AXIS=N")
        try:
            size = int(value)
        except ValueError:
            raise InvalidArgument(f"--dim {item!r}: size {value!r} is not an integer") from None
        if size < 1:
            raise InvalidArgument(f"--dim {item!r}: the size must be at least 1")
        if key in known:
            out[key] = size
            continue
        name, colon, axis_text = key.rpartition(":")
        if colon and name in shapes and axis_text.lstrip("-").isdigit():
            shape = shapes[name]
            if shape is None:
                raise InvalidArgument(f"--dim {item!r}: input {name!r} has no known rank; give it with --input")
            axis = int(axis_text) % len(shape) if -len(shape) <= int(axis_text) < len(shape) else None
            if axis is None:
                raise InvalidArgument(f"--dim {item!r}: input {name!r} has rank {len(shape)}, no axis {axis_text}")
            fixed = shape[axis]
            if isinstance(fixed, int) and fixed > 0 and fixed != size:
                raise InvalidArgument(f"--dim {item!r}: axis {axis} of input {name!r} is fixed at {fixed}")
            out[f"{name}:{axis}"] = size
            continue
        listed = ", ".join(f"{s} ({', '.join(w)})" for s, w in known.items()) or "none"
        raise InvalidArgument(
            f"--dim {item!r}: the model has no symbolic dim {key!r}; its symbolic dims: {listed}; "
            "a dim without a name is set with --dim INPUT:AXIS=N"
        )
    return out


def _is_image(v: "ValueInfo") -> str | None:
    """'nchw' or 'nhwc' for a 4-d float input with 1, 3 or 4 fixed channels."""
    import numpy as np

    s = v.shape
    if s is None or len(s) != 4 or v.np_dtype is None or not np.issubdtype(v.np_dtype, np.floating):
        return None
    if s[1] in (1, 3, 4):
        return "nchw"
    if s[3] in (1, 3, 4):
        return "nhwc"
    return None


def _is_rate(v: "ValueInfo") -> bool:
    import numpy as np

    small = v.shape is not None and len(v.shape) <= 1 and all(d in (1, None) or isinstance(d, str) for d in v.shape)
    return bool(_RATE_NAME.match(v.name)) and small and v.np_dtype is not None and np.issubdtype(v.np_dtype, np.integer)


def _signals(graph: "GraphView") -> set[str]:
    """Inputs that are audio: a 1-d or [batch, time] float input with an open time axis, named or
    dimensioned like a signal, or else the first such input of a model that takes a sample rate."""
    import numpy as np

    candidates: list[tuple[str, object]] = []  # (name, its last dim)
    for v in graph.inputs:
        s = v.shape
        if s is None or len(s) not in (1, 2) or v.np_dtype is None or not np.issubdtype(v.np_dtype, np.floating):
            continue
        if not (isinstance(s[-1], int) and s[-1] > 0):
            candidates.append((v.name, s[-1]))
    named = {
        name
        for name, last in candidates
        if _SIGNAL_NAME.search(name) or (is_symbol(last) and _TIME_SYMBOL.search(str(last)))
    }
    if not named and candidates and any(_is_rate(v) for v in graph.inputs):
        named.add(candidates[0][0])
    return named


def plan(
    graph: "GraphView",
    dims: Mapping[str, int],
    conventions: "Conventions | None" = None,
    bound: Mapping[str, int] | None = None,
) -> dict[str, InputSpec]:
    """Shape and value recipe of every input. ``bound``: symbol -> size taken from given inputs."""

    hints = dict(conventions.dims) if conventions is not None else {}
    rate = conventions.sample_rate if conventions is not None and conventions.sample_rate else SAMPLE_RATE
    frame = conventions.frame if conventions is not None and conventions.frame else int(rate * FRAME_SECONDS)
    signals = _signals(graph)
    chosen: dict[str, int] = dict(bound or {})
    specs: dict[str, InputSpec] = {}
    for v in graph.inputs:
        dtype = v.np_dtype
        spec = InputSpec(v.name, dtype, v.shape)
        if dtype is None:
            spec.how = f"type {v.type_str}: give it with --input {v.name}=FILE.npy"
            specs[v.name] = spec
            continue
        layout = _is_image(v)
        signal = v.name in signals
        rank = len(v.shape or ())
        for axis, d in enumerate(v.shape or ()):
            if isinstance(d, int) and d > 0:
                spec.shape.append(d)
                spec.forced.append(True)
                continue
            key = f"{v.name}:{axis}"
            sym = str(d) if is_symbol(d) else None
            size = (
                dims.get(key) or (dims.get(sym) if sym else None) or hints.get(key) or (hints.get(sym) if sym else None)
            )
            forced = size is not None or (signal and axis == rank - 1 and bool(conventions and conventions.frame))
            if size is None and sym is not None:
                size = chosen.get(sym)
            if size is None:
                if layout and axis in ((2, 3) if layout == "nchw" else (1, 2)):
                    size = IMAGE_SIDE
                elif signal and axis == rank - 1:
                    size = frame
                else:
                    size = 1
            if sym is not None:
                chosen.setdefault(sym, size)
            spec.shape.append(size)
            spec.forced.append(forced)
        _values(spec, v, graph, layout, signal, rate)
        fixed = dict(conventions.values) if conventions is not None else {}
        if v.name in fixed:
            spec.fill, spec.how = fixed[v.name], f"{fixed[v.name]:g}, as its package sets it"
        if layout and conventions is not None and conventions.mean is not None and conventions.std:
            spec.norm = (conventions.mean, conventions.std)
            spec.how += f", then (x - {conventions.mean:g}) / {conventions.std:g} as its package normalises"
        specs[v.name] = spec
    return specs


def _values(spec: InputSpec, v: "ValueInfo", graph: "GraphView", layout: str | None, signal: bool, rate: int) -> None:
    import numpy as np

    dtype = spec.dtype
    name = v.name.lower()
    if dtype == np.bool_:
        spec.how, spec.low, spec.high = "random booleans", 0, 2
    elif np.issubdtype(dtype, np.integer):
        if _is_rate(v):
            spec.fill, spec.how = float(rate), f"sample rate {rate} Hz"
        elif "mask" in name:
            spec.fill, spec.how = 1.0, "all ones (a mask)"
        elif "position" in name:
            spec.how = "positions 0, 1, 2, ... along the last axis"
        elif "token_type" in name or "segment" in name:
            spec.fill, spec.how = 0.0, "zeros (token types)"
        else:
            bounds = index_bounds(graph, v.name)
            info = np.iinfo(dtype)
            if bounds is not None:
                spec.low, spec.high = max(bounds[0], int(info.min)), min(bounds[1], int(info.max) + 1)
                spec.how = f"ids in [{spec.low}, {spec.high}) ({bounds[2]})"
            else:
                spec.low, spec.high = max(0, int(info.min)), min(10, int(info.max) + 1)
                spec.how = f"integers in [{spec.low}, {spec.high}) (no consumer bounds them)"
    elif np.issubdtype(dtype, np.floating):
        if layout:
            spec.how = "an image: uniform in [0, 1)"
        elif signal:
            spec.how = (
                f"audio: quiet noise, {spec.shape[-1]} samples ({spec.shape[-1] / rate * 1000:g} ms at {rate} Hz)"
            )
        elif _STATE_NAME.search(v.name):
            spec.fill, spec.how = 0.0, "zeros (a recurrent state starts empty)"
        else:
            spec.how = "standard normal"
    else:
        spec.how = f"dtype {np.dtype(dtype).name}: give it with --input {v.name}=FILE.npy"


def index_bounds(graph: "GraphView", name: str, depth: int = 0) -> tuple[int, int, str] | None:
    """[low, high) the consumers of integer value ``name`` accept, and which op says so; the
    tightest bound over every consumer, following value-preserving ops."""
    best: tuple[int, int, str] | None = None
    for node in graph.consumers(name):
        found = _bound_from(graph, node, name)
        if found is None and node.op_type in _PASS_THROUGH and node.inputs and node.inputs[0] == name and depth < 8:
            found = index_bounds(graph, node.outputs[0], depth + 1)
        if found is not None and (best is None or found[1] - found[0] < best[1] - best[0]):
            best = found
    return best


def _dim(graph: "GraphView", value: str, axis: int) -> int | None:
    const = graph.constant_value(value)
    shape = list(const.shape) if const is not None else None
    if shape is None:
        info = graph.value_info(value)
        shape = list(info.shape) if info is not None and info.shape is not None else None
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    d = shape[axis]
    return d if isinstance(d, int) and d > 0 else None


def _bound_from(graph: "GraphView", node: Any, name: str) -> tuple[int, int, str] | None:
    op, ins = node.op_type, list(node.inputs)
    if op in ("Gather", "GatherElements") and len(ins) > 1 and ins[1] == name:
        size = _dim(graph, ins[0], int(node.attr("axis", 0)))
        return (0, size, f"indices of {op} {node.name!r}") if size else None
    if op == "GatherND" and len(ins) > 1 and ins[1] == name:
        size = _dim(graph, ins[0], int(node.attr("batch_dims", 0)))
        return (0, size, f"indices of GatherND {node.name!r}") if size else None
    if op == "OneHot" and ins and ins[0] == name and len(ins) > 1:
        depth = graph.constant_value(ins[1])
        return (0, int(depth.reshape(-1)[0]), f"OneHot {node.name!r} depth") if depth is not None else None
    if op == "Equal" and len(ins) == 2:
        other = graph.constant_value(ins[1] if ins[0] == name else ins[0])
        if other is not None and other.size and other.dtype.kind in "iu":
            return (int(other.min()), int(other.max()) + 1, f"the values Equal {node.name!r} compares with")
    return None


def synthesise(specs: Mapping[str, InputSpec], seed: int = 0) -> dict[str, "np.ndarray"]:
    """Arrays for the specs (every spec must have a dtype)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    for name, s in specs.items():
        if s.dtype is None or not (np.issubdtype(s.dtype, np.number) or s.dtype == np.bool_):
            raise InvalidArgument(f"input {name!r}: {s.how}")
        shape = tuple(s.shape)
        if s.fill is not None:
            arr = np.full(shape, s.fill)
        elif s.how.startswith("positions"):
            arr = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape)
        elif s.high > s.low:
            arr = rng.integers(s.low, s.high, shape)
        elif s.how.startswith("an image"):
            arr = rng.random(shape)
            if s.norm is not None:
                arr = (arr - s.norm[0]) / s.norm[1]
        elif s.how.startswith("audio"):
            arr = rng.standard_normal(shape) * 0.1
        else:
            arr = rng.standard_normal(shape)
        feed[name] = np.array(arr, dtype=s.dtype)  # a copy: contiguous, and 0-d stays 0-d
    return feed

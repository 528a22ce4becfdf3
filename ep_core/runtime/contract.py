"""The EP contract on what a kernel or compiled function returns, checked in every run.

A step returns a tuple (a tuple subclass is accepted; a list or a bare value is an error) with
exactly one entry per node output, ``None`` where an optional output is omitted. Each tensor
output must have the element type, rank and static dims the graph declares or inference found;
unknown parts are not checked. A sequence output must be a list (the session's representation);
map and optional outputs are not checked.

Specs are built once per plan. The run loop compares a value's class, dtype and shape with the
last value that passed (identity and one tuple compare) and calls ``OutputSpec.accept`` only when
they differ, so the check costs tens of nanoseconds per output and stays on; messages are built
only on failure. A cached value always passed the full check, so sharing specs between threads
can cost an extra ``accept`` but never lets a wrong value through.

A graph output's declared shape is its author's word, not proof: the EP is not held to it (see
``load._infer``); users see it (``declared_outputs``), and runs contradicting it are logged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ep_core.host.logs import WARNING
from ep_core.sdk.errors import EpFail
from ep_core.sdk.graph import GraphView

FIX = "the EP's kernel or compiled function must return what the graph declares"


class OutputSpec:
    """What output ``index`` (``name``) of one step must be, and the last value that passed."""

    __slots__ = ("cls", "dtype", "shape", "index", "name", "kind", "want_dtype", "want_shape")

    def __init__(self, index: int, name: str, kind: str, want_dtype: Any, want_shape: tuple[int | None, ...] | None):
        self.index = index
        self.name = name
        self.kind = kind
        self.want_dtype = want_dtype  # numpy dtype, or None when the element type is unknown
        self.want_shape = want_shape  # None: rank unknown; None entries: dim unknown
        # the last value that passed; ``cls`` None never matches, so sequences always take ``accept``
        self.cls: Any = None  # Any: a typed class here would make mypy narrow the run loop's values
        self.dtype: Any = None
        self.shape: Any = None

    def accept(self, value: Any) -> None:
        """Check a value the run loop's fast compare did not vouch for; remember it if it passes."""
        got = self._problem(value)
        if got is not None:
            raise EpFail(f"output {self.index} {self.name!r}: expected {self.expected()}, got {got} ({FIX})")
        if self.kind == "tensor":
            self.dtype, self.shape = value.dtype, value.shape
            self.cls = type(value)

    def _problem(self, value: Any) -> str | None:
        """None when ``value`` meets the spec, else a description of what it is."""
        if self.kind == "sequence":
            return None if isinstance(value, list) else f"{type(value).__name__} (a sequence is a list)"
        dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
        if dtype is None or not isinstance(shape, tuple):
            return f"{type(value).__name__} with no dtype and shape"
        desc = f"{dtype} with shape {list(shape)} ({type(value).__name__})"
        want = self.want_shape
        if want is not None and (len(shape) != len(want) or any(w is not None and w != d for w, d in zip(want, shape))):
            return desc
        if self.want_dtype is not None:
            try:
                same = dtype == self.want_dtype
            except TypeError:  # a dtype NumPy cannot compare with
                same = False
            if not same:
                return desc
        return None

    def expected(self) -> str:
        if self.kind == "sequence":
            return "a sequence (list)"
        dtype = "any dtype" if self.want_dtype is None else str(self.want_dtype)
        if self.want_shape is None:
            return f"{dtype} of any shape"
        return f"{dtype} with shape [{', '.join('?' if d is None else str(d) for d in self.want_shape)}]"


def expect(graph: GraphView, outputs: Sequence[str]) -> tuple[OutputSpec | None, ...]:
    """One spec per output of a step (None where nothing is known or the output is omitted)."""
    specs: list[OutputSpec | None] = []
    for i, name in enumerate(outputs):
        info = graph.value_info(name) if name else None
        spec = None
        if info is not None and info.kind == "sequence":
            spec = OutputSpec(i, name, "sequence", None, None)
        elif info is not None and info.kind == "tensor" and (info.elem_type or info.shape is not None):
            shape = None
            if info.shape is not None:  # symbolic, unknown and negative (exporters' -1) dims are not checked
                shape = tuple(d if isinstance(d, int) and d >= 0 else None for d in info.shape)
            spec = OutputSpec(i, name, "tensor", info.np_dtype, shape)
        specs.append(spec)
    return tuple(specs)


def check_result(res: Any, outputs: Sequence[str]) -> tuple[Any, ...]:
    """``res`` as a tuple if it is one with one entry per output; else the EpFail saying why.
    Called only when the run loop's ``type(res) is tuple and len(res) == n`` fails."""
    n = len(outputs)
    if isinstance(res, tuple) and len(res) == n:
        return res
    names = ", ".join(repr(o) if o else "<omitted>" for o in outputs)
    expected = f"expected a tuple of {n} value{'s' if n != 1 else ''} (outputs {names})"
    if not isinstance(res, tuple):
        kind = "a list" if isinstance(res, list) else f"a bare {type(res).__name__}"
        raise EpFail(f"returned {kind}: {expected}, got {_describe(res)} ({FIX}; return a tuple)")
    way_out = "None for an omitted optional output" if len(res) < n else "no values for undeclared outputs"
    raise EpFail(
        f"returned {len(res)} value{'s' if len(res) != 1 else ''}: {expected}, got {_describe(res)} "
        f"({FIX}; return {way_out})"
    )


def check_all(specs: Sequence[OutputSpec | None], res: Any, outputs: Sequence[str]) -> tuple[Any, ...]:
    """The whole check, for callers outside the run loop (constant folding at plan time)."""
    values = check_result(res, outputs)
    for spec, value in zip(specs, values):
        if spec is not None:
            spec.accept(value)
    return values


def _describe(res: Any) -> str:
    if isinstance(res, (tuple, list)):
        inner = ", ".join(_describe(v) for v in res[:4]) + (", ..." if len(res) > 4 else "")
        return f"{type(res).__name__} of {len(res)} [{inner}]"
    dtype, shape = getattr(res, "dtype", None), getattr(res, "shape", None)
    if dtype is not None and isinstance(shape, tuple):
        return f"{type(res).__name__} {dtype} {list(shape)}"
    return type(res).__name__


def declared_outputs(declared: Any, inferred: Any) -> list[Any]:
    """The graph outputs users see (``get_outputs``, saved models): as ``declared`` (a GraphProto),
    dims only ``inferred`` knows filled in as onnxruntime merges them; a size they disagree on is
    unknown (onnxruntime shows None there), a rank they disagree on stays as declared."""
    found = {v.name: v.type.tensor_type for v in inferred.output if v.type.HasField("tensor_type")}
    typed = {v.name: v for v in inferred.output}  # for an output declared with no type: inference's
    outputs = []
    for given in (declared if declared is not None else inferred).output:
        (v := type(given)()).CopyFrom(typed.get(given.name, given) if given.type.WhichOneof("value") is None else given)
        t, src = v.type.tensor_type, found.get(v.name)
        if src is not None and src.HasField("shape") and v.type.HasField("tensor_type"):
            t.elem_type, pairs = t.elem_type or src.elem_type, list(zip(t.shape.dim, src.shape.dim))
            if not t.HasField("shape"):
                t.shape.CopyFrom(src.shape)
            elif len(t.shape.dim) == len(src.shape.dim):
                for a, b in pairs:  # a size the two disagree on is unknown, as onnxruntime shows it
                    if not _agree(a, b):
                        a.Clear()
                    elif _dim(b) is not None or (_dim(a) is None and not a.dim_param):
                        a.CopyFrom(b)
        outputs.append(v)
    return outputs


def _dim(d: Any) -> int | None:
    return int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None


def _agree(a: Any, b: Any) -> bool:
    return None in (_dim(a), _dim(b)) or _dim(a) == _dim(b)


def warn_declared(built: Any, values: Sequence[Any], run_options: Any) -> None:
    """onnxruntime's warning (VerifyOutputSizes) for a graph output contradicting the shape users
    see for it, where the contract does not hold the EP to that shape; once per output and shape."""
    if built.watched is None:
        index = {v.name: i for i, v in enumerate(built.graph.outputs)}
        specs = dict(zip(index, expect(built.graph, list(index))))
        shown = [v for v in declared_outputs(built.declared, built.graph.proto) if v.type.tensor_type.HasField("shape")]
        wants = [(index[v.name], v.name, tuple(_dim(d) for d in v.type.tensor_type.shape.dim)) for v in shown]
        built.watched = [(*w, set()) for w in wants if getattr(specs[w[1]], "want_shape", None) != w[2]]
    for i, name, want, seen in built.watched:
        shape = getattr(values[i], "shape", None)
        if isinstance(shape, tuple) and shape not in seen:
            if len(seen) < 64:  # past that, new shapes are logged on every run, as onnxruntime does
                seen.add(shape)
            if len(shape) != len(want) or any(w not in (None, d) for w, d in zip(want, shape)):
                dims = (",".join(str(-1 if d is None else d) for d in s) for s in (want, shape))
                msg = "Expected shape from model of {%s} does not match actual shape of {%s} for output %s"
                built.host.log.log(WARNING, msg, *dims, name, run_options=run_options)

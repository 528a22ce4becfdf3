"""Sequence and Optional ops. A sequence is a Python list of arrays, an optional is its value
or ``None`` (the session's representation: the same as onnx.reference and onnxruntime's Python
API), so these kernels are plain list operations that never copy tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY


def _position(node: Any, pos: Any, length: int, inserting: bool = False) -> int:
    """A validated, non-negative sequence position (``-length <= pos < length``; insert also ``== length``)."""
    p = int(np.asarray(pos).reshape(()))
    hi = length if inserting else length - 1
    if not -length <= p <= hi:
        raise IndexError(f"{node.describe()}: position {p} is out of range for a sequence of length {length}")
    return p + length if p < 0 else p


def _seq(node: Any, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{node.describe()}: expected a sequence, got {type(value).__name__}")
    return value


@REGISTRY.register("SequenceEmpty", since=11)
def build_sequence_empty(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    return lambda: ([],)


@REGISTRY.register("SequenceConstruct", since=11)
def build_sequence_construct(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    return lambda *xs: (list(xs),)


@REGISTRY.register("SequenceLength", since=11, host_outputs=(0,))
def build_sequence_length(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    return lambda s: (np.array(len(_seq(node, s)), dtype=np.int64),)


@REGISTRY.register("SequenceAt", since=11, host_inputs=(1,))
def build_sequence_at(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    def compute(s: Any, pos: Any) -> tuple[Any]:
        s = _seq(node, s)
        return (s[_position(node, pos, len(s))],)

    return compute


@REGISTRY.register("SequenceInsert", since=11, host_inputs=(2,))
def build_sequence_insert(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Returns a new list: the input sequence may still be read by other nodes."""

    def compute(s: Any, t: Any, pos: Any = None) -> tuple[Any]:
        out = list(_seq(node, s))
        out.insert(len(out) if pos is None else _position(node, pos, len(out), inserting=True), t)
        return (out,)

    return compute


@REGISTRY.register("SequenceErase", since=11, host_inputs=(1,))
def build_sequence_erase(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    def compute(s: Any, pos: Any = None) -> tuple[Any]:
        out = list(_seq(node, s))
        if not out:
            raise IndexError(f"{node.describe()}: cannot erase from an empty sequence")
        del out[len(out) - 1 if pos is None else _position(node, pos, len(out))]
        return (out,)

    return compute


@REGISTRY.register("SplitToSequence", since=11, host_inputs=(1,))
def build_split_to_sequence(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """No ``split``: pieces of 1 along ``axis`` (squeezed when keepdims=0); scalar ``split``: equal
    chunks, the last smaller, none of an empty axis; 1-D ``split``: those lengths."""
    axis = int(node.attr("axis", 0))
    keepdims = int(node.attr("keepdims", 1))

    def compute(x: Any, split: Any = None) -> tuple[Any]:
        ax = axis + x.ndim if axis < 0 else axis
        n = x.shape[ax]
        if split is None:
            parts = [np.take(x, [i], axis=ax) for i in range(n)]
            return ([p if keepdims else np.squeeze(p, axis=ax) for p in parts],)
        split_arr = np.asarray(split)
        if split_arr.ndim == 0:
            size = int(split_arr)
            if size <= 0:
                raise ValueError(f"{node.describe()}: split must be positive, got {size}")
            if n == 0:  # no chunk at all (onnxruntime), not one empty chunk
                return ([],)
            bounds = list(range(size, n, size))
        else:
            lengths = [int(v) for v in split_arr]
            if sum(lengths) != n:
                raise ValueError(f"{node.describe()}: split {lengths} does not sum to the axis length {n}")
            bounds = list(np.cumsum(lengths)[:-1])
        return (list(np.split(x, bounds, axis=ax)),)

    return compute


@REGISTRY.register("ConcatFromSequence", since=11)
def build_concat_from_sequence(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    axis = int(node.attr("axis"))
    new_axis = int(node.attr("new_axis", 0))

    def compute(s: Any) -> tuple[Any]:
        s = _seq(node, s)
        if not s:
            raise ValueError(f"{node.describe()}: cannot concatenate an empty sequence")
        if new_axis:
            rank = s[0].ndim + 1
            return (np.stack(s, axis=axis + rank if axis < 0 else axis),)
        return (np.concatenate(s, axis=axis),)

    return compute


@REGISTRY.register("Optional", since=15)
def build_optional(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """With no input: the empty optional (None); with one: that value."""
    return lambda x=None: (x,)


@REGISTRY.register("OptionalHasElement", since=15)
def build_optional_has_element(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    """Opset 18 made the input optional: a missing input is an empty optional."""
    return lambda x=None: (np.array(x is not None),)


@REGISTRY.register("OptionalGetElement", since=15)
def build_optional_get_element(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    def compute(x: Any) -> tuple[Any]:
        if x is None:
            raise ValueError(f"{node.describe()}: the optional input is empty")
        return (x,)

    return compute

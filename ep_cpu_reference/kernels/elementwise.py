"""Elementwise unary and binary ops: NumPy ufuncs already broadcast the ONNX way."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ep_core.kernels import FLOATS, NUMERIC

from ep_cpu_reference.registry import REGISTRY


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def build(node: Any, ctx: Any) -> Callable[..., Any]:
        def compute(a: Any, b: Any) -> tuple[Any]:
            return (fn(a, b),)

        return compute

    return build


def _unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def build(node: Any, ctx: Any) -> Callable[..., Any]:
        def compute(x: Any) -> tuple[Any]:
            return (fn(x),)

        return compute

    return build


for _op, _fn in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)):
    REGISTRY.register(_op, since=7, types={"T": NUMERIC})(_binary(_fn))

REGISTRY.register("Relu", since=6, types={"T": FLOATS})(_unary(lambda x: np.maximum(x, x.dtype.type(0))))

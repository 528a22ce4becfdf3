"""Optimizer ops of ``ai.onnx.preview.training``: Adagrad, Momentum, Adam. Each updates n
tensors at once: inputs are R (learning rate), T (step count), then n X's, n G's and n state
tensors per state kind; outputs are the n new X's then the new states."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

DOMAIN = "ai.onnx.preview.training"


def _groups(node: Any, args: tuple[Any, ...], n_states: int) -> tuple[float, int, list[list[Any]]]:
    """(R, T, [X's, G's, state1's, ...]) with the per-kind lists of equal length."""
    rest = args[2:]
    kinds = 2 + n_states
    if len(rest) % kinds:
        raise ValueError(f"{node.describe()}: {len(rest)} tensors after R and T is not a multiple of {kinds}")
    n = len(rest) // kinds
    return float(np.asarray(args[0])), int(np.asarray(args[1])), [list(rest[k * n : (k + 1) * n]) for k in range(kinds)]


@REGISTRY.register("Adagrad", since=1, domain=DOMAIN)
def build_adagrad(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))

    def compute(*args: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, hs) = _groups(node, args, 1)
        rate = r / (1 + t * decay)
        new_x, new_h = [], []
        for x, g, h in zip(xs, gs, hs, strict=False):
            g_reg = norm * x + g
            h_new = h + g_reg * g_reg
            new_x.append((x - rate * g_reg / (np.sqrt(h_new) + eps)).astype(x.dtype))
            new_h.append(h_new.astype(h.dtype))
        return (*new_x, *new_h)

    return compute


@REGISTRY.register("Momentum", since=1, domain=DOMAIN)
def build_momentum(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    mode = node.attr("mode", b"standard")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"{node.describe()}: mode must be 'standard' or 'nesterov', got {mode!r}")

    def compute(*args: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, vs) = _groups(node, args, 1)
        b = beta if t > 0 else 1.0
        new_x, new_v = [], []
        for x, g, v in zip(xs, gs, vs, strict=False):
            g_reg = norm * x + g
            v_new = alpha * v + b * g_reg
            step = v_new if mode == "standard" else g_reg + alpha * v_new
            new_x.append((x - r * step).astype(x.dtype))
            new_v.append(v_new.astype(v.dtype))
        return (*new_x, *new_v)

    return compute


@REGISTRY.register("Adam", since=1, domain=DOMAIN)
def build_adam(node: NodeView, ctx: KernelContext) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    norm_post = float(node.attr("norm_coefficient_post", 0.0))

    def compute(*args: Any) -> tuple[Any, ...]:
        r, t, (xs, gs, vs, hs) = _groups(node, args, 2)
        rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        new_x, new_v, new_h = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs, strict=False):
            g_reg = norm * x + g
            v_new = alpha * v + (1 - alpha) * g_reg
            h_new = beta * h + (1 - beta) * g_reg * g_reg
            x_new = (1 - norm_post) * (x - rate * v_new / (np.sqrt(h_new) + eps))
            new_x.append(x_new.astype(x.dtype))
            new_v.append(v_new.astype(v.dtype))
            new_h.append(h_new.astype(h.dtype))
        return (*new_x, *new_v, *new_h)

    return compute

"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the latter is NLL of log_softmax).

Input is [N, C] or [N, C, d1, ...], target [N] or [N, d1, ...]; targets equal to
``ignore_index`` contribute 0 and do not count towards the mean's denominator; the mean is
weighted by ``weight[target]`` when a weight is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]
_REDUCTIONS = ("none", "sum", "mean")


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def nll(node: Any, logp: np.ndarray, target: np.ndarray, weight: Any, reduction: str, ignore: int | None) -> np.ndarray:
    """The loss in float64 (callers cast back)."""
    if logp.shape[:1] + logp.shape[2:] != target.shape:
        raise ValueError(f"{node.describe()}: target shape {target.shape} does not fit input shape {logp.shape}")
    t = target.astype(np.int64)
    keep = np.ones(t.shape, dtype=bool) if ignore is None else t != ignore
    safe = np.where(keep, t, 0)
    c = logp.shape[1]
    if np.any((safe < 0) | (safe >= c)):
        raise ValueError(f"{node.describe()}: target values must be in [0, {c}) or ignore_index")
    picked = np.take_along_axis(logp.astype(np.float64), np.expand_dims(safe, 1), axis=1).squeeze(1)
    w = np.ones(t.shape) if weight is None else np.asarray(weight, dtype=np.float64)[safe]
    w = np.where(keep, w, 0.0)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    return np.asarray(loss.sum() / w.sum())


def _attrs(node: Any) -> tuple[str, int | None]:
    reduction = _text(node.attr("reduction", "mean"))
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{node.describe()}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    ignore = node.attr("ignore_index")
    return reduction, None if ignore is None else int(ignore)


@REGISTRY.register("NegativeLogLikelihoodLoss", since=12)
def build_nll(node: NodeView, ctx: KernelContext) -> Fn:
    reduction, ignore = _attrs(node)
    return lambda x, t, w=None: (nll(node, x, t, w, reduction, ignore).astype(x.dtype),)


@REGISTRY.register("SoftmaxCrossEntropyLoss", since=12)
def build_softmax_cross_entropy(node: NodeView, ctx: KernelContext) -> Fn:
    """Outputs the loss and, if asked, log_softmax(scores) over axis 1."""
    reduction, ignore = _attrs(node)
    want_logp = len(node.outputs) > 1  # one value per declared output, even an omitted one

    def compute(scores: Any, labels: Any, weights: Any = None) -> tuple[Any, ...]:
        s = scores.astype(np.float64)
        m = s.max(axis=1, keepdims=True)
        logp = s - m - np.log(np.exp(s - m).sum(axis=1, keepdims=True))
        loss = nll(node, logp, labels, weights, reduction, ignore).astype(scores.dtype)
        return (loss, logp.astype(scores.dtype)) if want_logp else (loss,)

    return compute

"""NonMaxSuppression: greedy per (batch, class) selection by score, suppressing boxes whose IoU
with an already selected box exceeds the threshold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def _corners(boxes: np.ndarray, center: int) -> np.ndarray:
    """[..., 4] boxes as (y_min, x_min, y_max, x_max) whatever corner order or center format, in
    float32 as onnxruntime computes every box, area and IoU (float64 moved a box lying on the
    threshold to the other side, and doubled the work)."""
    b = boxes.astype(np.float32)
    if center:
        xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        half = np.float32(2)
        return np.stack([yc - h / half, xc - w / half, yc + h / half, xc + w / half], axis=-1)
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [m, 4] with every box of ``b`` [n, 4] (0 where the union is empty)."""
    ih = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    iw = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = ih * iw
    union = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None] + ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[None, :]
    union -= inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)  # type: ignore[no-any-return]


BLOCK = 256  # candidates decided together: their IoUs as one matrix, the later ones suppressed at once


def _greedy(boxes: np.ndarray, threshold: float, limit: int) -> list[int]:
    """The boxes (sorted by score) greedy NMS keeps, in order: a block of candidates is decided
    one by one against its own IoU matrix (a row of booleans per kept box), then the block's
    kept boxes suppress the later candidates still alive in one matrix. Same decisions as a box
    at a time against every kept box (each IoU the same float32 arithmetic), without a NumPy call
    per candidate (torchvision's unbounded NMS of thousands of boxes ran 25-76x onnxruntime)."""
    n = len(boxes)
    alive = np.ones(n, bool)
    kept: list[int] = []
    for start in range(0, n, BLOCK):
        end = min(n, start + BLOCK)
        over = _iou(boxes[start:end], boxes[start:end]) > threshold
        first = len(kept)
        for i in range(start, end):
            if alive[i]:
                kept.append(i)
                if len(kept) >= limit:
                    return kept
                alive[i + 1 : end] &= ~over[i - start, i - start + 1 :]
        rest = np.flatnonzero(alive[end:]) + end
        if rest.size and len(kept) > first:
            alive[rest[(_iou(boxes[kept[first:]], boxes[rest]) > threshold).any(axis=0)]] = False
    return kept


@REGISTRY.register("NonMaxSuppression", since=10, host_inputs=(2, 3, 4))
def build_nms(node: NodeView, ctx: KernelContext) -> Fn:
    center = int(node.attr("center_point_box", 0))

    def compute(boxes: Any, scores: Any, max_out: Any = None, iou_thr: Any = None, score_thr: Any = None) -> tuple[Any]:
        limit = 0 if max_out is None or np.asarray(max_out).size == 0 else int(np.asarray(max_out).reshape(-1)[0])
        iou_t = 0.0 if iou_thr is None or np.asarray(iou_thr).size == 0 else float(np.asarray(iou_thr).reshape(-1)[0])
        has_score_t = score_thr is not None and np.asarray(score_thr).size > 0
        score_t = float(np.asarray(score_thr).reshape(-1)[0]) if has_score_t else 0.0
        if not 0.0 <= iou_t <= 1.0:  # onnxruntime refuses it too
            raise InvalidArgument(f"{node.describe()}: iou_threshold must be in range [0, 1], got {iou_t}")
        if (
            boxes.ndim != 3
            or scores.ndim != 3
            or boxes.shape[0] != scores.shape[0]
            or boxes.shape[1] != scores.shape[2]
        ):
            raise InvalidArgument(
                f"{node.describe()}: boxes {list(boxes.shape)} must be [batch, spatial, 4] and scores "
                f"{list(scores.shape)} [batch, classes, spatial] with the same batch and spatial dims"
            )
        corners = _corners(boxes, center)
        picked: list[tuple[int, int, int]] = []
        if limit > 0:
            for b in range(scores.shape[0]):
                for c in range(scores.shape[1]):
                    sc = scores[b, c].astype(np.float64)
                    # the score threshold first: a YOLO tail sorted 8400 scores for each of 80 classes
                    cand = np.flatnonzero(sc > score_t) if has_score_t else np.arange(sc.size)
                    cand = cand[np.argsort(-sc[cand], kind="stable")]
                    chosen = _greedy(corners[b, cand], iou_t, limit)
                    picked.extend((b, c, int(cand[i])) for i in chosen)
        return (np.array(picked, dtype=np.int64).reshape(-1, 3),)

    return compute

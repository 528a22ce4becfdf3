"""NonMaxSuppression: greedy per (batch, class) selection by score, suppressing boxes whose IoU
with an already selected box exceeds the threshold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def _corners(boxes: np.ndarray, center: int) -> np.ndarray:
    """[..., 4] boxes as (y_min, x_min, y_max, x_max) whatever corner order or center format."""
    b = boxes.astype(np.float64)
    if center:
        xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    ih = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    iw = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = ih * iw
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


@REGISTRY.register("NonMaxSuppression", since=10, host_inputs=(2, 3, 4))
def build_nms(node: NodeView, ctx: KernelContext) -> Fn:
    center = int(node.attr("center_point_box", 0))

    def compute(boxes: Any, scores: Any, max_out: Any = None, iou_thr: Any = None, score_thr: Any = None) -> tuple[Any]:
        limit = 0 if max_out is None or np.asarray(max_out).size == 0 else int(np.asarray(max_out).reshape(-1)[0])
        iou_t = 0.0 if iou_thr is None or np.asarray(iou_thr).size == 0 else float(np.asarray(iou_thr).reshape(-1)[0])
        has_score_t = score_thr is not None and np.asarray(score_thr).size > 0
        score_t = float(np.asarray(score_thr).reshape(-1)[0]) if has_score_t else 0.0
        corners = _corners(boxes, center)
        picked: list[tuple[int, int, int]] = []
        if limit > 0:
            for b in range(scores.shape[0]):
                for c in range(scores.shape[1]):
                    sc = scores[b, c].astype(np.float64)
                    cand = np.argsort(-sc, kind="stable")
                    if has_score_t:
                        cand = cand[sc[cand] > score_t]
                    chosen: list[int] = []
                    for i in cand:
                        if len(chosen) >= limit:
                            break
                        if chosen and np.any(_iou(corners[b, i], corners[b, chosen]) > iou_t):
                            continue
                        chosen.append(int(i))
                    picked.extend((b, c, i) for i in chosen)
        return (np.array(picked, dtype=np.int64).reshape(-1, 3),)

    return compute

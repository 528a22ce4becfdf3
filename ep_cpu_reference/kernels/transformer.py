"""Transformer building blocks that are plain tensor algebra: RotaryEmbedding and the KV-cache
update TensorScatter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.tensor_ops import norm_axis
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


@REGISTRY.register("RotaryEmbedding", since=23)
def build_rotary_embedding(node: NodeView, ctx: KernelContext) -> Fn:
    """X is [B, H, S, D] or [B, S, H*D] (then ``num_heads`` is required). The first
    ``rotary_embedding_dim`` (default: all) features rotate, as halves or interleaved pairs, by
    angles from the caches ([S, R/2], or [max_pos, R/2] indexed by position_ids [B, S])."""
    interleaved = int(node.attr("interleaved", 0))
    rot_dim_attr = int(node.attr("rotary_embedding_dim", 0))
    if rot_dim_attr < 0:  # onnxruntime refuses it too
        raise ValueError(f"{node.describe()}: rotary_embedding_dim must be >= 0, got {rot_dim_attr}")
    num_heads = int(node.attr("num_heads", 0))

    def compute(x: Any, cos: Any, sin: Any, pos: Any = None) -> tuple[Any]:
        shape = x.shape
        if x.ndim == 4:
            v = np.transpose(x, (0, 2, 1, 3))
        elif x.ndim == 3:
            if not num_heads:
                raise ValueError(f"{node.describe()}: a 3-D input needs the num_heads attribute")
            v = x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
        else:
            raise ValueError(f"{node.describe()}: input must be 3-D or 4-D, got shape {shape}")
        rot = rot_dim_attr or v.shape[3]
        half = rot // 2
        c = cos[pos] if pos is not None else cos
        s = sin[pos] if pos is not None else sin
        if c.shape[-1] != half or s.shape[-1] != half:
            raise ValueError(f"{node.describe()}: cos/sin caches need last dim {half}, got {c.shape[-1]}/{s.shape[-1]}")
        c, s = np.expand_dims(c, 2), np.expand_dims(s, 2)
        xr = v[..., :rot]
        if interleaved:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
        else:
            x1, x2 = xr[..., :half], xr[..., half:]
        real = c * x1 - s * x2
        imag = s * x1 + c * x2
        if interleaved:
            rotated = np.stack([real, imag], axis=-1).reshape(xr.shape)
        else:
            rotated = np.concatenate([real, imag], axis=-1)
        out = np.concatenate([rotated, v[..., rot:]], axis=-1).astype(x.dtype)
        return (out.reshape(shape) if x.ndim == 3 else np.transpose(out, (0, 2, 1, 3)),)

    return compute


@REGISTRY.register("TensorScatter", since=24)
def build_tensor_scatter(node: NodeView, ctx: KernelContext) -> Fn:
    """present = past with ``update`` written along ``axis`` at write_indices[batch] (default
    0), wrapping modulo the cache length in ``circular`` mode."""
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise ValueError(f"{node.describe()}: mode must be 'linear' or 'circular', got {mode!r}")
    axis_attr = int(node.attr("axis", -2))

    def compute(past: Any, update: Any, write_indices: Any = None) -> tuple[Any]:
        axis = norm_axis(node, axis_attr, past.ndim)
        if axis == 0:
            raise ValueError(f"{node.describe()}: axis must not be the batch axis 0")
        max_len, seq = past.shape[axis], update.shape[axis]
        out = past.copy()
        starts = np.zeros(past.shape[0], dtype=np.int64) if write_indices is None else write_indices.astype(np.int64)
        for b in range(past.shape[0]):
            pos = starts[b] + np.arange(seq)
            if mode == "circular":
                pos = pos % max_len
            elif pos.size and pos[-1] >= max_len:
                raise ValueError(f"{node.describe()}: writing {seq} entries at {starts[b]} overflows length {max_len}")
            # a view with the sequence axis first, so the write is one fancy-indexed assignment
            np.moveaxis(out[b], axis - 1, 0)[pos] = np.moveaxis(update[b], axis - 1, 0)
        return (out,)

    return compute

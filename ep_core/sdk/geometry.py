"""Window sizes as onnxruntime computes them, where they differ from the ONNX spec (and so from
onnx's shape inference): the kernels size their outputs with these, and the loader infers shapes
with them (``optimizer.onnxruntime_sizes``), so a static shape and a kernel's result agree."""

from __future__ import annotations

import math


def same_pads(size: int, kernel: int, stride: int, upper: bool) -> tuple[int, int]:
    """A pool's SAME padding as onnxruntime's: (ceil(size / stride) - 1) * stride + kernel - size
    from the undilated kernel (the spec dilates it), the odd one at the end for SAME_UPPER; below
    zero when the stride passes the kernel (the output is then shorter)."""
    total = (-(-size // stride) - 1) * stride + kernel - size
    small = int(total / 2)
    return (small, total - small) if upper else (total - small, small)


def pool_length(size: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int], ceil_mode: bool) -> int:
    """Windows along one axis; under ceil_mode a last window starting in the end padding is dropped."""
    span = (size + pads[0] + pads[1] - (kernel - 1) * dilation - 1) / stride + 1
    if not ceil_mode:
        return math.floor(span)
    n = math.ceil(span)
    return n - 1 if (n - 1) * stride >= size + pads[0] else n

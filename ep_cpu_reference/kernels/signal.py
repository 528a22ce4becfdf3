"""DFT and STFT on the last-dimension-as-(real[, imag]) layout ONNX uses: the input ends in 1
(real) or 2 (complex) and the output ends in 2."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.tensor_ops import ints
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]


def _complex(node: Any, x: np.ndarray) -> np.ndarray:
    """The signal as complex values in the input's precision (float32 -> complex64: NumPy's
    FFT then runs in single precision, like the float32 FFTs the test data came from)."""
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    if x.shape[-1] == 2:
        return (x[..., 0] + 1j * x[..., 1].astype(np.float64)).astype(ctype)
    raise ValueError(f"{node.describe()}: the last dimension must be 1 (real) or 2 (complex), got {x.shape[-1]}")


def _pack(c: np.ndarray, dtype: Any) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


def _dft(node: Any, x: np.ndarray, length: Any, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    rank = x.ndim
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank - 1:
        raise ValueError(f"{node.describe()}: axis {axis} must be a signal axis (not the last) of rank {rank}")
    c = _complex(node, x)
    given = ints(length)[0] if length is not None and np.asarray(length).size else None
    if onesided and inverse:
        # IRFFT: one-sided spectrum in, real signal of dft_length (default 2 * (bins - 1)) out
        n = given if given is not None else 2 * (c.shape[a] - 1)
        return np.expand_dims(np.fft.irfft(c, n=n, axis=a), -1).astype(x.dtype)
    n = given if given is not None else c.shape[a]
    y = np.fft.ifft(c, n=n, axis=a) if inverse else np.fft.fft(c, n=n, axis=a)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=a)
    return _pack(y, x.dtype)


@REGISTRY.register("DFT", since=17, end=19, host_inputs=(1,))
def build_dft17(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 17: axis is an attribute (default 1)."""
    axis = int(node.attr("axis", 1))
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    return lambda x, length=None: (_dft(node, x, length, axis, inverse, onesided),)


@REGISTRY.register("DFT", since=20, host_inputs=(1, 2))
def build_dft(node: NodeView, ctx: KernelContext) -> Fn:
    """Opset 20+: axis is an optional input (default -2, the axis before the real/imag one)."""
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))

    def compute(x: Any, length: Any = None, axis: Any = None) -> tuple[Any]:
        a = -2 if axis is None else ints(axis)[0]
        return (_dft(node, x, length, a, inverse, onesided),)

    return compute


@REGISTRY.register("STFT", since=17, host_inputs=(1, 3))
def build_stft(node: NodeView, ctx: KernelContext) -> Fn:
    """Frames of frame_length every frame_step samples, windowed, transformed; onesided keeps
    frame_length // 2 + 1 bins. Output [batch, frames, bins, 2]."""
    onesided = bool(node.attr("onesided", 1))

    def compute(signal: Any, step: Any, window: Any = None, length: Any = None) -> tuple[Any]:
        c = _complex(node, signal[..., None] if signal.ndim == 2 else signal)  # [batch, length]: real, as onnxruntime
        hop = ints(step)[0]
        if length is not None and np.asarray(length).size:
            n = ints(length)[0]
        elif window is not None:
            n = window.shape[0]
        else:
            raise ValueError(f"{node.describe()}: needs a window or a frame_length")
        if window is not None and window.shape[0] != n:
            raise ValueError(f"{node.describe()}: window length {window.shape[0]} != frame_length {n}")
        frames = 1 + (c.shape[1] - n) // hop
        idx = np.arange(frames)[:, None] * hop + np.arange(n)[None, :]
        framed = c[:, idx]
        if window is not None:
            framed = framed * window.astype(framed.real.dtype)
        y = np.fft.fft(framed, n=n, axis=-1)
        if onesided:
            y = y[..., : n // 2 + 1]
        return (_pack(y, signal.dtype),)

    return compute


@REGISTRY.register("AffineGrid", since=20, host_inputs=(1,))
def build_affine_grid(node: NodeView, ctx: KernelContext) -> Fn:
    """Sampling grid theta @ [x, y(, z), 1] over normalised output coordinates in [-1, 1]
    (pixel corners with align_corners=1, pixel centres otherwise)."""
    align = bool(node.attr("align_corners", 0))

    def coords(n: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
        return (np.arange(n) * 2.0 + 1.0) / n - 1.0

    def compute(theta: Any, size: Any) -> tuple[Any]:
        dims = ints(size)
        spatial = dims[2:]
        if len(spatial) not in (2, 3):
            raise ValueError(f"{node.describe()}: size must be [N, C, H, W] or [N, C, D, H, W], got {dims}")
        axes = [coords(n) for n in spatial]  # (H, W) or (D, H, W)
        mesh = np.meshgrid(*axes, indexing="ij")
        # homogeneous points ordered (x, y[, z], 1): x runs along the last spatial axis
        pts = np.stack(list(reversed(mesh)) + [np.ones_like(mesh[0])], axis=-1)
        out = np.einsum("...k,njk->n...j", pts, theta.astype(np.float64))
        return (out.astype(theta.dtype),)

    return compute


@REGISTRY.register("MelWeightMatrix", since=17, host_inputs=(0, 1, 2, 3, 4))
def build_mel_weight_matrix(node: NodeView, ctx: KernelContext) -> Fn:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters with peak 1. The band edges are
    num_mel_bins + 2 points evenly spaced in mel (mel(f) = 2595 log10(1 + f / 700)) from the
    lower edge, in steps of (mel(upper) - mel(lower)) / (num_mel_bins + 2), mapped to DFT bins
    as floor((dft_length + 1) * f / sample_rate): the construction the ONNX test data uses
    (the spec leaves the exact binning open)."""
    from onnx import helper

    dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("output_datatype", 1)))

    def compute(num_bins: Any, dft_length: Any, sample_rate: Any, lower: Any, upper: Any) -> tuple[Any]:
        m, n_fft, rate = ints(num_bins)[0], ints(dft_length)[0], ints(sample_rate)[0]
        lo, hi = float(np.asarray(lower).reshape(())), float(np.asarray(upper).reshape(()))

        def mel(f: float) -> float:
            return 2595.0 * np.log10(1.0 + f / 700.0)

        step = (mel(hi) - mel(lo)) / (m + 2)
        mels = mel(lo) + step * np.arange(m + 2)
        hz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
        edges = ((n_fft + 1) * hz // rate).astype(np.int64)
        out = np.zeros((n_fft // 2 + 1, m))
        j = np.arange(out.shape[0])[:, None]
        left, center, right = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
        rise = np.where(center > left, (j - left) / np.maximum(center - left, 1), 0.0)
        fall = np.where(right > center, (right - j) / np.maximum(right - center, 1), 0.0)
        out = np.where((j >= left) & (j <= center) & (center > left), rise, out)
        out = np.where((j >= center) & (j < right) & (right > center), fall, out)
        out = np.where((center == left) & (j == center), 1.0, out)
        return (out.astype(dtype),)

    return compute

"""Shared helpers of the native NN kernels: spatial padding arithmetic, float compute types,
first-opset lookups, the few-row product and the quantizer lookahead. Registers no kernel, so the
Numba CPU EP imports it without loading the reference EP's kernel families."""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.geometry import pool_length, same_pads
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import schema_history


def first_since(op: str, domain: str = "") -> int:
    """The first opset that defines ``op`` (registrations start there so validate() finds a schema)."""
    history = schema_history(domain or "ai.onnx", op)
    if not history:
        raise ValueError(f"no ONNX schema for {domain or 'ai.onnx'}::{op}")
    return history[0].since


def compute_dtype(dt: np.dtype) -> np.dtype:
    """float16/bfloat16 compute in float32 (as onnxruntime's CPU EP does); float64 stays."""
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def is_float(dt: np.dtype) -> bool:
    """float16/32/64 and ml_dtypes' bfloat16 (whose NumPy kind is 'V')."""
    return dt.kind == "f" or dt.name == "bfloat16"


def centred(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(mean over ``axes``, kept; x - mean), with rows that are constant along ``axes`` centred to
    exactly 0 (their mean the constant): onnxruntime's LayerNormalization gives exactly the bias
    there, where a float32 mean's last-bit error (63 x 0.1f averages 0.099999994) divided by
    sqrt(eps = 1e-12), BERT's epsilon, moved such rows by 0.9. Other rows keep NumPy's float32
    mean, which the zoo's int8 models need bit for bit (a float64 mean flipped a quantum)."""
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    first = d[tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))]
    flat = np.all(d == first, axis=axes, keepdims=True)
    if flat.any():
        mean = np.where(flat, x[tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))], mean)
        d = np.where(flat, np.zeros((), d.dtype), d)
    return mean, d


def as_compute(x: np.ndarray) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    return x if x.dtype == ct else x.astype(ct)


# Arrays computed once at session creation from constants (a slice of a weight, ...) and handed
# to every inference. They are read-only, and registered here by identity so that a pure op whose
# data inputs are all such arrays can compute once and hand out its (frozen) result too: this is
# how weight-preparation chains inside If branches (Slice -> Concat -> Unsqueeze), which the core
# does not fold because their weights are outer-scope values, cost nothing per inference.
_FROZEN: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def frozen(value: Any) -> Any:
    """``value`` as a read-only array registered as computed-from-constants (other values as is)."""
    if isinstance(value, np.ndarray):
        value = value.view()
        value.flags.writeable = False
        _FROZEN[id(value)] = value
    return value


def is_frozen(a: Any) -> bool:
    """Computed once from constants (``frozen``): the same object holds the same values on every
    run, e.g. weights sliced and unsqueezed inside an If branch."""
    return type(a) is np.ndarray and not a.flags.writeable and _FROZEN.get(id(a)) is a


def fold_frozen(compute: Any, first_only: bool = False) -> Any:
    """``compute`` of a deterministic op, memoised while its data inputs (the first input with
    ``first_only``, else all) are the same frozen arrays as in the memoised call: the result is
    then that call's (frozen) output. The per-call cost is an identity test, plus a writeable-flag
    test when it fails; only read-only inputs are looked up in the frozen registry."""
    memo: list[Any] = [(), ()]  # [the data inputs of the memoised call, its outputs]
    get = _FROZEN.get

    def remember(ins: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        for a in ins:
            if type(a) is not np.ndarray or a.flags.writeable or get(id(a)) is not a:
                return compute(*args)
        out = tuple(frozen(o) for o in compute(*args))
        memo[0], memo[1] = ins, out
        return out

    if first_only:

        def one(x: Any, *rest: Any) -> Any:
            last = memo[0]
            if last and x is last[0]:
                return memo[1]
            if type(x) is np.ndarray and x.flags.writeable:
                return compute(x, *rest)
            return remember((x,), (x, *rest))

        return one

    def many(*xs: Any) -> Any:
        last = memo[0]
        if len(last) == len(xs) and all(map(operator.is_, xs, last)) and last:
            return memo[1]
        for a in xs:
            if type(a) is np.ndarray and a.flags.writeable:
                return compute(*xs)
        return remember(xs, xs)

    return many


def fail(node: Any, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.describe()}: {msg}")


def ints(node: Any, name: str, n: int, default: int) -> list[int]:
    v = node.attr(name)
    if v is None or len(v) == 0:
        return [default] * n
    if len(v) != n:
        raise fail(node, f"attribute {name}={v} must have {n} entries for {n} spatial dims")
    return [int(a) for a in v]


def conv_pads(
    node: Any,
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str,
    pads: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    """(pad_begin, pad_end, out_spatial) per the Conv spec for every auto_pad value."""
    nd = len(in_spatial)
    pb, pe, out = [0] * nd, [0] * nd, [0] * nd
    for i in range(nd):
        k_eff = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-in_spatial[i] // strides[i])
            total = max(0, (o - 1) * strides[i] + k_eff - in_spatial[i])
            small, big = total // 2, total - total // 2
            pb[i], pe[i] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
            out[i] = o
        elif auto_pad == "VALID":
            out[i] = (in_spatial[i] - k_eff) // strides[i] + 1
        elif auto_pad in ("NOTSET", ""):
            if pads:
                pb[i], pe[i] = int(pads[i]), int(pads[i + nd])
            out[i] = (in_spatial[i] + pb[i] + pe[i] - k_eff) // strides[i] + 1
        else:
            raise fail(node, f"auto_pad={auto_pad!r}; allowed NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        if out[i] <= 0:
            raise fail(node, f"spatial dim {i} of size {in_spatial[i]} is too small for kernel {kernel[i]}")
    return pb, pe, out


def pool_geometry(
    node: Any,
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str,
    pads: Sequence[int] | None,
    ceil_mode: bool,
) -> tuple[list[int], list[int], list[int]]:
    """(pad_begin, pad_end, out_spatial) for pooling as onnxruntime sizes it (``sdk.geometry``):
    ceil_mode under every auto_pad, SAME's padding from the undilated kernel."""
    nd = len(in_spatial)
    pb, pe, out = [0] * nd, [0] * nd, [0] * nd
    for i in range(nd):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pb[i], pe[i] = same_pads(in_spatial[i], kernel[i], strides[i], auto_pad == "SAME_UPPER")
        elif auto_pad in ("NOTSET", "") and pads:
            pb[i], pe[i] = int(pads[i]), int(pads[i + nd])
        elif auto_pad not in ("NOTSET", "", "VALID"):
            raise fail(node, f"auto_pad={auto_pad!r}; allowed NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        out[i] = pool_length(in_spatial[i], kernel[i], strides[i], dilations[i], (pb[i], pe[i]), ceil_mode)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # a negative SAME pad only shortened the output
            pb[i], pe[i] = max(pb[i], 0), max(pe[i], 0)
        if out[i] <= 0:
            raise fail(node, f"spatial dim {i} of size {in_spatial[i]} is too small for kernel {kernel[i]}")
    return pb, pe, out


def im2col_view(
    xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]
) -> np.ndarray:
    """A zero-copy (N, C, *kernel, *out) view of a C-contiguous padded input (built directly from
    strides: far cheaper per call than sliding_window_view, which matters for small convs)."""
    if not xp.flags.c_contiguous:
        xp = np.ascontiguousarray(xp)
    sp = xp.strides[2:]
    shape = xp.shape[:2] + tuple(kernel) + tuple(out)
    strides = (
        xp.strides[:2]
        + tuple(s * d for s, d in zip(sp, dilations, strict=False))
        + tuple(s * t for s, t in zip(sp, strides, strict=False))
    )
    return np.ndarray(shape, dtype=xp.dtype, buffer=xp, strides=strides)


def pad_spatial(x: np.ndarray, pb: Sequence[int], pe: Sequence[int], value: float = 0.0) -> np.ndarray:
    if not any(pb) and not any(pe):
        return x
    if min(pb) >= 0 and min(pe) >= 0:
        # a filled buffer plus one slice assignment: much cheaper than np.pad for small tensors
        shape = x.shape[:2] + tuple(d + b + e for d, b, e in zip(x.shape[2:], pb, pe, strict=False))
        xp = np.full(shape, value, dtype=x.dtype) if value != 0 else np.zeros(shape, dtype=x.dtype)
        xp[(slice(None), slice(None)) + tuple(slice(b, b + d) for b, d in zip(pb, x.shape[2:], strict=False))] = x
        return xp
    nd = len(pb)
    widths = [(0, 0), (0, 0)] + [(max(0, b), max(0, e)) for b, e in zip(pb, pe, strict=False)]
    xp = np.pad(x, widths, constant_values=value) if any(w != (0, 0) for w in widths) else x
    # negative pads crop
    crop = (slice(None), slice(None)) + tuple(
        slice(-b if b < 0 else 0, xp.shape[2 + i] + e if e < 0 else None)
        for i, (b, e) in enumerate(zip(pb, pe, strict=False))
    )
    return xp[crop] if any(b < 0 or e < 0 for b, e in zip(pb, pe, strict=False)) or nd == 0 else xp


FEW_ROWS = 2
# OpenBLAS's AVX-512 kernels (as threadpoolctl names them), whose two-row float32 product of a
# C-contiguous B up to this many values beats two matrix-vector products (see ``few_rows``)
_AVX512_BLAS = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
_TWO_ROW_GEMM_MAX = 1 << 18


@functools.cache
def _two_row_gemm_pays() -> bool:
    """Whether NumPy's BLAS is OpenBLAS on its AVX-512 kernels (decided once per process, so every
    run of a session sums in the same order)."""
    from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

    return any(
        i.get("internal_api") == "openblas" and str(i.get("architecture", "")).lower() in _AVX512_BLAS
        for i in threadpool_info()
    )


def few_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ b`` (2-D, into ``out`` when given, C-contiguous) as one BLAS matrix-vector product per
    row; None, computing nothing, unless ``a`` has 1 to ``FEW_ROWS`` rows and both are float32 or
    both float64. OpenBLAS's AVX2 (Haswell) kernels run a two-row product 2-3x slower than two
    gemvs (2 x 512 by 512 x 512: 72 against 28 us on a 2-core EPYC). Its AVX-512 kernels run it
    1.3-1.8x faster up to a 1 MB float32 B (13.5 against 24.5 us) and 2.5-3.5x slower beyond
    (2 x 384 by 384 x 1536: 152 against 62 us), so there two rows under that size are left to the
    caller's one product (None)."""
    if not (0 < a.shape[0] <= FEW_ROWS and a.dtype == b.dtype and a.dtype in (np.float32, np.float64)):
        return None
    if (
        a.shape[0] == 2
        and a.dtype == np.float32
        and b.size <= _TWO_ROW_GEMM_MAX
        and b.flags.c_contiguous
        and _two_row_gemm_pays()
    ):
        return None
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        np.dot(a[i], b, out=out[i])
    return out


# ops that quantize their float input dynamically or to a fixed scale: a 1-ulp difference there
# can flip a whole quantum, which the integer graph after them then amplifies
_QUANTIZERS = frozenset({"DynamicQuantizeLinear", "QuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM"})


def feeds_quantizer(node: NodeView) -> bool:
    """Whether ``node``'s output reaches a quantizer directly or through one Mul (x * sigmoid(x))."""
    for c in node.graph.consumers(node.outputs[0]):
        if c.op_type in _QUANTIZERS or (
            c.op_type == "Mul" and any(cc.op_type in _QUANTIZERS for cc in node.graph.consumers(c.outputs[0]))
        ):
            return True
    return False

"""MatMul, MatMulInteger, QLinearMatMul, Gemm and Einsum, plus DepthToSpace/SpaceToDepth.

Half floats multiply in float32 (what onnxruntime's CPU EP does via casts); integer products
of 8-bit operands are exact in float64, which BLAS runs far faster than integer matmul.
Gemm transposes and casts a constant B once at build time."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_cpu_reference.kernels.nn_common import as_compute, fail, first_since, is_float
from ep_cpu_reference.registry import REGISTRY


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy's own float16 matmul (what the ONNX reference computes); bfloat16 via float32."""
    y = np.matmul(a, b)
    return y if y.dtype == a.dtype else y.astype(a.dtype)


@REGISTRY.register("MatMul", since=first_since("MatMul"))
def build_matmul(node: Any, ctx: Any) -> Any:
    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        try:
            return (matmul(a, b),)
        except ValueError as exc:
            raise fail(node, f"shapes {list(a.shape)} and {list(b.shape)} do not multiply: {exc}") from None

    return compute


def _zp(v: Any, zp: Any, axis_from_end: int) -> np.ndarray:
    f = v.astype(np.float64)
    if zp is None:
        return f
    z = np.asarray(zp).astype(np.float64)
    if z.ndim >= 1 and z.size > 1:
        # per-row of A (shape (M,) -> (M,1)) or per-column of B (shape (N,) broadcasts along the last axis)
        z = z.reshape(-1, 1) if axis_from_end == 2 else z.reshape(-1)
    elif z.ndim >= 1:
        z = z.reshape(())
    return f - z


@REGISTRY.register("MatMulInteger", since=first_since("MatMulInteger"))
def build_matmul_integer(node: Any, ctx: Any) -> Any:
    def compute(a: Any, b: Any, a_zp: Any = None, b_zp: Any = None) -> tuple[np.ndarray]:
        af = _zp(a, a_zp, 2)
        bf = _zp(b, b_zp, 1)
        return (np.rint(np.matmul(af, bf)).astype(np.int32),)

    return compute


@REGISTRY.register("QLinearMatMul", since=first_since("QLinearMatMul"))
def build_qlinear_matmul(node: Any, ctx: Any) -> Any:
    """QLinearMatMul: exact integer product, rescaled, rounded half-to-even, saturated."""

    def compute(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):  # type: ignore[no-untyped-def]
        acc = np.matmul(_zp(a, a_zp, 2), _zp(b, b_zp, 1))
        a_scale = np.asarray(a_s, dtype=np.float64)
        b_scale = np.asarray(b_s, dtype=np.float64)
        a_scale = a_scale.reshape(-1, 1) if a_scale.size > 1 else a_scale.reshape(())
        b_scale = b_scale.reshape(-1) if b_scale.size > 1 else b_scale.reshape(())
        y = acc * a_scale * b_scale / np.asarray(y_s, dtype=np.float64).reshape(-1)[0]
        zp = np.asarray(y_zp)
        info = np.iinfo(zp.dtype)
        y = np.clip(np.rint(y) + float(zp.reshape(-1)[0]), info.min, info.max)
        return (y.astype(zp.dtype),)

    return compute


@REGISTRY.register("Gemm", since=first_since("Gemm"))
def build_gemm(node: Any, ctx: Any) -> Any:
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    ta = bool(node.attr("transA", 0))
    tb = bool(node.attr("transB", 0))
    b_const = ctx.constant(node.inputs[1])
    c_const = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    prepared: dict[Any, Any] = {}

    def compute(a: np.ndarray, b: np.ndarray, c: Any = None) -> tuple[np.ndarray]:
        odt = a.dtype
        ac = as_compute(a) if is_float(a.dtype) else a
        dt = ac.dtype
        key = dt
        got = prepared.get(key) if b_const is not None else None
        if got is None:
            bb = b.T if tb else b
            bb = np.ascontiguousarray(bb.astype(dt, copy=False))
            if alpha != 1.0:
                bb = bb * dt.type(alpha) if dt.kind == "f" else bb * int(alpha)
            cc = None
            if c is not None:
                cc = c.astype(dt, copy=False)
                if beta != 1.0:
                    cc = cc * (dt.type(beta) if dt.kind == "f" else int(beta))
            got = (bb, cc)
            if b_const is not None and (c is None or c_const is not None):
                prepared[key] = got
        bb, cc = got
        if c is not None and cc is None:
            cc = c.astype(dt, copy=False) * (dt.type(beta) if dt.kind == "f" else int(beta))
        elif c is not None and c_const is None:
            cc = c.astype(dt, copy=False) * (dt.type(beta) if dt.kind == "f" else int(beta))
        aa = ac.T if ta else ac
        if aa.ndim != 2 or bb.ndim != 2 or aa.shape[1] != bb.shape[0]:
            raise fail(node, f"A {list(a.shape)} (transA={int(ta)}) and B {list(b.shape)} (transB={int(tb)}) do not multiply")
        y = aa @ bb
        if cc is not None:
            y += cc
        return (y if y.dtype == odt else y.astype(odt),)

    return compute


@REGISTRY.register("Einsum", since=first_since("Einsum"))
def build_einsum(node: Any, ctx: Any) -> Any:
    """Einsum: NumPy's einsum with a contraction path chosen once per input shapes."""
    eq = node.attr("equation", "").replace(" ", "")
    paths: dict[Any, Any] = {}

    def compute(*xs: np.ndarray) -> tuple[np.ndarray]:
        key = tuple(x.shape for x in xs)
        path = paths.get(key)
        if path is None:
            try:
                path = np.einsum_path(eq, *xs, optimize="greedy")[0]
            except ValueError as exc:
                raise fail(node, f"equation {eq!r} does not fit inputs {[list(x.shape) for x in xs]}: {exc}") from None
            paths[key] = path
        dt = xs[0].dtype
        ins = [as_compute(x) for x in xs] if is_float(dt) else list(xs)
        y = np.einsum(eq, *ins, optimize=path)
        return (np.asarray(y).astype(dt, copy=False),)

    return compute


@REGISTRY.register("DepthToSpace", since=first_since("DepthToSpace"))
def build_depth_to_space(node: Any, ctx: Any) -> Any:
    bs = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        n, c, h, w = x.shape
        if c % (bs * bs):
            raise fail(node, f"{c} channels are not divisible by blocksize^2={bs * bs}")
        if mode == "DCR":
            t = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        elif mode == "CRD":
            t = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            raise fail(node, f"mode={mode!r}; allowed DCR, CRD")
        return (t.reshape(n, c // (bs * bs), h * bs, w * bs),)

    return compute


@REGISTRY.register("SpaceToDepth", since=first_since("SpaceToDepth"))
def build_space_to_depth(node: Any, ctx: Any) -> Any:
    bs = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"mode={mode!r}; allowed DCR, CRD")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def compute(x: np.ndarray) -> tuple[np.ndarray]:
        n, c, h, w = x.shape
        if h % bs or w % bs:
            raise fail(node, f"spatial size {h}x{w} is not divisible by blocksize={bs}")
        t = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(perm)
        return (t.reshape(n, c * bs * bs, h // bs, w // bs),)

    return compute

"""Running one fused group: its contraction steps through NumPy/BLAS, its elementwise clusters
through their Numba kernels. A plan is plain JSON data (it travels in the EP context); the compiled
kernels and the weights are handed in beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _pads_for(auto_pad: str, size: int, k: int, s: int, d: int) -> tuple[int, int]:
    if auto_pad == "VALID":
        return 0, 0
    out = -(-size // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
    if auto_pad == "SAME_LOWER":
        return total - total // 2, total // 2
    return total // 2, total - total // 2


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: Mapping[str, Any],
           depthwise: Any = None) -> np.ndarray:
    """ONNX Conv for 1-D and 2-D inputs: 1x1 convolutions are one BLAS call per image, depthwise
    ones the compiled ``depthwise`` kernel (or shifted multiply-adds), the rest im2col + BLAS."""
    one_d = x.ndim == 3
    if one_d:
        x, w = x[:, :, None, :], w[:, :, None, :]
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = (list(attrs.get("strides") or [1, 1]) + [1])[:2] if not one_d else (1, (attrs.get("strides") or [1])[0])
    dh, dw = (list(attrs.get("dilations") or [1, 1]) + [1])[:2] if not one_d else (1, (attrs.get("dilations") or [1])[0])
    group = int(attrs.get("group", 1))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", ""):
        pt, pb = _pads_for(auto_pad, h, kh, sh, dh) if not one_d else (0, 0)
        pl, pr = _pads_for(auto_pad, wd, kw, sw, dw)
    else:
        pads = list(attrs.get("pads") or [])
        if one_d:
            pads = pads or [0, 0]
            pt, pb, pl, pr = 0, 0, pads[0], pads[1]
        else:
            pads = pads or [0, 0, 0, 0]
            pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, wd + pl + pr
    ho = (hp - dh * (kh - 1) - 1) // sh + 1
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    if group == c and cg == 1 and m == c and depthwise is not None and not one_d:
        # padding and bias handled inside the kernel: no padded copy, no extra pass
        out = np.empty((n, m, ho, wo), dtype=x.dtype)
        params = np.array([sh, sw, dh, dw, pt, pl], dtype=np.int64)
        wr = np.ascontiguousarray(w).reshape(m, kh, kw)
        bias = np.zeros(m, dtype=x.dtype) if b is None else np.ascontiguousarray(b, dtype=x.dtype)
        xc = np.ascontiguousarray(x)
        # the kernel's signature takes read-only views
        depthwise(out, np.broadcast_to(xc, xc.shape), np.broadcast_to(wr, wr.shape), np.broadcast_to(bias, bias.shape),
                  np.broadcast_to(params, params.shape))
        return out
    if pt or pb or pl or pr:
        padded = np.zeros((n, c, hp, wp), dtype=x.dtype)
        padded[:, :, pt:pt + h, pl:pl + wd] = x
        x = padded
    else:
        x = np.ascontiguousarray(x)
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and group == 1:
        wm = w.reshape(m, c)
        xs = np.ascontiguousarray(x).reshape(n, c, hp * wp)
        out = np.empty((n, m, hp * wp), dtype=x.dtype)
        for img in range(n):
            np.dot(wm, xs[img], out=out[img])
        out = out.reshape(n, m, ho, wo)
    elif group == c and cg == 1 and m == c:
        out = np.zeros((n, m, ho, wo), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                patch = x[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                out += patch * w[:, 0, i, j][None, :, None, None]
    else:
        mg = m // group
        out = np.empty((n, m, ho, wo), dtype=x.dtype)
        for g in range(group):
            xs = x[:, g * cg:(g + 1) * cg]
            cols = np.empty((n, cg, kh, kw, ho, wo), dtype=x.dtype)
            for i in range(kh):
                for j in range(kw):
                    cols[:, :, i, j] = xs[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh,
                                          j * dw: j * dw + sw * (wo - 1) + 1: sw]
            wg = np.ascontiguousarray(w[g * mg:(g + 1) * mg]).reshape(mg, cg * kh * kw)
            cm = cols.reshape(n, cg * kh * kw, ho * wo)
            for img in range(n):
                out[img, g * mg:(g + 1) * mg] = np.dot(wg, cm[img]).reshape(mg, ho, wo)
    if b is not None:
        out += b.reshape(1, m, 1, 1)
    return out[:, :, 0, :] if one_d else out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MatMul; a stack times a matrix is one BLAS call (np.dot is much faster than np.matmul's
    stacked loop here)."""
    if b.ndim == 2 and a.ndim >= 2:
        out = np.dot(np.ascontiguousarray(a).reshape(-1, a.shape[-1]), b)
        return out.reshape(a.shape[:-1] + (b.shape[1],))
    return np.matmul(a, b)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    out = np.dot(a, b)
    alpha = attrs.get("alpha", 1.0)
    if alpha != 1.0:
        out *= out.dtype.type(alpha)
    if c is not None:
        beta = attrs.get("beta", 1.0)
        out = out + (c if beta == 1.0 else c * c.dtype.type(beta))
    return out


class GraphRunner:
    """Executes one plan: ``run(*inputs)`` returns the fused node's outputs in order."""

    def __init__(self, plan: Mapping[str, Any], kernels: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> None:
        self.plan = plan
        self.inputs: tuple[str, ...] = tuple(plan["inputs"])
        self.outputs: tuple[str, ...] = tuple(plan["outputs"])
        self.weights = dict(weights)
        self.steps: list[Any] = []
        for step in plan["steps"]:
            kind = step["kind"]
            key = step.get("kernel")
            fn = kernels[key] if key else None
            if kind == "kernel":
                flat = step.get("kernel_flat")
                fn = (fn, kernels[flat] if flat else None)
            self.steps.append((kind, step, fn))

    def __call__(self, *inputs: Any) -> list[Any]:
        env: dict[str, Any] = dict(self.weights)
        for name, value in zip(self.inputs, inputs, strict=True):
            env[name] = value
        for kind, step, fn in self.steps:
            ins = step["inputs"]
            if kind == "kernel":
                self._run_kernel(step, fn, env)
            elif kind == "conv":
                env[step["outputs"][0]] = conv2d(env[ins[0]], env[ins[1]], env[ins[2]] if ins[2] else None, step["attrs"],
                                                 fn)
            elif kind == "matmul":
                env[step["outputs"][0]] = matmul(env[ins[0]], env[ins[1]])
            elif kind == "gemm":
                env[step["outputs"][0]] = gemm(env[ins[0]], env[ins[1]], env[ins[2]] if ins[2] else None, step["attrs"])
            else:
                raise RuntimeError(f"unknown step kind {kind!r}")
        return [env[o] for o in self.outputs]

    @staticmethod
    def _run_kernel(step: Mapping[str, Any], fns: Any, env: dict[str, Any]) -> None:
        fn, flat = fns
        rank = step["rank"]
        args = [np.asarray(env[n]) for n in step["inputs"]]
        shapes = [a.shape for a in args]
        full = np.broadcast_shapes(*shapes) if shapes else ()
        full = (1,) * (rank - len(full)) + tuple(full)
        outs = [np.empty(full, dtype=o["dtype"]) for o in step["outputs"]]
        if flat is not None and args and all(a.size == outs[0].size and a.flags.c_contiguous for a in args):
            size = outs[0].size
            flat(*[o.reshape(size) for o in outs], *[np.broadcast_to(a.reshape(size), (size,)) for a in args])
        else:
            views = [np.broadcast_to(a.reshape((1,) * (rank - a.ndim) + a.shape), full) for a in args]
            fn(*outs, *views)
        for o, buf in zip(step["outputs"], outs, strict=True):
            deps = [shapes[i] for i in o["deps"]]
            real = tuple(np.broadcast_shapes(*deps)) if deps else ()
            real = (1,) * (o["rank"] - len(real)) + real
            real_r = (1,) * (rank - len(real)) + real
            if real_r != full:
                buf = buf[tuple(slice(None) if r == f else slice(0, 1) for r, f in zip(real_r, full, strict=True))]
            env[o["name"]] = buf.reshape(real)


def run_plan_inputs(runner: GraphRunner, inputs: Sequence[Any]) -> list[Any]:
    return runner(*inputs)

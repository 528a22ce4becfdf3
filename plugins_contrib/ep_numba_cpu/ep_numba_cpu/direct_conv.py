"""Dense float32 convolutions computed directly: no im2col matrix, no BLAS packing of it.

Why: im2col writes and reads back C*kh*kw values per output position, and BLAS then packs them
again; on the zoo's 3x3 convolutions that ran at 50-76 GFLOP/s against onnxruntime's 105-115
(MLAS's direct NCHWc kernels) on one Zen 4 core, 1.5-2.5x slower.

How: the input is copied once (``Plan.fill``: one strided NumPy copy per phase) into a
zero-bordered buffer split into ``s * s`` stride phases (phase (ph, pw) holds padded rows ph,
ph + s, ... and columns pw, pw + s, ...). Tap (a, e) of
channel c then reads, for output position (i, j), phase ((a*dh) % s, (e*dw) % s) at row
i + (a*dh) // s and column j + (e*dw) // s: every tap is one fixed offset (``offsets``) from the
output's flat position i * wq + j over the phase plane's width ``wq``. So a stride-s conv is a sum
over taps of stride-1 reads, and 16 consecutive flat positions are one vector load. The
micro-kernel (a Numba intrinsic, as ``vnni``'s) keeps 8 output channels x 16 positions in eight
registers and for each (channel, tap) loads 16 input values and broadcasts 8 weights (packed
per 8 output channels, ``pack``) into fused multiply-adds. Positions i * wq + j with j >= wo are
computed and dropped when the rows are copied out, bias added; the sums run over (channel, tap)
in order, with fused multiply-adds, as onnxruntime's do in its own order (within float32
rounding of the reference EP's, not bit for bit).

Vectors of 16 float32 are AVX-512's: on AVX2 LLVM splits them in two, the same values, but the 16
accumulators fill every register and spill (2.4x slower than im2col + BLAS under a Haswell target;
without FMA each lane calls fmaf), so the planner takes the kernel only where ``available``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_numba_cpu.recurrent import readonly

TILE = 8  # output channels per micro-kernel call: 8 accumulators of 16 lanes
LANES = 16
VECS = 1  # vectors of 16 positions per micro-kernel call


def _micro(tile: int, vecs: int) -> Any:
    """``micro(x, x_off, offsets, k, w, w_off, y, y_off, ldy)``: for r < tile and l < 16 * vecs,
    y[y_off + r*ldy + l] = sum over q < k of w[w_off + tile*q + r] * x[x_off + offsets[q] + l]."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.extending import intrinsic

    f32 = ir.FloatType()
    vec = ir.VectorType(f32, LANES)
    i64 = ir.IntType(64)

    @intrinsic
    def micro(typingctx, x, x_off, offsets, k, w, w_off, y, y_off, ldy):  # type: ignore[no-untyped-def]
        if not all(isinstance(t, types.Integer) for t in (x_off, k, w_off, y_off, ldy)):
            return None
        sig = types.void(x, x_off, offsets, k, w, w_off, y, y_off, ldy)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            def int_arg(i: int) -> Any:
                return context.cast(builder, args[i], signature.args[i], types.int64)

            def data(i: int) -> Any:
                return context.make_array(signature.args[i])(context, builder, args[i]).data

            x_ptr = builder.gep(data(0), [int_arg(1)])
            w_ptr = builder.gep(data(4), [int_arg(5)])
            y_ptr = builder.gep(data(6), [int_arg(7)])
            off_ptr, ld = data(2), int_arg(8)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), "llvm.fma.v16f32")
            zero = ir.Constant(vec, None)
            mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
            accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(vecs)] for _ in range(tile)]
            with cgutils.for_range(builder, int_arg(3)) as loop:
                q = loop.index
                at = builder.load(builder.gep(off_ptr, [q]))
                xvs = [
                    builder.load(
                        builder.bitcast(
                            builder.gep(x_ptr, [builder.add(at, ir.Constant(i64, LANES * v))]), vec.as_pointer()
                        ),
                        align=4,
                    )
                    for v in range(vecs)
                ]
                row = builder.mul(q, ir.Constant(i64, tile))
                for r in range(tile):
                    wv = builder.load(builder.gep(w_ptr, [builder.add(row, ir.Constant(i64, r))]))
                    splat = builder.shuffle_vector(builder.insert_element(zero, wv, ir.Constant(i64, 0)), zero, mask)
                    for v in range(vecs):
                        builder.store(builder.call(fma, [splat, xvs[v], builder.load(accs[r][v])]), accs[r][v])
            for r in range(tile):
                for v in range(vecs):
                    at = builder.add(builder.mul(ld, ir.Constant(i64, r)), ir.Constant(i64, LANES * v))
                    dst = builder.bitcast(builder.gep(y_ptr, [at]), vec.as_pointer())
                    builder.store(builder.load(accs[r][v]), dst, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return micro


# the kernel imports it (compiled into its object code: a rebuild does not call it)
micro = _micro(TILE, VECS)

# geometry: g[0] stride, g[1..2] pads top/left, g[3..4] phase plane (hq, wq), g[5..6] output (ho, wo),
# g[7] groups, g[8] input channels a group, g[9] tiles of 8 output channels a group, g[10] taps a
# tile (channels x kh x kw), g[11] flat positions a tile computes (a multiple of 16)
_KERNEL = """import numpy as np
from ep_numba_cpu.direct_conv import TILE, VECS, micro


def kernel(out, xpad, w, offsets, bias, yflat, g):
    s, hq, wq, ho, wo = g[0], g[3], g[4], g[5], g[6]
    group, cg, tiles, kk, lpad = g[7], g[8], g[9], g[10], g[11]
    nb, m = out.shape[0], out.shape[1]
    plane = hq * wq
    image = s * s * cg * group * plane
    if s < 1 or group < 1 or cg < 1 or m % group != 0 or tiles * TILE < m // group or lpad % (16 * VECS) != 0:
        return 1
    if out.shape[2] != ho or out.shape[3] != wo or bias.shape[0] < m or kk < 1 or wo > wq:
        return 1
    if lpad < (ho - 1) * wq + wo or xpad.shape[0] < nb * image + lpad or yflat.shape[0] < tiles * TILE * lpad:
        return 1
    if w.shape[0] < group * tiles * kk * TILE or offsets.shape[0] < kk:
        return 1
    top = 0
    for q in range(kk):
        if offsets[q] < 0:
            return 1
        top = max(top, offsets[q])
    if top + (group - 1) * cg * plane + lpad > image + lpad:
        return 1
    mg = m // group
    for b in range(nb):
        for gi in range(group):
            for t in range(tiles):
                for p in range(0, lpad, 16 * VECS):
                    at = b * image + gi * cg * plane + p
                    micro(xpad, at, offsets, kk, w, (gi * tiles + t) * kk * TILE, yflat, t * TILE * lpad + p, lpad)
            for oc in range(mg):
                bv = bias[gi * mg + oc]
                for i in range(ho):
                    src = oc * lpad + i * wq
                    o = out[b, gi * mg + oc, i]
                    for j in range(wo):
                        o[j] = yflat[src + j] + bv
    return 0
"""


def kernel_source() -> Any:
    """The one kernel every direct convolution runs (its geometry is data: compiled once)."""
    from ep_numba_cpu.generate import KernelSource

    sig = "float32:4:C:w,float32:1:C:r,float32:1:C:r,int64:1:C:r,float32:1:C:r,float32:1:C:w,int64:1:C:r"
    return KernelSource(_KERNEL, sig, False)


def available() -> bool:
    """Whether Numba compiles for a CPU with AVX-512F (``compat.host_has``): the micro-kernel's
    8 x 16-lane accumulators fill every AVX2 register (measured 2.4x slower than im2col + BLAS
    under a Haswell target, and a call to fmaf per lane, 54x, without FMA)."""
    from ep_numba_cpu.compat import host_has

    return host_has("avx512f")


def serves(attrs: Mapping[str, Any], w_shape: Sequence[int], dtype: str) -> bool:
    """Whether a convolution with these attributes and filter takes the direct kernel: float32,
    2-D (or 1-D), more than one tap (a 1x1 product is BLAS's, strided or not: the phases would be
    copied for one), at least 16 products a tap set (channels x taps: a 1-channel 3x3 loses), a
    whole tile of 8 output channels a group, one stride of at most 2 on both axes (a 4x4 stride-4
    patchify lost to its 16 phase copies), explicit non-negative pads. Depthwise ones have their
    own kernel; the planner adds the CPU and the session's thread count (``planner._direct``)."""
    if dtype != "float32" or len(w_shape) not in (3, 4) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return False
    group = int(attrs.get("group", 1))
    m, cg, taps = int(w_shape[0]), int(w_shape[1]), int(np.prod(w_shape[2:]))
    strides = list(attrs.get("strides") or [1] * (len(w_shape) - 2))
    if group < 1 or m % group or m // group < TILE or cg * taps < 16 or taps < 2:
        return False
    return min(attrs.get("pads") or [0]) >= 0 and len(set(strides)) == 1 and 1 <= strides[0] <= 2


@dataclass(frozen=True)
class Plan:
    """One input shape's direct convolution: packed weights, tap offsets, buffer sizes, geometry."""

    weights: np.ndarray
    offsets: np.ndarray
    geometry: np.ndarray
    out_shape: tuple[int, int, int, int]
    xpad_size: int
    yflat_size: int
    # per stride phase (ph, pw): its rows u0:u0+nu and columns v0:v0+nv hold x[..., r0::s, c0::s]
    phases: tuple[tuple[int, int, int, int, int, int, int, int], ...]

    def fill(self, x: np.ndarray, xpad: np.ndarray) -> None:
        """``xpad`` (a scratch other convolutions share, at least ``xpad_size`` values) as the
        kernel reads it: each image's zero-bordered input split into its stride phases (one strided
        NumPy copy a phase; the kernel's own loops for it cost 0.3 s more to compile)."""
        s, hq, wq = (int(v) for v in self.geometry[[0, 3, 4]])
        n, c = int(x.shape[0]), int(x.shape[1])
        used = n * s * s * c * hq * wq
        xpad[: used + int(self.geometry[11])] = 0
        grid = xpad[:used].reshape(n, s, s, c, hq, wq)
        for ph, pw, u0, nu, v0, nv, r0, c0 in self.phases:
            grid[:, ph, pw, :, u0 : u0 + nu, v0 : v0 + nv] = x[:, :, r0::s, c0::s]


def plan(
    x_shape: Sequence[int],
    w: np.ndarray,
    group: int,
    strides: Sequence[int],
    dil: Sequence[int],
    pads_begin: Sequence[int],
    out_hw: Sequence[int],
) -> Plan | None:
    """The plan for a 2-D float32 convolution with equal strides and non-negative pads begin, or
    None (the caller keeps its other plans): also for planes so small that more than half of the
    positions a tile computes would be thrown away (BLAS is faster there: 3.7 against 11 us on a
    one-position 1-D conv)."""
    n, c, h, wd = (int(v) for v in x_shape)
    m, cg, kh, kw = (int(v) for v in w.shape)
    s, (dh, dw), (pt, pl), (ho, wo) = int(strides[0]), dil, pads_begin, out_hw
    if strides[0] != strides[1] or s < 1 or min(pt, pl) < 0 or group < 1 or cg * group != c or m % group:
        return None
    hp = max((ho - 1) * s + (kh - 1) * dh + 1, pt + h)
    wp = max((wo - 1) * s + (kw - 1) * dw + 1, pl + wd)
    hq, wq = -(-hp // s), -(-wp // s)
    plane = hq * wq
    lpad = -(-((ho - 1) * wq + wo) // (LANES * VECS)) * LANES * VECS
    if lpad > 2 * ho * wo:  # most of a tile's positions would be padding or dropped columns (a 4-wide plane)
        return None
    mg = m // group
    tiles = -(-mg // TILE)
    kk = cg * kh * kw
    taps = [(a, e) for a in range(kh) for e in range(kw)]
    offsets = np.array(
        [
            (((a * dh) % s) * s + (e * dw) % s) * c * plane + ci * plane + (a * dh // s) * wq + e * dw // s
            for ci in range(cg)
            for a, e in taps
        ],
        dtype=np.int64,
    )
    packed = np.zeros((group, tiles * TILE, kk), dtype=np.float32)
    packed[:, :mg] = w.astype(np.float32, copy=False).reshape(group, mg, kk)
    # (group, tile, k, 8): the 8 weights of one (channel, tap) are one run the micro-kernel broadcasts
    packed = packed.reshape(group, tiles, TILE, kk).transpose(0, 1, 3, 2)
    geometry = np.array([s, pt, pl, hq, wq, ho, wo, group, cg, tiles, kk, lpad], dtype=np.int64)
    phases = []
    for ph in range(s):  # padded row ph + s*u is input row ph + s*u - pt (the same for columns)
        u0 = -(-max(0, pt - ph) // s)
        r0 = ph + s * u0 - pt
        nu = len(range(r0, h, s))
        for pw in range(s):
            v0 = -(-max(0, pl - pw) // s)
            c0 = pw + s * v0 - pl
            nv = len(range(c0, wd, s))
            if nu and nv:
                phases.append((ph, pw, u0, nu, v0, nv, r0, c0))
    return Plan(
        readonly(np.ascontiguousarray(packed).reshape(-1)),
        readonly(offsets),
        readonly(geometry),
        (n, m, ho, wo),
        n * s * s * c * plane + lpad,
        tiles * TILE * lpad,
        tuple(phases),
    )

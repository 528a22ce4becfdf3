"""DepthToSpace and SpaceToDepth (DCR and CRD) on rank-4 tensors, channels first or, for the
internal NHWC domain, channels last: pure index moves, one output element per thread."""

from __future__ import annotations

from typing import Any

from numba import cuda

from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cuda_numba.kernels.conv import _at, _unravel, join_shape, split_shape
from ep_cuda_numba.launch import Runtime, flat, prod
from ep_cuda_numba.registry import NUM16_T, rank_of, register_versions, support_check


@support_check("DepthToSpace", "SpaceToDepth")
def _rank4(node: Any) -> str | None:
    r = rank_of(node)
    return None if r in (None, 4) else f"{node.op_type} on rank-{r} input (rank 4 only)"


@cuda.jit
def depth_to_space(x, out, C, H, W, b, crd, cl):
    oc_n = C // (b * b)
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        n, oc, _, oy, ox = _unravel(i, oc_n, 1, H * b, W * b, cl)
        bi = oy % b
        bj = ox % b
        ic = oc * b * b + bi * b + bj if crd else (bi * b + bj) * oc_n + oc
        out[i] = x[_at(n, ic, 0, oy // b, ox // b, C, 1, H, W, cl)]


@cuda.jit
def space_to_depth(x, out, C, H, W, b, crd, cl):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        n, oc, _, oy, ox = _unravel(i, C * b * b, 1, H // b, W // b, cl)
        blk = oc % (b * b) if crd else oc // C  # CRD: channel-major blocks; DCR: block-major
        c = oc // (b * b) if crd else oc % C
        out[i] = x[_at(n, c, 0, oy * b + blk // b, ox * b + blk % b, C, 1, H, W, cl)]


def depth_space_builder(to_space: bool, cl: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)
        b = int(node.attr("blocksize"))
        mode = node.attr("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise InvalidArgument(f"{node.describe()}: mode={mode!r}; allowed DCR, CRD")
        crd = mode == "CRD"

        def compute(x: Any) -> tuple[Any]:
            N, C, (H, W) = split_shape(tuple(int(s) for s in x.shape), cl)
            bad = C % (b * b) if to_space else (H % b or W % b)
            if b < 1 or bad:
                raise InvalidArgument(f"{node.describe()}: blocksize {b} does not divide input {list(x.shape)}")
            if to_space:
                out = rt.empty(join_shape(N, C // (b * b), [H * b, W * b], cl), x.dtype)
                rt.launch1d(depth_to_space, prod(out.shape), flat(x), flat(out), C, H, W, b, crd, cl)
            else:
                out = rt.empty(join_shape(N, C * b * b, [H // b, W // b], cl), x.dtype)
                rt.launch1d(space_to_depth, prod(out.shape), flat(x), flat(out), C, H, W, b, crd, cl)
            return (out,)

        return compute

    return build


register_versions("DepthToSpace", 1, {"T": NUM16_T})(depth_space_builder(True, False))
register_versions("SpaceToDepth", 1, {"T": NUM16_T})(depth_space_builder(False, False))

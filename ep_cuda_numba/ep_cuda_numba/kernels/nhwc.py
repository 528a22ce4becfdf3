"""The internal NHWC domain (``com.ms.internal.nhwc``): the kernels the layout transformer's
rewritten nodes run on. Each NHWC registration mirrors its NCHW one (same opsets, same types,
same host inputs), so every node this EP claims in NCHW it can also claim after the rewrite;
the set of ops registered here is the EP's one NHWC allowlist (``ep_cuda_numba.layout``).

Conv, ConvTranspose, pooling, BatchNormalization, Resize and Depth/SpaceToDepth reuse their NCHW
kernels with the channels-last flag; GlobalAverage/MaxPool get a channels-last reduction here."""

from __future__ import annotations

import math
from typing import Any

from numba import cuda

from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_core.sdk.layout import LAYOUT_SENSITIVE_OPS, NHWC_DOMAIN

# the NCHW families must have registered before they are mirrored
from ep_cuda_numba.kernels import conv, depth_space, reduce, resize  # noqa: F401
from ep_cuda_numba.kernels.conv import acc_zero
from ep_cuda_numba.launch import Runtime, flat, prod
from ep_cuda_numba.registry import REGISTRY


@cuda.jit
def global_pool_nhwc(x, out, S, C, is_max, zero):
    """out[n, c] over the S spatial positions of x[n, s, c] (threads run along c: coalesced)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        c = i % C
        base = (i // C) * S * C + c
        acc = zero
        best = -math.inf
        for s in range(S):
            v = x[base + s * C] + zero
            acc += v
            if v > best:
                best = v
        out[i] = best if is_max else acc / S


def global_pool_builder(is_max: bool) -> Any:
    def build(node: NodeView, ctx: KernelContext) -> Any:
        rt = Runtime.of(ctx)

        def compute(x: Any) -> tuple[Any]:
            shape = tuple(int(s) for s in x.shape)
            out = rt.empty((shape[0], *([1] * (len(shape) - 2)), shape[-1]), x.dtype)
            S = prod(shape[1:-1])
            if prod(out.shape):
                rt.launch1d(
                    global_pool_nhwc, prod(out.shape), flat(x), flat(out), S, shape[-1], is_max, acc_zero(x.dtype)
                )
            return (out,)

        return compute

    return build


NHWC_BUILDERS = {
    "Conv": conv.conv_builder(True),
    "ConvTranspose": conv.conv_transpose_builder(True),
    "MaxPool": conv.pool_builder(True, True),
    "AveragePool": conv.pool_builder(False, True),
    "BatchNormalization": conv.batchnorm_builder(True),
    "Resize": resize.resize_builder(True),
    "GlobalAveragePool": global_pool_builder(False),
    "GlobalMaxPool": global_pool_builder(True),
    "DepthToSpace": depth_space.depth_space_builder(True, True),
    "SpaceToDepth": depth_space.depth_space_builder(False, True),
}
assert set(NHWC_BUILDERS) <= set(LAYOUT_SENSITIVE_OPS), "the core rewrites only LAYOUT_SENSITIVE_OPS"


def _mirror() -> None:
    for op, builder in NHWC_BUILDERS.items():
        for e in [e for e in REGISTRY if e.kernel_def.op_type == op and e.kernel_def.domain_key == "ai.onnx"]:
            d = e.kernel_def
            REGISTRY.register(
                op,
                d.since_version,
                d.end_version,
                domain=NHWC_DOMAIN,
                types=d.type_constraints,
                host_inputs=d.host_inputs,
                host_outputs=d.host_outputs,
            )(builder)


_mirror()

"""``com.microsoft::EPContext`` nodes written by this EP: the kernel finds the node's graph in the
context binary (``epcontext.load_group``: validated spec, constants checked against their hashes,
binding and signature checked), regenerates the fused elementwise kernel from the spec with this
package's generator (or binds the stored PTX where ``context_ptx.decide`` allows), uploads the
group's constants once and runs it. Nothing from the file is executed as Python."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from numba import cuda  # noqa: F401  (the simulator wants numba.cuda imported at module level)

from ep_cuda_numba.registry import REGISTRY

if TYPE_CHECKING:
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelContext


@REGISTRY.register("EPContext", since=1, domain="com.microsoft")
def build_ep_context(node: "NodeView", ctx: "KernelContext") -> Any:
    from ep_cuda_numba.context_group import kernel_compute
    from ep_cuda_numba.epcontext import load_group
    from ep_cuda_numba.launch import Runtime

    group = load_group(node, ctx)
    ctx.ep.loaded_context_groups.append(group)
    return kernel_compute(group, Runtime.of(ctx))

"""``com.microsoft::EPContext`` nodes written by this EP: the kernel checks the node's recorded spec
(data only) and its binding to the node, regenerates the fused elementwise kernel from it with
this package's generator, and runs it. Nothing from the file is executed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from numba import cuda  # noqa: F401  (the simulator wants numba.cuda imported at module level)

from ep_cuda_numba.registry import REGISTRY

if TYPE_CHECKING:
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelContext


@REGISTRY.register("EPContext", since=1, domain="com.microsoft")
def build_ep_context(node: "NodeView", ctx: "KernelContext") -> Any:
    from ep_cuda_numba.epcontext import load_context_node
    from ep_cuda_numba.fusion import compile_spec
    from ep_cuda_numba.launch import Runtime

    spec = load_context_node(node, ctx)
    group = compile_spec(spec, node.name, ctx.ep)
    ctx.ep.loaded_context_groups.append(group)
    rt = Runtime.of(ctx)
    run = group.compute_info().compute

    def compute(*inputs: Any) -> Any:
        return run(rt, *inputs)

    return compute

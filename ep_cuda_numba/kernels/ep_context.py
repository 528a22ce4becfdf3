"""``com.microsoft::EPContext`` nodes written by this EP: the kernel rebuilds the fused
elementwise kernel from the node's recorded spec (data only) and runs it."""

from __future__ import annotations

from typing import Any

from numba import cuda  # noqa: F401  (the simulator wants numba.cuda imported at module level)

from ep_cuda_numba.registry import REGISTRY


@REGISTRY.register("EPContext", since=1, domain="com.microsoft")
def build_ep_context(node: Any, ctx: Any) -> Any:
    from ep_cuda_numba.epcontext import load_context_node
    from ep_cuda_numba.fusion import compile_spec
    from ep_cuda_numba.launch import Runtime

    ep = getattr(getattr(ctx, "ep", None), "ep", None)
    spec = load_context_node(node, ctx)
    group = compile_spec(spec, node.name, node.inputs, node.outputs, ep)
    if ep is not None:
        ep.loaded_context_groups.append(group)
    rt = Runtime(ctx)
    run = group.compute_info().compute

    def compute(*inputs: Any) -> Any:
        return run(rt, *inputs)

    return compute

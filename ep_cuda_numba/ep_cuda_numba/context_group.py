"""Fused groups with their constant inputs baked in.

The EP claims groups with ``drop_constant_initializers=True``: an initializer a group reads is no
input of the fused node (nor of its EPContext node) but part of the group. Its spec lists it after
the node's own inputs, the host array rides on the group (``CompiledGroup.constants``), it is
uploaded to the device once per session, and the context binary stores it once by content hash,
so a context model needs no copy of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.compute import ComputeContext, FusedNode, NodeComputeInfo
from ep_core.sdk.errors import EpFail

if TYPE_CHECKING:
    from ep_core.sdk.graph import GraphView
    from ep_cuda_numba.fusion import CompiledGroup
    from ep_cuda_numba.launch import Runtime


def constant_inputs(view: "GraphView", fused: FusedNode) -> dict[str, np.ndarray]:
    """Value name -> array of the initializers the group's nodes read as data (Clip bounds are
    baked into params and not counted), in first-use order."""
    produced = {o for n in view.nodes for o in n.outputs if o}
    out: dict[str, np.ndarray] = {}
    for n in sorted(view.nodes, key=lambda n: n.index):
        if n.op_type == "Constant":
            continue
        data = n.inputs[:1] if n.op_type == "Clip" else tuple(i for i in n.inputs if i)
        for name in data:
            if name in produced or name in fused.inputs or name in out:
                continue
            value = view.constant_value(name)
            if value is None:
                raise EpFail(f"fused group {fused.name}: {name!r} is neither an input of the group nor a constant")
            out[name] = np.ascontiguousarray(value).reshape(np.shape(value))  # a 0-d constant stays 0-d
    return out


def compile_group(view: "GraphView", fused: FusedNode, ep: Any) -> "CompiledGroup":
    """``fusion.compile_group`` with the group's constants appended to its spec's inputs."""
    from ep_cuda_numba import fusion

    consts = constant_inputs(view, fused)
    if not consts:
        return fusion.compile_group(view, fused, ep)
    full = FusedNode(fused.name, (*fused.inputs, *consts), fused.outputs, fused.node_names)
    group = fusion.compile_group(view, full, ep)
    group.constants = {len(fused.inputs) + k: arr for k, arr in enumerate(consts.values())}
    return group


def upload(group: "CompiledGroup", rt: "Runtime") -> tuple[Any, ...]:
    """The group's constants on the device, in spec order (once per session)."""
    return tuple(rt.to_device(group.constants[i]) for i in sorted(group.constants))


def compute_info(group: "CompiledGroup") -> NodeComputeInfo:
    """The group's compute functions, its constants appended to every call's inputs."""
    info = group.compute_info()
    if not group.constants:
        return info
    make = info.create_state
    assert make is not None
    run = info.compute

    def create_state(ctx: ComputeContext) -> Any:
        rt = make(ctx)
        return rt, upload(group, rt)

    def compute(state: Any, *inputs: Any) -> Sequence[Any]:
        rt, consts = state
        return run(rt, *inputs, *consts)

    return NodeComputeInfo(compute, create_state, info.release_state, dict(info.metadata))


def kernel_compute(group: "CompiledGroup", rt: "Runtime") -> Callable[..., Any]:
    """The registry-kernel form (EPContext nodes): constants uploaded now."""
    run = group.compute_info().compute
    consts = upload(group, rt)

    def compute(*inputs: Any) -> Any:
        return run(rt, *inputs, *consts)

    return compute

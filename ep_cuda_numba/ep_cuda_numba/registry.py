"""The EP's kernel registry (ep_core's one format). Kernel modules in ``ep_cuda_numba.kernels``
register on import; ``registry()`` imports them once, which is when numba is first imported.

``register_versions`` registers an op for every ONNX schema version from ``since`` on, with the
types this EP supports intersected with what each version's schema allows, so the registry
always validates against the pinned onnx and a new opset of an op is not silently claimed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ep_core.sdk.kernels import KernelBuilder, KernelRegistry, schema_history
from ep_cuda_numba import EP_NAME

REGISTRY = KernelRegistry(EP_NAME, kernel_package="ep_cuda_numba.kernels")

FLOAT_T = ("tensor(float)", "tensor(double)")
INT_T = ("tensor(int32)", "tensor(int64)")
NUM_T = FLOAT_T + INT_T
BOOL_T = ("tensor(bool)",)
ALL_T = NUM_T + BOOL_T
INDEX_T = ("tensor(int32)", "tensor(int64)")
# float16 where a family computes it (in float32, rounded once at the store); bfloat16 (kernels see
# uint16 bit patterns, math in float32) in the elementwise, data-movement and shape families only
F16_T = ("tensor(float16)",)
BF16_T = ("tensor(bfloat16)",)
FLOAT16_T = FLOAT_T + F16_T
NUM16_T = NUM_T + F16_T
ALL16_T = ALL_T + F16_T
ANY_T = ALL16_T + BF16_T
BF16_REASON = (
    "this EP runs bfloat16 only in elementwise ops (fused too), data movement and shape ops; "
    "MatMul/Gemm, reductions, Softmax, normalisations, Conv, pooling and Resize have no bfloat16 "
    "kernel here: left to another EP"
)


def registry() -> KernelRegistry:
    return REGISTRY.ensure_loaded()


def register_versions(
    op: str,
    since: int,
    types: Mapping[str, Iterable[str]],
    *,
    host_inputs: Iterable[int] = (),
    host_outputs: Iterable[int] = (),
    until: int | None = None,
) -> Callable[[KernelBuilder], KernelBuilder]:
    """Register ``builder`` for each schema version of ``op`` in ``[since, until]`` (the op's own
    versions, walked per op: a walk over every schema per op made the registry take ~0.3 s)."""
    wanted = {k: tuple(v) for k, v in types.items()}

    def deco(builder: KernelBuilder) -> KernelBuilder:
        versions = schema_history("ai.onnx", op)
        if not versions:
            raise ValueError(f"{EP_NAME}: no ONNX schema for {op}")
        for v in versions:
            end = v.end
            if (end is not None and end < since) or (until is not None and v.since > until):
                continue
            start = max(v.since, since)
            if until is not None and (end is None or end > until):
                end = until
            allowed = v.constraints
            tc = {k: tuple(t for t in v_ if t in allowed.get(k, ())) for k, v_ in wanted.items() if k in allowed}
            if any(not t for t in tc.values()):
                continue
            REGISTRY.register(op, since=start, end=end, types=tc, host_inputs=host_inputs, host_outputs=host_outputs)(
                builder
            )
        return builder

    return deco


# op -> predicate(node) returning why this EP cannot run that node (attributes, ranks), or None.
# The capability step consults it so a node is never claimed only to fail at session creation.
SUPPORT_CHECKS: dict[str, Callable[[Any], str | None]] = {}


def support_check(*ops: str) -> Callable[[Callable[[Any], str | None]], Callable[[Any], str | None]]:
    def deco(fn: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
        for op in ops:
            SUPPORT_CHECKS[op] = fn
        return fn

    return deco


def unsupported_reason(node: Any) -> str | None:
    check = SUPPORT_CHECKS.get(node.op_type)
    # rewritten internal-domain (NHWC) nodes pass the same checks as the NCHW nodes they were
    return check(node) if check is not None and node.domain in ("", "ai.onnx", "com.ms.internal.nhwc") else None


def touches_bfloat16(node: Any) -> bool:
    """Whether an input or output of ``node`` is bfloat16 (declined with ``BF16_REASON``)."""
    infos = [node.input_info(i) for i in range(len(node.inputs))]
    infos += [node.output_info(i) for i in range(len(node.outputs))]
    return any(vi is not None and vi.type_str == "tensor(bfloat16)" for vi in infos)


def rank_of(node: Any, i: int = 0) -> int | None:
    vi = node.input_info(i)
    return None if vi is None or vi.shape is None else len(vi.shape)

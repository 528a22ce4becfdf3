"""onnxruntime's NCHWc ops (domain com.microsoft.nchwc: Conv, pooling, ReorderInput/Output,
Upsample), which its optimizer writes into a model saved from an ORT_ENABLE_ALL session
(``optimized_model_filepath``). Their tensors and reordered weights are laid out in blocks of
MLAS's channel block size for the machine that saved the model (16 with AVX-512, 8 with AVX2),
which nothing in the file records; onnxruntime itself warns that such a file runs only where it
was made. The reference EP takes these nodes so that session creation fails saying so, with the
way out, instead of with "no kernel"."""

from __future__ import annotations

from typing import Any

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

NCHWC = "com.microsoft.nchwc"
OPS = "Conv MaxPool AveragePool GlobalMaxPool GlobalAveragePool ReorderInput ReorderOutput Upsample"


def _refuse(node: NodeView, ctx: KernelContext) -> Any:
    raise NotImplementedByAnyEp(
        f"{NCHWC} ops are onnxruntime's blocked-channel layout for its own CPU kernels, "
        "written by optimized_model_filepath at ORT_ENABLE_ALL and valid only on the machine that wrote them "
        "(its channel block size is not in the file). Give the original model, or save the optimized one at "
        "ORT_ENABLE_EXTENDED"
    )


for _op in OPS.split():
    REGISTRY.register(_op, domain=NCHWC)(_refuse)

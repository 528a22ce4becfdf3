"""Layout facts an EP and the core agree on: the internal NHWC domain and which ops the layout
transformer may rewrite into it."""

from __future__ import annotations

NHWC_DOMAIN = "com.ms.internal.nhwc"
LAYOUT_SENSITIVE_OPS = (
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "Resize",
    "SpaceToDepth",
    "DepthToSpace",
)
# ops through which a layout transpose can be pushed unchanged (one input, same layout out)
LAYOUT_AGNOSTIC_UNARY = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Clip",
        "Elu",
        "Selu",
        "Softplus",
        "Identity",
        "Neg",
        "Abs",
        "Exp",
        "Sqrt",
        "Gelu",
        "Mish",
        "Erf",
        "Cast",
    }
)

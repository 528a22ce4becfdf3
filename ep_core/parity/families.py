"""Op families, so charts group ~200 ONNX ops into a dozen bars a person can read.

ONNX schemas carry no category, so this is our own table (close to the folders ORT keeps its
kernels in). An op not listed falls into ``other``; a wrong family only moves a bar."""

from __future__ import annotations

_FAMILIES: dict[str, tuple[str, ...]] = {
    "elementwise math": (
        "Abs", "Acos", "Acosh", "Add", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd",
        "BitwiseNot", "BitwiseOr", "BitwiseXor", "Ceil", "Cos", "Cosh", "Div", "Erf", "Exp", "Floor",
        "IsInf", "IsNaN", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Pow", "Reciprocal", "Round",
        "Sign", "Sin", "Sinh", "Sqrt", "Sub", "Sum", "Tan", "Clip", "BitCast",
    ),
    "activation": (
        "Celu", "Elu", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "LeakyRelu", "LogSoftmax", "Mish",
        "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softmax", "Softplus", "Softsign", "Tanh",
        "ThresholdedRelu", "Swish",
    ),
    "logic & compare": (
        "And", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "Or", "Where", "Xor",
    ),
    "reduction": (
        "ArgMax", "ArgMin", "CumProd", "CumSum", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
        "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "TopK",
    ),
    "matmul & attention": (
        "Attention", "Einsum", "FlexAttention", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul",
        "RotaryEmbedding",
    ),
    "conv & pool": (
        "AveragePool", "Col2Im", "Conv", "ConvInteger", "ConvTranspose", "DeformConv", "GlobalAveragePool",
        "GlobalLpPool", "GlobalMaxPool", "LpPool", "MaxPool", "MaxRoiPool", "MaxUnpool", "QLinearConv",
        "RoiAlign",
    ),
    "normalization": (
        "BatchNormalization", "GroupNormalization", "InstanceNormalization", "LayerNormalization",
        "LpNormalization", "LRN", "MeanVarianceNormalization", "RMSNormalization",
        "SkipLayerNormalization",
    ),
    "tensor & shape": (
        "Cast", "CastLike", "Compress", "Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Expand",
        "EyeLike", "Flatten", "Gather", "GatherElements", "GatherND", "Identity", "NonZero", "OneHot", "Pad",
        "Range", "Reshape", "Resize", "ReverseSequence", "Scatter", "ScatterElements", "ScatterND", "Shape",
        "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose", "Trilu", "Unique",
        "Unsqueeze", "Upsample", "CenterCropPad", "GridSample", "AffineGrid", "TensorScatter",
    ),
    "quantization": (
        "DequantizeLinear", "DynamicQuantizeLinear", "QuantizeLinear",
    ),
    "control flow": ("If", "Loop", "Scan"),
    "sequence & optional": (
        "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt",
        "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SequenceMap", "SplitToSequence",
    ),
    "recurrent": ("GRU", "LSTM", "RNN"),
    "random": ("Bernoulli", "Dropout", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
               "RandomUniformLike"),
    "signal, image & text": (
        "BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT", "ImageDecoder",
        "NonMaxSuppression", "RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit",
        "TfIdfVectorizer",
    ),
}

_BY_OP = {op: family for family, ops in _FAMILIES.items() for op in ops}
FAMILIES: tuple[str, ...] = tuple(_FAMILIES) + ("ml (ai.onnx.ml)", "training", "other")


def family_of(op_type: str, domain: str = "") -> str:
    """The chart family of an op; ``ai.onnx.ml`` and training domains are families of their own."""
    if domain == "ai.onnx.ml":
        return "ml (ai.onnx.ml)"
    if domain.startswith("ai.onnx.preview"):
        return "training"
    if op_type.startswith("Reduce"):
        return "reduction"
    return _BY_OP.get(op_type, "other")

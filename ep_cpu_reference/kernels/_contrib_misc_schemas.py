"""Schemas of the miscellaneous onnxruntime contrib ops (com.microsoft) and of the legacy
experimental ai.onnx ops onnxruntime still serves (Affine, Crop, ...: onnx dropped their schemas,
and onnxruntime's SimplifiedLayerNormalization lives in ai.onnx too), as onnxruntime 1.31.1
declares them (``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``):
names, optionality, types and attribute defaults, so the kernel registry can check its defs and
onnx.checker / shape inference accept the models. Leading underscore: a helper of the
contrib_misc and legacy families, not an op family.

Each entry: inputs and outputs as ``name[?|*]:type`` (``?`` optional, ``*`` variadic),
attributes as (name, kind, default) with default "REQ" for required and None for optional
without a default, and the type constraints."""

from __future__ import annotations

from typing import Any

from ep_cpu_reference.kernels._ms_schema import register_table

ALL_TYPES = (
    "uint8 uint16 uint32 uint64 int8 int16 int32 int64 float16 float double string bool complex64 complex128".split()
)

_MS: dict[str, Any] = {
    "BifurcationDetector": (
        "src_tokens:T cur_tokens:T prev_suffix_match_idx:T pred_tokens?:T",
        "tokens:T suffix_match_idx:T",
        [("max_ngram_size", "INT", 3), ("min_ngram_size", "INT", 1)],
        {"T": ["int64"]},
    ),
    "BranchwiseRMSNorm": (
        "X:T scale?:M",
        "Y:T",
        [("epsilon", "FLOAT", 1e-05), ("num_branches", "INT", 0)],
        {"T": ["float", "float16", "bfloat16"], "M": ["float", "float16", "bfloat16"]},
    ),
    "CDist": ("A:T B:T", "C:T", [("metric", "STRING", "sqeuclidean")], {"T": ["float", "double"]}),
    "ConvTransposeWithDynamicPads": (
        "X:T W:T Pads?:tensor(int64) B?:T",
        "Y:T",
        [
            ("auto_pad", "STRING", "NOTSET"),
            ("dilations", "INTS", None),
            ("group", "INT", 1),
            ("kernel_shape", "INTS", None),
            ("output_padding", "INTS", None),
            ("strides", "INTS", None),
        ],
        {"T": ["float16", "float", "double"]},
    ),
    "CropAndResize": (
        "X:T1 rois:T1 batch_indices:T2 crop_size:T2",
        "Y:T1",
        [("extrapolation_value", "FLOAT", 0.0), ("mode", "STRING", "bilinear")],
        {"T1": ["float16", "float", "double"], "T2": ["int32"]},
    ),
    "DynamicTimeWarping": ("input:F", "output:I", [], {"F": ["float"], "I": ["int32"]}),
    "ExpandDims": (
        "X:T axis:tensor(int32)",
        "Y:T",
        [],
        {"T": ALL_TYPES},
    ),
    "GatedAdd": ("X:T Y:T gate:T", "output:T", [], {"T": ["float", "float16", "bfloat16"]}),
    "GatedRMSNorm": (
        "X:T scale:T gate:T",
        "Y:T",
        [("activation", "STRING", "silu"), ("epsilon", "FLOAT", 1e-05)],
        {"T": ["float", "float16", "bfloat16"]},
    ),
    "GatherND": (
        "data:T indices:Tind",
        "output:T",
        [],
        {
            "T": ALL_TYPES,
            "Tind": ["int32", "int64"],
        },
    ),
    "GridSample": (
        "X:T1 Grid:T1",
        "Y:T2",
        [("align_corners", "INT", 0), ("mode", "STRING", "bilinear"), ("padding_mode", "STRING", "zeros")],
        {
            "T1": ALL_TYPES,
            "T2": ["float16", "float", "double"],
        },
    ),
    "Inverse": ("X:T", "Y:T", [], {"T": ["float16", "float", "double"]}),
    "MaxpoolWithMask": (
        "X:T M:tensor(int32)",
        "Y:T",
        [
            ("auto_pad", "STRING", "NOTSET"),
            ("kernel_shape", "INTS", None),
            ("pads", "INTS", None),
            ("storage_order", "INT", 0),
            ("strides", "INTS", None),
        ],
        {"T": ["float"]},
    ),
    "MurmurHash3": (
        "X:T1",
        "Y:T2",
        [("positive", "INT", 1), ("seed", "INT", 0)],
        {"T1": ["uint32", "int32", "uint64", "int64", "float", "double", "string"], "T2": ["uint32", "int32"]},
    ),
    "NGramRepeatBlock": (
        "input_ids:Tid scores:T",
        "scores_out:T",
        [("ngram_size", "INT", "REQ")],
        {"Tid": ["int64"], "T": ["float"]},
    ),
    "NhwcMaxPool": (
        "x:T",
        "y:T",
        [
            ("auto_pad", "STRING", "NOTSET"),
            ("ceil_mode", "INT", 0),
            ("dilations", "INTS", None),
            ("kernel_shape", "INTS", "REQ"),
            ("pads", "INTS", None),
            ("strides", "INTS", None),
        ],
        {"T": ["int8", "uint8"]},
    ),
    "Pad": (
        "data:T pads:tensor(int64) value?:T",
        "output:T",
        [("mode", "STRING", "constant")],
        {"T": ["float16", "float", "double"]},
    ),
    "Range": ("start:T limit:T delta?:T", "Y:T", [], {"T": ["float", "double", "int16", "int32", "int64"]}),
    "SampleOp": ("X:T", "Y:T", [], {"T": ["uint32", "uint64", "int32", "int64", "float16", "float", "double"]}),
    "ScaledSiLU": (
        "X:T scale?:M",
        "Y:T",
        [("alpha", "FLOAT", 1.0)],
        {"T": ["float", "float16", "bfloat16"], "M": ["float", "float16", "bfloat16"]},
    ),
    "Tokenizer": (
        "X:T",
        "Y:T",
        [
            ("mark", "INT", "REQ"),
            ("mincharnum", "INT", "REQ"),
            ("pad_value", "STRING", "REQ"),
            ("separators", "STRINGS", None),
            ("tokenexp", "STRING", None),
        ],
        {"T": ["string"]},
    ),
    "TransposeMatMul": (
        "A:T B:T",
        "Y:T",
        [("alpha", "FLOAT", 1.0), ("transA", "INT", 0), ("transB", "INT", 0)],
        {"T": ["float16", "float", "double", "bfloat16"]},
    ),
    "Trilu": (
        "X:T k?:tensor(int64)",
        "Y:T",
        [("upper", "INT", 1)],
        {
            "T": [
                "float16",
                "float",
                "double",
                "bfloat16",
                "uint8",
                "uint16",
                "uint32",
                "uint64",
                "int8",
                "int16",
                "int32",
                "int64",
                "bool",
            ]
        },
    ),
    "UnfoldTensor": (
        "input:T",
        "output:T",
        [("dim", "INT", -1), ("size", "INT", "REQ"), ("step", "INT", 1)],
        {
            "T": [
                "uint8",
                "uint16",
                "uint32",
                "uint64",
                "int8",
                "int16",
                "int32",
                "int64",
                "bfloat16",
                "float16",
                "float",
                "double",
                "string",
                "bool",
                "complex64",
                "complex128",
            ]
        },
    ),
    "Unique": (
        "x:T",
        "y:T idx:tensor(int64) counts:tensor(int64)",
        [],
        {"T": ALL_TYPES},
    ),
    "WordConvEmbedding": (
        "Sequence:T W:T1 B:T1 C:T1",
        "Y:T1",
        [("char_embedding_size", "INT", None), ("conv_window_size", "INT", None), ("embedding_size", "INT", None)],
        {"T": ["int32"], "T1": ["float"]},
    ),
}
_ONNX: dict[str, Any] = {
    "Affine": ("X:T", "Y:T", [("alpha", "FLOAT", 1.0), ("beta", "FLOAT", 0.0)], {"T": ["float16", "float", "double"]}),
    "Crop": (
        "input:T",
        "output:T",
        [("border", "INTS", None), ("scale", "INTS", None)],
        {"T": ["float16", "float", "double"]},
    ),
    "DynamicSlice": (
        "data:T starts:Tind ends:Tind axes?:Tind",
        "output:T",
        [],
        {
            "T": ALL_TYPES,
            "Tind": ["int32", "int64"],
        },
    ),
    "ImageScaler": (
        "input:T",
        "output:T",
        [("bias", "FLOATS", None), ("scale", "FLOAT", 1.0)],
        {"T": ["float16", "float", "double"]},
    ),
    "ParametricSoftplus": (
        "X:T",
        "Y:T",
        [("alpha", "FLOAT", None), ("beta", "FLOAT", None)],
        {"T": ["float16", "float", "double"]},
    ),
    "Scale": ("input:T", "output:T", [("scale", "FLOAT", 1.0)], {"T": ["float16", "float", "double"]}),
    "ScaledTanh": (
        "input:T",
        "output:T",
        [("alpha", "FLOAT", None), ("beta", "FLOAT", None)],
        {"T": ["float16", "float", "double"]},
    ),
    "SimplifiedLayerNormalization": (
        "X:T scale:V",
        "Y:V inv_std_var?:U",
        [("axis", "INT", -1), ("epsilon", "FLOAT", 1e-05), ("stash_type", "INT", 1)],
        {
            "T": ["float16", "float", "double", "bfloat16"],
            "U": ["float", "double"],
            "V": ["float16", "float", "double", "bfloat16"],
        },
    ),
}


def register_schemas() -> None:
    """Register every schema above (once; existing ones are kept); the ai.onnx ones at opset 1, as
    onnxruntime has them (experimental in onnx, which dropped their schemas)."""
    register_table(_MS)
    register_table(_ONNX, domain="", doc="as onnxruntime 1.31.1 declares it (onnx dropped the schema)")

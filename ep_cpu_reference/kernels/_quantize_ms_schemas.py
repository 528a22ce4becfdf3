"""Schemas of onnxruntime's quantization contrib ops (com.microsoft), as onnxruntime 1.31.1
declares them (names, optionality, types, attribute defaults), for onnx.checker and shape
inference. Leading underscore: a helper of the quantize_ms family, not an op family.

Each entry: inputs and outputs as ``name[?|*]:type`` (``?`` optional, ``*`` variadic),
attributes as (name, kind, default) with default "REQ" for required and None for optional
without a default, and the type constraints."""

from __future__ import annotations

from typing import Any

from ep_cpu_reference.kernels._ms_schema import register_table

_SCHEMAS: dict[str, Any] = {
    "DynamicQuantizeMatMul": (
        "A:T1 B:T2 b_scale:T1 b_zero_point?:T2 bias?:T1",
        "Y:T1",
        [],
        {"T1": ["float"], "T2": ["int8", "uint8"]},
    ),
    "MatMulIntegerToFloat": (
        "A:T1 B:T2 a_scale:T3 b_scale:T3 a_zero_point?:T1 b_zero_point?:T2 bias?:T3",
        "Y:T3",
        [],
        {"T1": ["int8", "uint8"], "T2": ["int8", "uint8"], "T3": ["float", "float16"]},
    ),
    "DynamicQuantizeLSTM": (
        "X:T W:T2 R:T2 B?:T sequence_lens?:T1 initial_h?:T initial_c?:T P?:T W_scale:T W_zero_point:T2 R_scale:T R_zero_point:T2",
        "Y?:T Y_h?:T Y_c?:T",
        [
            ("activation_alpha", "FLOATS", None),
            ("activation_beta", "FLOATS", None),
            ("activations", "STRINGS", None),
            ("clip", "FLOAT", None),
            ("direction", "STRING", "forward"),
            ("hidden_size", "INT", None),
            ("input_forget", "INT", 0),
        ],
        {"T": ["float"], "T1": ["int32"], "T2": ["int8", "uint8"]},
    ),
    "QLinearAdd": (
        "A:T A_scale:tensor(float) A_zero_point?:T B:T B_scale:tensor(float) B_zero_point?:T C_scale:tensor(float) C_zero_point?:T",
        "C:T",
        [],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearMul": (
        "A:T A_scale:tensor(float) A_zero_point?:T B:T B_scale:tensor(float) B_zero_point?:T C_scale:tensor(float) C_zero_point?:T",
        "C:T",
        [],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearSigmoid": (
        "X:T X_scale:tensor(float) X_zero_point?:T Y_scale:tensor(float) Y_zero_point?:T",
        "Y:T",
        [],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearLeakyRelu": (
        "X:T X_scale:tensor(float) X_zero_point?:T Y_scale:tensor(float) Y_zero_point?:T",
        "Y:T",
        [("alpha", "FLOAT", 0.01)],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearSoftmax": (
        "X:T X_scale:tensor(float) x_zero_point?:T y_scale:tensor(float) y_zero_point:T",
        "Y:T",
        [("axis", "INT", -1), ("opset", "INT", "REQ")],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearConcat": (
        "Y_scale:TF Y_zero_point:T8 inputs*:TV",
        "Y:T8",
        [("axis", "INT", "REQ")],
        {"T8": ["int8", "uint8"], "TF": ["float"], "TV": ["float", "int8", "uint8"]},
    ),
    "QLinearGlobalAveragePool": (
        "X:T x_scale:tensor(float) x_zero_point:T y_scale:tensor(float) y_zero_point:T",
        "Y:T",
        [("channels_last", "INT", 0)],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearAveragePool": (
        "X:T x_scale:tensor(float) x_zero_point?:T y_scale:tensor(float) y_zero_point?:T",
        "Y:T",
        [
            ("auto_pad", "STRING", "NOTSET"),
            ("ceil_mode", "INT", 0),
            ("channels_last", "INT", 0),
            ("count_include_pad", "INT", 0),
            ("kernel_shape", "INTS", "REQ"),
            ("pads", "INTS", None),
            ("strides", "INTS", None),
        ],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearReduceMean": (
        "data:T data_scale:tensor(float) data_zero_point?:T reduced_scale:tensor(float) reduced_zero_point?:T",
        "reduced:T",
        [("axes", "INTS", "REQ"), ("keepdims", "INT", "REQ")],
        {"T": ["int8", "uint8"]},
    ),
    "QLinearWhere": (
        "condition:B X:T x_scale:TF x_zero_point:T Y:T y_scale:TF y_zero_point:T z_scale:TF z_zero_point:T",
        "Z:T",
        [],
        {"B": ["bool"], "TF": ["float"], "T": ["int8", "uint8"]},
    ),
    "QGemm": (
        "A:TA a_scale:T a_zero_point:TA B:TB b_scale:T b_zero_point:TB C?:TC y_scale?:T y_zero_point?:TYZ",
        "Y:TY",
        [("alpha", "FLOAT", 1.0), ("transA", "INT", 0), ("transB", "INT", 0)],
        {
            "T": ["float"],
            "TA": ["int8", "uint8"],
            "TB": ["int8", "uint8"],
            "TC": ["int32"],
            "TYZ": ["int8", "uint8"],
            "TY": ["float", "int8", "uint8"],
        },
    ),
    "QAttention": (
        "input:T1 weight:T2 bias:T3 input_scale:T3 weight_scale:T3 mask_index?:T4 input_zero_point?:T1 weight_zero_point?:T2 past?:T3",
        "output:T3 present?:T3",
        [
            ("do_rotary", "INT", None),
            ("mask_filter_value", "FLOAT", None),
            ("num_heads", "INT", "REQ"),
            ("past_present_share_buffer", "INT", None),
            ("scale", "FLOAT", None),
            ("unidirectional", "INT", 0),
        ],
        {"T1": ["int8", "uint8"], "T2": ["int8", "uint8"], "T3": ["float", "float16"], "T4": ["int32"]},
    ),
    "QuantizeLinear": (
        "x:T1 y_scale:T1 y_zero_point?:T2",
        "y:T2",
        [("axis", "INT", None)],
        {"T1": ["float", "float16"], "T2": ["int16", "int4", "int8", "uint16", "uint4", "uint8"]},
    ),
    "DequantizeLinear": (
        "x:T1 x_scale:T2 x_zero_point?:T1",
        "y:T2",
        [("axis", "INT", None)],
        {"T1": ["int16", "int32", "int4", "int8", "uint16", "uint4", "uint8"], "T2": ["float", "float16"]},
    ),
    "MatMulNBits": (
        "A:T1 B:T2 scales:T1 zero_points?:T3 g_idx?:T4 bias?:T1",
        "Y:T1",
        [
            ("K", "INT", "REQ"),
            ("N", "INT", "REQ"),
            ("accuracy_level", "INT", 0),
            ("bits", "INT", 4),
            ("block_size", "INT", "REQ"),
            ("weight_prepacked", "INT", 0),
        ],
        {
            "T1": ["bfloat16", "float", "float16"],
            "T2": ["uint8"],
            "T3": ["bfloat16", "float", "float16", "uint8"],
            "T4": ["int32"],
        },
    ),
    "QLinearConv": (
        "x:T1 x_scale:tensor(float) x_zero_point:T1 w:T2 w_scale:tensor(float) w_zero_point:T2 y_scale:tensor(float) y_zero_point:T3 B?:T4",
        "y:T3",
        [
            ("auto_pad", "STRING", "NOTSET"),
            ("channels_last", "INT", 0),
            ("dilations", "INTS", None),
            ("group", "INT", 1),
            ("kernel_shape", "INTS", None),
            ("pads", "INTS", None),
            ("strides", "INTS", None),
        ],
        {"T1": ["int8", "uint8"], "T2": ["int8", "uint8"], "T3": ["int8", "uint8"], "T4": ["int32"]},
    ),
}


def register_schemas() -> None:
    """Register every schema above (once; existing ones are kept)."""
    register_table(_SCHEMAS)

"""Schemas of onnxruntime's blocked-quantization, mixture-of-experts and recurrent contrib ops
(com.microsoft) as onnxruntime 1.31.1 declares them (get_all_operator_schema()), for onnx.checker
and shape inference. Same table format and helpers as _quantize_ms_schemas (one source of truth).
Leading underscore: a helper of the contrib_moe and quantize_blocks families, not an op family."""

from __future__ import annotations

from typing import Any

from ep_cpu_reference.kernels._ms_schema import register_table

_FLOATS = ["float", "float16", "bfloat16"]
_MOE_ATTRS = [
    ("activation_alpha", "FLOAT", 1.0),
    ("activation_beta", "FLOAT", 0.0),
    ("activation_type", "STRING", "relu"),
    ("k", "INT", 1),
    ("normalize_routing_weights", "INT", 0),
    ("swiglu_fusion", "INT", 0),
    ("swiglu_limit", "FLOAT", None),
    ("use_sparse_mixer", "INT", 0),
]
_RNN_ATTRS = [
    ("activation_alpha", "FLOATS", None),
    ("activation_beta", "FLOATS", None),
    ("activations", "STRINGS", None),
    ("clip", "FLOAT", None),
    ("direction", "STRING", "forward"),
    ("hidden_size", "INT", None),
    ("input_forget", "INT", 0),
]

_SCHEMAS: dict[str, Any] = {
    "GatherBlockQuantized": (
        "data:T1 indices:Tind scales:T2 zero_points?:T1",
        "output:T2",
        [("bits", "INT", 4), ("block_size", "INT", 128), ("gather_axis", "INT", 0), ("quantize_axis", "INT", 1)],
        {
            "T1": ["int4", "uint4", "uint8", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"]
            + ["float4e2m1"],
            "T2": _FLOATS,
            "Tind": ["int32", "int64"],
        },
    ),
    "MatMulBnb4": (
        "A:T1 B:T2 absmax:T1",
        "Y:T1",
        [
            ("K", "INT", "REQ"),
            ("N", "INT", "REQ"),
            ("block_size", "INT", "REQ"),
            ("quant_type", "INT", "REQ"),
            ("training_mode", "INT", 0),
            ("transB", "INT", 1),
        ],
        {"T1": _FLOATS, "T2": ["uint8"]},
    ),
    "MatMulFpQ4": (
        "A:T1 B:T2 B_shape:T3",
        "Y:T1",
        [("blk_quant_type", "INT", 1)],
        {"T1": ["float"], "T2": ["uint8"], "T3": ["int64"]},
    ),
    "MatMulInteger16": (
        "A:T1 B:T2",
        "Y:T3",
        [],
        {"T1": ["int16", "uint16"], "T2": ["int16", "uint16"], "T3": ["int32", "uint32"]},
    ),
    "QEmbedLayerNormalization": (
        "input_ids:T1 segment_ids?:T1 word_embedding_quant:T2 position_embedding_quant:T2 segment_embedding?:T2 "
        "gamma_quant:T2 beta_quant:T2 mask?:T1 word_embedding_scale:T position_embedding_scale:T "
        "segment_embedding_scale?:T gamma_scale:T beta_scale:T word_embedding_zero_point:T2 "
        "position_embedding_zero_point:T2 segment_embedding_zero_point?:T2 gamma_zero_point:T2 beta_zero_point:T2",
        "layernorm_out:T mask_index_out:T1",
        [("epsilon", "FLOAT", 1e-12)],
        {"T1": ["int32"], "T2": ["int8", "uint8"], "T": ["float"]},
    ),
    "MoE": (
        "input:T router_probs:T fc1_experts_weights:T fc1_experts_bias?:T fc2_experts_weights:T "
        "fc2_experts_bias?:T fc3_experts_weights?:T fc3_experts_bias?:T",
        "output:T",
        _MOE_ATTRS,
        {"T": _FLOATS},
    ),
    "QMoE": (
        "input:T router_probs:T fc1_experts_weights:T1 fc1_scales?:T2 fc1_experts_bias?:T "
        "fc2_experts_weights:T1 fc2_scales?:T2 fc2_experts_bias?:T fc3_experts_weights?:T1 fc3_scales?:T2 "
        "fc3_experts_bias?:T fc1_zero_points?:T1 fc2_zero_points?:T1 fc3_zero_points?:T1 router_weights?:T "
        "fc1_global_scale?:T4 fc2_global_scale?:T4 fc1_act_scale?:T4 fc2_act_scale?:T4 "
        "fc1_act_block_scale?:T2 fc2_act_block_scale?:T2",
        "output:T",
        _MOE_ATTRS
        + [
            ("accuracy_level", "INT", 0),
            ("block_size", "INT", None),
            ("expert_weight_bits", "INT", 4),
            ("fc1_expert_weight_bits", "INT", None),
            ("fc2_expert_weight_bits", "INT", None),
            ("fc3_expert_weight_bits", "INT", None),
            ("quant_type", "STRING", "int"),
            ("weights_prepacked", "INT", -1),
        ],
        {
            "T": _FLOATS,
            "T1": ["uint8", "float8e4m3fn"],
            "T2": _FLOATS + ["float8e8m0", "float8e4m3fn"],
            "T4": ["float"],
        },
    ),
    "AttnLSTM": (
        "X:T W:T R:T B?:T sequence_lens?:T1 initial_h?:T initial_c?:T P?:T QW?:T MW?:T V?:T M?:T "
        "memory_seq_lens?:T1 AW?:T",
        "Y?:T Y_h?:T Y_c?:T",
        _RNN_ATTRS,
        {"T": ["float", "double"], "T1": ["int32"]},
    ),
}


def register_schemas() -> None:
    """Register every schema above (once; existing ones are kept)."""
    register_table(_SCHEMAS)

"""onnxruntime 1.31's schemas for the com.microsoft attention-family and sequence-model ops that
kernels/contrib_seq.py serves: input/output names and options, attribute names, kinds and defaults,
so models exported for onnxruntime check and infer the same here. Leading underscore: not an op
family (the package loader skips it)."""

from __future__ import annotations

from ep_cpu_reference.kernels._ms_schema import attr, inp, register, required_attr
from ep_cpu_reference.kernels.contrib_attention import _opt_attr, _req

FLOAT_T = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
T3 = ("T", FLOAT_T, "float tensors")
I32 = ("M", ["tensor(int32)"], "indices / lengths")


def register_schemas() -> None:
    """Register every schema once (``register`` skips names onnx already knows)."""
    register(
        "DecoderMaskedMultiHeadAttention",
        [inp("query"), inp("key", True), inp("value", True), inp("mask_index", True, "M")]
        + [inp("attention_bias", True), inp("past_key", True), inp("past_value", True)]
        + [inp("past_sequence_length", True, "M"), inp("beam_width", True, "M")]
        + [inp("cache_indirection", True, "M"), inp("bias", True)],
        [inp("output"), inp("present_key", True), inp("present_value", True), inp("qk", True, "QK")],
        [_opt_attr("output_qk", "INT"), _opt_attr("mask_filter_value", "FLOAT"), _opt_attr("scale", "FLOAT")]
        + [_opt_attr("past_present_share_buffer", "INT"), _req("num_heads")],
        "one decoding step of multi-head attention over a shared past/present KV buffer",
        [
            ("T", ["tensor(float)", "tensor(float16)"], "float tensors"),
            ("QK", ["tensor(float)", "tensor(float16)"], "qk output"),
            I32,
        ],
    )
    register(
        "SparseAttention",
        [inp("query"), inp("key", True), inp("value", True), inp("past_key"), inp("past_value")]
        + [inp("block_row_indices", type_str="M"), inp("block_col_indices", type_str="M")]
        + [inp("total_sequence_length", type_str="M"), inp("key_total_sequence_lengths", type_str="M")]
        + [inp("cos_cache", True), inp("sin_cache", True)],
        [inp("output"), inp("present_key"), inp("present_value")],
        [_opt_attr("rotary_interleaved", "INT"), _req("sparse_block_size"), _opt_attr("scale", "FLOAT")]
        + [_opt_attr("do_rotary", "INT"), _req("kv_num_heads"), _req("num_heads")],
        "block-sparse causal grouped-query attention with a shared KV buffer",
        [T3, I32],
    )
    register(
        "MRotaryEmbedding",
        [inp("input"), inp("position_ids", type_str="M"), inp("cos_cache"), inp("sin_cache")],
        [inp("output")],
        [_req_ints("mrope_section")]
        + [_opt_attr(n, "INT") for n in ("num_heads", "rotary_embedding_dim", "interleaved", "mrope_layout")]
        + [_opt_attr("is_packed_batching", "INT"), _opt_attr("scale", "FLOAT")],
        "multimodal rotary embedding: three position streams (T, H, W) share the rotary dims",
        [T3, ("M", ["tensor(int64)"], "position ids")],
    )
    register(
        "LinearAttention",
        [inp("query"), inp("key"), inp("value"), inp("past_state", True, "S"), inp("decay", True), inp("beta", True)],
        [inp("output"), inp("present_state", type_str="S")],
        [attr("chunk_size", 64), _req("kv_num_heads"), attr("state_window", 0), _req("q_num_heads")]
        + [attr("scale", 0.0), attr("update_rule", "gated_delta")],
        "linear attention recurrences (linear, gated, delta, gated_delta) with a [B, H, dk, dv] state",
        [T3, ("S", FLOAT_T, "state")],
    )
    register(
        "LinearAttentionGate",
        [inp("a"), inp("dt_bias", type_str="TF"), inp("decay_scale", type_str="TF"), inp("b", True)],
        [inp("decay"), inp("beta", True)],
        [],
        "decay = decay_scale * softplus(a + dt_bias), beta = sigmoid(b)",
        [T3, ("TF", ["tensor(float)"], "float32 parameters")],
    )
    register(
        "CausalConvWithState",
        [inp("input"), inp("weight"), inp("bias", True), inp("past_state", True)],
        [inp("output"), inp("present_state")],
        [attr("state_window", 0), attr("channels_last", 0), attr("dilation", 1), attr("ndim", 1)]
        + [attr("activation", "none")],
        "stateful causal depthwise convolution",
        [T3],
    )
    register(
        "EngramGate",
        [inp("key"), inp("query"), inp("value"), inp("key_norm_scale"), inp("query_norm_scale")]
        + [inp("conv_norm_scale", True)],
        [inp("output"), inp("gated_value_normed", True)],
        [attr("epsilon", 1e-5)],
        "Engram gate: sigmoid of the signed square root of RMSNorm(key) . RMSNorm(query), times value",
        [T3],
    )
    mix = ("M", FLOAT_T, "mixing weights")
    register(
        "HyperConnectionPreMix",
        [inp("streams"), inp("pre_mix", type_str="M")],
        [inp("output")],
        [attr("reduction_scale", 1.0), attr("num_branches", 0)],
        "reduce C hyper-connection streams to one with per-stream (or per-feature) weights",
        [T3, mix],
    )
    register(
        "HyperConnectionPostMix",
        [inp("streams"), inp("block_output"), inp("post_mix", type_str="M"), inp("stream_mix", True, "M")],
        [inp("output")],
        [attr("num_branches", 0)],
        "mix C hyper-connection streams and inject a branch output",
        [T3, mix],
    )
    ids = ("M", ["tensor(int32)", "tensor(int64)"], "token ids")
    ngram_attrs = [attr("reset_on_eos", 0), _req("pad_id"), _req("n_head_per_ngram"), _req("max_ngram_size")]
    register(
        "NGramHashMapping",
        [inp("input_ids", type_str="M"), inp("multipliers", type_str="M"), inp("vocab_sizes", type_str="M")]
        + [inp("past_ids", True, "M"), inp("head_offsets", True, "M"), inp("eos_token_id", True, "M")]
        + [inp("segment_ids", True, "tensor(int32)")],
        [inp("hash_ids", type_str="M"), inp("present_ids", True, "M")],
        ngram_attrs,
        "Engram n-gram hash ids of token ids",
        [ids],
    )
    register(
        "VarlenNGramHashMapping",
        [inp("input_ids", type_str="M"), inp("multipliers", type_str="M"), inp("vocab_sizes", type_str="M")]
        + [inp("cumulative_sequence_length", type_str="S"), inp("past_ids", True, "M"), inp("head_offsets", True, "M")]
        + [inp("eos_token_id", True, "M"), inp("segment_ids", True, "tensor(int32)")]
        + [inp("past_segment_ids", True, "S"), inp("capture_count", True, "S")],
        [inp("hash_ids", type_str="M"), inp("present_ids", True, "M"), inp("present_segment_ids", True, "S")]
        + [inp("state_update", True, "M")],
        [attr("reset_on_eos", 0), attr("state_update_capacity", 0), _req("pad_id"), _req("n_head_per_ngram")]
        + [_req("max_ngram_size")],
        "Engram n-gram hash ids over a packed batch of variable-length requests",
        [ids, ("S", ["tensor(int32)"], "lengths / segments")],
    )


def _req_ints(name: str) -> object:
    from onnx import defs

    return defs.OpSchema.Attribute(name, defs.OpSchema.AttrType.INTS, "", required=True)


def register_generation_schemas() -> None:
    """GreedySearch's and BeamSearch's schemas (kernels/contrib_generation.py)."""
    from onnx import defs

    graph = defs.OpSchema.AttrType.GRAPH
    i32 = ("I", ["tensor(int32)"], "ids / lengths")
    register(
        "GreedySearch",
        [inp("input_ids", type_str="I"), inp("max_length", type_str="I"), inp("min_length", True, "I")]
        + [inp("repetition_penalty", True), inp("vocab_mask", True, "I"), inp("prefix_vocab_mask", True, "I")]
        + [inp("attention_mask", True, "I")],
        [inp("sequences", type_str="I")],
        [attr("vocab_size", -1), required_attr("decoder", graph), _opt_attr("init_decoder", "GRAPH")]
        + [_opt_attr("encoder", "GRAPH"), attr("model_type", 0), attr("no_repeat_ngram_size", 0)]
        + [attr("decoder_start_token_id", -1), _req("pad_token_id"), _req("eos_token_id")],
        "greedy decoding over a decoder subgraph",
        [("T", ["tensor(float)"], "scores"), i32],
    )
    register(
        "BeamSearch",
        [inp("input_ids", type_str="F"), inp("max_length", type_str="I"), inp("min_length", True, "I")]
        + [inp("num_beams", type_str="I"), inp("num_return_sequences", type_str="I"), inp("length_penalty", True)]
        + [inp("repetition_penalty", True), inp("vocab_mask", True, "M"), inp("prefix_vocab_mask", True, "M")]
        + [inp("attention_mask", True, "I"), inp("decoder_input_ids", True, "I"), inp("logits_processor", True, "I")],
        [inp("sequences", type_str="I"), inp("sequences_scores", True), inp("scores", True)],
        [attr("vocab_size", -1), required_attr("decoder", graph), _opt_attr("init_decoder", "GRAPH")]
        + [_opt_attr("encoder", "GRAPH"), attr("model_type", 0), attr("no_repeat_ngram_size", 0)]
        + [attr("decoder_start_token_id", -1), attr("early_stopping", 0), _req("pad_token_id"), _req("eos_token_id")],
        "beam search over a decoder subgraph",
        [
            ("T", ["tensor(float)", "tensor(float16)"], "scores"),
            ("F", ["tensor(float)", "tensor(int32)", "tensor(float16)"], "input ids or features"),
            i32,
            ("M", ["tensor(int32)"], "masks"),
        ],
    )

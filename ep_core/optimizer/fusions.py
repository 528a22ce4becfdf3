"""Which rewrites make which ops: the table that gates a rewrite on the session's first EP.

A rewrite that turns nodes into an op the graph may not have had (a com.microsoft contrib op, or
a standard op such as Clip or HardSwish) is applied only when the first EP has a kernel for every
op it makes; otherwise the nodes would leave that EP for the fallback. Each entry names onnxscript
rules (imported when used) or ep-core's own (``own_rules``, where onnxscript has none), and the
ops its pattern contains, so a graph without any of them skips it without matching. Importable
without onnxscript: ``api`` reads the anchors before deciding to import it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MS = "com.microsoft"
INTERNAL = "ai.onnxruntime._fusion"  # onnxscript's intermediate ops (SDPA, RotaryEmbedding): no EP serves them
GQA_CONFIG = "session.enable_gqa_fusion"  # session config entry: "1" opts into the GQA fusion


@dataclass(frozen=True)
class Fusion:
    name: str
    makes: tuple[tuple[str, str], ...]  # (op_type, domain) the rewrite introduces
    anchors: frozenset[str]  # op types its pattern contains: tried only on a graph with one of them
    rules: Callable[[], Sequence[Any]]  # the rewrite rules, imported on first use
    own: bool = False  # written in ep_core.optimizer.own_rules (onnxscript has no such rule)
    min_opset: int = 0  # the ai.onnx opset the ops it makes need
    sequential: bool = False  # its rules applied one after the other (each builds on the ops the last made)
    opt_in: str = ""  # a session config entry that must be "1" (a rewrite that assumes an input contract)


def _anchors(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _rules(module: str, *names: str) -> Callable[[], Sequence[Any]]:
    """Loader of onnxscript rules: each name a rule, a rule set, or a function returning a set."""

    @functools.cache
    def load() -> Sequence[Any]:
        import importlib

        from onnxscript.rewriter import RewriteRule, RewriteRuleSet

        def flat(x: Any) -> list[Any]:
            if isinstance(x, RewriteRuleSet):
                return list(x.rules)
            return [x] if isinstance(x, RewriteRule) else flat(x())

        mod = importlib.import_module(f"onnxscript.rewriter.{module}")
        return [r for n in names for r in flat(getattr(mod, n))]

    return load


def _common(*names: str) -> Callable[[], Sequence[Any]]:
    return _rules("rules.common", *names)


def _ort(module: str, *names: str) -> Callable[[], Sequence[Any]]:
    return _rules(module, *names)


def _own(name: str, module: str = "own_rules") -> Callable[[], Sequence[Any]]:
    def load() -> Sequence[Any]:
        import importlib

        return list(getattr(importlib.import_module(f"ep_core.optimizer.{module}"), name)())

    return load


def _attention(*parts: str) -> Callable[[], Sequence[Any]]:
    """Loader of the attention-family rules (``ort_fusions``), in the order they build on each other.
    "sdpa" is onnxscript's SDPA rule refusing a match whose head count is not a known integer:
    such an SDPA could be neither fused further nor turned into MultiHeadAttention, and its
    matched nodes are gone (``passes.resolve_internal`` turns every other leftover SDPA into
    MultiHeadAttention)."""

    @functools.cache
    def load() -> Sequence[Any]:
        import importlib

        names = (
            "attention cos_sin_cache gqa gqa_packed_qkv mha mha_bias mha_scale rotary_embedding sdpa shape_optimization"
        )
        m = {n: importlib.import_module(f"onnxscript.rewriter.ort_fusions.{n}") for n in names.split()}
        sdpa = m["sdpa"]

        class KnownHeadsSDPA(sdpa.SDPA):  # type: ignore[name-defined]
            def check(
                self, context: Any, query: Any, key: Any, value: Any, mask: Any, key_format: str, **kw: Any
            ) -> Any:
                shape = getattr(query, "shape", None)
                if shape is None or shape.rank() != 4 or not isinstance(shape[1], int):
                    return sdpa.pattern.MatchResult().fail("the query's head count is not a known integer", query)
                return super().check(context, query, key, value, mask, key_format, **kw)

        sets: dict[str, Any] = {
            "shape": m["shape_optimization"].rules,
            "rotary": m["rotary_embedding"].rotary_embedding_rules,
            "cos_sin": m["cos_sin_cache"].cos_sin_cache_rules,
            "partial_rotary": m["rotary_embedding"].partial_embedding_rules,
            "sdpa": [KnownHeadsSDPA.rule()],
            "gqa": m["gqa"].gqa_rules,
            "gqa_packed": [m["gqa_packed_qkv"].packed_qkv_for_gqa_rule],
            "mha": [*m["mha"].mha_rules_with_past.rules, *m["mha"].mha_rules_no_past.rules],
            "mha_scale": m["mha_scale"]._mha_scale_rules,
            "mha_bias": m["mha_bias"].mha_bias_rules,
            "attention": m["attention"].attention_rules,
        }
        return [r for p in parts for r in getattr(sets[p], "rules", sets[p])]

    return load


# BASIC rewrites that make an op the matched nodes were not (the others only remove or merge nodes)
BASIC_GATED = (
    Fusion("Min/Max to Clip", (("Clip", ""),), _anchors("Min Max"), _own("min_max_clip_rules", "guards"), min_opset=11),
    Fusion(
        "HardSwish/HardSigmoid fusion",
        (("HardSwish", ""), ("HardSigmoid", "")),
        _anchors("HardSigmoid Clip Relu Min Max"),
        _own("hardswish_rules", "guards"),
        min_opset=14,
    ),
)


def _qdq(int8_allowed: bool) -> Callable[[], Sequence[Any]]:
    @functools.cache
    def load() -> Sequence[Any]:
        from ep_core.optimizer.qdq import qdq_rules

        return qdq_rules(int8_allowed)

    return load


# onnxruntime's QDQ selector/actions (``qdq.py``): DequantizeLinear -> op -> QuantizeLinear groups into
# integer ops; first among the EXTENDED fusions, as onnxruntime orders them. Two variants: int8 Q/DQ pairs
# turned into uint8 first (onnxruntime on x86, the default), or kept (``session.qdqisint8allowed=1``)
_QDQ_MAKES = tuple(
    (op, "" if op in ("QLinearConv", "QLinearMatMul") else MS)
    for op in "QLinearConv QLinearMatMul QLinearAdd QLinearMul QLinearSigmoid QLinearLeakyRelu QLinearAveragePool "
    "QLinearGlobalAveragePool QLinearSoftmax QLinearConcat QLinearWhere QGemm MatMulIntegerToFloat".split()
)
QDQ = {
    allowed: Fusion("QDQ fusion", _QDQ_MAKES, _anchors("QuantizeLinear DequantizeLinear"), _qdq(allowed), own=True)
    for allowed in (False, True)
}


@functools.cache
def dq_matmulnbits(accuracy: int, block_size: int) -> Fusion:
    """onnxruntime's DQ -> MatMul/Gemm to MatMulNBits (``dq_matmulnbits.py``), part of its QDQ
    transformer, at the session's accuracy level and per-channel block size."""

    def load() -> Sequence[Any]:
        from ep_core.optimizer.dq_matmulnbits import matmulnbits_rules

        return matmulnbits_rules(accuracy, block_size)

    return Fusion(NBITS, (("MatMulNBits", MS),), _anchors("DequantizeLinear"), load, own=True)


NBITS = "DQ+MatMul to MatMulNBits"

# EXTENDED: fusions into contrib ops (and LayerNormalization), in the order they build on each other
EXTENDED = (
    Fusion("Gelu fusion", (("Gelu", MS),), _anchors("Erf"), _ort("ort_fusions.erfgelu", "rules")),
    Fusion("FastGelu fusion", (("FastGelu", MS),), _anchors("Tanh"), _ort("ort_fusions.gelu", "_tanh_rule")),
    Fusion("Gelu fusion (divided form)", (("Gelu", MS),), _anchors("Erf"), _ort("ort_fusions.gelu", "_erf_rule")),
    Fusion(
        "BiasGelu fusion", (("BiasGelu", MS),), _anchors("Gelu Erf"), _ort("ort_fusions.bias_gelu", "bias_gelu_rules")
    ),
    Fusion("QuickGelu fusion", (("QuickGelu", MS),), _anchors("Sigmoid"), _own("quick_gelu_rules"), own=True),
    Fusion(
        "LayerNormalization fusion",
        (("LayerNormalization", ""),),
        _anchors("ReduceMean"),
        _ort("rules.fusion._layer_norm", "layer_normalization_ruleset"),
        min_opset=17,
    ),
    Fusion(
        "SkipLayerNormalization fusion",
        (("SkipLayerNormalization", MS),),
        _anchors("LayerNormalization ReduceMean"),
        _ort("ort_fusions.skip_normalization", "skip_layer_normalization_ruleset"),
    ),
    Fusion(
        "SimplifiedLayerNormalization fusion",
        (("SimplifiedLayerNormalization", MS),),
        _anchors("Reciprocal"),
        _ort("ort_fusions.rms_normalization", "rms_normalization_ruleset"),
    ),
    Fusion(
        "SkipSimplifiedLayerNormalization fusion",
        (("SkipSimplifiedLayerNormalization", MS),),
        _anchors("SimplifiedLayerNormalization Reciprocal"),
        _ort("ort_fusions.skip_normalization", "skip_rms_normalization_ruleset"),
    ),
    # the attention family (onnxscript's fuse_xformers order): the ops it makes in onnxscript's internal
    # domain are consumed by the next rules; what is left of them is resolved by ``passes.resolve_internal``
    Fusion("shape optimization", (), _anchors("Softmax"), _attention("shape")),
    Fusion(
        "RotaryEmbedding fusion",
        (("RotaryEmbedding", INTERNAL), ("RotaryEmbedding", MS)),
        _anchors("Neg"),
        _attention("rotary", "cos_sin", "partial_rotary"),
        sequential=True,
    ),
    Fusion(
        "GroupQueryAttention fusion",
        (("SDPA", INTERNAL), ("GroupQueryAttention", MS), ("MultiHeadAttention", MS)),
        _anchors("RotaryEmbedding"),
        _attention("sdpa", "gqa", "gqa_packed"),
        sequential=True,
        opt_in=GQA_CONFIG,
    ),
    Fusion(
        "MultiHeadAttention fusion",
        (("SDPA", INTERNAL), ("MultiHeadAttention", MS)),
        _anchors("Softmax SDPA"),  # or the SDPA the GroupQueryAttention fusion made and left
        _attention("sdpa", "mha", "mha_scale", "mha_bias"),
        sequential=True,
    ),
    Fusion("Attention fusion", (("Attention", MS),), _anchors("MultiHeadAttention"), _attention("attention")),
    Fusion(
        "FusedMatMul fusion",
        (("FusedMatMul", MS),),
        _anchors("MatMul"),
        _ort("ort_fusions.fused_matmul_rule_sets", "fused_matmul_rule_sets"),
    ),
    Fusion("FusedConv fusion", (("FusedConv", MS),), _anchors("Conv"), _own("conv_activation_rules"), own=True),
    Fusion(
        "Gemm stacking",  # independent Gemms sharing a constant B: one Gemm (gemm_stacking.py), before FusedGemm
        (("Concat", ""), ("Gemm", ""), ("Split", "")),
        _anchors("Gemm"),
        _own("gemm_stacking_passes", "gemm_stacking"),
        own=True,
    ),
    Fusion("FusedGemm fusion", (("FusedGemm", MS),), _anchors("Gemm"), _own("gemm_activation_rules"), own=True),
)

ANCHORS = frozenset().union(*(f.anchors for f in (*EXTENDED, QDQ[False])))

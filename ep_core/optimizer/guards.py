"""onnxscript's rewrite rules with the conditions they lack, each found changing a valid model's
results (or failing the optimizer, which then runs the model unoptimized) against onnxruntime:

- no-op ScatterND: any ScatterND whose indices cover the data became its updates, ``reduction``
  not read (add/mul/min gave the updates alone);
- Cast chains: ``Cast(Cast(x, float), float16)`` became one Cast whatever x was (a double then
  rounds once instead of twice: 1 + 2^-11 + 2^-40 gave 1.00098 for onnxruntime's 1.0);
- Min/Max to Clip: a NaN bound was taken for a bound (onnxruntime propagates NaN), a one-element
  bound of higher rank than x lost its broadcast dims, and an opset 6-10 model got an opset 11 Clip;
- Min/Max chains: a one-input Min or Max raised;
- HardSwish/HardSigmoid fusion: constants matched within rtol 1e-4 (a bias of 3.0003 was fused),
  and one-element constants of higher rank than x lost their broadcast dims;
- ConstantOfShape+Cast: a value the target type cannot hold raised (2^40 to int32, NaN to int);
- BatchNormalization folding: an opset 6-8 ``spatial=0`` BatchNormalization raised, and a training
  one (statistics outputs before opset 14, or training_mode) was folded as if it used its inputs;
- Pad folding: an opset 2-10 Pad (pads as an attribute) raised.

Each rule keeps onnxscript's pattern, check and rewrite; ``guarded`` adds ep-core's condition in
front of its check (onnxscript 0.7 keeps a rule's check in ``_condition_function``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult
from onnxscript.rewriter.rules import common as rules

from ep_core.optimizer.own_rules import constant

Check = Callable[..., Any]


def guarded(rule: Any, check: Check) -> Any:
    """A copy of ``rule`` that also needs ``check(context, **bindings)`` to hold."""
    out = copy.copy(rule)
    own = rule._condition_function

    def both(context: Any, **bindings: Any) -> Any:
        first = check(context, **bindings)
        return first if not first else own(context, **bindings)

    out._condition_function = both
    return out


def _rank(v: Any) -> int | None:
    shape = getattr(v, "shape", None)
    return None if shape is None else len(shape)


def _fits(x: Any, constants: list[np.ndarray]) -> bool:
    """Every constant broadcasts into x without adding dims (rank 0, or x's rank known and not lower)."""
    rank = _rank(x)
    return all(c.ndim == 0 or (rank is not None and c.ndim <= rank) for c in constants)


def _reduction_none(context: Any, data: Any, indices: Any, updates: Any, **_: Any) -> MatchResult:
    for node, i in updates.uses():
        if node.op_type == "ScatterND" and i == 2 and node.inputs[0] is data and node.inputs[1] is indices:
            if node.attributes.get_string("reduction", "none") != "none":
                return MatchResult().fail("a ScatterND with a reduction is not its updates")
    return MatchResult()


# types whose values float32 holds exactly, so rounding through float32 first changes nothing
_EXACT_IN_FLOAT = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.BOOL}
_EXACT_IN_FLOAT |= {ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16}


def _source_exact_in_float(context: Any, x: Any, **_: Any) -> MatchResult:
    if getattr(x, "dtype", None) in _EXACT_IN_FLOAT:
        return MatchResult()
    return MatchResult().fail("the source type does not round the same through float32")


def _bounds(out1: Any, out2: Any) -> list[np.ndarray] | None:
    """The constant inputs of a Min/Max pair (all but the chained value), None if one is missing."""
    first, second = out1.producer(), out2.producer()
    if len(first.inputs) < 2 or len(second.inputs) < 2:
        return None
    values = [constant(v) for v in list(first.inputs[1:]) + [v for v in second.inputs if v is not out1]]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def _min_max_chain(context: Any, out1: Any, out2: Any, **_: Any) -> MatchResult:
    if _bounds(out1, out2) is None:
        return MatchResult().fail("a Min/Max with one input, or a bound that is not a constant")
    return MatchResult()


def _min_max_clip(context: Any, x: Any, out1: Any, out2: Any, **_: Any) -> MatchResult:
    values = _bounds(out1, out2)
    if values is None:
        return MatchResult().fail("a Min/Max with one input, or a bound that is not a constant")
    if any(v.dtype.kind == "f" and np.isnan(v).any() for v in values):
        return MatchResult().fail("a NaN bound propagates in Min/Max and would not bound in Clip")
    if not _fits(x, values):
        return MatchResult().fail("a bound has dims x does not have (Clip's bounds are scalars)")
    return MatchResult()


_HARD = {"clip_min": 0.0, "clip_max": 6.0, "bias": 3.0, "divisor": 6.0}


def _hard_constants_exact(context: Any, x: Any, **bound: Any) -> MatchResult:
    values = [constant(bound[name]) for name in _HARD]
    if any(v is None or v.size != 1 for v in values):
        return MatchResult().fail("a constant of the HardSwish/HardSigmoid form is missing")
    if any(float(v.reshape(-1)[0]) != want for v, want in zip(values, _HARD.values())):  # type: ignore[union-attr]
        return MatchResult().fail("the constants are not exactly 0, 6, 3 and 6")
    if not _fits(x, values):  # type: ignore[arg-type]
        return MatchResult().fail("a constant has dims x does not have")
    return MatchResult()


def _value_fits_type(context: Any, scalar: Any = None, dtype: Any = None, **_: Any) -> MatchResult:
    if scalar is None or dtype is None:
        return MatchResult()
    value = np.asarray(scalar.value.numpy())
    target = ir.DataType(dtype.as_int()).numpy()
    with np.errstate(all="ignore"):
        cast = value.astype(target)
        same = bool(np.array_equal(cast.astype(value.dtype), value))
    if not same or (value.dtype.kind == "f" and not np.isfinite(value).all()):
        return MatchResult().fail("the value does not convert exactly to the target type")
    return MatchResult()


def _spatial(context: Any, batchnorm_out: Any, **_: Any) -> MatchResult:
    node = batchnorm_out.producer()
    if node is not None and node.attributes.get_int("spatial", 1) != 1:
        return MatchResult().fail("BatchNormalization with spatial=0 normalises per element, not per channel")
    if node is not None and (len(node.outputs) > 1 or node.attributes.get_int("training_mode", 0)):
        return MatchResult().fail(
            "a training BatchNormalization (its statistics outputs, or training_mode) uses batch statistics"
        )
    return MatchResult()


def _pads_input(context: Any, pad: Any, **_: Any) -> MatchResult:
    node = pad.producer()
    if node is None or len(node.inputs) < 2 or node.inputs[1] is None:
        return MatchResult().fail("Pad's pads are an attribute (opset 2-10)")
    return MatchResult()


def basic() -> dict[str, Any]:
    """The guarded forms of the BASIC rules ``passes.BASIC_RULES`` takes from onnxscript."""
    return {
        "no_op_static_scatter_nd_rule": guarded(rules.no_op_static_scatter_nd_rule, _reduction_none),
        "cast_cast_rule": guarded(rules.cast_cast_rule, _source_exact_in_float),
        "min_min_rule": guarded(rules.min_min_rule, _min_max_chain),
        "max_max_rule": guarded(rules.max_max_rule, _min_max_chain),
        "fuse_batchnorm_into_conv_rule": guarded(rules.fuse_batchnorm_into_conv_rule, _spatial),
        "fuse_batchnorm_into_conv_transpose_rule": guarded(rules.fuse_batchnorm_into_conv_transpose_rule, _spatial),
        "fuse_batchnorm_into_gemm_rule": guarded(rules.fuse_batchnorm_into_gemm_rule, _spatial),
        "fuse_pad_into_conv_rule": guarded(rules.fuse_pad_into_conv_rule, _pads_input),
        "cast_constant_of_shape_rule": guarded(rules.cast_constant_of_shape_rule, _value_fits_type),
    }


def min_max_clip_rules() -> list[Any]:
    return [guarded(rules.min_max_rule, _min_max_clip), guarded(rules.max_min_rule, _min_max_clip)]


def hardswish_rules() -> list[Any]:
    """onnxscript's HardSwish/HardSigmoid rules; those matching Add/Clip/Div constants exactly."""
    out = []
    for rule in rules.fuse_hardswish_rules().rules:
        takes_constants = rule.name in ("HardSwishFusion", "HardSigmoidFusion")
        out.append(guarded(rule, _hard_constants_exact) if takes_constants else rule)
    return out

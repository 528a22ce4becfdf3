"""The rewrites onnxscript does not have, written with its pattern API (as onnxruntime makes them):

- Add/Sub of 0 and Mul/Div by 1 removed only when the constant is exactly that: onnxscript's
  no-op rules match within abs 1e-8 / rel 1e-5, so they took the guard of ``Log(x + 1e-8)`` for 0
  and removed it (-inf where onnxruntime, whose NoopElimination compares exactly, gives -18.4);
- Relu/Clip chains merged into one Clip only where the result is the same clamp (``_Clamps``:
  onnxscript's rules dropped the bounds of attribute-form Clips);
- Conv followed by Add or Mul of a per-channel constant, folded into the Conv's bias and weights
  (onnxruntime's ConvAddFusion and ConvMulFusion; onnxscript's conv-affine rule needs both, with
  scalar constants);
- Conv, Conv + Add of a same-shaped tensor, and Gemm, followed by an activation, made one
  com.microsoft FusedConv (with its Z input) or FusedGemm (onnxruntime's ConvActivationFusion,
  ConvAddActivationFusion and GemmActivationFusion). float32 only, as onnxruntime's CPU kernels;
- x * Sigmoid(x) and x * Sigmoid(alpha * x), alpha a scalar constant, made one com.microsoft
  QuickGelu (onnxruntime's QuickGeluFusion: the SiLU of YOLO-style detectors). float32 only: the
  CPU kernel onnxruntime has."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, _pattern_ir, pattern

MS = "com.microsoft"
_F32 = float(np.finfo(np.float32).max)
# activation -> its attributes with their defaults, as FusedConv's activation_params (MLAS)
CONV_ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "LeakyRelu": (("alpha", 0.01),),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Clip": (),  # its min and max: constant inputs (opset 11+) or attributes
}
# activation -> attributes as FusedGemm's activation_alpha/_beta/_gamma (onnxruntime's functors)
GEMM_ACTIVATIONS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "Softsign": (),
    "Softplus": (),
    "LeakyRelu": (("alpha", "activation_alpha", 0.01),),
    "Elu": (("alpha", "activation_alpha", 1.0),),
    "ThresholdedRelu": (("alpha", "activation_alpha", 1.0),),
    "HardSigmoid": (("alpha", "activation_alpha", 0.2), ("beta", "activation_beta", 0.5)),
    "Selu": (
        ("alpha", "activation_alpha", 1.6732632423543772),
        ("gamma", "activation_gamma", 1.0507009873554805),
    ),
}


def _float_attr(node: ir.Node, name: str, default: float) -> float:
    a = node.attributes.get(name)
    return default if a is None else float(a.as_float())


def constant(v: ir.Value | None) -> np.ndarray | None:
    """The value of a constant that is not a graph input (a feed could override it): the one
    reading of constants for ep-core's rules (own, guards, QDQ, MatMulNBits)."""
    if v is None or v.const_value is None or v.is_graph_input():
        return None
    return np.asarray(v.const_value.numpy())


def clip_bounds(node: ir.Node, big: float = _F32) -> list[float] | None:
    """[min, max] of a Clip whose bounds are constants (absent: -big and big, the lowest and largest
    values of its type, float32's by default, as onnxruntime and the spec take them); None when one
    is not a constant, or is NaN (which onnxruntime's Clip ignores, so no fused form may take it for
    a bound)."""
    bounds = [-big, big]
    if node.attributes.get("min") is not None or node.attributes.get("max") is not None:
        bounds = [_float_attr(node, "min", -big), _float_attr(node, "max", big)]
    for i in (1, 2):
        if len(node.inputs) > i and node.inputs[i] is not None:
            c = constant(node.inputs[i])
            if c is None or c.size != 1:
                return None
            bounds[i - 1] = float(c.reshape(()))
    return None if any(math.isnan(b) for b in bounds) else bounds


class _Clamps(pattern.RewriteRuleClassBase):
    """Two clamps in a row (Relu, or Clip with constant bounds) -> one Clip with the bounds'
    intersection, as onnxruntime's Relu/Clip fusion. onnxscript's successive Clip/Relu rules are
    not used: they read a Clip's bounds from its inputs only (the two attribute-form Clips of an
    opset 6-10 model became one unbounded Clip), wrote an opset 11 Clip into such models, and
    merged clamps whose intervals do not meet (Relu(Clip(x, -5, -1)) is 0, the merged Clip -1)."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first}{second}Fusion")
        self.first, self.second = first, second
        self.legacy = False

    def pattern(self, op: Any, x: Any) -> Any:
        y = getattr(op, self.first)(x, _allow_other_inputs=True, _outputs=["first_out"])
        return getattr(op, self.second)(y, _allow_other_inputs=True, _outputs=["second_out"])

    def _merged(self, kw: dict[str, Any]) -> list[float] | None:
        """The one clamp's [min, max] (an absent bound is its type's largest value), or None."""
        if not _is_float(kw["x"]):
            return None
        big = float(np.finfo(kw["x"].dtype.numpy()).max)
        first, second = (
            [0.0, math.inf] if o.producer().op_type == "Relu" else clip_bounds(o.producer(), big)
            for o in (kw["first_out"], kw["second_out"])
        )
        if first is None or second is None:
            return None
        lo, hi = max(first[0], second[0]), min(first[1], second[1])
        return [lo, min(hi, big)] if lo <= hi else None

    def check(self, op: Any, *args: Any, **kw: Any) -> MatchResult:  # op: the match context
        imports = op.model.opset_imports
        self.legacy = int(imports.get("", imports.get("ai.onnx", 0))) < 11
        if self._merged(kw) is None:
            return MatchResult().fail("a bound is not a constant, is NaN, or the intervals do not meet")
        return MatchResult()

    def rewrite(self, op: Any, x: ir.Value, **kw: Any) -> Any:
        """The Clip in the model's form, a bound at its type's extreme left out (a float attribute
        cannot hold a double's)."""
        merged = self._merged({"x": x, **kw})
        assert merged is not None and x.dtype is not None  # check() held
        dtype = x.dtype.numpy()
        big = float(np.finfo(dtype).max)
        given = {n: b for n, b in zip(("min", "max"), merged) if abs(b) != big}
        if self.legacy:
            return op.Clip(x, **given)
        bound = {n: op.initializer(ir.tensor(np.array(b, dtype)), name=f"{x.name}_{n}") for n, b in given.items()}
        return op.Clip(x, bound.get("min"), bound.get("max")) if bound else op.Clip(x)


@functools.cache
def clamp_rules() -> list[Any]:
    """Relu then Clip, Clip then Relu, Clip then Clip -> one Clip (``_Clamps``)."""
    return [_Clamps.rule(a, b) for a, b in (("Relu", "Clip"), ("Clip", "Relu"), ("Clip", "Clip"))]


class _ConvAffine(pattern.RewriteRuleClassBase):
    """Conv then Add/Mul of a per-channel constant -> one Conv (weights and bias folded)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"Conv{kind}Fusion")
        self.kind = kind

    def pattern(self, op: Any, x: Any, c: Any) -> Any:
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Add(conv, c) if self.kind == "Add" else op.Mul(conv, c)

    def check(self, op: Any, *args: Any, **kw: Any) -> MatchResult:
        result, c, conv_out = MatchResult(), kw["c"], kw["conv_out"]
        conv = conv_out.producer()
        assert conv is not None
        w = conv.inputs[1] if len(conv.inputs) > 1 else None
        weights = [w] + ([conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] is not None else [])
        if any(constant(v) is None or not v.is_initializer() for v in weights):  # type: ignore[union-attr]
            return result.fail("Conv weights or bias are not constant initializers")
        if any(u is not conv for v in weights for u, _ in v.uses()):  # type: ignore[union-attr]
            return result.fail("Conv weights or bias are shared with another node")
        k, wv = constant(c), constant(w)
        assert wv is not None
        if k is None or k.dtype != wv.dtype or wv.dtype.kind != "f" or k.ndim > wv.ndim:
            return result.fail("the other operand is not a float constant of the Conv's type")
        dims = (1,) * (wv.ndim - k.ndim) + k.shape  # as broadcast against (N, M, spatial...)
        if any(d != 1 for i, d in enumerate(dims) if i != 1) or dims[1] not in (1, wv.shape[0]):
            return result.fail("the constant is not per output channel")
        return result

    def rewrite(self, op: Any, x: Any, c: Any, conv_out: ir.Value, **_: Any) -> Any:
        conv = conv_out.producer()
        assert conv is not None
        w = conv.inputs[1]
        assert w is not None
        wv, k = constant(w), constant(c)
        assert wv is not None and k is not None
        per_channel = np.broadcast_to(k.reshape(-1), (wv.shape[0],)).astype(wv.dtype)
        b = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = constant(b) if b is not None else np.zeros(wv.shape[0], wv.dtype)
        assert bias is not None
        if self.kind == "Mul":
            wv = wv * per_channel.reshape((-1,) + (1,) * (wv.ndim - 1))
            bias = bias * per_channel
        else:
            bias = bias + per_channel
        new_w = op.initializer(ir.tensor(wv.astype(k.dtype)), name=w.name)
        new_b = op.initializer(
            ir.tensor(bias.astype(k.dtype)), name=b.name if b is not None else f"{conv_out.name}_bias"
        )
        return op.Conv(x, new_w, new_b, **conv.attributes)


def _exactly(value: float) -> Any:
    """A pattern matching a scalar constant equal to ``value``, with no tolerance."""
    return _pattern_ir.Constant(value, rel_tol=0.0, abs_tol=0.0)


def _identity(op: Any, x: ir.Value, **_: Any) -> ir.Value:
    return op.Identity(x)


@functools.cache
def exact_no_op_rules() -> list[Any]:
    """x + 0, x - 0, x * 1, x / 1 (the constant exactly that, a scalar) -> x."""
    return [
        pattern.RewriteRule(lambda op, x: op.Add(x, _exactly(0)), _identity, name="Add 0"),
        pattern.RewriteRule(lambda op, x: op.Sub(x, _exactly(0)), _identity, name="Sub 0"),
        pattern.RewriteRule(lambda op, x: op.Mul(x, _exactly(1)), _identity, name="Mul by 1"),
        pattern.RewriteRule(lambda op, x: op.Div(x, _exactly(1)), _identity, name="Div by 1"),
    ]


class _DropoutElimination(pattern.RewriteRuleClassBase):
    """Dropout -> Identity when its mask is not used, whatever ``ratio`` and ``training_mode``, when
    another node feeds it and its output is not a graph output: as onnxruntime's EliminateDropout
    at level 1 (a train-mode GPT-2 export's seven Dropouts dropped at random, so greedy tokens
    changed run to run, where onnxruntime passes the values through). onnxscript's rules match only
    a ratio of 0 or training_mode false."""

    def pattern(self, op: Any, x: Any) -> Any:
        return op.Dropout(x, _allow_other_inputs=True, _outputs=["out"])

    def check(self, op: Any, *args: Any, **kw: Any) -> MatchResult:
        node = kw["out"].producer()
        mask = node.outputs[1] if node is not None and len(node.outputs) > 1 else None
        if mask is not None and (mask.is_graph_output() or mask.uses()):
            return MatchResult().fail("the mask output is used")
        if kw["x"].producer() is None or kw["out"].is_graph_output():  # as onnxruntime's (measured)
            return MatchResult().fail("the input is not another node's, or the output is a graph output")
        return MatchResult()

    def rewrite(self, op: Any, x: ir.Value, **_: Any) -> Any:
        return op.Identity(x)


@functools.cache
def dropout_rules() -> list[Any]:
    return [_DropoutElimination.rule()]


@functools.cache
def conv_affine_rules(op: str) -> list[Any]:
    """Conv followed by Add (``op`` 'Add') or Mul of a per-channel constant, folded into the Conv."""
    return [_ConvAffine.rule(op)]


def _is_f32(v: Any) -> bool:
    return isinstance(v, ir.Value) and v.dtype == ir.DataType.FLOAT


def _is_float(v: Any) -> bool:
    return isinstance(v, ir.Value) and v.dtype is not None and v.dtype.is_floating_point()


class _ConvActivation(pattern.RewriteRuleClassBase):
    """Conv (+ Add of a same-shaped Z) then an activation -> com.microsoft FusedConv."""

    def __init__(self, act: str, with_z: bool) -> None:
        super().__init__(f"FusedConv{'Add' if with_z else ''}{act}")
        self.act, self.with_z = act, with_z

    def pattern(self, op: Any, x: Any, z: Any) -> Any:
        y = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        if self.with_z:
            y = op.Add(y, z)
        return getattr(op, self.act)(y, _allow_other_inputs=True, _outputs=["act_out"])

    def check(self, op: Any, *args: Any, **kw: Any) -> MatchResult:
        result, x, z, conv_out, act_out = MatchResult(), kw["x"], kw.get("z"), kw["conv_out"], kw["act_out"]
        if not _is_f32(x) or not _is_f32(act_out):
            return result.fail("FusedConv is fused for float32 only")
        if self.with_z:
            zs, ys = getattr(z, "shape", None), conv_out.shape
            if zs is None or ys is None or not zs.is_static() or not ys.is_static() or tuple(zs) != tuple(ys):
                return result.fail("Z's shape is not the Conv output's (both known)")
        act = act_out.producer()
        if self.act == "Clip" and (act is None or clip_bounds(act) is None):
            return result.fail("Clip bounds are not constants")
        return result

    def rewrite(self, op: Any, x: Any, z: Any, conv_out: ir.Value, act_out: ir.Value, **_: Any) -> Any:
        conv, act = conv_out.producer(), act_out.producer()
        assert conv is not None and act is not None
        if self.act == "Clip":
            params = clip_bounds(act)
        else:
            params = [_float_attr(act, name, default) for name, default in CONV_ACTIVATIONS[self.act]]
        ins = list(conv.inputs) + [None] * (3 - len(conv.inputs))
        extra = {"activation_params": params} if params else {}
        args = ins[:3] + ([z] if self.with_z else [])
        return op.FusedConv(*args, activation=self.act, **extra, **conv.attributes, _domain=MS)


@functools.cache
def conv_activation_rules() -> list[Any]:
    rules = []
    for act in CONV_ACTIVATIONS:
        rules += _ConvActivation.rule(act, True).commute() + [_ConvActivation.rule(act, False)]
    return rules


class _GemmActivation(pattern.RewriteRuleClassBase):
    """Gemm then an activation -> com.microsoft FusedGemm."""

    def __init__(self, act: str) -> None:
        super().__init__(f"FusedGemm{act}")
        self.act = act

    def pattern(self, op: Any, a: Any) -> Any:
        y = op.Gemm(a, _allow_other_inputs=True, _outputs=["gemm_out"])
        return getattr(op, self.act)(y, _outputs=["act_out"])

    def check(self, op: Any, *args: Any, **kw: Any) -> MatchResult:
        result = MatchResult()
        if not _is_f32(kw["a"]) or not _is_f32(kw["act_out"]):
            return result.fail("FusedGemm is fused for float32 only")
        return result

    def rewrite(self, op: Any, a: Any, gemm_out: ir.Value, act_out: ir.Value, **_: Any) -> Any:
        gemm, act = gemm_out.producer(), act_out.producer()
        assert gemm is not None and act is not None
        params = {to: _float_attr(act, name, default) for name, to, default in GEMM_ACTIVATIONS[self.act]}
        return op.FusedGemm(*gemm.inputs, activation=self.act, **params, **gemm.attributes, _domain=MS)


@functools.cache
def gemm_activation_rules() -> list[Any]:
    return [_GemmActivation.rule(act) for act in GEMM_ACTIVATIONS]


class _QuickGelu(pattern.RewriteRuleClassBase):
    """x * Sigmoid(x) (alpha 1) or x * Sigmoid(x * alpha), alpha a scalar constant -> QuickGelu. The
    Sigmoid (and the scaling Mul) must have no other reader, which the pattern API checks."""

    def __init__(self, scaled: bool) -> None:
        super().__init__(f"QuickGelu{'Scaled' if scaled else ''}")
        self.scaled = scaled

    def pattern(self, op: Any, x: Any, alpha: Any) -> Any:
        return op.Mul(x, op.Sigmoid(op.Mul(x, alpha) if self.scaled else x))

    def check(self, op: Any, x: Any, alpha: Any = None, **_: Any) -> MatchResult:
        result = MatchResult()
        if not _is_f32(x):
            return result.fail("QuickGelu is fused for float32 only")
        if self.scaled:
            value = constant(alpha)
            if value is None or value.size != 1 or value.ndim > 1 or value.dtype.kind != "f":
                return result.fail("alpha is not a scalar float constant")
        return result

    def rewrite(self, op: Any, x: Any, alpha: Any = None, **_: Any) -> Any:
        value = 1.0 if not self.scaled else float(np.float32(constant(alpha).reshape(-1)[0]))  # type: ignore[union-attr]
        return op.QuickGelu(x, alpha=value, _domain=MS)


@functools.cache
def quick_gelu_rules() -> list[Any]:
    return [*_QuickGelu.rule(True).commute(), *_QuickGelu.rule(False).commute()]

"""QDQ fusions: DequantizeLinear -> op -> QuantizeLinear groups made integer ops, as onnxruntime's
QDQ transformers make them (qdq_transformer/selectors_actions: qdq_selector_action_transformer.cc,
qdq_selectors.cc, qdq_actions.cc; qdq_s8_to_u8.cc; qdq_final_cleanup.cc), written with onnxscript's
pattern API. onnxruntime runs them at Level 2 (ORT_ENABLE_EXTENDED), all of them: the data-movement
"drop" rules too (they are selector/actions of QDQSelectorActionTransformer, a Level 2 transformer);
Level 1 only prepares the groups (QDQPropagation, EnsureUniqueDQForNodeUnit, DoubleQDQPairsRemover).

``qdq_rules(int8_allowed)`` returns, in the order they must be tried:

- ``QDQS8ToU8``: a QuantizeLinear -> DequantizeLinear pair with int8 zero points becomes uint8
  (zero point + 128, the same real values), as QDQS8ToU8Transformer does on x86 before the fusions
  (``int8_allowed=False``: onnxruntime's QDQIsInt8Allowed() is false off ARM, so int8 activations
  are fused only once converted). A pair is converted when the Q feeds exactly one DQ once
  EnsureUniqueDQForNodeUnit has given each consumer of a DQ its own copy: the DQ has one consumer.
  Each pair is judged once, on the graph as it was, and fusions touching a pair wait for its
  conversion, so the outcome does not depend on the order the rules meet the nodes.
- ``QLinear<Op>`` (UnaryReplaceWithQLinear, BinaryReplaceWithQLinear, VariadicReplaceWithQLinear,
  ConvReplaceWithQLinear, MatMulReplaceWithQLinear, GemmReplaceWithQuant, WhereReplaceWithQLinear):
  AveragePool, GlobalAveragePool, LeakyRelu, Sigmoid, Softmax -> QLinear* (com.microsoft);
  Add, Mul -> QLinearAdd/QLinearMul; Concat -> QLinearConcat; Conv -> QLinearConv; MatMul ->
  QLinearMatMul; Gemm -> QGemm; Where -> QLinearWhere. A Relu or Clip between the op and its Q is
  absorbed when the Q's range already clips (IsClipMadeRedundantByQ); one that does not stops the
  fusion, as there.
- ``MatMulIntegerToFloat`` / ``QGemm (float output)``: DQ -> MatMul or Gemm with no Q after it.
- ``DropQDQ<Op>`` (MergeIntoTargetFixed with DropQDQNodesSelector): DQ -> data movement -> Q with
  the same constant scalar scale and zero point runs on the integers: Expand, Flatten, Gather,
  GatherElements, Reshape, Slice, Squeeze, Tile, Transpose, Unsqueeze (8 and 16 bit), Resize
  (8 bit), MaxPool (opset 12+: 1.31 drops MaxPool-22 too), ReduceMax, ReduceMin (8 bit, positive scale).
- ``DropDQArgMax`` (DropDQNodesSelector): DQ -> ArgMax runs ArgMax on the integers.
- ``QDQFinalCleanup``: DQ -> Q with the same constant scale and zero point removed (onnxruntime's
  default cleanup; its optional Q -> DQ removal is off by default and not mirrored).

The selection rules are onnxruntime's: the quantized types of a group's DQ inputs and Q output
match (int8 activations with int8 weights only when int8 is allowed; uint8 activations with int8
or uint8 weights), no 16- or 4-bit types in QLinear ops, Conv/Gemm bias int32 (Gemm with beta 1),
every input of the op from a DQ, the op's output consumed by the Q alone and not a graph output,
Q/DQ of the ai.onnx domain. Per-channel weight scales pass (QLinearConv, QLinearMatMul, QGemm);
activation scales must be float32 scalars (the QLinear kernels read one scale), which onnxruntime
does not check but its kernels require. A DQ shared with other consumers stays for them (onnxruntime
duplicates it per consumer), so the rules do not remove matched nodes; the rule set's unused-node
sweep removes what is left. Not mirrored: Split's group (SplitReplaceWithQuant), QDQPropagation,
DoubleQDQPairsRemover, com.microsoft Q/DQ, 16-bit groups. Weight-only DQ -> MatMul/Gemm to MatMulNBits
is its own fusion (``dq_matmulnbits.py``), run beside these."""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from ep_core.optimizer.own_rules import clip_bounds, constant

MS = "com.microsoft"
_ONNX = ("", "ai.onnx")
_DT = ir.DataType
_8BIT = (_DT.INT8, _DT.UINT8)
_16BIT = (_DT.INT16, _DT.UINT16)
_RANGE = {_DT.INT8: (-128, 127), _DT.UINT8: (0, 255), _DT.INT16: (-32768, 32767), _DT.UINT16: (0, 65535)}

UNARY = ("AveragePool", "GlobalAveragePool", "LeakyRelu", "Sigmoid", "Softmax")
DROP_QDQ: tuple[str, ...] = ("Expand", "Flatten", "Gather", "GatherElements", "Reshape", "Slice", "Squeeze")
DROP_QDQ += ("Tile", "Transpose", "Unsqueeze")
DROP_8BIT = ("Resize",)
DROP_POSITIVE = ("MaxPool", "ReduceMax", "ReduceMin")


# ------------------------------------------------------------------------------- small helpers
def _is(node: ir.Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in _ONNX


def _zp(node: ir.Node) -> ir.Value | None:
    return node.inputs[2] if len(node.inputs) > 2 else None


def _q_type(q: ir.Node) -> ir.DataType | None:
    """The type a QuantizeLinear makes: its zero point's, else output_dtype, else uint8."""
    zp = _zp(q)
    if zp is not None:
        return zp.dtype
    attr = q.attributes.get("output_dtype")
    return _DT(attr.as_int()) if attr is not None and attr.as_int() else _DT.UINT8


def _dq_type(dq: ir.Node) -> ir.DataType | None:
    """The quantized type a DequantizeLinear reads (its zero point's type is the same)."""
    zp = _zp(dq)
    if zp is not None and zp.dtype is not None:
        return zp.dtype
    x = dq.inputs[0]
    if x is not None and x.dtype is not None:
        return x.dtype
    src = x.producer() if x is not None else None
    return _q_type(src) if src is not None and _is(src, "QuantizeLinear") else None


def _scalar(v: ir.Value | None) -> np.ndarray | None:
    """A constant scalar (rank 0 or shape [1]), as onnxruntime's IsScalar + constant initializer."""
    c = constant(v)
    return c if c is not None and c.ndim <= 1 and c.size == 1 else None


def _same_graph_uses(v: ir.Value) -> list[tuple[ir.Node, int]]:
    return [(n, i) for n, i in v.uses() if n.graph is v.graph]


def _dq_copies(dq: ir.Node) -> int:
    """How many DQ nodes EnsureUniqueDQForNodeUnit leaves for ``dq``: one per consumer input in its
    graph, plus the original where it also gives a graph output or a subgraph's input."""
    out = dq.outputs[0]
    explicit = len(_same_graph_uses(out))
    keep = out.is_graph_output() or explicit < len(list(out.uses()))
    return max(1, explicit + int(keep))


def _dq_producing(v: ir.Value | None, graph: Any) -> ir.Node | None:
    src = v.producer() if v is not None else None
    return src if src is not None and _is(src, "DequantizeLinear") and src.graph is graph else None


# ------------------------------------------------------------------- QDQS8ToU8Transformer
_PAIRS: weakref.WeakKeyDictionary[ir.Node, Any] = weakref.WeakKeyDictionary()


def _s8_partner(q: ir.Node) -> ir.Node | None:
    """The DQ converted to uint8 with Q ``q`` by QDQS8ToU8Transformer, judged once (the first time
    asked, before any fusion near it changed the graph) and remembered."""
    if q in _PAIRS:
        found = _PAIRS[q]
        return found() if found is not None else None
    dq = _judge_pair(q)
    _PAIRS[q] = weakref.ref(dq) if dq is not None else None
    return dq


def _judge_pair(q: ir.Node) -> ir.Node | None:
    out = q.outputs[0]
    uses = list(out.uses())
    if len(q.inputs) != 3 or out.is_graph_output() or len(uses) != 1:
        return None
    dq, index = uses[0]
    if not _is(dq, "DequantizeLinear") or index != 0 or dq.graph is not q.graph or len(dq.inputs) != 3:
        return None
    if _dq_copies(dq) != 1:  # the Q would feed one DQ per consumer: more than one edge
        return None
    zq, zd = _scalar(q.inputs[2]), _scalar(dq.inputs[2])
    if zq is None or zd is None or zq.dtype != np.int8 or zd.dtype != np.int8 or int(zq.item()) != int(zd.item()):
        return None
    return dq


class _Rules:
    """What a rule set shares: whether int8 activations are allowed (no S8->U8 conversion)."""

    def __init__(self, int8_allowed: bool) -> None:
        self.int8_allowed = int8_allowed

    def pending(self, qs: list[ir.Node], dqs: list[ir.Node]) -> bool:
        """A Q or DQ of the group still waits for its S8->U8 conversion (which comes first)."""
        if self.int8_allowed:
            return False
        if any(_s8_partner(q) is not None for q in qs):
            return True
        srcs = [(dq, dq.inputs[0].producer() if dq.inputs[0] is not None else None) for dq in dqs]
        return any(_is(s, "QuantizeLinear") and _s8_partner(s) is dq for dq, s in srcs)  # type: ignore[arg-type]


class _S8ToU8(pattern.RewriteRuleClassBase):
    def __init__(self, shared: _Rules) -> None:
        super().__init__("QDQS8ToU8")
        self.shared = shared

    def pattern(self, op: Any, x: Any, s: Any, zp: Any, s2: Any, zp2: Any) -> Any:
        q = op.QuantizeLinear(x, s, zp, _outputs=["q"])
        return op.DequantizeLinear(q, s2, zp2, _outputs=["dq"])

    def check(self, context: Any, q: ir.Value, dq: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        qn, dqn = q.producer(), dq.producer()
        if self.shared.int8_allowed or qn is None or _s8_partner(qn) is not dqn:
            return result.fail("not an int8 Q -> DQ pair onnxruntime converts")
        return result

    def rewrite(self, op: Any, x: Any, s: Any, zp: ir.Value, s2: Any, q: ir.Value, dq: ir.Value, **_: Any) -> Any:
        qn, dqn = q.producer(), dq.producer()
        assert qn is not None and dqn is not None
        v = constant(zp)
        assert v is not None
        zp_u8 = op.Constant(value=ir.tensor((v.astype(np.int16) + 128).astype(np.uint8)))
        attrs = {k: a for k, a in qn.attributes.items() if k != "output_dtype"}
        new_q = _typed(op.QuantizeLinear(x, s, zp_u8, **attrs), _DT.UINT8, q)
        return _typed(op.DequantizeLinear(new_q, s2, zp_u8, **dqn.attributes), dq.dtype, dq)


# ----------------------------------------------------------------------- group selection
def _opset(context: Any) -> int:
    imports = context.model.opset_imports
    return int(imports.get("", imports.get("ai.onnx", 0)))


def _clip_redundant(clip: ir.Node, q: ir.Node) -> bool:
    """IsClipMadeRedundantByQ: Relu when the Q's zero point is its type's minimum, Clip when its
    quantized bounds cover the type's range."""
    scale, zp = _scalar(q.inputs[1]), _zp(q)
    zpv = _scalar(zp) if zp is not None else np.zeros((), np.uint8)
    if scale is None or scale.dtype != np.float32 or zpv is None or (zp is not None and constant(zp).ndim != 0):  # type: ignore[union-attr]
        return False
    qt = _q_type(q)
    if qt not in _RANGE:
        return False
    lo, hi = _RANGE[qt]
    z = int(zpv.item())
    if clip.op_type == "Relu":
        return z == lo
    bounds = clip_bounds(clip)
    if bounds is None:
        return False
    s = np.float32(scale.item())
    qmin = int(np.rint(np.float32(bounds[0]) / s)) + z
    qmax = int(np.rint(np.float32(bounds[1]) / s)) + z
    return qmin <= lo and qmax >= hi


def _single_use(v: ir.Value) -> ir.Node | None:
    uses = list(v.uses())
    return uses[0][0] if len(uses) == 1 and uses[0][1] == 0 and not v.is_graph_output() else None


def _output_q(t: ir.Node, q: ir.Node, clip: ir.Node | None) -> str:
    """CheckQDQNodes on the output side: ``t`` has one output, consumed by the Q alone (through
    the redundant Relu/Clip if any), not a graph output. '' when it holds, else why not."""
    if len([o for o in t.outputs if o is not None]) != 1:
        return "the op has more than one output"
    after = clip if clip is not None else q
    if _single_use(t.outputs[0]) is not after:
        return "the op's output has other consumers or is a graph output"
    if clip is not None and (_single_use(clip.outputs[0]) is not q or not _clip_redundant(clip, q)):
        return "the Relu/Clip before the Q is not made redundant by it"
    return ""


def _input_dqs(t: ir.Node) -> list[ir.Node | None]:
    return [_dq_producing(v, t.graph) if v is not None else None for v in t.inputs]


def _numel(shape: Any) -> int | None:
    """Elements of a shape whose dims are all known, else None (onnx-ir's Shape has no size())."""
    dims = list(shape) if shape is not None else None
    return math.prod(dims) if dims is not None and all(isinstance(d, int) for d in dims) else None


def _float_scales(nodes: list[ir.Node], scalar: list[ir.Node]) -> bool:
    if any(n.inputs[1] is None or n.inputs[1].dtype not in (None, _DT.FLOAT) for n in nodes):
        return False
    for n in scalar:
        c = constant(n.inputs[1])
        scale = n.inputs[1]
        assert scale is not None  # refused just above
        size = c.size if c is not None else _numel(scale.shape)
        if size != 1:
            return False
    return True


def _zero_or(op: Any, node: ir.Node, dtype: ir.DataType) -> Any:
    """The node's zero point, or a zero of its type (SetOptionalZeroPoint)."""
    zp = _zp(node)
    return zp if zp is not None else op.Constant(value=ir.tensor(np.zeros((), dtype.numpy())))


def _qin(op: Any, dq: ir.Node) -> list[Any]:
    """A DQ's (x, scale, zero point), the inputs a QLinear op takes for it."""
    return [dq.inputs[0], dq.inputs[1], _zero_or(op, dq, _dq_type(dq) or _DT.UINT8)]


def _typed(v: Any, dtype: ir.DataType | None, like: ir.Value | None) -> Any:
    """``v`` with the type and shape of the value it replaces (contrib ops have no inference here)."""
    if dtype is not None:
        v.dtype = dtype
    if like is not None and like.shape is not None:
        v.shape = like.shape
    return v


def _qout(op: Any, q: ir.Node) -> list[Any]:
    return [q.inputs[1], _zero_or(op, q, _q_type(q) or _DT.UINT8)]


# ---------------------------------------------------------------------- QLinear fusions
class _QLinear(pattern.RewriteRuleClassBase):
    """DQ inputs -> ``op_type`` (-> redundant Relu/Clip) -> Q, made the op's integer form."""

    def __init__(self, shared: _Rules, op_type: str, kind: str, clip: str | None) -> None:
        super().__init__(f"QLinear{op_type}{'+' + clip if clip else ''}", remove_nodes=False)
        self.shared, self.op_type, self.kind, self.clip = shared, op_type, kind, clip

    def pattern(self, op: Any, x: Any) -> Any:
        y = getattr(op, self.op_type)(x, _allow_other_inputs=True, _outputs=["t_out"])
        if self.clip == "Relu":
            y = op.Relu(y)
        elif self.clip == "Clip":
            y = op.Clip(y, _allow_other_inputs=True)
        return op.QuantizeLinear(y, _allow_other_inputs=True, _outputs=["q_out"])

    def check(self, context: Any, x: Any, t_out: ir.Value, q_out: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        t, q = t_out.producer(), q_out.producer()
        assert t is not None and q is not None
        clip = q.inputs[0].producer() if self.clip else None  # type: ignore[union-attr]
        why = (
            _output_q(t, q, clip)
            or self._inputs(t, q)
            or ("" if not self.shared.pending([q], self._dqs(t)) else "S8->U8 first")
        )
        return result.fail(why) if why else result

    def _dqs(self, t: ir.Node) -> list[ir.Node]:
        return [d for d in _input_dqs(t) if d is not None]

    def _inputs(self, t: ir.Node, q: ir.Node) -> str:
        """The selector's input-side and type rules for this kind of op ('' when they hold)."""
        dqs, actual = _input_dqs(t), [v for v in t.inputs if v is not None]
        found = [d for d in dqs if d is not None]
        if self.kind == "where":
            if len(found) != 2 or dqs[0] is not None or len(t.inputs) != 3:
                return "Where needs DQ on both values"
        elif self.kind == "unary":
            if len(found) != 1 or dqs[0] is None:
                return "the input is not from a DQ"
        elif len(found) != len(actual) or (self.kind == "binary" and len(found) != 2):
            return "not every input is from a DQ"
        types = [_dq_type(d) for d in found]
        qt = _q_type(q)
        act = found[0] if self.kind != "where" else found[0]
        if qt not in _8BIT or types[0] != qt:
            return "the activation's and the output's quantized types differ (or are not 8-bit)"
        if self.kind in ("unary", "binary", "variadic", "where") and any(tt != qt for tt in types):
            return "the inputs' quantized types differ"
        if self.kind in ("conv", "matmul", "gemm"):
            w = types[1]
            if w not in _8BIT:
                return "the weight is not 8-bit"
            if types[0] == _DT.INT8 and (w != _DT.INT8 or (self.kind != "gemm" and not self.shared.int8_allowed)):
                return "int8 activations are not fused here (onnxruntime's QDQIsInt8Allowed is false off ARM)"
            if len(found) == 3 and types[2] != _DT.INT32:
                return "the bias is not int32"
            if self.kind == "gemm" and len(found) == 3:
                beta = t.attributes.get("beta")
                if beta is not None and beta.as_float() != 1.0:
                    return "Gemm's beta is not 1"
        if not _float_scales(
            found + [q], [act, q] + (found[1:] if self.kind not in ("conv", "matmul", "gemm") else [])
        ):
            return "scales are not float32 (or an activation's is not a scalar)"
        if self.op_type == "AveragePool" and any(d != 1 for d in _ints(t, "dilations")):
            return "QLinearAveragePool has no dilations"
        return ""

    def rewrite(self, op: Any, x: Any, t_out: ir.Value, q_out: ir.Value, **_: Any) -> Any:
        q = q_out.producer()
        assert q is not None
        return _typed(self._build(op, t_out, q), _q_type(q), t_out)

    def _build(self, op: Any, t_out: ir.Value, q: ir.Node) -> Any:
        t = t_out.producer()
        assert t is not None
        dqs = [d for d in _input_dqs(t) if d is not None]
        attrs = dict(t.attributes)
        if self.kind == "unary":
            attrs.pop("dilations", None)
            if self.op_type == "Softmax":
                attrs["opset"] = ir.AttrInt64("opset", _softmax_since(t))
            return getattr(op, f"QLinear{self.op_type}")(*_qin(op, dqs[0]), *_qout(op, q), **attrs, _domain=MS)
        if self.kind == "binary":
            return getattr(op, f"QLinear{self.op_type}")(
                *_qin(op, dqs[0]), *_qin(op, dqs[1]), *_qout(op, q), _domain=MS
            )
        if self.kind == "variadic":
            ins = [v for d in dqs for v in _qin(op, d)]
            return op.QLinearConcat(*_qout(op, q), *ins, **attrs, _domain=MS)
        if self.kind == "where":
            return op.QLinearWhere(t.inputs[0], *_qin(op, dqs[0]), *_qin(op, dqs[1]), *_qout(op, q), _domain=MS)
        if self.kind == "conv":
            bias = [dqs[2].inputs[0]] if len(dqs) == 3 else []
            return op.QLinearConv(*_qin(op, dqs[0]), *_qin(op, dqs[1]), *_qout(op, q), *bias, **attrs)
        if self.kind == "matmul":
            return op.QLinearMatMul(*_qin(op, dqs[0]), *_qin(op, dqs[1]), *_qout(op, q))
        attrs.pop("beta", None)
        gemm_bias = dqs[2].inputs[0] if len(dqs) == 3 else None
        return op.QGemm(*_qin(op, dqs[0]), *_qin(op, dqs[1]), gemm_bias, *_qout(op, q), **attrs, _domain=MS)


def _ints(node: ir.Node, name: str) -> list[int]:
    a = node.attributes.get(name)
    return list(a.as_ints()) if a is not None else []


def _softmax_since(t: ir.Node) -> int:
    version = t.graph.opset_imports.get("", 0) if t.graph is not None else 0
    return 13 if version >= 13 else 11 if version >= 11 else 1


class _ToFloat(pattern.RewriteRuleClassBase):
    """DQ -> MatMul / Gemm with no Q after it: MatMulIntegerToFloat / QGemm with a float output."""

    def __init__(self, shared: _Rules, op_type: str) -> None:
        super().__init__(f"{op_type}IntegerToFloat", remove_nodes=False)
        self.shared, self.op_type = shared, op_type

    def pattern(self, op: Any, a: Any) -> Any:
        return getattr(op, self.op_type)(a, _allow_other_inputs=True, _outputs=["t_out"])

    def check(self, context: Any, a: Any, t_out: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        t = t_out.producer()
        assert t is not None
        uses = list(t_out.uses())
        if any(_is(n, "QuantizeLinear") for n, _ in uses):
            return result.fail("the output goes to a Q (QLinear fusion's case)")
        if len(uses) == 1 and uses[0][0].op_type in ("Relu", "Clip") and uses[0][0].domain in _ONNX:
            after = uses[0][0].outputs[0]
            if len(list(after.uses())) == 1 and not after.is_graph_output():
                return result.fail("a Relu/Clip follows (onnxruntime selects it as a redundant clip and finds no Q)")
        dqs = _input_dqs(t)
        found = [d for d in dqs if d is not None]
        n_inputs = len([v for v in t.inputs if v is not None])
        if (self.op_type == "MatMul" and len(found) != 2) or (self.op_type == "Gemm" and len(found) != n_inputs):
            return result.fail("not every input is from a DQ")
        types = [_dq_type(d) for d in found]
        if types[0] not in _8BIT or types[1] not in _8BIT:
            return result.fail("not 8-bit")
        if types[0] == _DT.INT8 and (
            types[1] != _DT.INT8 or (self.op_type == "MatMul" and not self.shared.int8_allowed)
        ):
            return result.fail("int8 activations with these weights are not fused")
        if self.op_type == "Gemm" and len(found) == 3:
            beta = t.attributes.get("beta")
            if types[2] != _DT.INT32 or (beta is not None and beta.as_float() != 1.0):
                return result.fail("the bias is not int32 or beta is not 1")
        if not _float_scales(found, found[:1]):
            return result.fail("scales are not float32 or A's is not a scalar")
        if self.shared.pending([], found):
            return result.fail("S8->U8 first")
        return result

    def rewrite(self, op: Any, a: Any, t_out: ir.Value, **_: Any) -> Any:
        t = t_out.producer()
        assert t is not None
        dqs = [d for d in _input_dqs(t) if d is not None]
        (xa, sa, za), (xb, sb, zb) = _qin(op, dqs[0]), _qin(op, dqs[1])
        if self.op_type == "MatMul":
            return _typed(op.MatMulIntegerToFloat(xa, xb, sa, sb, za, zb, _domain=MS), t_out.dtype, t_out)
        attrs = {k: v for k, v in t.attributes.items() if k != "beta"}
        bias = dqs[2].inputs[0] if len(dqs) == 3 else None
        return _typed(op.QGemm(xa, sa, za, xb, sb, zb, bias, **attrs, _domain=MS), t_out.dtype, t_out)


# ------------------------------------------------------------------ dropped Q/DQ, cleanup
def _pair_supported(q: ir.Node, dq: ir.Node) -> bool:
    """IsQDQPairSupported: explicit, constant, scalar and equal scales and zero points."""
    if len(q.inputs) != 3 or len(dq.inputs) != 3:
        return False
    sq, sd, zq, zd = (_scalar(v) for v in (q.inputs[1], dq.inputs[1], q.inputs[2], dq.inputs[2]))
    if sq is None or sd is None or zq is None or zd is None or zq.dtype != zd.dtype:
        return False
    return bool(zq.reshape(-1)[0] == zd.reshape(-1)[0] and sq.reshape(-1)[0] == sd.reshape(-1)[0])


class _DropQDQ(pattern.RewriteRuleClassBase):
    """DQ -> data movement -> Q with equal parameters: the op runs on the integers."""

    def __init__(self, shared: _Rules, op_type: str, allow_16bit: bool, positive_scale: bool) -> None:
        super().__init__(f"DropQDQ{op_type}", remove_nodes=False)
        self.shared, self.op_type = shared, op_type
        self.allow_16bit, self.positive_scale = allow_16bit, positive_scale

    def pattern(self, op: Any, x: Any) -> Any:
        y = getattr(op, self.op_type)(x, _allow_other_inputs=True, _outputs=["t_out"])
        return op.QuantizeLinear(y, _allow_other_inputs=True, _outputs=["q_out"])

    def check(self, context: Any, x: ir.Value, t_out: ir.Value, q_out: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        t, q = t_out.producer(), q_out.producer()
        assert t is not None and q is not None
        if self.op_type == "MaxPool" and _opset(context) < 12:
            return result.fail("onnxruntime drops Q/DQ around MaxPool from opset 12 (8-bit MaxPool)")
        dqs = [d for d in _input_dqs(t) if d is not None]
        if len(dqs) != 1 or _dq_producing(x, t.graph) is None:
            return result.fail("input 0 alone must come from a DQ")
        dq = dqs[0]
        why = _output_q(t, q, None)
        if why:
            return result.fail(why)
        qt, dt = _q_type(q), _dq_type(dq)
        if qt != dt or qt not in _8BIT + (_16BIT if self.allow_16bit else ()):
            return result.fail("types differ or are not supported here")
        if self.positive_scale:
            s = _scalar(q.inputs[1])
            if s is None or not float(s.reshape(-1)[0]) > 0:
                return result.fail("the scale is not a positive constant")
        if not _pair_supported(q, dq):
            return result.fail("Q and DQ parameters differ or are not constant scalars")
        if self.shared.pending([q], [dq]):
            return result.fail("S8->U8 first")
        return result

    def rewrite(self, op: Any, x: ir.Value, t_out: ir.Value, q_out: ir.Value, **_: Any) -> Any:
        t, dq, q = t_out.producer(), x.producer(), q_out.producer()
        assert t is not None and dq is not None and q is not None
        return _typed(getattr(op, self.op_type)(dq.inputs[0], *t.inputs[1:], **t.attributes), _q_type(q), t_out)


class _DropDQArgMax(pattern.RewriteRuleClassBase):
    def __init__(self, shared: _Rules) -> None:
        super().__init__("DropDQArgMax", remove_nodes=False)
        self.shared = shared

    def pattern(self, op: Any, x: Any) -> Any:
        return op.ArgMax(x, _outputs=["t_out"])

    def check(self, context: Any, x: ir.Value, t_out: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        t = t_out.producer()
        dq = _dq_producing(x, t.graph if t is not None else None)
        if dq is None or _dq_type(dq) not in _8BIT or _zp(dq) is None:
            return result.fail("not an 8-bit DQ with a zero point")
        if _scalar(dq.inputs[1]) is None or _scalar(_zp(dq)) is None:
            return result.fail("the DQ's scale and zero point are not constant scalars")
        if self.shared.pending([], [dq]):
            return result.fail("S8->U8 first")
        return result

    def rewrite(self, op: Any, x: ir.Value, t_out: ir.Value, **_: Any) -> Any:
        t, dq = t_out.producer(), x.producer()
        assert t is not None and dq is not None
        return _typed(op.ArgMax(dq.inputs[0], **t.attributes), _DT.INT64, t_out)


class _FinalCleanup(pattern.RewriteRuleClassBase):
    """DQ -> Q with equal constant parameters: the integers pass through."""

    def __init__(self, shared: _Rules) -> None:
        super().__init__("QDQFinalCleanup")
        self.shared = shared

    def pattern(self, op: Any, x: Any) -> Any:
        dq = op.DequantizeLinear(x, _allow_other_inputs=True, _outputs=["dq_out"])
        return op.QuantizeLinear(dq, _allow_other_inputs=True, _outputs=["q_out"])

    def check(self, context: Any, x: ir.Value, dq_out: ir.Value, q_out: ir.Value, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        dq, q = dq_out.producer(), q_out.producer()
        assert dq is not None and q is not None
        if not _pair_supported(q, dq):
            return result.fail("Q and DQ parameters differ or are not constant scalars")
        if q_out.is_graph_output() and list(q_out.uses()):
            return result.fail("the Q's output is a graph output with consumers")
        if self.shared.pending([q], [dq]):
            return result.fail("S8->U8 first")
        return result

    def rewrite(self, op: Any, x: ir.Value, q_out: ir.Value, **_: Any) -> Any:
        return op.Identity(x) if q_out.is_graph_output() else x


@functools.cache
def qdq_rules(int8_allowed: bool = False) -> list[Any]:
    """The QDQ rules in the order they must be tried (module docstring). ``int8_allowed``:
    onnxruntime's session.qdqisint8allowed (false on x86, where int8 Q/DQ pairs become uint8)."""
    shared = _Rules(int8_allowed)
    rules: list[Any] = [] if int8_allowed else [_S8ToU8.rule(shared)]
    kinds = [(op, "unary") for op in UNARY] + [("Add", "binary"), ("Mul", "binary"), ("Concat", "variadic")]
    kinds += [("Conv", "conv"), ("MatMul", "matmul"), ("Gemm", "gemm"), ("Where", "where")]
    for op_type, kind in kinds:
        rules += [_QLinear.rule(shared, op_type, kind, clip) for clip in (None, "Relu", "Clip")]
    rules += [_ToFloat.rule(shared, "MatMul"), _ToFloat.rule(shared, "Gemm")]
    rules += [_DropQDQ.rule(shared, op, True, False) for op in DROP_QDQ]
    rules += [_DropQDQ.rule(shared, op, False, False) for op in DROP_8BIT]
    rules += [_DropQDQ.rule(shared, op, False, True) for op in DROP_POSITIVE]
    return rules + [_DropDQArgMax.rule(shared), _FinalCleanup.rule(shared)]

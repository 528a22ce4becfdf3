"""The passes, run on onnxscript's IR (onnx-ir): imported only when a model is optimized.

BASIC, repeated until nothing changes (at most ``ROUNDS`` times): onnxscript's constant folding
(subgraphs included, so outer-scope constants fold inside If/Loop/Scan bodies; bounded by the
session's budget through ``FoldGate``), ep-core's exact no-op removal (``own_rules``: onnxscript's
matches within a tolerance) and onnxscript's rewrite rules that remove or merge nodes (``BASIC_RULES``,
in named groups), ep-core's Conv+Add and Conv+Mul folding, the gated rules of ``fusions.BASIC_GATED``,
then onnx-ir's dead-node removal. EXTENDED adds ``fusions.EXTENDED``, each gated on the first EP,
the attention family among them; ``resolve_internal`` then leaves none of onnxscript's intermediate
ops (``fusions.INTERNAL``). Nodes keep their names; a node a rewrite made is named after the first
node it replaced. A step, group or fusion the session turned off by name (``disabled``) is skipped."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass
from onnxscript.optimizer import _constant_folding as folding
from onnxscript.rewriter import RewriteRuleSet, _pattern_ir, _rewrite_rule
from onnxscript.rewriter.rules import common as rules

from ep_core.optimizer import guards, onnxruntime_sizes, own_rules
from ep_core.optimizer.api import ENABLE_EXTENDED, VERBOSE, Log, SupportsOp
from ep_core.optimizer.disabled import KEY as DISABLED_KEY
from ep_core.optimizer.disabled import disabled
from ep_core.optimizer.fusions import BASIC_GATED, EXTENDED, INTERNAL, QDQ, Fusion, dq_matmulnbits
from ep_core.optimizer.spelling import for_the_checker
from ep_core.sdk.errors import Fail

ROUNDS = 2  # as onnxscript.optimizer.optimize (num_iterations=2)
FOLD_NODE_LIMIT = 1 << 30  # onnxruntime's cap on what folding one node may produce
SOURCE = "ep_core.optimizer.source"  # metadata: the name of the node a rewritten node came from
_GUARDED = guards.basic()  # onnxscript's rules with the conditions they lack (guards.py)
# onnxscript's rules that remove or merge nodes, in groups named for ``disabled`` (and docs/optimizer.md)
BASIC_RULES: dict[str, tuple[Any, ...]] = {
    "Dropout elimination": (rules.dropout_inference_rule, rules.dropout_zero_rule, *own_rules.dropout_rules()),
    "no-op Cast": (rules.no_op_cast_rule,),
    "no-op Expand": (rules.no_op_expand_rule,),
    "no-op Slice": (rules.collapse_slice_rule, rules.collapse_slice2_rule),
    "no-op ScatterND": (_GUARDED["no_op_static_scatter_nd_rule"],),
    "Cast chains": (_GUARDED["cast_cast_rule"],),
    "Transpose chains": (rules.no_op_transpose_rule, rules.transpose_transpose_rule),
    "Reshape chains": (
        rules.reshape_reshape_rule,
        rules.squeeze_reshape_1d_rule,
        rules.one_reshape_matmul_reshape_rule,
        rules.two_reshapes_matmul_reshape_rule,
    ),
    "Unsqueeze chains": (rules.unsqueeze_unsqueeze_rule,),
    "Min/Max chains": (_GUARDED["min_min_rule"], _GUARDED["max_max_rule"]),
    "Relu/Clip chains": (rules.successive_relu_rule, *own_rules.clamp_rules()),  # see own_rules._Clamps
    "BatchNormalization folding": (
        _GUARDED["fuse_batchnorm_into_conv_rule"],
        _GUARDED["fuse_batchnorm_into_conv_transpose_rule"],
    ),
    "Gemm+BatchNormalization folding": (_GUARDED["fuse_batchnorm_into_gemm_rule"],),
    "Pad folding": (_GUARDED["fuse_pad_into_conv_rule"],),
    "zero bias removal": (
        rules.remove_optional_bias_from_conv_rule,
        rules.remove_optional_bias_from_conv_transpose_rule,
        rules.remove_optional_bias_from_gemm_rule,
    ),
    "ConstantOfShape+Cast": (_GUARDED["cast_constant_of_shape_rule"],),
}


class LibraryFailure(Exception):
    """An onnxscript pass raised on the model: ``api`` drops the optimizer's work with a warning."""


SMALL_FILL = 64 << 10  # bytes: a ConstantOfShape up to this is folded (pads, shapes), a larger fill kept


class FoldGate:
    """onnxscript's ``should_fold``: a node is folded only when its outputs' sizes are known before
    computing them (never strings') and fit what is left of the session's budget (and onnxruntime's per-node cap);
    nodes making a graph output stay. None leaves onnxscript's own limits to decide."""

    def __init__(self, budget: int, log: Log) -> None:
        self.left, self.log = budget, log

    def __call__(self, node: ir.Node) -> bool | None:
        size = 0
        for v in node.outputs:
            if v.is_graph_output() or v.shape is None or v.dtype is None or not v.shape.is_static():
                return False
            if v.dtype == ir.DataType.STRING:  # its bytes are data: StringConcat(x, x) doubles them per node
                return False
            size += math.ceil(math.prod(v.shape.numpy()) * v.dtype.itemsize)
        if size > min(FOLD_NODE_LIMIT, self.left):
            self.log(
                VERBOSE,
                "graph optimizer: %s (%s) not folded: %d bytes, %d left",
                node.name,
                node.op_type,
                size,
                self.left,
            )
            return False
        self.left -= size
        if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx") and size <= SMALL_FILL:
            return True  # onnxscript keeps every ConstantOfShape; a small one folded (as onnxruntime does) makes shapes known
        return None


class GuardedFold(folding.FoldConstantsPass):
    """onnxscript's folder, kept off nodes making a graph output (they stay, as in the plan's
    folding; its Shape/Identity shortcuts would bypass ``should_fold``) and off the nodes it would
    get wrong: a CastLike with saturate=0 (its CastLike -> Cast drops ``saturate``)."""

    def process_node(self, node: ir.Node, is_function: bool) -> Any:
        if any(v.is_graph_output() for v in node.outputs):  # its inputs still skip removed Identities
            for i, value in enumerate(node.inputs):
                if isinstance(sym := self._state.get_sym_value(value), ir.Value):
                    node.replace_input_with(i, sym)
                    self._modified = True
            return None
        saturate = node.attributes.get("saturate")
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and saturate is not None:
            if saturate.as_int() == 0:
                return None
        return super().process_node(node, is_function)


def _nodes(model: ir.Model) -> list[ir.Node]:
    return list(ir.traversal.RecursiveGraphIterator(model.graph))


def run_passes(
    proto: Any, level: int, supports: SupportsOp, budget: int, log: Log, config: Mapping[str, str] | None = None
) -> Any:
    """``proto`` optimized (a new ModelProto), or ``proto`` itself when no pass changed it."""
    config = config or {}
    import onnx

    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as exc:
        raise LibraryFailure(f"onnx-ir cannot read the model: {type(exc).__name__}: {exc}") from exc
    names = {node: node.name or "" for node in _nodes(model)}
    for i, node in enumerate(names):  # merged over the nodes a rewrite replaces: the earliest stays
        node.metadata_props[SOURCE] = f"{i:09d}:{node.name or ''}"
    _rewrite_rule._default_metadata_merger.mergers[SOURCE] = min
    changed: list[str] = []
    own_changed: set[str] = set()
    off = disabled(config)  # rewrites the session turned off by name

    def step(name: str, apply: Callable[[], bool], own: bool = False) -> None:
        if name in off:
            log(VERBOSE, "graph optimizer: %s turned off (%s)", name, DISABLED_KEY)
            return
        try:
            modified = apply()
        except LibraryFailure:
            raise
        except Exception as exc:
            if own:
                raise Fail(
                    f"graph optimizer: ep-core's pass {name!r} failed: {type(exc).__name__}: {exc}. Set "
                    "SessionOptions.graph_optimization_level to ORT_DISABLE_ALL to run the model unoptimized"
                ) from exc
            raise LibraryFailure(f"onnxscript's pass {name!r} failed: {type(exc).__name__}: {exc}") from exc
        if modified:
            changed.append(name)
            if own:
                own_changed.add(name)

    def rewrite(rule_list: Any, sequential: bool = False) -> Callable[[], bool]:
        groups = [[r] for r in rule_list] if sequential else [list(rule_list)]

        def apply() -> bool:  # again while it changes: a rule may need the op another just made
            changed = False
            for _ in range(ROUNDS):
                count = 0
                for group in groups:  # sequential: each rule sees what the one before made
                    if isinstance(group[0], ir.passes.PassBase):  # an own graph pass (gemm_stacking), not a rule
                        count += sum(p(model).modified for p in group)
                        continue
                    ops = {n.op_type for n in _nodes(model)}
                    present = [r for r in group if _needed_ops(r) <= ops]  # matching costs ~50 us a node a rule
                    count += RewriteRuleSet(present).apply_to_model(model) if present else 0
                if count == 0:
                    break
                changed = True
            return changed

        return apply

    def gated(f: Fusion, ops: set[str]) -> None:
        if not ops & f.anchors or f.opt_in and config.get(f.opt_in, "0") != "1":
            return
        # onnxscript's intermediate ops are never kept (resolve_internal): the real ops they lead to are gated
        missing = [f"{d or 'ai.onnx'}::{o}" for o, d in f.makes if d != INTERNAL and not supports(o, d)]
        if missing or model.opset_imports.get("", 0) < f.min_opset:
            why = f"the first EP has no kernel for {missing}" if missing else f"it needs opset {f.min_opset}"
            log(VERBOSE, "graph optimizer: %s skipped: %s", f.name, why)
            return
        if any(d == "com.microsoft" for _, d in f.makes):
            model.opset_imports.setdefault("com.microsoft", 1)
        step(f.name, rewrite(f.rules(), f.sequential), own=f.own)

    gate = FoldGate(budget, log)
    fold = GuardedFold(
        shape_inference=False,  # the checked model carries inferred shapes; per-node inference costs ~0.2 ms
        input_size_limit=folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
        output_size_limit=folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
        should_fold=gate,
    )
    # Constant nodes become initializers first, as onnxruntime's loader makes them: rules such as
    # BatchNormalization-into-Conv match initializer weights only (opset 11-13 exports keep weights
    # in Constant nodes)
    from onnx_ir.passes.common import LiftConstantsToInitializersPass

    step(
        "Constant nodes to initializers",
        lambda: LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model).modified,
    )
    for _ in range(ROUNDS):
        before = len(changed)
        step("constant folding", lambda: fold(model).modified)
        basic = [r for name, group in BASIC_RULES.items() if name not in off for r in group]
        step("no-op arithmetic", rewrite(own_rules.exact_no_op_rules()), own=True)
        step("redundant node elimination", rewrite(basic))
        for op in ("Add", "Mul"):
            step(f"Conv+{op} folding", rewrite(own_rules.conv_affine_rules(op)), own=True)
        ops = {n.op_type for n in _nodes(model)}
        for f in BASIC_GATED:
            gated(f, ops)
        step("dead node removal", lambda: RemoveUnusedNodesPass()(model).modified)
        if len(changed) == before:
            break
    if level >= ENABLE_EXTENDED:
        if config.get("session.disable_quant_qdq", "0") != "1":
            gated(QDQ[config.get("session.qdqisint8allowed", "0") == "1"], {n.op_type for n in _nodes(model)})
            accuracy, blocks = (
                int(config.get(f"session.qdq_matmulnbits_{k}", d))
                for k, d in (("accuracy_level", "4"), ("block_size", "32"))
            )
            gated(dq_matmulnbits(accuracy, blocks), {n.op_type for n in _nodes(model)})
        for f in EXTENDED:
            gated(f, {n.op_type for n in _nodes(model)})
        step("intermediate attention ops", lambda: resolve_internal(model))
        step("dead node removal", lambda: RemoveUnusedNodesPass()(model).modified)
    if not changed:
        return proto

    def finish() -> bool:
        _lift_new_constants(model, names)
        _name_nodes(model, names)
        return False  # bookkeeping of the changes above, none of its own

    step("constants to initializers and names", finish, own=True)
    try:
        out = ir.serde.serialize_model(model)
    except Exception as exc:
        raise LibraryFailure(f"onnx-ir cannot write the optimized model: {type(exc).__name__}: {exc}") from exc
    if proto.HasField("model_version"):  # onnx-ir keeps its value, not that it was set (0 is a version)
        out.model_version = proto.model_version
    _restore_empty_inputs(out)
    try:
        onnx.checker.check_model(for_the_checker(out), full_check=False)
        out = _fresh_shapes(out)
    except Exception as exc:
        why = f"the model made by the passes {sorted(set(changed))} is invalid: {' '.join(str(exc).split())}"
        if not own_changed:  # onnxscript's passes alone made it: its limit, as when a pass raises
            raise LibraryFailure(why) from exc
        raise Fail(
            f"graph optimizer: {why}. Set SessionOptions.graph_optimization_level to ORT_DISABLE_ALL (or "
            "ORT_ENABLE_BASIC when only fusions changed it) to run the model"
        ) from exc
    log(VERBOSE, "graph optimizer: passes that changed the model: %s", ", ".join(dict.fromkeys(changed)))
    return out


def _restore_empty_inputs(proto: Any) -> None:
    """onnx-ir writes a node without its trailing empty inputs: a Loop(M, "") became Loop(M), which
    its schema refuses (the optimized model was dropped). Each node gets back the empty inputs its
    schema requires (a required input may be given as "")."""
    from onnx import defs

    from ep_core.sdk.graph import nested_graphs

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    for g in nested_graphs(proto.graph):
        for node in g.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            try:
                least = defs.get_schema(node.op_type, opset).min_input
            except Exception:  # noqa: BLE001 - no schema: the checker names it
                continue
            node.input.extend([""] * (least - len(node.input)))


def resolve_internal(model: ir.Model) -> bool:
    """Leaves none of onnxscript's intermediate ops (domain ``fusions.INTERNAL``), as its own pipeline
    ends: an SDPA no rule fused further becomes MultiHeadAttention (``sdpa_via_mha``), a RotaryEmbedding
    function no rule used is inlined back into the nodes it replaced, and the domain's functions and
    opset import go. Any intermediate op still left raises ``LibraryFailure``: no EP serves them."""
    from onnx_ir.passes.common import InlinePass
    from onnxscript.rewriter.ort_fusions import sdpa_via_mha

    def internal_nodes() -> list[ir.Node]:
        graphs = [model.graph, *(f.graph for f in model.functions.values() if f.domain != INTERNAL)]
        return [n for g in graphs for n in ir.traversal.RecursiveGraphIterator(g) if n.domain == INTERNAL]

    modified = False
    if any(n.op_type == "SDPA" for n in internal_nodes()):
        modified |= sdpa_via_mha._rules.apply_to_model(model) > 0
    if any(f.domain == INTERNAL for f in model.functions.values()):
        modified |= InlinePass(criteria=lambda f: f.domain == INTERNAL)(model).modified
    left = sorted({f"{n.domain}::{n.op_type}" for n in internal_nodes()})
    if left:
        raise LibraryFailure(
            f"onnxscript's fusions left intermediate attention ops resolved by no rule: {left}, which no EP serves"
        )
    for key in [k for k, f in model.functions.items() if f.domain == INTERNAL]:
        del model.functions[key]
        modified = True
    for imports in (model.opset_imports, *(f.opset_imports for f in model.functions.values())):
        modified |= imports.pop(INTERNAL, None) is not None
    return modified


def _needed_ops(rule: Any) -> frozenset[str]:
    """Op types every match of ``rule`` contains (its pattern's nodes outside alternatives)."""
    found = _NEEDED.get(rule)
    if found is None:
        target = getattr(rule, "_target_pattern", None)  # alternatives (OrValue) left out: not needed
        nodes = _pattern_ir._nodes_in_pattern(target.outputs) if target is not None else ()
        found = _NEEDED[rule] = frozenset(i[1] for n in nodes if (i := n.op_identifier()) is not None)
    return found


_NEEDED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def _name_nodes(model: ir.Model, names: dict[ir.Node, str]) -> None:
    """Original nodes get their names back (onnxscript renames unnamed ones); a node a rewrite made
    is named after the earliest node it replaced (a suffix keeps names unique), unnamed if that was."""
    nodes = _nodes(model)
    used = {names[n] for n in nodes if n in names}
    for node in nodes:
        source = node.metadata_props.pop(SOURCE, ":").split(":", 1)[1]
        if node in names:
            node.name = names[node]
            continue
        name, i = source, 1  # unnamed like the nodes it replaced when they were: named as ep-core names those
        while name and name in used:
            i += 1
            name = f"{source}_{node.op_type}" + (f"_{i}" if i > 2 else "")
        node.name = name
        used.add(name)


def _lift_new_constants(model: ir.Model, originals: dict[ir.Node, str]) -> None:
    """Constant nodes a rewrite made (new Reshape shapes, Unsqueeze axes, folded Shapes) become
    initializers, as onnxruntime keeps constants (one making a graph output stays a node, its value
    a tensor attribute); the model's own Constant nodes stay as they were."""
    for node in _nodes(model):
        if node in originals or node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        out, graph, tensor = node.outputs[0], node.graph, _constant_tensor(node)
        if graph is None or tensor is None:
            continue
        if out.is_graph_output():  # stays a node, its value in the attribute every opset has
            node.attributes.clear()
            node.attributes["value"] = ir.AttrTensor("value", tensor)
            continue
        value = ir.Value(name=out.name, type=ir.TensorType(tensor.dtype), shape=tensor.shape, const_value=tensor)
        out.replace_all_uses_with(value)
        graph.remove(node, safe=True)
        graph.register_initializer(value)


def _constant_tensor(node: ir.Node) -> Any:
    """The tensor of a Constant node, from whichever attribute holds it (onnxscript writes
    value_ints even where the model's opset predates it)."""
    import numpy as np

    for name, attr in node.attributes.items():
        if name == "value" and attr.type == ir.AttributeType.TENSOR:
            return attr.as_tensor()
        dtype = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32}.get(name)
        dtype = np.float32 if name == "value_floats" else dtype
        if dtype is not None:
            return ir.tensor(np.array(attr.value, dtype=dtype))
    return None


# fused ops whose output has the shape of the standard op they extend (onnx has no inference for
# them: past one, every shape downstream stayed as stale as before folding): (inputs kept, attributes)
_SHAPED_AS = {
    "FusedConv": ("Conv", 3, frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})),
    "FusedGemm": ("Gemm", 3, frozenset({"alpha", "beta", "transA", "transB"})),
}


def _as_inferable(node: Any) -> None:
    """``node`` (in a copy only shapes are read from) as the standard op of its output's shape."""
    found = _SHAPED_AS.get(node.op_type) if node.domain == "com.microsoft" else None
    if found is None:
        return
    op, inputs, attrs = found
    kept = [a for a in node.attribute if a.name in attrs]
    node.op_type, node.domain = op, ""
    del node.input[inputs:], node.attribute[:]
    node.attribute.extend(kept)


def _fresh_shapes(proto: Any) -> Any:
    """``proto`` with its shapes inferred anew over the optimized graph. Inference keeps the dims a
    value_info already holds, and those written before the passes can be stale: a Slice whose ends
    were computed got a made-up ``unk__0`` batch dim, which stays after folding makes its ends
    constants, and two values that are both ``batch`` rows look unrelated to the EPs (the Numba EP
    then cannot fuse a GRU cell into one kernel). Each dim inference now derives (a number, or a
    symbol it did not make up) replaces the old one, and a shape of another rank whose every dim
    is derived replaces the old shape; the old dims stay where inference now knows less (after a
    contrib op, which onnx cannot infer). Should the fresh pass fail, the plain inference stands."""
    import onnx

    from ep_core.sdk.graph import nested_graphs

    out = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
    fresh = onnxruntime_sizes.inferred_afresh(out, edit=_as_inferable)  # pools sized as onnxruntime's kernels
    if fresh is None:  # the plain inference above is valid on its own
        return out
    for old_g, new_g in zip(nested_graphs(out.graph), nested_graphs(fresh.graph), strict=True):
        known = {v.name: v for v in [*new_g.value_info, *new_g.output]}
        for v in [*old_g.value_info, *old_g.output]:
            got = known.get(v.name)
            if got is not None and v.type.WhichOneof("value") == got.type.WhichOneof("value") == "tensor_type":
                _merge_dims(v.type.tensor_type, got.type.tensor_type)
    return out


def _derived(dim: Any) -> bool:
    return dim.HasField("dim_value") or (dim.HasField("dim_param") and not dim.dim_param.startswith("unk__"))


def _merge_dims(old: Any, new: Any) -> None:
    """``old``'s shape takes what ``new``'s (inferred anew) knows better (``_fresh_shapes``)."""
    if not new.HasField("shape"):
        return
    if not old.HasField("shape") or len(old.shape.dim) != len(new.shape.dim):
        if not old.HasField("shape") or all(_derived(d) for d in new.shape.dim):
            old.shape.CopyFrom(new.shape)
        return
    for od, nd in zip(old.shape.dim, new.shape.dim, strict=True):
        if _derived(nd):
            od.CopyFrom(nd)

"""Model-local functions run as their bodies: no ep-core EP claims a function call, so every call is
inlined at load (onnx's inliner), as onnxruntime expands a function no EP takes.

onnx's inliner (and onnx-ir's) refuses a function whose opset of a domain differs from the model's
(skl2onnx's KNNImputer: functions at ai.onnx 21 in an opset 22 model). onnx's checker, run on the
model first, refuses a function whose ops differ between its opset and the model's; the others mean
the same under the model's opset, so their imports are aligned to it and the calls inlined."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ep_core.optimizer.spelling import bodies
from ep_core.sdk.errors import InvalidGraph
from ep_core.sdk.graph import nested_graphs

# inlining may multiply the stored nodes by AMPLIFICATION, or make up to MAX_INLINED_NODES (past the
# largest exported graphs): 2^17 nested calls (a 1.4 KB model) took 20 s and 720 MiB to create
MAX_INLINED_NODES = 300_000
AMPLIFICATION = 100


def inline_functions(model: Any) -> Any:
    """``model`` (checked by onnx's checker) with its local functions' calls expanded; the very
    object when it has none. A model whose calls would expand out of proportion to its stored
    nodes is refused before inlining: each function calling the previous twice makes 2^K nodes."""
    if not model.functions:
        return model
    from onnx import ModelProto, inliner

    model = _without_shadowing_functions(model)
    if not model.functions:
        return model

    total = _expanded(model.graph.node, {(f.domain, f.name): f for f in model.functions}, {}, ())
    stored = sum(len(g.node) for g in nested_graphs(model.graph)) + sum(len(f.node) for f in model.functions)
    if total > min(MAX_INLINED_NODES, max(10_000, AMPLIFICATION * stored)):
        raise InvalidGraph(
            f"the model's local functions expand to {total} nodes when inlined, from {stored} stored: more than "
            f"ep-core creates a session of ({AMPLIFICATION}x the stored nodes, at least 10000, at most "
            f"{MAX_INLINED_NODES}); nested functions that call each other several times multiply"
        )

    model = _with_default_attributes(model)
    imports = {o.domain: o.version for o in model.opset_import}
    if any(imports.get(o.domain, o.version) != o.version for f in model.functions for o in f.opset_import):
        aligned = ModelProto()
        aligned.CopyFrom(model)
        for f in aligned.functions:
            for o in f.opset_import:
                o.version = imports.get(o.domain, o.version)
        model = aligned
    return inliner.inline_local_functions(model)


def _without_shadowing_functions(model: Any) -> Any:
    """``model`` without the local functions named like an op onnx defines in their domain at the
    model's opset (a ``Relu`` in domain ``""``): onnxruntime runs the op itself and ignores such a
    function; inlining it gave other numbers, silently. A warning names each one."""
    import warnings

    from onnx import ModelProto, defs

    imports = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    shadowing = []
    for f in model.functions:
        domain = "" if f.domain == "ai.onnx" else f.domain
        try:
            defs.get_schema(f.name, imports.get(domain, 1), domain)
        except Exception:  # noqa: BLE001 - no such op there: a function of its own
            continue
        shadowing.append(f)
    if not shadowing:
        return model
    for f in shadowing:
        warnings.warn(
            f"local function {f.domain or 'ai.onnx'}::{f.name} has the name of an ONNX op: the op runs, the function "
            "is ignored, as onnxruntime does (rename the function or give it a domain of its own)",
            RuntimeWarning,
            stacklevel=5,
        )
    kept = ModelProto()
    kept.CopyFrom(model)
    names = {(f.domain, f.name) for f in shadowing}
    functions = [f for f in kept.functions if (f.domain, f.name) not in names]
    del kept.functions[:]
    kept.functions.extend(functions)
    return kept


def _with_default_attributes(model: Any) -> Any:
    """``model`` with every local call carrying its function's default attribute values
    (``attribute_proto``, IR 9) that the call leaves unset, as onnxruntime binds them: onnx's inliner
    drops them, so the body's op took its own schema default instead (LeakyRelu alpha 0.01 for a
    function's 0.25). The very object when no call needs one."""
    defaults = {(f.domain, f.name): f.attribute_proto for f in model.functions if f.attribute_proto}
    if not defaults:
        return model
    from onnx import ModelProto

    filled = ModelProto()
    filled.CopyFrom(model)
    _forward_defaults(filled)
    defaults = {(f.domain, f.name): f.attribute_proto for f in filled.functions if f.attribute_proto}
    for g in bodies(filled):
        for n in g.node:
            have = {a.name for a in n.attribute}
            for a in defaults.get((n.domain, n.op_type), ()):
                if a.name not in have:
                    n.attribute.append(a)
    return filled


def _forward_defaults(model: Any) -> None:
    """A function F that passes its attribute ``r`` on to a local call (``alpha=@r``) and has no
    default for ``r`` gets the callee's default for ``alpha``: when F's caller leaves ``r`` unset,
    the reference resolves to nothing and the callee's default applies (onnxruntime), which onnx's
    inliner loses (it left the callee's body without the attribute). Only when every use of ``r``
    in F's body is such a forwarding, with one default among them; again for deeper nesting."""
    by_key = {(f.domain, f.name): f for f in model.functions}
    for _ in range(len(by_key)):
        changed = False
        for f in model.functions:
            have = {a.name for a in f.attribute_proto}
            found: dict[str, list[Any]] = {}
            for n in (n for g in nested_graphs(f) for n in g.node):
                callee = by_key.get((n.domain, n.op_type))
                for a in n.attribute:
                    if not a.ref_attr_name or a.ref_attr_name in have:
                        continue
                    given = {d.name: d for d in callee.attribute_proto} if callee is not None else {}
                    found.setdefault(a.ref_attr_name, []).append(given.get(a.name))
            for r, uses in found.items():
                if None in uses or len({_renamed(d, "").SerializeToString() for d in uses}) != 1:
                    continue
                f.attribute_proto.append(_renamed(uses[0], r))
                kept = [name for name in f.attribute if name != r]
                del f.attribute[:]
                f.attribute.extend(kept)
                changed = True
        if not changed:
            return


def _renamed(attribute: Any, name: str) -> Any:
    copy = type(attribute)()
    copy.CopyFrom(attribute)
    copy.name = name
    return copy


def _expanded(nodes: Iterable[Any], functions: dict[tuple[str, str], Any], memo: dict[Any, int], path: tuple) -> int:
    """How many nodes ``nodes`` make once every local call in them (and their subgraphs) is inlined;
    the count is capped past the limit (and a recursive call counts as past it: onnx's checker
    refuses recursion, this never loops)."""
    total = 0
    for n in nodes:
        key = (n.domain, n.op_type)
        if key in functions:
            if key in path:
                return MAX_INLINED_NODES + 1
            if key not in memo:
                memo[key] = _expanded(functions[key].node, functions, memo, (*path, key))
            total += memo[key]
        else:
            total += 1
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                total += _expanded(g.node, functions, memo, path)
        if total > MAX_INLINED_NODES:
            return total
    return total

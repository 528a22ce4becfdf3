"""``optimize_model``: the level, the cheap decisions taken before onnxscript is imported (nothing
to do, a model the optimizer leaves alone) and what a failure inside the optimizer becomes.

Failures (docs/optimizer.md): the passes work on their own copy of the model (onnxscript's IR),
so one that raises leaves the checked model intact. onnxscript or onnx-ir failing on a valid model
(raising, or making a model onnx's checker refuses) is the library's limit, not a wrong model: the
optimizer's work is dropped, a warning names the pass, and the session runs the checked model. A
pass of ep-core's own that raises, or an invalid model it had a part in, raises ``Fail`` naming the
passes. Never a wrong model, never a silent one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ep_core.sdk.graph import nested_graphs

SupportsOp = Callable[[str, str], bool]  # (op_type, domain) -> the first EP has a kernel for it
Log = Callable[..., None]  # (severity, message, *args), onnxruntime's severities

DISABLE_ALL, ENABLE_BASIC, ENABLE_EXTENDED = 0, 1, 2
VERBOSE, WARNING = 0, 2

# ops some BASIC rule starts from; a graph with none of them and nothing foldable is left as it is
BASIC_ANCHORS = frozenset(
    "Identity Dropout Cast CastLike Transpose Reshape Unsqueeze Squeeze Flatten Expand BatchNormalization Pad "
    "Shape Size If Slice ScatterND ConstantOfShape Min Max Clip Relu Concat SequenceConstruct SplitToSequence "
    "ConcatFromSequence SequenceAt HardSigmoid".split()
)
ARITHMETIC = frozenset("Add Sub Mul Div".split())  # no-op and Conv+Add/Mul rules: with a constant input


def optimize_model(
    model: Any,
    level: int,
    supports: SupportsOp | None,
    budget: int,
    log: Log,
    config: Mapping[str, str] | None = None,
    declared: Any = None,
    host: bool = True,
) -> Any:
    """``model`` (a checked, inferred ModelProto) optimized to ``level``; the very object given
    when nothing changes. ``supports`` gates every rewrite into an op the graph did not have;
    ``budget`` is the bytes constant folding may materialise in all; ``config`` the session config
    entries (onnxruntime's ``session.disable_quant_qdq`` and ``session.qdqisint8allowed``).
    Whatever the level, values inference left without a shape take the model's own value_info
    shapes (``declared``, a GraphProto: ``shape_hints``), and Reshapes whose targets are computed
    from shapes get their output shapes (``shape_values``): shapes are data the EPs plan with, not
    a change to the graph. ``host``: the first EP runs on the host, so float16 nodes compute as
    onnxruntime's CPU EP computes them, at every level as there (``fp16.upcast_float16``)."""
    from ep_core.optimizer.fp16 import upcast_float16
    from ep_core.optimizer.shape_hints import with_hints
    from ep_core.optimizer.shape_values import with_computed_reshapes

    model = _optimize(with_hints(model, declared), level, supports, budget, log, config)
    return with_computed_reshapes(upcast_float16(model) if host else model)  # after the rewrites, as there


def _optimize(
    model: Any, level: int, supports: SupportsOp | None, budget: int, log: Log, config: Mapping[str, str] | None
) -> Any:
    level = int(level)
    if (config or {}).get("optimization.disable_specified_optimizers"):  # checked at every level: a typo is refused
        from ep_core.optimizer.disabled import disabled

        disabled(config)
    if level <= DISABLE_ALL or any(n.op_type == "EPContext" for n in model.graph.node):
        return model  # a compiled model: its graph was optimized before the EPs compiled it
    if not _worth_trying(model, level):
        return model
    why = _left_alone(model)
    if why:
        log(VERBOSE, "graph optimizer: model left as it is: %s", why)
        return model
    from ep_core.optimizer import cache

    key = cache.entry_key(model, level, budget, config) if cache.enabled(config) else None
    asked = cache.Recorder(supports or (lambda op, domain: False))
    if key is not None:
        hit = cache.load(key, asked)
        if hit is not None:
            log(VERBOSE, "graph optimizer: the optimized model of an earlier session, from %s", cache.folder())
            return model if hit[1] else hit[0]
    from ep_core.optimizer.passes import LibraryFailure, run_passes

    fed = _overridable(model)
    if fed:
        names = ", ".join(repr(t.name) for t in fed[:5]) + (f" and {len(fed) - 5} more" if len(fed) > 5 else "")
        log(
            WARNING,
            "initializer(s) %s appear in graph inputs and are not treated as constants (a feed may "
            "replace them): this may prevent graph optimizations such as constant folding. Move them out of "
            "the graph inputs if they need not be overridden",
            names,
        )
    try:
        given = _without(model, fed) if fed else model
        out = run_passes(given, level, asked, budget, log, config)
        if out is given:
            out = model
        elif fed:
            out.graph.initializer.extend(fed)
    except LibraryFailure as exc:
        log(WARNING, "graph optimizer: %s; the session runs the model unoptimized", exc)
        return model  # not cached: a library's failure is worth retrying with the next version
    if key is not None:
        cache.store(key, asked.answers, out, out is model)
    return out


def _overridable(model: Any) -> list[Any]:
    """Initializers listed as graph inputs: a feed may replace them, so no rewrite or folding may
    take their values for constants (onnxruntime's rule, and its warning)."""
    inputs = {v.name for v in model.graph.input}
    return [t for t in model.graph.initializer if t.name in inputs]


def _without(model: Any, fed: list[Any]) -> Any:
    """A copy of ``model`` whose initializers in ``fed`` are plain graph inputs."""
    import onnx

    names = {t.name for t in fed}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [t for t in out.graph.initializer if t.name not in names]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out


def _worth_trying(model: Any, level: int) -> bool:
    """Whether any rule could apply, from op types and constant inputs alone (no onnxscript)."""
    from ep_core.optimizer.fusions import ANCHORS

    anchors = BASIC_ANCHORS | (ANCHORS if level >= ENABLE_EXTENDED else frozenset())
    inputs = {v.name for v in model.graph.input}
    constants = {t.name for g in nested_graphs(model.graph) for t in g.initializer} - inputs
    for g in nested_graphs(model.graph):
        constants.update(o for n in g.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx") for o in n.output)
    for g in nested_graphs(model.graph):
        for n in g.node:
            if n.op_type in anchors:
                return True
            ins = [i for i in n.input if i]
            known = sum(i in constants for i in ins)
            if n.op_type != "Constant" and (ins and known == len(ins) or known and n.op_type in ARITHMETIC):
                return True
    return False


def _left_alone(model: Any) -> str:
    """Why the optimizer does not touch this model ('' when it may)."""
    from onnx import TensorProto

    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        return "its weights stay in their file (a model over 1 GiB), which the optimizer would read into memory"
    if any(g.sparse_initializer for g in nested_graphs(model.graph)):
        return "it has sparse initializers, which onnxscript's IR does not keep"
    values = (v.type for g in nested_graphs(model.graph) for v in [*g.input, *g.output, *g.value_info])
    if any(_has_map(t) for t in values):
        return "it has map values (ZipMap, DictVectorizer...), which onnxscript's IR cannot read"
    return ""


def _has_map(t: Any) -> bool:
    kind = t.WhichOneof("value")
    if kind == "map_type":
        return True
    inner = {"sequence_type": "elem_type", "optional_type": "elem_type"}.get(str(kind))
    return inner is not None and _has_map(getattr(getattr(t, str(kind)), inner))

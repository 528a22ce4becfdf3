"""Registering com.microsoft schemas with onnx, shared by every contrib-op family.

onnx ships no schemas for onnxruntime's contrib domain, so ``onnx.checker`` and shape inference
would reject models using those ops; each family registers the schemas of the ops it serves with
onnxruntime's inputs, outputs and attributes. Leading underscore: not an op family, so the package
loader does not import it as one.

``onnx.reference`` is imported first: its op table requires op names to be unique across domains,
so importing it after a schema is registered here (com.microsoft's Gelu beside ai.onnx's) fails.
Every family that registers schemas goes through this module, whoever imports it first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx.reference  # noqa: F401  (see the docstring: must precede schema registration)

MS = "com.microsoft"
FLOAT_TYPES = ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"]
DEFAULT_CONSTRAINTS: tuple[tuple[str, list[str], str], ...] = (
    ("T", FLOAT_TYPES, "float tensors"),
    ("U", ["tensor(float)", "tensor(double)"], "stats"),
)


def inp(name: str, opt: bool = False, type_str: str = "T", variadic: bool = False) -> Any:
    """A formal input or output: optional, variadic or single."""
    from onnx import defs

    options = defs.OpSchema.FormalParameterOption
    option = options.Variadic if variadic else options.Optional if opt else options.Single
    return defs.OpSchema.FormalParameter(name, type_str, "", param_option=option, is_homogeneous=not variadic)


def attr(name: str, default: Any) -> Any:
    """An attribute with a default (onnxruntime's)."""
    from onnx import defs, helper

    return defs.OpSchema.Attribute(name, helper.make_attribute(name, default), "")


def required_attr(name: str, kind: Any) -> Any:
    """A required attribute of ``kind`` (an ``onnx.defs.OpSchema.AttrType``)."""
    from onnx import defs

    return defs.OpSchema.Attribute(name, kind, "", required=True)


def register(
    name: str,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    attrs: Sequence[Any],
    doc: str,
    constraints: Sequence[tuple[str, list[str], str]] = DEFAULT_CONSTRAINTS,
    since: int = 1,
    domain: str = MS,
) -> None:
    """Register ``domain::name`` (com.microsoft unless said) unless a schema for it exists already."""
    from onnx import defs

    try:
        if defs.has(name, domain):
            return
    except Exception:  # noqa: BLE001 - older onnx: has() without a domain overload
        pass
    schema = defs.OpSchema(
        name,
        domain,
        since,
        doc=doc,
        inputs=list(inputs),
        outputs=list(outputs),
        type_constraints=list(constraints),
        attributes=list(attrs),
    )
    if domain == MS and name in OUTPUT_TYPES:
        schema.set_type_and_shape_inference_function(_typing(OUTPUT_TYPES[name]))
    defs.register_schema(schema)


def _elem(ctx: Any, i: int) -> int:
    """The element type of input ``i`` (0 when absent or unknown)."""
    t = ctx.get_input_type(i) if i < ctx.get_num_inputs() and ctx.has_input(i) else None
    return int(t.tensor_type.elem_type) if t is not None and t.HasField("tensor_type") else 0


def _float_stats(ctx: Any) -> int:
    """LayerNormalization's mean/inverse-std outputs: float, double for a double input."""
    return 11 if _elem(ctx, 0) == 11 else 1


def _qgemm_output(ctx: Any) -> int:
    """float without y_scale, else y_zero_point's type (uint8 when it is absent)."""
    if not (ctx.get_num_inputs() > 7 and ctx.has_input(7)):
        return 1
    return _elem(ctx, 8) or 2


def _murmur_output(ctx: Any) -> int:
    positive = ctx.get_attribute("positive")
    return 12 if positive is None or positive.i == 1 else 6  # uint32, int32


# output -> its element type (a TensorProto.DataType) for the contrib ops whose output types no
# input binds: onnx cannot infer them, and a strict inference of the op consuming them failed
# (a QOperator-quantized GPT-2: QGemm feeding a Reshape); every output of such an op is set
OUTPUT_TYPES: dict[str, tuple[Any, ...]] = {
    "QGemm": (_qgemm_output,),
    "MurmurHash3": (_murmur_output,),
    "MatMulInteger16": (lambda ctx: 6,),
    "GridSample": (lambda ctx: _elem(ctx, 0),),
    "LayerNormalization": (lambda ctx: _elem(ctx, 0), _float_stats, _float_stats),
    "SimplifiedLayerNormalization": (lambda ctx: _elem(ctx, 0), _float_stats),
    "SkipLayerNormalization": (lambda ctx: _elem(ctx, 0), _float_stats, _float_stats, lambda ctx: _elem(ctx, 0)),
    "SkipSimplifiedLayerNormalization": (
        lambda ctx: _elem(ctx, 0),
        _float_stats,
        _float_stats,
        lambda ctx: _elem(ctx, 0),
    ),
}


def _typing(rules: tuple[Any, ...]) -> Any:
    def infer(ctx: Any) -> None:
        from onnx import TypeProto

        for i, rule in enumerate(rules):
            elem = rule(ctx) if i < ctx.get_num_outputs() and ctx.has_output(i) else 0
            if elem:
                tp = TypeProto()
                tp.tensor_type.elem_type = elem
                ctx.set_output_type(i, tp)

    return infer


# Compact schema tables (the ``_*_schemas.py`` files, transcribed from onnxruntime 1.31.1's
# ``get_all_operator_schema()``): name -> (inputs, outputs, attributes, type constraints), where
# inputs/outputs are "name:type" words ("name?" optional, "name*" variadic), attributes are
# (name, AttrType name, default; "REQ" required, None optional without default) and constraints map
# a type parameter to element type names.
SchemaSpec = tuple[str, str, list[tuple[str, str, Any]], dict[str, list[str]]]


def formals(spec: str) -> list[Any]:
    """The formal parameters of a "name:type ..." spec."""
    out = []
    for item in spec.split():
        name, type_str = item.split(":", 1)
        flag = name[-1] if name[-1] in "?*" else ""
        out.append(inp(name.rstrip("?*"), flag == "?", type_str, flag == "*"))
    return out


def attribute(name: str, kind: str, default: Any) -> Any:
    """An attribute of AttrType ``kind``: required ("REQ"), optional (None) or with a default."""
    from onnx import defs

    if default in ("REQ", None):
        return defs.OpSchema.Attribute(name, getattr(defs.OpSchema.AttrType, kind), "", required=default == "REQ")
    return attr(name, default)


def _known(type_name: str) -> bool:
    """onnx versions without float8e8m0 / float4e2m1 cannot name those types in a schema."""
    from onnx import TensorProto

    return hasattr(TensorProto, type_name.upper())


def register_table(table: dict[str, SchemaSpec], domain: str = MS, doc: str = "") -> None:
    """Register every schema of a compact table (once; existing ones are kept)."""
    for name, (ins, outs, attrs, spec) in table.items():
        constraints = [(k, [f"tensor({t})" for t in v if _known(t)], k) for k, v in spec.items()]
        attributes = [attribute(*a) for a in attrs]
        register(name, formals(ins), formals(outs), attributes, doc or name, constraints, domain=domain)

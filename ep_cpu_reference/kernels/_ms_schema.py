"""Registering com.microsoft schemas with onnx, shared by every contrib-op family.

onnx ships no schemas for onnxruntime's contrib domain, so ``onnx.checker`` and shape inference
would reject models using those ops; each family registers the schemas of the ops it serves with
onnxruntime's inputs, outputs and attributes. Leading underscore: not an op family, so the package
loader does not import it as one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    defs.register_schema(schema)


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

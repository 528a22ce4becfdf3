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
) -> None:
    """Register ``com.microsoft::name`` unless a schema for it exists already."""
    from onnx import defs

    try:
        if defs.has(name, MS):
            return
    except Exception:  # noqa: BLE001 - older onnx: has() without a domain overload
        pass
    schema = defs.OpSchema(
        name,
        MS,
        since,
        doc=doc,
        inputs=list(inputs),
        outputs=list(outputs),
        type_constraints=list(constraints),
        attributes=list(attrs),
    )
    defs.register_schema(schema)

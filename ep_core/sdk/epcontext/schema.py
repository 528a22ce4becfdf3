"""The ``com.microsoft::EPContext`` op, registered with ``onnx.defs`` so that context models pass
``onnx.checker`` and kernel registries can declare kernels for it.

Attributes and defaults follow the EP Context design: ``main_context`` 1, ``embed_mode`` 1,
``max_size`` 0; the string attributes are optional and have no default."""

from __future__ import annotations

import threading
from typing import Any

EP_CONTEXT_OP = "EPContext"
MS_DOMAIN = "com.microsoft"
SINCE_VERSION = 1

# name -> (AttributeProto type name, default or None when optional without default, description)
ATTRIBUTES: dict[str, tuple[str, Any, str]] = {
    "main_context": (
        "INT",
        1,
        "1: the node references context content holding its graph; 0: the graph "
        "comes from a primary context (a node with main_context=1 of the same source)",
    ),
    "ep_cache_context": (
        "STRING",
        None,
        "the payload (embed_mode=1) or the path of the context file relative to the model's folder (embed_mode=0)",
    ),
    "embed_mode": ("INT", 1, "1: ep_cache_context holds the payload; 0: it holds a relative file path"),
    "ep_sdk_version": ("STRING", None, "version of the SDK that generated the node"),
    "onnx_model_filename": ("STRING", None, "file name of the source ONNX model"),
    "hardware_architecture": ("STRING", None, "hardware architecture the context targets"),
    "partition_name": ("STRING", None, "name of the partitioned graph (the fused node's name)"),
    "source": ("STRING", None, "key of the EP that generated the node; only that EP claims it"),
    "notes": ("STRING", None, "extra information the EP needs"),
    "max_size": ("INT", 0, "maximum size in the context, meaning defined by the EP"),
}

_lock = threading.Lock()
_registered = False


def build_schema() -> Any:
    """The ``OpSchema`` of EPContext: variadic heterogeneous inputs and outputs of any tensor type."""
    from onnx import defs, helper

    attrs = []
    for name, (kind, default, doc) in ATTRIBUTES.items():
        if default is None:
            attrs.append(defs.OpSchema.Attribute(name, getattr(defs.OpSchema.AttrType, kind), doc, required=False))
        else:
            attrs.append(defs.OpSchema.Attribute(name, helper.make_attribute(name, default), doc))
    variadic = defs.OpSchema.FormalParameterOption.Variadic
    types = [
        f"tensor({t})"
        for t in (
            "float16",
            "float",
            "double",
            "bfloat16",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "bool",
            "string",
        )
    ]
    return defs.OpSchema(
        EP_CONTEXT_OP,
        MS_DOMAIN,
        SINCE_VERSION,
        "Runs a precompiled partition of the graph from an EP's context (the EP Context design).",
        inputs=[
            defs.OpSchema.FormalParameter(
                "inputs", "T", "the partition's inputs", param_option=variadic, is_homogeneous=False, min_arity=0
            )
        ],
        outputs=[
            defs.OpSchema.FormalParameter(
                "outputs", "T", "the partition's outputs", param_option=variadic, is_homogeneous=False, min_arity=1
            )
        ],
        type_constraints=[("T", types, "any tensor type")],
        attributes=attrs,
    )


def register_ep_context_schema() -> None:
    """Register EPContext with ``onnx.defs`` once per process (idempotent, thread-safe; a schema
    registered by someone else first is kept)."""
    global _registered
    with _lock:
        if not _registered:
            from onnx import defs

            if not defs.has(EP_CONTEXT_OP, SINCE_VERSION, MS_DOMAIN):
                defs.register_schema(build_schema())
            _registered = True


def attribute_defaults() -> dict[str, Any]:
    """Attribute name -> default value, for the attributes the design gives a default."""
    return {name: default for name, (_, default, _) in ATTRIBUTES.items() if default is not None}

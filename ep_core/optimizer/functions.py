"""Model-local functions run as their bodies: no ep-core EP claims a function call, so every call is
inlined at load (onnx's inliner), as onnxruntime expands a function no EP takes.

onnx's inliner (and onnx-ir's) refuses a function whose opset of a domain differs from the model's
(skl2onnx's KNNImputer: functions at ai.onnx 21 in an opset 22 model). onnx's checker, run on the
model first, refuses a function whose ops differ between its opset and the model's; the others mean
the same under the model's opset, so their imports are aligned to it and the calls inlined."""

from __future__ import annotations

from typing import Any


def inline_functions(model: Any) -> Any:
    """``model`` (checked by onnx's checker) with its local functions' calls expanded; the very
    object when it has none."""
    if not model.functions:
        return model
    from onnx import ModelProto, inliner

    imports = {o.domain: o.version for o in model.opset_import}
    if any(imports.get(o.domain, o.version) != o.version for f in model.functions for o in f.opset_import):
        aligned = ModelProto()
        aligned.CopyFrom(model)
        for f in aligned.functions:
            for o in f.opset_import:
                o.version = imports.get(o.domain, o.version)
        model = aligned
    return inliner.inline_local_functions(model)

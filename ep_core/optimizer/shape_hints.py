"""The model's own value_info shapes, where onnx's inference finds none.

Loading takes every value's shape from inference, not from the model's value_info: those are the
author's word, and exporters leave stale ones (torch's dynamo exporter writes its example input's
dims, [B, 1, 32] for a value that is [B, T, 32], which onnxruntime never checks; holding an EP to
them failed runs that onnxruntime completes). Where inference finds no shape at all (an op without
a shape function, a contrib op), the author's word is all there is, and an EP plans better with it
(ranks decide what the Numba EP compiles): those shapes are put back here, then carried on by a
lenient inference pass."""

from __future__ import annotations

from typing import Any


def _shaped(v: Any) -> bool:
    return v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")


def with_hints(model: Any, declared: Any) -> Any:
    """``model`` (inferred), or a copy with ``declared.value_info``'s shapes for the values inference
    left without one. ``declared``: a GraphProto with the model's original value_info, or None."""
    if declared is None or not any(_shaped(v) for v in declared.value_info):
        return model
    graph = model.graph
    known = {v.name for v in graph.value_info if _shaped(v)}
    known |= {v.name for v in (*graph.input, *graph.output)} | {t.name for t in graph.initializer}
    hints = [v for v in declared.value_info if _shaped(v) and v.name not in known]
    if not hints:
        return model
    import onnx

    copy = type(model)()
    copy.CopyFrom(model)
    names = {v.name for v in hints}
    kept = [v for v in copy.graph.value_info if v.name not in names]
    del copy.graph.value_info[:]
    copy.graph.value_info.extend([*kept, *hints])
    try:
        return onnx.shape_inference.infer_shapes(copy, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - the hints stand alone, as inference left the rest
        return copy

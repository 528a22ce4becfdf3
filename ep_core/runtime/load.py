"""Step 1 of a session: path | bytes | ModelProto -> a checked ModelProto with its external data
resolved and shapes inferred."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import InvalidArgument, InvalidGraph, NoSuchFile

EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def load_model(model: Any, external_folder: str | None) -> tuple[Any, Path | None]:
    """The model and the path it came from (None for bytes or a ModelProto)."""
    import onnx
    from onnx import external_data_helper

    path: Path | None = None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise NoSuchFile(f"model file {str(path)!r} does not exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as exc:
            raise InvalidGraph(f"{path} is not a valid ONNX model: {exc}") from exc
        base: str | None = str(path.parent)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise InvalidGraph(f"the model bytes are not a valid ONNX model: {exc}") from exc
        base = external_folder
    elif isinstance(model, onnx.ModelProto):
        proto = model
        base = external_folder
    else:
        raise InvalidArgument(f"a model is a path, bytes or onnx.ModelProto, got {type(model).__name__}")

    external = [t for t in external_data_helper._get_all_tensors(proto) if external_data_helper.uses_external_data(t)]
    if external:
        if base is None:
            raise InvalidArgument(
                f"initializer {external[0].name!r} is stored in external data, but the model was given as "
                f"bytes: set the session config entry {EXTERNAL_FOLDER_KEY!r} to the folder holding it"
            )
        if proto is model:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
        try:
            external_data_helper.load_external_data_for_model(proto, base)
        except Exception as exc:  # onnx raises FileNotFoundError or a checker ValidationError
            raise NoSuchFile(f"external data of the model cannot be read from folder {base!r}: {exc}") from exc
    return proto, path


def check_and_infer(proto: Any) -> Any:
    """Validate the model and add inferred value types (kernels match on them)."""
    import onnx

    try:
        onnx.checker.check_model(_with_placeholder_shapes(proto), full_check=False)
    except onnx.checker.ValidationError as exc:
        raise InvalidGraph(f"the model is invalid: {str(exc).splitlines()[0]}") from exc
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return proto  # inference is a help, not a requirement: kernels still check at run time


def _with_placeholder_shapes(proto: Any) -> Any:
    """A copy for the checker in which tensor types of unknown rank carry a shape field.

    ONNX allows a tensor type without ``shape`` (unknown rank) and onnxruntime runs such models,
    but onnx 1.23's checker insists on the field for graph inputs and outputs. Only the copy is
    touched; the session runs the model as given."""

    def missing(v: Any) -> bool:
        return v.type.WhichOneof("value") == "tensor_type" and not v.type.tensor_type.HasField("shape")

    if not any(missing(v) for v in list(proto.graph.input) + list(proto.graph.output)):
        return proto
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for v in list(copy.graph.input) + list(copy.graph.output):
        if missing(v):
            v.type.tensor_type.shape.dim.add()  # one unknown dim: satisfies the field, checks nothing else
    return copy

"""``onnxruntime.transformers.io_binding_helper``: ``TypeHelper``, onnxruntime's tables between
``NodeArg.type`` strings (``tensor(float16)``), ONNX element types, NumPy and torch types.

torch is imported only by the torch methods (onnxruntime's module needs it at import). The CUDA
helpers of onnxruntime's module (``IOBindingHelper``, ``CudaSession``, ``GpuBinding``,
``GpuBindingManager``) bind torch CUDA tensors through onnxruntime's CUDA EP and are not here:
bind through ``InferenceSession.io_binding()``."""

from __future__ import annotations

from typing import Any

import numpy
from onnx import TensorProto

__all__ = ["TypeHelper"]

# onnxruntime's element types with a NumPy type (bool is Python's, as onnxruntime has it)
_NUMPY: dict[str, Any] = {
    "int64": numpy.int64,
    "int32": numpy.int32,
    "float": numpy.float32,
    "float16": numpy.float16,
    "bool": bool,
    "uint8": numpy.uint8,
    "int8": numpy.int8,
    "double": numpy.float64,
    "int16": numpy.int16,
    "uint16": numpy.uint16,
    "uint32": numpy.uint32,
    "uint64": numpy.uint64,
    "complex64": numpy.complex64,
    "complex128": numpy.complex128,
}
# onnxruntime's element types with a torch type: the name of the torch attribute
_TORCH = {
    **{k: k for k in ("int64", "int32", "float16", "bfloat16", "bool", "uint8", "int8", "int16")},
    **{k: k for k in ("uint16", "uint32", "uint64", "complex64", "complex128", "int4", "uint4")},
    "float": "float32",
    "double": "float64",
    **{f: f.replace("float8e", "float8_e") for f in ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")},
}
_ONNX_ELEMENT_TYPES = ("float4e2m1", "string", *_TORCH)  # what ort_type_to_onnx_type knows


def _element(ort_type: str, known: Any) -> str:
    """``float16`` of ``tensor(float16)``, if ``known`` has it; else onnxruntime's ValueError."""
    name = ort_type[len("tensor(") : -1] if ort_type.startswith("tensor(") and ort_type.endswith(")") else ""
    if name not in known:
        raise ValueError(f"{ort_type} not found in map")
    return name


def _torch() -> Any:
    import torch  # type: ignore[import-not-found]  # onnxruntime imports it at import; this module when asked

    return torch


class TypeHelper:
    """The type of an input or output of a session, in ONNX, NumPy or torch terms."""

    @staticmethod
    def get_input_type(ort_session: Any, name: str) -> str:
        for arg in ort_session.get_inputs():
            if arg.name == name:
                return str(arg.type)
        raise ValueError(f"input name {name} not found")

    @staticmethod
    def get_output_type(ort_session: Any, name: str) -> str:
        for arg in ort_session.get_outputs():
            if arg.name == name:
                return str(arg.type)
        raise ValueError(f"output name {name} not found")

    @staticmethod
    def ort_type_to_numpy_type(ort_type: str) -> Any:
        return _NUMPY[_element(ort_type, _NUMPY)]

    @staticmethod
    def ort_type_to_torch_type(ort_type: str) -> Any:
        torch_type = getattr(_torch(), _TORCH[_element(ort_type, _TORCH)], None)
        if torch_type is None:  # an element type this torch does not have (int4 in older ones)
            raise ValueError(f"{ort_type} not found in map")
        return torch_type

    @staticmethod
    def ort_type_to_onnx_type(ort_type: str) -> int:
        return int(TensorProto.DataType.Value(_element(ort_type, _ONNX_ELEMENT_TYPES).upper()))

    @staticmethod
    def numpy_type_to_torch_type(numpy_type: Any) -> Any:
        for name, np_type in _NUMPY.items():
            if np_type is numpy_type:
                return getattr(_torch(), _TORCH[name])
        raise ValueError(f"{numpy_type} not found in map")

    @staticmethod
    def torch_type_to_numpy_type(torch_type: Any) -> Any:
        torch = _torch()
        for name, np_type in _NUMPY.items():
            if getattr(torch, _TORCH[name]) == torch_type:
                return np_type
        raise ValueError(f"{torch_type} not found in map")

    @staticmethod
    def get_io_onnx_type_map(ort_session: Any) -> dict[str, int]:
        args = [*ort_session.get_inputs(), *ort_session.get_outputs()]
        return {a.name: TypeHelper.ort_type_to_onnx_type(a.type) for a in args}

    @staticmethod
    def get_io_numpy_type_map(ort_session: Any) -> dict[str, Any]:
        args = [*ort_session.get_inputs(), *ort_session.get_outputs()]
        return {a.name: TypeHelper.ort_type_to_numpy_type(a.type) for a in args}

    @staticmethod
    def get_io_torch_type_map(ort_session: Any) -> dict[str, Any]:
        args = [*ort_session.get_inputs(), *ort_session.get_outputs()]
        return {a.name: TypeHelper.ort_type_to_torch_type(a.type) for a in args}

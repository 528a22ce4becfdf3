"""``onnxruntime.capi.onnxruntime_inference_collection``: onnxruntime's Python classes, where
applications import them from (``OrtValue``, ``IOBinding``, ``InferenceSession``, ``Session``...)."""

from __future__ import annotations

from ep_core.onnxruntime.compiler import ModelCompiler
from ep_core.onnxruntime.devices import OrtDevice, OrtDeviceVendorId, get_ort_device_type, get_vendor_id_for_device_type
from ep_core.onnxruntime.iobinding import IOBinding
from ep_core.onnxruntime.ortvalue import OrtValue, copy_tensors
from ep_core.onnxruntime.refusals import AdapterFormat, SparseTensor
from ep_core.onnxruntime.session import InferenceSession, check_and_normalize_provider_args

Session = InferenceSession  # onnxruntime's base class of InferenceSession; here the one class

__all__ = [
    "AdapterFormat",
    "IOBinding",
    "InferenceSession",
    "ModelCompiler",
    "OrtDevice",
    "OrtDeviceVendorId",
    "OrtValue",
    "Session",
    "SparseTensor",
    "check_and_normalize_provider_args",
    "copy_tensors",
    "get_ort_device_type",
    "get_vendor_id_for_device_type",
]

"""onnxruntime's ``OrtValue`` over ep-core's ``Tensor``: the tensor is what onnxruntime's
``OrtValue._ortvalue`` (the C value) is, so IO binding and sessions pass it straight to the engine.

Devices are onnxruntime's names (``cpu``, ``cuda``, ``gpu``, ``npu``, ...) resolved to the memory an
installed EP offers (``cuda`` is the Numba-CUDA EP's device memory); copies go through that EP
factory's data transfer. A CPU value shares the NumPy array it was made from, as in onnxruntime.
Where onnxruntime raises a bare ``RuntimeError``/``ValueError``/``TypeError``, the errors here are
ep-core's typed ``InvalidArgument`` that also derive from that builtin, so either ``except`` works."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices
from ep_core.sdk.errors import EpCoreError, Fail, InvalidArgument, NotImplementedByAnyEp
from ep_core.sdk.memory import HOST_MEMORY, DeviceType, MemoryInfo
from ep_core.sdk.tensor import Tensor

__all__ = ["OrtValue", "as_runtime_error", "copy_tensors", "resolve_device", "device_tensor", "copy_between"]


class OrtRuntimeError(InvalidArgument, RuntimeError):
    """Where onnxruntime raises ``RuntimeError``."""


class OrtValueError(InvalidArgument, ValueError):
    """Where onnxruntime raises ``ValueError``."""


class OrtTypeError(InvalidArgument, TypeError):
    """Where onnxruntime raises ``TypeError``."""


_AS_RUNTIME: dict[type[EpCoreError], type[EpCoreError]] = {}


def as_runtime_error(exc: EpCoreError) -> EpCoreError:
    """``exc`` as an instance of a class deriving from its own and ``RuntimeError``, where
    onnxruntime raises a bare ``RuntimeError`` (its ``run_with_iobinding``): both ``except``
    clauses catch it."""
    if isinstance(exc, RuntimeError):
        return exc
    base = type(exc)
    cls = _AS_RUNTIME.get(base)
    if cls is None:
        cls = _AS_RUNTIME[base] = type(base.__name__, (base, RuntimeError), {"__module__": base.__module__})
    new = cls.__new__(cls, *exc.args)
    new.__dict__.update(exc.__dict__)
    new.args = exc.args
    return new


# onnxruntime's device names (OrtDevice.make) -> ep-core device type, and the vendor each alias implies
_KINDS = {
    "cpu": DeviceType.CPU,
    "cuda": DeviceType.GPU,
    "dml": DeviceType.GPU,
    "webgpu": DeviceType.GPU,
    "gpu": DeviceType.GPU,
    "cann": DeviceType.NPU,
    "npu": DeviceType.NPU,
}
_ALIAS_VENDOR = {"cuda": 0x10DE, "dml": 0x1414, "cann": 0x19E5, "webgpu": 0}
_NON_STRING = "Creation of OrtValues is currently only supported from non-string numpy arrays"


def device_name(mem: MemoryInfo) -> str:
    """onnxruntime's ``device_name()`` for a memory: ``cpu``, ``cuda`` (NVIDIA GPUs), else ``gpu``/``npu``."""
    if mem.device_type is DeviceType.CPU:
        return "cpu"
    return "cuda" if mem.vendor_id == _ALIAS_VENDOR["cuda"] else mem.device_type.value.lower()


def resolve_device(device_type: str, device_id: int = 0, vendor_id: int = -1) -> MemoryInfo:
    """The memory an installed EP offers for an onnxruntime device (``OrtDevice.make``'s arguments)."""
    kind = _KINDS.get(device_type)
    if kind is None:
        raise OrtRuntimeError(
            f"Unsupported device type: {device_type}; onnxruntime's device types are {sorted(_KINDS)}"
        )
    if kind is DeviceType.CPU:
        return HOST_MEMORY
    vendor = vendor_id if vendor_id >= 0 else _ALIAS_VENDOR.get(device_type)
    devices = [d for d in get_ep_devices() if not d.memory_info.is_host]
    for d in devices:
        m = d.memory_info
        if m.device_type is kind and m.device_id == device_id and vendor in (None, m.vendor_id):
            return m
    have = ["cpu"] + sorted({f"{device_name(d.memory_info)}:{d.memory_info.device_id} ({d.ep_name})" for d in devices})
    wanted = f"{device_type}:{device_id}" + ("" if vendor is None else f" (vendor id 0x{vendor:04x})")
    raise OrtRuntimeError(
        f"no installed execution provider offers device {wanted}; the devices here are {have} "
        "(install the EP for that device: an EP package; `ep-core providers` lists the installed ones)"
    )


def copy_between(value: Any, src: MemoryInfo, dst: MemoryInfo) -> Any:
    """``value`` copied from ``src`` to ``dst`` memory by the data transfer of the EP that owns them."""
    if src == dst or (src.is_host and dst.is_host):
        return value
    registry = get_registry()
    for d in get_ep_devices(registry):
        if d.memory_info in (src, dst):
            dt = registry.handle(d.ep_name).call("ep_factory_create_data_transfer", default=None)
            if dt is not None and dt.can_copy(src, dst):
                return dt.copy(value, src, dst, None)
    raise Fail(f"no installed execution provider can copy from {src} to {dst}")


def device_tensor(data: Any, mem: MemoryInfo) -> Tensor:
    """A ``Tensor`` of ``data`` in ``mem`` that can copy itself to the host."""
    if mem.is_host:
        return Tensor(data, mem)
    return Tensor(data, mem, lambda v: np.asarray(copy_between(v, mem, HOST_MEMORY)))


def np_dtype(element_type: Any) -> np.dtype:
    """A NumPy dtype from onnxruntime's ``element_type``: a NumPy type or an ONNX ``TensorProto`` int."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(int(element_type)))
        except (KeyError, ValueError):
            raise OrtRuntimeError(f"tensor type {int(element_type)} is not supported") from None
    try:
        return np.dtype(element_type)
    except TypeError as exc:
        raise OrtTypeError(f"element_type {element_type!r} is neither a NumPy type nor an ONNX type: {exc}") from None


def _onnx_type(dtype: np.dtype) -> int:
    if dtype.kind in "OUS":
        return int(TensorProto.STRING)
    try:
        return int(helper.np_dtype_to_tensor_dtype(dtype))
    except (KeyError, ValueError):
        raise OrtRuntimeError(f"Numpy_type {dtype} can't be converted to an ONNX tensor type") from None


def _numeric(arr: Any) -> np.ndarray:
    """The array an OrtValue can be made from (onnxruntime refuses strings, and anything not an array)."""
    if not isinstance(arr, np.ndarray) or arr.dtype.kind in "OUS":
        raise OrtRuntimeError(_NON_STRING + f" (got {getattr(arr, 'dtype', None) or type(arr).__name__})")
    _onnx_type(arr.dtype)
    return arr


def _contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself when C-contiguous (shared, as onnxruntime does), else a C-contiguous copy;
    unlike ``np.ascontiguousarray`` it keeps 0-d arrays 0-d."""
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _is_tensor(data: Any) -> bool:
    return hasattr(data, "shape") and hasattr(data, "dtype")


def _type_str(v: Any) -> str:
    """onnxruntime's type string of a value: tensor(float), seq(tensor(int64)), map(int64,tensor(float))."""
    if _is_tensor(v):
        return f"tensor({TensorProto.DataType.Name(_onnx_type(np.dtype(v.dtype))).lower()})"
    if isinstance(v, list):
        return f"seq({_type_str(v[0]) if v else 'tensor(undefined)'})"
    if isinstance(v, dict):  # ZipMap's maps: Python int/str keys, Python float values (tensor(float))
        key, val = next(iter(v.items()), ("", 0.0))
        value = "tensor(float)" if isinstance(val, float) else _type_str(np.asarray(val))
        return f"map({'string' if isinstance(key, str) else 'int64'},{value})"
    raise OrtRuntimeError(f"an OrtValue cannot hold a {type(v).__name__}")


class OrtValue:
    """A value (tensor, sequence, map) with the memory it lives in, as onnxruntime's ``OrtValue``."""

    _is_webgpu_buffer = False  # onnxruntime checks it before WebGPU-only paths; ep-core has no WebGPU

    def __init__(self, ortvalue: Tensor, numpy_obj: np.ndarray | None = None, session: Any = None) -> None:
        if not isinstance(ortvalue, Tensor):
            raise OrtValueError("`Provided ortvalue` needs to be of type `ep_core.sdk.tensor.Tensor`")
        self._ortvalue = ortvalue
        self._numpy_obj = numpy_obj  # the array a CPU value shares: kept alive with it
        self._session = session

    def _get_c_value(self) -> Tensor:
        return self._ortvalue

    @property
    def _tensor(self) -> Tensor:
        """The ep-core value (the compat session reads this name)."""
        return self._ortvalue

    # ------------------------------------------------------------------------- factories
    @classmethod
    def ortvalue_from_numpy(
        cls, numpy_obj: np.ndarray, /, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """A value over ``numpy_obj``: on the CPU it shares the array's memory (a C-contiguous one;
        others are copied), on a device it holds a copy."""
        arr = _contiguous(_numeric(numpy_obj))
        mem = resolve_device(device_type, device_id, vendor_id)
        if mem.is_host:
            return cls(Tensor(arr), numpy_obj)
        return cls(device_tensor(copy_between(arr, HOST_MEMORY, mem), mem))

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data: np.ndarray, /, onnx_element_type: int) -> OrtValue:
        """A CPU value over ``data``'s memory reinterpreted as an ONNX type of the same item size (bfloat16...)."""
        arr, dtype = _contiguous(_numeric(data)), np_dtype(onnx_element_type)
        if arr.itemsize != dtype.itemsize:
            raise OrtRuntimeError(
                f"Items size in the incoming array: {arr.itemsize} specified by onnxtype: {dtype.itemsize}"
            )
        return cls(Tensor(arr.view(dtype)), data)

    @classmethod
    def ortvalue_from_shape_and_type(
        cls,
        shape: Sequence[int],
        element_type: Any,
        device_type: str = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
        memory_info: MemoryInfo | None = None,
    ) -> OrtValue:
        """A new zero-filled value of ``shape`` and ``element_type`` on the device (or ``memory_info``)."""
        dtype = np_dtype(element_type)
        if dtype.kind in "OUS":
            raise OrtRuntimeError(_NON_STRING)
        if any(int(d) < 0 for d in shape):
            raise OrtRuntimeError(f"Tensor shape.Size() must be >= 0 (shape {list(shape)})")
        if memory_info is not None:
            memory_info = getattr(memory_info, "memory_info", memory_info)  # an OrtMemoryInfo carries ep-core's
            if not isinstance(memory_info, MemoryInfo):
                raise OrtTypeError(f"memory_info must be an ep_core MemoryInfo, got {type(memory_info).__name__}")
            if device_type != "cpu" or device_id != 0 or vendor_id != -1:
                warnings.warn(
                    "device_type, device_id, and vendor_id are ignored when memory_info is provided.", stacklevel=2
                )
            mem = memory_info
        else:
            mem = resolve_device(device_type, device_id, vendor_id)
        host = np.zeros([int(d) for d in shape], dtype)
        return cls(device_tensor(copy_between(host, HOST_MEMORY, mem), mem))

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor: Any) -> OrtValue:
        raise NotImplementedByAnyEp(
            "ep-core has no sparse tensors (no EP consumes them): densify the data and use ortvalue_from_numpy"
        )

    # -------------------------------------------------------------------------- queries
    def _tensor_data(self, what: str) -> Any:
        data = self._ortvalue.data
        if not _is_tensor(data):
            raise OrtRuntimeError(f"{what} needs an OrtValue that is a Tensor; this one is {self.data_type()}")
        return data

    def data_ptr(self) -> int:
        """The address of the first element (host or device), 0 for an empty tensor."""
        data = self._tensor_data("data_ptr()")
        if int(np.prod(data.shape)) == 0:
            return 0
        iface = getattr(data, "__cuda_array_interface__", None) or getattr(data, "__array_interface__", None)
        if iface is None:
            raise NotImplementedByAnyEp(f"{type(data).__name__} in {self._ortvalue.memory_info} exposes no address")
        return int(iface["data"][0])

    def device_name(self) -> str:
        self._tensor_data("device_name()")
        return device_name(self._ortvalue.memory_info)

    def shape(self) -> list[int]:
        return [int(d) for d in self._tensor_data("shape()").shape]

    def data_type(self) -> str:
        if self._ortvalue.data is None:
            raise OrtRuntimeError("this OrtValue holds no value (an optional without one): check has_value()")
        return _type_str(self._ortvalue.data)

    def element_type(self) -> int:
        """The ONNX element type of a tensor, or of the tensors of a sequence."""
        data = self._ortvalue.data
        if isinstance(data, list) and data and all(_is_tensor(t) for t in data):
            data = data[0]
        if not _is_tensor(data):
            raise OrtRuntimeError("Tensor proto_type is unavailable for this value.")
        return _onnx_type(np.dtype(data.dtype))

    def tensor_size_in_bytes(self) -> int:
        data = self._tensor_data("tensor_size_in_bytes()")
        return int(np.prod(data.shape)) * np.dtype(data.dtype).itemsize

    def has_value(self) -> bool:
        return self._ortvalue.data is not None

    def is_tensor(self) -> bool:
        return _is_tensor(self._ortvalue.data)

    def is_sparse_tensor(self) -> bool:
        return False  # ep-core has no sparse tensors

    def is_tensor_sequence(self) -> bool:
        data = self._ortvalue.data
        return isinstance(data, list) and all(_is_tensor(t) for t in data)

    def as_sparse_tensor(self) -> Any:
        raise OrtRuntimeError(
            "This OrtValue does not contain SparseTensor. Check data_type() value. (ep-core has no sparse tensors)"
        )

    # ----------------------------------------------------------------------------- data
    def numpy(self) -> np.ndarray:
        """The tensor as a NumPy array: the shared memory itself on the CPU, a copy from a device."""
        self._tensor_data("numpy()")
        return self._ortvalue.numpy()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        if copy is not None:
            return np.array(arr, dtype=dtype, copy=copy)
        return arr if dtype is None else np.asarray(arr, dtype=dtype)

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (a NumPy array or an OrtValue, same element count and type) into this
        value's memory, so its address stays the same (values bound to a session see it)."""
        if isinstance(data, OrtValue):
            value, src = data._tensor_data("update_inplace()"), data._ortvalue.memory_info
        elif isinstance(data, np.ndarray):
            value, src = _contiguous(data), HOST_MEMORY
        else:
            raise OrtTypeError("data must be a numpy.ndarray or an OrtValue.")
        target = self._ortvalue
        mine = self._tensor_data("update_inplace()")
        if int(np.prod(value.shape)) != int(np.prod(mine.shape)):
            raise OrtRuntimeError("The input size of numpy arrays does not match the size of the OrtValue.")
        if np.dtype(value.dtype) != np.dtype(mine.dtype):
            raise OrtRuntimeError(f"update_inplace: the data is {value.dtype}, this OrtValue is {mine.dtype}")
        if target.memory_info.is_host and not mine.flags.writeable:
            raise OrtRuntimeError("update_inplace: this OrtValue shares a read-only NumPy array")
        value = copy_between(value, src, target.memory_info)
        target.write(value.reshape(tuple(mine.shape)), "this OrtValue")

    # -------------------------------------------------------------------------- DLPack
    def __dlpack__(self, *, stream: Any = None) -> Any:
        data = self._tensor_data("__dlpack__()")
        if self._ortvalue.memory_info.is_host or getattr(type(data), "__dlpack__", None) is not None:
            return data.__dlpack__(stream=stream)
        raise NotImplementedByAnyEp(
            f"{type(data).__name__} in {self._ortvalue.memory_info} does not export DLPack; copy it with numpy() first"
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        data, mem = self._tensor_data("__dlpack_device__()"), self._ortvalue.memory_info
        if mem.is_host:
            return (1, 0)  # kDLCPU
        if getattr(type(data), "__dlpack_device__", None) is not None:
            return tuple(data.__dlpack_device__())  # type: ignore[return-value]
        if device_name(mem) == "cuda":
            return (2, mem.device_id)  # kDLCUDA
        raise NotImplementedByAnyEp(f"no DLPack device type for {mem}")

    @classmethod
    def from_dlpack(cls, data: Any, /) -> OrtValue:
        """A CPU value sharing the memory of a DLPack producer (or raw capsule); device producers are
        refused (ep-core's device arrays cannot import DLPack)."""
        if isinstance(data, OrtValue):
            return cls(data._ortvalue, data._numpy_obj)
        dtype = getattr(data, "dtype", None)
        is_bool = getattr(dtype, "name", str(dtype)) in ("bool", "bool_", "torch.bool")
        device = data.__dlpack_device__() if hasattr(data, "__dlpack_device__") else (1, 0)
        if device[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise NotImplementedByAnyEp(
                f"DLPack import from device {tuple(device)} is not supported: ep-core imports host memory only; "
                "copy the data to the host first"
            )
        arr = np.from_dlpack(data if hasattr(data, "__dlpack__") else _Capsule(data))
        if is_bool and arr.dtype == np.uint8:
            arr = arr.view(np.bool_)
        return cls(Tensor(arr), arr)


class _Capsule:
    """A raw DLPack capsule as a producer NumPy can import (onnxruntime's legacy path)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def copy_tensors(src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: Any = None) -> None:
    """onnxruntime's ``copy_tensors``: each source's data into the destination at the same place."""
    if stream is not None:
        raise OrtValueError("copy_tensors: ep-core copies synchronously and takes no stream; pass stream=None")
    if len(src) != len(dst):
        raise OrtValueError(f"copy_tensors: {len(src)} sources but {len(dst)} destinations")
    for s, d in zip(src, dst):
        d.update_inplace(s)

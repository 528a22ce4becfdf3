"""onnxruntime's ``IOBinding`` over the engine's (``ep_core.runtime.iobinding``), kept in
``_iobinding`` as onnxruntime keeps its C ``SessionIOBinding``: the compat session's
``run_with_iobinding(b)`` runs the engine's binding. Only bound outputs come back, in bind order.

Raw pointers: a CPU pointer becomes a NumPy array over that memory (ctypes); a ``cuda`` pointer
becomes a Numba device array over it (``__cuda_array_interface__``; under the numba-cuda simulator
a device pointer is a host address, so it is wrapped as the simulator's device array)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ep_core.onnxruntime.ortvalue import (
    OrtRuntimeError,
    OrtTypeError,
    OrtValue,
    OrtValueError,
    as_runtime_error,
    device_name,
    device_tensor,
    np_dtype,
    resolve_device,
)
from ep_core.runtime.iobinding import IOBinding as EngineIOBinding
from ep_core.runtime.session import InferenceSession as EngineSession
from ep_core.sdk.errors import EpCoreError, NotImplementedByAnyEp
from ep_core.sdk.memory import MemoryInfo
from ep_core.sdk.tensor import Tensor

__all__ = ["IOBinding", "SessionIOBinding"]


def engine_session(session: Any) -> EngineSession:
    """The ep-core session behind ``session``: itself, or the compat session's ``_sess`` (where
    onnxruntime's InferenceSession keeps its C session)."""
    for s in (session, getattr(session, "_sess", None)):
        if isinstance(s, EngineSession):
            return s
    raise OrtTypeError(f"IOBinding needs an InferenceSession, got {type(session).__name__}")


def SessionIOBinding(session: Any) -> EngineIOBinding:  # noqa: N802 - onnxruntime's class name
    """onnxruntime's C-level ``SessionIOBinding(sess._sess)``: the engine's binding of the session."""
    return EngineSession.io_binding(engine_session(session))  # the engine's, not a subclass's override


def _host_array_at(ptr: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    return np.frombuffer(memoryview((ctypes.c_byte * nbytes).from_address(int(ptr))), dtype).reshape(shape)


class _CudaPointer:
    """A device pointer with its shape and type, as numba's ``as_cuda_array`` takes it."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (int(ptr), False),
            "strides": None,
            "version": 3,
        }


def _device_array_at(ptr: int, shape: tuple[int, ...], dtype: np.dtype, mem: MemoryInfo) -> Any:
    if device_name(mem) != "cuda":
        raise NotImplementedByAnyEp(f"binding a raw pointer in {mem} is not supported; bind an OrtValue there instead")
    from numba import config, cuda

    if getattr(config, "ENABLE_CUDASIM", False):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(_host_array_at(ptr, shape, dtype))
    return cuda.as_cuda_array(_CudaPointer(ptr, shape, dtype))


def _tensor_at(ptr: int, shape: Sequence[int], element_type: Any, mem: MemoryInfo) -> Tensor:
    """A tensor over memory the caller owns at ``ptr`` (nothing is copied)."""
    dtype, dims = np_dtype(element_type), tuple(int(d) for d in shape)
    if mem.is_host:
        return Tensor(_host_array_at(ptr, dims, dtype), mem)
    return device_tensor(_device_array_at(ptr, dims, dtype, mem), mem)


_F = TypeVar("_F", bound=Callable[..., Any])


def _runtime_errors(method: _F) -> _F:
    """onnxruntime's binding raises ``RuntimeError`` for what it refuses: ep-core's typed error
    is raised as a class deriving from both (``as_runtime_error``)."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except EpCoreError as exc:
            raise as_runtime_error(exc) from exc

    return call  # type: ignore[return-value]


class IOBinding:
    """Binds inputs and outputs of an InferenceSession to memory on a device, e.g. GPU."""

    def __init__(self, session: Any) -> None:
        self._session = engine_session(session)
        self._iobinding: EngineIOBinding = EngineSession.io_binding(self._session)

    def _input(self, name: str) -> str:
        s = self._session
        if name not in {a.name for a in [*s.get_inputs(), *s.get_overridable_initializers()]}:
            raise OrtRuntimeError(f"Failed to find NodeArg with name: {name} in the def list")
        return name

    def _owned(self, mem: MemoryInfo) -> MemoryInfo:
        """``mem`` if this session can use it (the host, or an EP's device memory)."""
        if mem.is_host or any(e.memory_info == mem for e in self._session.execution_providers):
            return mem
        raise OrtRuntimeError(
            f"no execution provider of this session {self._session.get_providers()} uses device "
            f"{device_name(mem)}:{mem.device_id}; put that device's EP in the session's providers"
        )

    @_runtime_errors
    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind an input to a NumPy array; the binding shares its memory."""
        if not isinstance(arr_on_cpu, np.ndarray):
            raise OrtRuntimeError(
                f"Unable to create OrtValue from the given python object ({type(arr_on_cpu).__name__})"
            )
        self._iobinding.bind_cpu_input(self._input(name), arr_on_cpu)

    @_runtime_errors
    def bind_input(
        self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int], buffer_ptr: int
    ) -> None:
        """Bind an input to memory at ``buffer_ptr`` on the device (no copy)."""
        mem = self._owned(resolve_device(device_type, device_id))
        self._iobinding.bind_input(self._input(name), _tensor_at(buffer_ptr, shape, element_type, mem))

    @_runtime_errors
    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        if not isinstance(ortvalue, OrtValue):
            raise OrtTypeError(f"bind_ortvalue_input takes an OrtValue, got {type(ortvalue).__name__}")
        self._owned(ortvalue._ortvalue.memory_info)
        self._iobinding.bind_input(self._input(name), ortvalue._ortvalue)

    def synchronize_inputs(self) -> None:
        self._iobinding.synchronize_inputs()

    @_runtime_errors
    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output to a device (the session allocates it there) or to memory at ``buffer_ptr``
        (the result is written into it)."""
        mem = self._owned(resolve_device(device_type, device_id))
        if buffer_ptr is None:
            self._iobinding.bind_output(name, mem)
            return
        if element_type is None or shape is None:
            raise OrtValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        self._iobinding.bind_output(name, buffer=_tensor_at(buffer_ptr, shape, element_type, mem))

    @_runtime_errors
    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an output to an OrtValue: the result is written into it."""
        if not isinstance(ortvalue, OrtValue):
            raise OrtTypeError(f"bind_ortvalue_output takes an OrtValue, got {type(ortvalue).__name__}")
        self._owned(ortvalue._ortvalue.memory_info)
        self._iobinding.bind_output(name, buffer=ortvalue._ortvalue)

    def synchronize_outputs(self) -> None:
        self._iobinding.synchronize_outputs()

    @_runtime_errors
    def get_outputs(self) -> list[OrtValue]:
        """The bound outputs of the last run, in bind order (on the devices they were bound to)."""
        return [OrtValue(t) for t in self._iobinding.get_outputs()]

    def get_outputs_as_ortvaluevector(self) -> list[Tensor]:
        """The outputs as the engine's values (onnxruntime's C ``OrtValueVector``)."""
        return self._iobinding.get_outputs()

    @_runtime_errors
    def copy_outputs_to_cpu(self) -> list[Any]:
        return self._iobinding.copy_outputs_to_cpu()

    def clear_binding_inputs(self) -> None:
        self._iobinding.clear_binding_inputs()

    def clear_binding_outputs(self) -> None:
        self._iobinding.clear_binding_outputs()

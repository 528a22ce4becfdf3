"""``Tensor``: a value with the memory it lives in, like ``OrtValue``. Host data is a NumPy
array; device data is whatever the EP's allocator returns (e.g. a numba DeviceNDArray)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument, NotImplementedByAnyEp
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo


@dataclass
class Tensor:
    data: Any
    memory_info: MemoryInfo = HOST_MEMORY
    _to_host: Callable[[Any], np.ndarray] | None = None

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "Tensor":
        return cls(np.asarray(array), HOST_MEMORY)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        dtype: np.dtype = np.dtype(self.data.dtype)  # ``data`` is Any: host array or device array
        return dtype

    def device_name(self) -> str:
        return self.memory_info.device_type.value.lower()

    def is_on_host(self) -> bool:
        return self.memory_info.is_host

    def numpy(self) -> np.ndarray:
        """The data as a host array (copied from the device when needed)."""
        if self.memory_info.is_host:
            return np.asarray(self.data)
        if self._to_host is None:
            raise RuntimeError(f"no way to copy this tensor from {self.memory_info} to the host")
        return self._to_host(self.data)

    def write(self, value: Any, what: str = "the tensor") -> None:
        """Copy ``value`` (same shape and dtype; host data for a host tensor) into this memory in place."""
        if tuple(value.shape) != self.shape or np.dtype(value.dtype) != self.dtype:
            raise InvalidArgument(f"{value.dtype}{tuple(value.shape)} cannot go into {what} ({self.dtype}{self.shape})")
        if not self.memory_info.is_host and not hasattr(self.data, "copy_to_device"):  # numba device arrays have it
            raise NotImplementedByAnyEp(f"{type(self.data).__name__} in {self.memory_info} has no copy_to_device()")
        np.copyto(self.data, value) if self.memory_info.is_host else self.data.copy_to_device(value)

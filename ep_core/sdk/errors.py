"""Typed errors. Each carries the ONNX Runtime status code the design names, so callers can
branch on ``err.code`` the way they would on an ``OrtStatus``."""

from __future__ import annotations

import os
from enum import Enum


class StatusCode(str, Enum):
    """``OrtErrorCode``'s values. Each has an exception class below, named as
    ``onnxruntime.capi.onnxruntime_pybind11_state`` names it (``ep_core.onnxruntime`` re-exports
    these very classes there), so ``except onnxruntime...InvalidArgument`` catches ep-core's."""

    FAIL = "FAIL"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NO_SUCHFILE = "NO_SUCHFILE"
    INVALID_GRAPH = "INVALID_GRAPH"
    NOT_IMPLEMENTED = "NOT_IMPLEMENTED"
    NO_MODEL = "NO_MODEL"
    ENGINE_ERROR = "ENGINE_ERROR"
    RUNTIME_EXCEPTION = "RUNTIME_EXCEPTION"
    INVALID_PROTOBUF = "INVALID_PROTOBUF"
    MODEL_LOADED = "MODEL_LOADED"
    NOT_FOUND = "NOT_FOUND"
    EP_FAIL = "EP_FAIL"
    MODEL_LOAD_CANCELED = "MODEL_LOAD_CANCELED"
    MODEL_REQUIRES_COMPILATION = "MODEL_REQUIRES_COMPILATION"
    DEVICE_RESET = "DEVICE_RESET"


class EpCoreError(Exception):
    """Base of every error ep-core raises on purpose."""

    code: StatusCode = StatusCode.FAIL

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.code.value}] {message}")
        self.message = message


class Fail(EpCoreError):
    code = StatusCode.FAIL


class InvalidArgument(EpCoreError):
    code = StatusCode.INVALID_ARGUMENT


class NoSuchFile(EpCoreError):
    code = StatusCode.NO_SUCHFILE


class InvalidGraph(EpCoreError):
    code = StatusCode.INVALID_GRAPH


class NotImplementedByAnyEp(EpCoreError):
    """No execution provider can run a node (or an op has no kernel); onnxruntime's ``NotImplemented``."""

    code = StatusCode.NOT_IMPLEMENTED


class NoModel(EpCoreError):
    code = StatusCode.NO_MODEL


class EngineError(EpCoreError):
    code = StatusCode.ENGINE_ERROR


class RuntimeException(EpCoreError):
    code = StatusCode.RUNTIME_EXCEPTION


class InvalidProtobuf(EpCoreError):
    """A model file that is not a parseable ONNX protobuf."""

    code = StatusCode.INVALID_PROTOBUF


class ModelLoaded(EpCoreError):
    code = StatusCode.MODEL_LOADED


class NotFound(EpCoreError):
    code = StatusCode.NOT_FOUND


class ModelLoadCanceled(EpCoreError):
    """Session creation stopped by ``SessionOptions.set_load_cancellation_flag(True)``."""

    code = StatusCode.MODEL_LOAD_CANCELED


class DeviceReset(EpCoreError):
    code = StatusCode.DEVICE_RESET


class EpFail(EpCoreError):  # onnxruntime's EPFail
    """An execution provider broke one of its promises (bad return value, failed hook)."""

    code = StatusCode.EP_FAIL


class ModelRequiresCompilation(EpCoreError):
    """``session.disable_compile=1`` and an EP would compile part of the model (only precompiled
    EPContext nodes may be loaded), as ORT's ``ORT_MODEL_REQUIRES_COMPILATION``."""

    code = StatusCode.MODEL_REQUIRES_COMPILATION


class RunTerminated(Fail):
    """A run stopped because its ``RunOptions.terminate`` was set (onnxruntime reports FAIL too)."""


class ConfigError(InvalidArgument):
    """A session option, provider option or config file entry is unknown or has a bad value."""


class UnknownProviderError(InvalidArgument):
    """A provider name that no installed plugin registers."""


class PluginError(Fail):
    """A plugin failed to load or validate; raised only in strict mode, else recorded."""


# -- strict mode (issue 12): an EP author's contract mistakes raise instead of being recorded
STRICT_ENV = "EP_CORE_STRICT_PLUGINS"


def strict_mode() -> bool:
    """Whether ``EP_CORE_STRICT_PLUGINS=1``: an EP's mistakes (load errors, refused kernels, bad
    claims) raise; otherwise they are recorded and shown (``ep-core providers``, diagnostics)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")

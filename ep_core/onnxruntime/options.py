"""``onnxruntime.SessionOptions`` and ``RunOptions``: ep-core's own option classes (every
onnxruntime attribute, each with its effect or refused) with onnxruntime's ways where they differ:
``add_provider``/``has_providers`` (which select an EP by name through ep-core's device selection,
so an ep-core session given these options honours them too), a negative thread count meaning the
default, profiles named ``onnxruntime_profile_...json``, ``AttributeError`` for an attribute
onnxruntime does not have (SessionOptions and RunOptions), ``RuntimeError`` for a run config key that is not set. onnxruntime's
session config keys are ep-core's too (``ep_core/runtime/onnxruntime_config_keys.toml``).
``SessionOptions.get_session_config_entry`` of a key not set gives None (onnxruntime raises
``RuntimeError``): ep-core's engine reads its options through it."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np

from ep_core.runtime import options as _options
from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices
from ep_core.sdk.errors import ConfigError, InvalidArgument


class SessionOptions(_options.SessionOptions):
    __doc__ = _options.SessionOptions.__doc__

    # onnxruntime takes any int: 0 or less lets it choose the size (a negative one is kept as set)
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    profile_file_prefix: str = "onnxruntime_profile_"  # files onnxruntime_profile__<date>.json, as onnxruntime's

    def __setattr__(self, name: str, value: Any) -> None:
        _known_attribute(self, name, value)
        super().__setattr__(name, value)

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any] | None = None) -> None:
        """Use the EP named (or an EP answering to that onnxruntime name) on its first device, with
        these options, as onnxruntime's ``add_provider`` (used by ``ModelCompiler``)."""
        name = get_registry().handle(provider_name).name
        devices = [d for d in get_ep_devices() if d.ep_name == name]
        if not devices:
            raise ConfigError(f"execution provider {provider_name!r} has no device here (see `ep-core providers`)")
        self.add_provider_for_devices(devices[:1], provider_options)

    def has_providers(self) -> bool:
        """Whether EPs were added (``add_provider``, ``add_provider_for_devices``)."""
        return bool(self.provider_devices)


class RunOptions(_options.RunOptions):
    __doc__ = _options.RunOptions.__doc__

    def __setattr__(self, name: str, value: Any) -> None:
        _known_attribute(self, name, value)
        super().__setattr__(name, value)

    def get_run_config_entry(self, key: str) -> str:
        """The value set for ``key``; one not set is a ``RuntimeError``, as in onnxruntime."""
        if key not in self.config_entries:
            raise _ConfigKeyError(f"RunOptions does not have configuration with key: {key}")
        return self.config_entries[key]


def _known_attribute(options: Any, name: str, value: Any = None) -> None:
    """An attribute onnxruntime's options do not have is an ``AttributeError``, and a value its
    binding would not take a ``TypeError``, as there: an int field takes ints and bools (within
    int32), a bool field ints and bools, a str field str or bytes, an enum field only its enum
    (``graph_optimization_level = 99`` and ``intra_op_num_threads = "2"`` fail there; pydantic
    would convert them)."""
    cls = type(options)
    if not name.startswith("_") and name not in cls.model_fields and not hasattr(cls, name):
        raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}' (onnxruntime's have none either)")
    field = cls.model_fields.get(name)
    kind = field.annotation if field is not None else None
    integral = isinstance(value, (int, np.integer))
    checks: dict[Any, bool] = {
        int: integral and -(2**31) <= int(value) < 2**31,
        bool: integral or isinstance(value, np.bool_),
        str: isinstance(value, (str, bytes)),
    }
    ok = checks.get(kind, not (isinstance(kind, type) and issubclass(kind, enum.Enum)) or isinstance(value, kind))
    if not ok:
        from ep_core.onnxruntime.ortvalue import OrtTypeError

        want = getattr(kind, "__name__", str(kind))
        raise OrtTypeError(
            f"{cls.__name__}.{name}: incompatible value {value!r} ({type(value).__name__}); it takes {want}"
        )


class _ConfigKeyError(InvalidArgument, RuntimeError):
    """A config key that is not set: onnxruntime raises ``RuntimeError``."""


__all__ = ["RunOptions", "SessionOptions"]

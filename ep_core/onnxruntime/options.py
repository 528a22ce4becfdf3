"""``onnxruntime.SessionOptions``: ep-core's own ``SessionOptions`` (every onnxruntime attribute,
each with its effect or refused) plus onnxruntime's ``add_provider``/``has_providers``, which
select an EP by name through ep-core's device selection (``provider_devices``), so an ep-core
session given these options honours them too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ep_core.runtime import options as _options
from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices
from ep_core.sdk.errors import ConfigError


class SessionOptions(_options.SessionOptions):
    __doc__ = _options.SessionOptions.__doc__

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


__all__ = ["SessionOptions"]

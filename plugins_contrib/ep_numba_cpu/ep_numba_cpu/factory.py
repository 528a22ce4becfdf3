"""Entry point of the Numba CPU EP (``ep_core.execution_providers`` group)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from logging import Logger
from typing import Any

from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.ep_base import HostEpFactory
from ep_numba_cpu import EP_NAME, __version__


class NumbaCpuFactory(HostEpFactory):
    ep_name = EP_NAME
    ep_vendor = "ep-core contrib"
    ep_version = __version__
    option_names = ("parallel", "kernel_cache", "kernel_cache_dir", "kernel_cache_max_mb", "compile_workers")

    def ep_factory_api_version(self) -> int:
        return 2

    def ep_factory_create_ep(
        self, devices: Sequence[EpDevice], ep_options: Mapping[str, str], session_options: Any, logger: Logger
    ) -> Any:
        """The EP for one session; ``logger`` (the session's child for this EP) gets its notes."""
        self.check_options(ep_options)
        from ep_numba_cpu.ep import NumbaCpuEp

        return NumbaCpuEp(ep_options, session_options, logger)

    def ep_factory_get_fusable_ops(self) -> list[tuple[str, str, int, None]]:
        """What the EP fuses, from the first opset each op is implemented for (the parity report)."""
        from ep_numba_cpu.ops import fusable_ops

        return fusable_ops()

    def ep_factory_validate_compiled_model_compatibility(
        self, devices: Sequence[HardwareDevice], compatibility_info: str
    ) -> str:
        from ep_numba_cpu.compat import verdict

        return verdict(compatibility_info)


factory = NumbaCpuFactory()

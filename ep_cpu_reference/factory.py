"""Entry point of the reference EP (``ep_core.execution_providers`` group)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ep_core.sdk.devices import EpDevice
from ep_core.sdk.ep_base import HostEpFactory
from ep_cpu_reference import EP_NAME, __version__


class CpuReferenceFactory(HostEpFactory):
    ep_name = EP_NAME
    ep_vendor = "ep-core"
    ep_version = __version__

    def ep_factory_api_version(self) -> int:
        return 3

    def ep_factory_get_provider_aliases(self) -> list[str]:
        """onnxruntime's default CPU EP: this EP runs every ONNX operator on the CPU and is tested
        against onnxruntime's results (the parity report and the node tests)."""
        return ["CPUExecutionProvider"]

    def ep_factory_is_cpu_fallback(self) -> bool:
        return True

    def set_random_seed(self, seed: int) -> None:
        """onnxruntime's ``set_seed``: random ops without a ``seed`` attribute, in sessions created
        from now on, draw from ``numpy.random.RandomState(seed)``."""
        from ep_cpu_reference.kernels import misc

        misc.SEED[0] = seed

    def ep_factory_create_ep(
        self, devices: Sequence[EpDevice], ep_options: Mapping[str, str], session_options: Any
    ) -> Any:
        self.check_options(ep_options)
        from ep_cpu_reference.ep import CpuReferenceEp

        return CpuReferenceEp()


factory = CpuReferenceFactory()

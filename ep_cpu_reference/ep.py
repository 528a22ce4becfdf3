"""The reference EP object: its capability is its kernel registry."""

from __future__ import annotations

from ep_core.sdk.ep_base import RegistryEp
from ep_cpu_reference import EP_NAME
from ep_cpu_reference.registry import registry


class CpuReferenceEp(RegistryEp):
    def __init__(self) -> None:
        super().__init__(EP_NAME, registry())

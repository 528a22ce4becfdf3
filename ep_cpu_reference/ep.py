"""The reference EP object: its capability is its kernel registry."""

from __future__ import annotations

from ep_core.sdk.ep_base import RegistryEp
from ep_cpu_reference import EP_NAME
from ep_cpu_reference.registry import REGISTRY


class CpuReferenceEp(RegistryEp):
    def __init__(self) -> None:
        # not loaded here: the kernel families load on the registry's first query, so a session
        # whose nodes another EP claims (a Numba EPContext model) never imports them
        super().__init__(EP_NAME, REGISTRY)

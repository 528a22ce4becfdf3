"""Entry point of the Numba-CUDA EP (``ep_core.execution_providers`` group).

Importing this module imports neither numba nor the kernels: probing (``device.probe``) and EP
creation import them on first use, so ``import ep_core`` and provider listing stay cheap and a
machine without numba-cuda still lists the EP with a reason it cannot run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.errors import ConfigError
from ep_core.sdk.memory import MemoryInfo
from ep_cuda_numba import EP_NAME, NVIDIA_VENDOR_ID, __version__
from ep_cuda_numba import device as _device
from ep_cuda_numba.options import parse_options


class NumbaCudaFactory:
    """Owns what sessions share per device: the arena, the data transfer, the kernel registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arenas: dict[int, Any] = {}
        self._pinned: dict[int, Any] = {}
        self._transfer: Any = None
        self.streams_created = 0

    # ------------------------------------------------------------------------ identity
    def ep_factory_name(self) -> str:
        return EP_NAME

    def ep_factory_vendor(self) -> str:
        return "ep-core"

    def ep_factory_vendor_id(self) -> int:
        return NVIDIA_VENDOR_ID

    def ep_factory_version(self) -> str:
        return __version__

    def ep_factory_api_version(self) -> int:
        return 4  # 4: the graph capture hooks (ep_is_graph_capture_enabled ...)

    # ------------------------------------------------------------------------- devices
    def ep_factory_probe_hardware_devices(self) -> Sequence[HardwareDevice]:
        return list(_device.probe().devices)

    def ep_factory_get_supported_devices(self, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
        out = []
        for d in devices:
            if _device.usable(d):
                out.append(
                    EpDevice(
                        EP_NAME,
                        "ep-core",
                        d,
                        _device.device_memory_info(d.device_id),
                        _device.pinned_memory_info(d.device_id),
                        ep_metadata={"simulated": d.metadata.get("simulated", "0"), "version": __version__},
                        ep_options={"device_id": str(d.device_id)},
                    )
                )
        return out

    def ep_factory_get_hardware_device_incompatibility_details(self, device: HardwareDevice) -> list[str] | None:
        return _device.incompatibility(device)

    # ------------------------------------------------------------------------------ EP
    def ep_factory_create_ep(
        self, devices: Sequence[EpDevice], ep_options: Mapping[str, str], session_options: Any, logger: logging.Logger
    ) -> Any:
        """``CreateEp`` on the selected device. The core merges ``ep_options`` over the EpDevice's own
        (``device_id`` of that device), the user's winning; without a ``device_id`` (a direct call)
        the selected device decides. ``logger`` is the session's child logger for this EP."""
        raw = dict(ep_options)
        if devices:
            raw.setdefault("device_id", str(devices[0].device.device_id))
        opts = parse_options(raw)
        available = sorted(d.device_id for d in _device.probe().devices if _device.usable(d))
        if opts.device_id not in available:
            raise ConfigError(
                f"{EP_NAME} option device_id={opts.device_id} names no usable CUDA device; available device ids: "
                f"{available or 'none'}"
            )
        selected = devices[0].device.device_id if devices else opts.device_id
        if selected != opts.device_id:
            raise ConfigError(
                f"{EP_NAME} option device_id={opts.device_id} disagrees with the selected device gpu:{selected}; "
                f"select the device instead: providers=[('{EP_NAME}', {{'device': 'gpu:{opts.device_id}'}})]"
            )
        from ep_cuda_numba.ep import NumbaCudaEp

        arena = self.arena(opts.device_id, opts.arena)
        found = next(d for d in _device.probe().devices if d.device_id == opts.device_id)
        logger.info(
            "%s on gpu:%d (%s, compute capability %s), arena %r",
            EP_NAME,
            opts.device_id,
            found.metadata.get("name", "?"),
            found.metadata.get("compute_capability", "?"),
            arena,
        )
        return NumbaCudaEp(self, opts, arena, session_options, simulated=_device.simulator_requested(), logger=logger)

    def ep_factory_release_ep(self, ep: Any) -> None:
        ep.release()

    # -------------------------------------------------------------------- memory, copies
    def arena(self, device_id: int, request: Mapping[str, object] | None = None, partial: bool = False) -> Any:
        """The one device arena of ``device_id``, shared by every session on it. ``request`` holds the
        arena settings a session asked for (arena_config.arena_request); None asks for nothing."""
        from ep_cuda_numba.allocator import DeviceArena

        return self._shared(self._arenas, DeviceArena, device_id, request, partial)

    def pinned(self, device_id: int, request: Mapping[str, object] | None = None, partial: bool = False) -> Any:
        """The one pinned (``CudaPinned``) host arena for copies to and from ``device_id``."""
        from ep_cuda_numba.pinned import PinnedArena

        return self._shared(self._pinned, PinnedArena, device_id, request, partial)

    def _shared(
        self, table: dict[int, Any], cls: type, device_id: int, request: Mapping[str, object] | None, partial: bool
    ) -> Any:
        """Create the arena with the first request; an idle arena (no session, nothing in use) takes a
        new session's settings (the defaults for those not given, or with ``partial`` the arena's
        current ones); a busy one must already have every setting asked for explicitly."""
        from ep_cuda_numba.arena_config import config_for, conflicts

        with self._lock:
            arena = table.get(device_id)
            if arena is None:
                arena = table[device_id] = cls(device_id, config_for(request or {}))
            elif request is not None and config_for(request, arena.config if partial else None) != arena.config:
                if not (arena.users or arena.in_use()):
                    arena.release_unused(config_for(request, arena.config if partial else None))
                elif conflicts(request, arena.config):
                    raise ConfigError(
                        f"{EP_NAME}: the {arena.memory_name} arena of gpu:{device_id} is shared by every session on "
                        f"the device and is in use with {arena.config.describe()}; this session asks for "
                        f"{', '.join(conflicts(request, arena.config))}: pass the same arena options, or close the "
                        "other sessions first"
                    )
            return arena

    def ep_factory_create_allocator(self, memory_info: MemoryInfo, allocator_options: Mapping[str, str]) -> Any:
        """The shared arena for ``Cuda`` (device) or ``CudaPinned`` (host) memory; ``allocator_options``
        are OrtArenaCfg's ``arena.*`` keys (ep-core passes the session's ``ep.<EP>.arena.*`` entries)."""
        from ep_cuda_numba.arena_config import arena_request

        if memory_info.name not in ("Cuda", "CudaPinned"):
            return None
        request = arena_request(allocator_options) if allocator_options else None
        make = self.arena if memory_info.name == "Cuda" else self.pinned
        arena = make(memory_info.device_id, request, partial=True)
        with self._lock:
            arena.users += 1
        return arena

    def ep_factory_release_allocator(self, allocator: Any) -> None:
        with self._lock:
            allocator.users -= 1
            last = allocator.users <= 0
        if last:
            allocator.release_unused()  # no session uses the device: give its free regions back
            with self._lock:  # and the pinned arena's: no session option or user ever reaches it
                pinned = None if allocator.host_side else self._pinned.get(allocator.device_id)
            if pinned is not None and pinned.users <= 0:
                pinned.release_unused()

    def ep_factory_create_data_transfer(self) -> Any:
        with self._lock:
            if self._transfer is None:
                from ep_cuda_numba.transfer import CudaDataTransfer

                self._transfer = CudaDataTransfer(self)
            return self._transfer

    def ep_factory_is_stream_aware(self) -> bool:
        return True

    def ep_factory_create_sync_stream_for_device(
        self, memory_info: MemoryInfo, stream_options: Mapping[str, str]
    ) -> Any:
        from ep_cuda_numba.stream import CudaSyncStream

        self.streams_created += 1
        return CudaSyncStream(memory_info.device_id)

    def ep_factory_get_fusable_ops(self) -> list[tuple[str, str, int, None]]:
        """Ops fused into generated kernels (with the EP option ``enable_fusion`` on, its default)."""
        from ep_cuda_numba.fusion import fusable_ops

        return fusable_ops()

    # --------------------------------------------------------------- compiled models
    def ep_factory_validate_compiled_model_compatibility(
        self, devices: Sequence[HardwareDevice], compatibility_info: str
    ) -> str:
        from ep_cuda_numba.epcontext import validate_compatibility

        return validate_compatibility(devices, compatibility_info)


factory = NumbaCudaFactory()

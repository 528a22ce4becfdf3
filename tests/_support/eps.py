"""Execution providers defined for tests, registered by hand with
``register_execution_provider_library`` and removed afterwards."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_core.sdk.compute import NodeComputeInfo
from ep_core.sdk.devices import EpDevice, HardwareDevice
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import FLOATS, KernelRegistry
from ep_core.sdk.memory import DeviceType, MemoryInfo


class FusingEp:
    """Claims maximal chains of Add/Mul and compiles each into one NumPy closure."""

    FUSABLE = {"Add": np.add, "Mul": np.multiply}

    def __init__(self, bad_claim: bool = False) -> None:
        self.bad_claim = bad_claim
        self.compiled: list[str] = []

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        nodes = [n for n in graph.nodes if n.op_type in self.FUSABLE]
        if self.bad_claim and len(nodes) >= 3:
            # claim first and last Add/Mul but not the middle node: a path leaves and re-enters
            support.add_nodes_to_fuse([nodes[0], nodes[-1]])
            return
        if nodes:
            support.add_nodes_to_fuse(nodes)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
        infos = []
        for graph, fused in zip(graphs, fused_nodes):
            self.compiled.append(fused.name)
            steps = [(self.FUSABLE[n.op_type], n.inputs, n.outputs[0]) for n in graph.nodes]
            in_names = fused.inputs
            out_names = fused.outputs

            def compute(
                state: Any, *inputs: Any, steps=steps, in_names=in_names, out_names=out_names
            ) -> tuple[Any, ...]:
                env = dict(zip(in_names, inputs))
                for fn, ins, out in steps:
                    env[out] = fn(env[ins[0]], env[ins[1]])
                return tuple(env[o] for o in out_names)

            infos.append(NodeComputeInfo(compute=compute))
        return infos


class FusingFactory(HostEpFactory):
    ep_name = "FusingTestExecutionProvider"
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, bad_claim: bool = False) -> None:
        self.bad_claim = bad_claim
        self.last_ep: FusingEp | None = None

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> FusingEp:
        self.check_options(ep_options)
        self.last_ep = FusingEp(self.bad_claim)
        return self.last_ep


# ------------------------------------------------------------------ an EP with its own memory
FAKE_DEVICE = HardwareDevice(DeviceType.NPU, "tests", 0xFFFF, 0, {"kind": "fake accelerator"})
FAKE_MEMORY = MemoryInfo("FakeNpu", DeviceType.NPU, 0, 0xFFFF)


@dataclass
class DeviceBuffer:
    """Data on the fake device: NumPy cannot read it without a copy."""

    payload: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.payload.shape

    @property
    def dtype(self) -> np.dtype:
        return self.payload.dtype


class FakeAllocator:
    def __init__(self) -> None:
        self.allocations = 0
        self._lock = threading.Lock()

    def wrap(self, array: np.ndarray) -> DeviceBuffer:
        with self._lock:
            self.allocations += 1
        return DeviceBuffer(np.array(array, copy=True))


class FakeTransfer:
    def __init__(self, allocator: FakeAllocator) -> None:
        self.allocator = allocator
        self.copies: list[tuple[str, str]] = []

    def can_copy(self, src: MemoryInfo, dst: MemoryInfo) -> bool:
        return {src.device_type, dst.device_type} <= {DeviceType.CPU, DeviceType.NPU}

    def copy(self, value: Any, src: MemoryInfo, dst: MemoryInfo, stream: Any) -> Any:
        self.copies.append((str(src), str(dst)))
        if dst.device_type is DeviceType.NPU:
            if isinstance(value, DeviceBuffer):
                return self.allocator.wrap(value.payload)
            return self.allocator.wrap(np.asarray(value))
        assert isinstance(value, DeviceBuffer), f"expected a device buffer, got {type(value).__name__}"
        return np.array(value.payload, copy=True)


DEVICE_REGISTRY = KernelRegistry("FakeNpuTestExecutionProvider")


@DEVICE_REGISTRY.register("Mul", since=7, types={"T": FLOATS})
def _device_mul(node: Any, ctx: Any) -> Any:
    def compute(a: DeviceBuffer, b: DeviceBuffer) -> tuple[DeviceBuffer]:
        assert isinstance(a, DeviceBuffer) and isinstance(b, DeviceBuffer), "device kernel got host data"
        return (DeviceBuffer(a.payload * b.payload),)

    return compute


class FakeProfiler:
    def __init__(self) -> None:
        self.epoch = 0

    def start(self, epoch_ns: int) -> None:
        self.epoch = epoch_ns

    def stop(self) -> list[dict[str, Any]]:
        return [{"name": "fake_npu_queue", "ts": 0.0, "dur": 1.0, "args": {"from": "FakeProfiler"}}]


class DeviceEp(RegistryEp):
    def __init__(self) -> None:
        super().__init__("FakeNpuTestExecutionProvider", DEVICE_REGISTRY)
        self.run_starts = 0
        self.run_ends = 0
        self.syncs = 0

    def ep_on_run_start(self, run_options: Any) -> None:
        self.run_starts += 1

    def ep_on_run_end(self, run_options: Any, sync_stream: bool) -> None:
        self.run_ends += 1

    def ep_sync(self) -> None:
        self.syncs += 1

    def ep_create_profiler(self) -> FakeProfiler:
        return FakeProfiler()


class DeviceFactory:
    """A factory for an EP whose memory is not host memory."""

    def __init__(self) -> None:
        self.allocator = FakeAllocator()
        self.transfer = FakeTransfer(self.allocator)
        self.last_ep: DeviceEp | None = None

    def ep_factory_name(self) -> str:
        return "FakeNpuTestExecutionProvider"

    def ep_factory_vendor(self) -> str:
        return "tests"

    def ep_factory_version(self) -> str:
        return "1.0.0"

    def ep_factory_probe_hardware_devices(self) -> list[HardwareDevice]:
        return [FAKE_DEVICE]

    def ep_factory_get_supported_devices(self, devices: Sequence[HardwareDevice]) -> list[EpDevice]:
        return [EpDevice("FakeNpuTestExecutionProvider", "tests", d, FAKE_MEMORY) for d in devices if d == FAKE_DEVICE]

    def ep_factory_create_ep(self, devices: Any, ep_options: Any, session_options: Any) -> DeviceEp:
        self.last_ep = DeviceEp()
        return self.last_ep

    def ep_factory_create_allocator(self, memory_info: MemoryInfo, allocator_options: Any) -> FakeAllocator:
        return self.allocator

    def ep_factory_create_data_transfer(self) -> FakeTransfer:
        return self.transfer

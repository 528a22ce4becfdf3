"""IO binding, like ORT's ``SessionIOBinding``: inputs already on a device; only bound outputs come
back, in bind order, kept on their device or written into their bound buffer. Plans are cached."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.runtime import run
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.memory import HOST_MEMORY, MemoryInfo
from ep_core.sdk.tensor import Tensor

if TYPE_CHECKING:
    from ep_core.runtime.engine import Built
    from ep_core.runtime.options import RunOptions


class IOBinding:
    """Made by ``InferenceSession.io_binding()``; runs the session's engine through ``execute``."""

    def __init__(self, built: "Built") -> None:
        self._built = built
        self._inputs: dict[str, Tensor] = {}
        self._outputs: dict[str, tuple[MemoryInfo, Tensor | None]] = {}
        self._results: list[Tensor] = []

    def _memory(self, device: MemoryInfo | str) -> MemoryInfo:
        if isinstance(device, MemoryInfo):
            return device
        kind, _, idx = device.lower().partition(":")
        if kind == "cpu":
            return HOST_MEMORY
        kind, pinned = kind.removesuffix("_pinned"), kind.endswith("_pinned")  # cuda_pinned: pinned host memory
        kind = {"cuda": "gpu"}.get(kind, kind)
        for ep in self._built.eps:
            m = ep.memory_info
            if m.device_type.value.lower() == kind and m.device_id == int(idx or 0):
                found = ep.devices[0].host_accessible_memory_info if pinned else m
                if found is not None:
                    return found
        have = sorted(
            {"cpu"} | {f"{e.memory_info.device_type.value.lower()}:{e.memory_info.device_id}" for e in self._built.eps}
        )
        raise InvalidArgument(f"no execution provider of this session owns device {device!r}; devices: {have}")

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.bind_input(name, np.asarray(array), "cpu")

    def bind_input(self, name: str, value: Any, device: MemoryInfo | str = "cpu") -> None:
        self._inputs[name] = value if isinstance(value, Tensor) else Tensor(value, self._memory(device))

    def bind_output(self, name: str, device: MemoryInfo | str = "cpu", buffer: Tensor | None = None) -> None:
        assert self._built.graph is not None
        names = [v.name for v in self._built.graph.outputs]
        if name not in names:
            raise InvalidArgument(f"unknown output {name!r}; the model's outputs are {names}")
        self._outputs[name] = (buffer.memory_info if buffer else self._memory(device), buffer)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def synchronize_inputs(self) -> None:
        self._sync()

    def synchronize_outputs(self) -> None:
        self._sync()

    def _sync(self) -> None:
        for ep in self._built.eps:
            if ep.has_sync:
                ep.call("ep_sync")

    def run(self, run_options: "RunOptions | None") -> None:
        """Run with the bound inputs; outputs stay where they were bound (host by default)."""
        built = self._built
        if built.program is None or built.graph is None or built.context is None:
            raise InvalidArgument("the session is closed")
        if not self._outputs:
            raise InvalidArgument("no output is bound: bind_output() the outputs to compute (only those come back)")
        bound = {k: t.data for k, t in self._inputs.items()}
        feed = run.check_feed(
            built.graph, bound, frozenset(k for k, t in self._inputs.items() if not t.memory_info.is_host)
        )
        placement = {k: t.memory_info for k, t in self._inputs.items() if not t.memory_info.is_host}
        values = run.run(built, feed, run_options, placement, False)
        plan = built.program.plan(placement, False)
        names = [v.name for v in built.graph.outputs]
        results: list[Tensor] = []
        for name, (want, buf) in self._outputs.items():
            value, have = values[names.index(name)], plan.output_memory[names.index(name)]
            if not (have == want or (have.is_host and want.is_host)):
                dt, stream = built.context.transfer_for(have, want)
                value = dt.copy(value, have, want, stream)
                have = want
            if buf is not None:
                buf.write(value, f"the buffer bound for output {name!r}")
            results.append(buf or Tensor(value, have, self._host_copier(have)))
        self._results = results

    def _host_copier(self, mem: MemoryInfo) -> Callable[[Any], np.ndarray] | None:
        if mem.is_host:
            return None
        ctx = self._built.context
        assert ctx is not None

        def to_host(value: Any) -> np.ndarray:
            dt, stream = ctx.transfer_for(mem, HOST_MEMORY)
            return np.asarray(dt.copy(value, mem, HOST_MEMORY, stream))

        return to_host

    def get_outputs(self) -> list[Tensor]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [t.numpy() if hasattr(t.data, "shape") else t.data for t in self._results]  # sequences, maps as is

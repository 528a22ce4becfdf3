"""Graph capture, as onnxruntime's session drives it (``OrtEp::IsGraphCaptureEnabled`` and friends).

An EP that captures runs as device graphs (CUDA graphs) is checked at session creation: every node
on it, or on a host EP where its policy is ``ALLOW_CPU_FOR_SHAPES``, no copies between devices and no
control flow. A run picks its graph by the run config entry ``gpu_graph_id`` (default 0; -1 runs
without capture) and must bind every input on the EP's device. Until the EP says the graph is
captured the runtime runs again (warm-up, then the capturing run; at most ``MAX_CAPTURE_RUNS``), so
one ``run`` does both, as onnxruntime's. Later runs replay: the EP launches the graph, the runtime
runs no node and returns the capture run's outputs, which the replay rewrote in place; the inputs
must be the very buffers (address and shape) the graph was captured with.

Duck-typed over the runtime's ``Built`` and ``EpInstance``: this layer imports only the sdk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ep_core.sdk.errors import EpFail, InvalidArgument, InvalidGraph

GRAPH_ID_KEY = "gpu_graph_id"  # onnxruntime's run config key (kOrtRunOptionsConfigCudaGraphAnnotation)
MAX_CAPTURE_RUNS = 8  # onnxruntime's kMaxGraphCaptureWarmupRuns
ALLOW_CPU_FOR_SHAPES = "ALLOW_CPU_FOR_SHAPES"


class GraphCapture:
    """The session's capturing EP and, per graph id, the inputs and outputs of its capture run."""

    def __init__(self, ep: Any) -> None:
        self.ep = ep
        self.graphs: dict[int, tuple[dict[str, Any], list[Any]]] = {}

    @classmethod
    def check(cls, built: Any) -> "GraphCapture | None":
        """None when no EP of the session captures graphs; else onnxruntime's creation checks."""
        eps = [ep for ep in built.eps if ep.call("ep_is_graph_capture_enabled")]
        if not eps:
            return None
        cap = eps[0]
        cpu_ok = cap.call("ep_get_graph_capture_node_assignment_policy") == ALLOW_CPU_FOR_SHAPES
        programs = built.programs()
        plan = built.program.plan({v.name: cap.memory_info for v in built.graph.inputs}, False)
        copied = {i.name.rsplit("@", 1)[0] for i in plan.infos if i.kind == "copy"}
        bad = [
            f"node {u.name} on {ep.name}"
            for p in programs
            for u in p.units
            if (ep := built.eps[u.ep_index]) is not cap
            and not (cpu_ok and ep.memory_info.is_host and not copied.intersection((*u.inputs, *u.outputs)))
        ]
        bad += [] if bad else [f"copy of {name}" for name in sorted(copied)]
        bad += [f"control flow (subgraph of {p.name})" for p in programs[1:]]
        bad += [f"{ep.name} captures graphs too" for ep in eps[1:]]
        if bad:
            allowed = " (or shape computations on a CPU EP)" if cpu_ok else ""
            raise InvalidGraph(
                f"{cap.name} has graph capture enabled, which needs every node on {cap.name}{allowed}, no copies "
                f"between devices and no control flow; this session has: {'; '.join(bad)}. Turn graph capture off "
                f"on {cap.name} or run these nodes on it"
            )
        return cls(cap)

    def graph_id(self, run_options: Any, feed: Mapping[str, Any], placed: Mapping[str, Any] | None) -> int | None:
        """This run's graph id; None for -1 (run without capture)."""
        text = run_options.config_entries.get(GRAPH_ID_KEY, "0") if run_options is not None else "0"
        if not text.lstrip("-").isdigit() or int(text) < -1:
            raise InvalidArgument(f"run config entry {GRAPH_ID_KEY}={text!r} must be an integer >= -1 (-1: no capture)")
        if int(text) == -1:
            return None
        off = sorted(k for k in feed if (placed or {}).get(k) != self.ep.memory_info)
        if off:
            raise InvalidArgument(
                f"{self.ep.name} captures graphs: every input must be bound on {self.ep.memory_info} through IOBinding "
                f"(bind_input(name, device_array, 'cuda:N')); {off} are not. Bind them there, or run without capture "
                f"with the run config entry {GRAPH_ID_KEY}=-1"
            )
        return int(text)

    def captured(self, gid: int) -> bool:
        return bool(self.ep.call("ep_is_graph_captured", graph_annotation_id=gid))

    def again(self, gid: int, feed: Mapping[str, Any], outputs: list[Any], n: int) -> bool:
        """After the ``n``-th run of one ``run`` call: True if the runtime must run again (not captured yet)."""
        if self.captured(gid):
            self.graphs[gid] = (dict(feed), outputs)
            return False
        if n > MAX_CAPTURE_RUNS:
            raise EpFail(f"{self.ep.name} did not capture graph {gid} within {MAX_CAPTURE_RUNS} runs")
        return True

    def replay(self, gid: int, feed: Mapping[str, Any]) -> list[Any]:
        """Launch captured graph ``gid`` after checking the inputs are the buffers it reads."""
        fed, outputs = self.graphs[gid]
        for name, value in feed.items():
            was = fed.get(name)
            if was is None or _address(value) != _address(was) or tuple(value.shape) != tuple(was.shape):
                raise InvalidArgument(
                    f"input {name!r} is not the buffer graph {gid} was captured with (same address and shape "
                    f"{list(getattr(was, 'shape', ()))}): write new values into that buffer in place, or capture "
                    f"another graph for it with the run config entry {GRAPH_ID_KEY}=<unused id>"
                )
        self.ep.call("ep_replay_graph", graph_annotation_id=gid)
        return list(outputs)

    def release(self) -> None:
        self.graphs.clear()


def _address(value: Any) -> Any:
    """Where a tensor's data lives: its device pointer (``__cuda_array_interface__``), else host pointer."""
    face = getattr(value, "__cuda_array_interface__", None) or getattr(value, "__array_interface__", None)
    return face["data"][0] if face else id(value)

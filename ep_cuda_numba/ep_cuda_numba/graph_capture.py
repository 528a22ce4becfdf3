"""CUDA graphs for one session (``enable_cuda_graph=1``), with onnxruntime's CUDA EP semantics.

Per graph id (run config entry ``gpu_graph_id``, default 0; -1 never captures) the first
``MIN_RUNS_BEFORE_CAPTURE`` runs are regular (they compile kernels and warm the arena), the next
one is captured between ``ep_on_run_start`` and ``ep_on_run_end`` and, since captured work does not
execute, replayed at its end; the core then replays through ``ep_replay_graph`` and runs no node.
ep_core's session repeats runs until the graph is captured, so one ``run`` does all of it.

Every array a kernel allocates while a graph is captured stays owned by that graph (it is never
returned to the arena while the graph exists), so replays write the same addresses.

On a GPU the capture is the driver's stream capture (cuda-bindings ``cuStreamBeginCapture`` in
relaxed mode on the session's numba stream, ``cuStreamEndCapture``, ``cuGraphInstantiate``,
``cuGraphLaunch``). Under the simulator the same control flow records each launch (kernel,
grid, block, stream, arguments) instead of running it and replays the recording."""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import EpFail

if TYPE_CHECKING:
    from ep_cuda_numba.ep import NumbaCudaEp

GRAPH_ID_KEY = "gpu_graph_id"  # onnxruntime's run config key
MIN_RUNS_BEFORE_CAPTURE = 2  # onnxruntime's CUDA EP: min_num_runs_before_cuda_graph_capture_
POLICY = "ALLOW_CPU_FOR_SHAPES"  # as onnxruntime's CUDA EP: shape computations may stay on the host


def graph_id(run_options: Any) -> int:
    entries = getattr(run_options, "config_entries", None) or {}
    return int(entries.get(GRAPH_ID_KEY, "0"))  # the core validated it before the run


class SimGraph:
    """Simulator: the launches recorded during capture; a replay launches them again in order."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, Any, Any, Any, tuple[Any, ...]]] = []

    def begin(self) -> None:
        self.launches.clear()

    def record(self, rt: Any, kernel: Any, blocks: Any, threads: Any, args: tuple[Any, ...]) -> None:
        self.launches.append((kernel, blocks, threads, rt, args))

    def end(self) -> None:
        pass

    def launch(self) -> None:
        for kernel, blocks, threads, rt, args in self.launches:
            with rt.device:
                kernel[blocks, threads, rt.s](*args)

    def kernel_nodes(self) -> int:
        return len(self.launches)

    def destroy(self) -> None:
        self.launches.clear()


class DriverGraph:
    """A GPU: stream capture on the session's numba stream through cuda-bindings' driver API."""

    def __init__(self, stream: Any) -> None:
        from cuda.bindings import driver as cu  # type: ignore[import-untyped]

        self.cu = cu
        self.stream = stream
        self.handle = cu.CUstream(int(stream.handle))
        self.graph: Any = None
        self.exec: Any = None

    def _check(self, result: Any, call: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise EpFail(f"NumbaCudaExecutionProvider CUDA graph: {call} failed with {err!r}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    def begin(self) -> None:
        mode = self.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        self._check(self.cu.cuStreamBeginCapture(self.handle, mode), "cuStreamBeginCapture")

    def end(self) -> None:
        self.graph = self._check(self.cu.cuStreamEndCapture(self.handle), "cuStreamEndCapture")
        self.exec = self._check(self.cu.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")

    def abort(self) -> None:
        """End a capture a failed run left open, discarding what it recorded."""
        err, graph = self.cu.cuStreamEndCapture(self.handle)
        if graph is not None and err == self.cu.CUresult.CUDA_SUCCESS:
            self.cu.cuGraphDestroy(graph)

    def launch(self) -> None:
        self._check(self.cu.cuGraphLaunch(self.exec, self.handle), "cuGraphLaunch")

    def kernel_nodes(self) -> int:
        """The kernel launches the capture recorded, as the driver holds them (the graph's kernel
        nodes; copies and memsets are nodes of other types)."""
        if self.graph is None:
            return 0
        sizing = self.cu.cuGraphGetNodes(self.graph, 0)  # (status, no nodes, how many there are)
        self._check(sizing, "cuGraphGetNodes")
        result = self.cu.cuGraphGetNodes(self.graph, int(sizing[2]))
        self._check(result, "cuGraphGetNodes")
        kernel = self.cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
        return sum(
            1 for node in result[1] if self._check(self.cu.cuGraphNodeGetType(node), "cuGraphNodeGetType") == kernel
        )

    def destroy(self) -> None:
        if self.exec is not None:
            self.cu.cuGraphExecDestroy(self.exec)
        if self.graph is not None:
            self.cu.cuGraphDestroy(self.graph)
        self.exec = self.graph = None


class CapturedGraph:
    """One graph id's graph and the arrays it owns."""

    def __init__(self, gid: int, backend: Any) -> None:
        self.gid = gid
        self.backend = backend
        self.owned: list[Any] = []
        self.replays = 0


class CudaGraphs:
    """The EP's graphs: warm-up counts, the capture in progress, the captured graphs by id."""

    def __init__(self, ep: "NumbaCudaEp") -> None:
        self.ep = ep
        self.regular_runs: dict[int, int] = {}
        self.graphs: dict[int, CapturedGraph] = {}
        self.capturing: CapturedGraph | None = None
        self._cleanup: ExitStack | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.ep.options.enable_cuda_graph)

    def _stream(self) -> Any:
        streams = self.ep._streams
        if len(streams) != 1:
            raise EpFail(
                f"NumbaCudaExecutionProvider CUDA graph capture needs the session's kernels on one stream; "
                f"they use {len(streams)}: turn enable_cuda_graph off"
            )
        return streams[0]

    # -------------------------------------------------------------------------- run hooks
    def on_run_start(self, run_options: Any) -> None:
        if self.capturing is not None:  # the run that was capturing failed before its end
            self._abort()
        gid = graph_id(run_options)
        if gid == -1 or gid in self.graphs or self.regular_runs.get(gid, 0) < MIN_RUNS_BEFORE_CAPTURE:
            return
        stream = self._stream()
        stream.synchronize()  # the warm-up runs' work finishes outside the graph
        if self.ep.simulated:
            backend: Any = SimGraph()
        else:
            backend = DriverGraph(stream.cuda_stream)
        graph = CapturedGraph(gid, backend)
        self._cleanup = ExitStack()
        if not self.ep.simulated:
            from numba import cuda

            self._cleanup.enter_context(cuda.defer_cleanup())  # no cuMemFree while capturing
        backend.begin()
        self.capturing, self.ep.capturing = graph, graph.owned
        # simulated: launches are recorded, not run; GPU: the driver records them (no timing events)
        self.ep.tap = backend.record if self.ep.simulated else None

    def on_run_end(self, run_options: Any) -> None:
        gid = graph_id(run_options)
        graph = self.capturing
        if graph is None:
            if gid != -1 and gid not in self.graphs:
                self.regular_runs[gid] = self.regular_runs.get(gid, 0) + 1
            return
        try:
            graph.backend.end()
        except BaseException:
            self._abort()
            raise
        self._finish()
        self.graphs[graph.gid] = graph
        self.replay(graph.gid)  # the captured work has not run yet

    def _finish(self) -> None:
        # the tap of the timeline recording now: profiling may have stopped (or started) meanwhile
        timeline = self.ep.timeline
        self.ep.tap = timeline.launch if timeline is not None else None
        self.ep.capturing, self.capturing = None, None
        if self._cleanup is not None:
            self._cleanup.close()
            self._cleanup = None

    def _abort(self) -> None:
        graph = self.capturing
        if graph is not None and isinstance(graph.backend, DriverGraph):
            graph.backend.abort()
        self._finish()

    # ----------------------------------------------------------------------------- replay
    def is_captured(self, gid: int) -> bool:
        return gid in self.graphs

    def replay(self, gid: int) -> None:
        graph = self.graphs.get(gid)
        if graph is None:
            raise EpFail(f"NumbaCudaExecutionProvider has no captured CUDA graph for {GRAPH_ID_KEY}={gid}")
        stream = self._stream()
        timeline = self.ep.timeline
        if timeline is not None:
            timeline.time_replay(stream.cuda_stream, gid, graph.backend.launch)
        else:
            graph.backend.launch()
        graph.replays += 1
        stream.synchronize()  # as onnxruntime's replay: the outputs are ready when run returns

    def stats(self) -> dict[str, Any]:
        return {
            "regular_runs": dict(self.regular_runs),
            "captured": sorted(self.graphs),
            "replays": {g: c.replays for g, c in self.graphs.items()},
            "owned_arrays": {g: len(c.owned) for g, c in self.graphs.items()},
            "recorded_launches": {g: c.backend.kernel_nodes() for g, c in self.graphs.items()},
        }

    def release(self) -> None:
        if self.capturing is not None:
            self._abort()
        for graph in self.graphs.values():
            graph.backend.destroy()
            graph.owned.clear()
        self.graphs.clear()

"""``SessionHost``: what one session does to its process, made at session creation from its
options, and the two calls the runtime makes around every run."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from ep_core.host import memory
from ep_core.host.logs import INFO, VERBOSE, SessionLog
from ep_core.host.threads import SessionThreads, scan_libraries
from ep_core.host.trace import Profiler


class RunRecord(NamedTuple):
    """A run being logged or traced (``run_start`` returns None for the others)."""

    t0_ns: int
    events: list[dict[str, Any]] | None  # the trace's step events; None when not profiling
    logged: bool


class SessionHost:
    """The session's thread size, logger, trace (``trace`` is None without profiling) and its
    hold on the CPU memory arena (taken once the session is built, given back by ``release``)."""

    __slots__ = ("threads", "log", "trace", "arena", "_holds_arena")

    def __init__(self, options: Any) -> None:
        self.arena = bool(options.enable_cpu_mem_arena)
        self._holds_arena = False
        self.threads = SessionThreads(options.intra_op_num_threads, options.use_per_session_threads)
        self.log = SessionLog(options.logid, options.log_severity_level, options.log_verbosity_level)
        self.trace = Profiler(options.profile_file_prefix) if options.enable_profiling else None

    def created(self, built: Any, t0_ns: int) -> None:
        """Log the session just built (``t0_ns``: when its creation started)."""
        scan_libraries()  # the EPs just created may have loaded BLAS/OpenMP libraries
        self._holds_arena = self.arena and memory.acquire()
        if capped := self.threads.capped():
            self.log.log(INFO, "%s", capped)
        if self.arena:  # info when the arena cannot be had (not glibc, malloc tuned by the environment)
            self.log.log(VERBOSE if self._holds_arena else INFO, "enable_cpu_mem_arena: %s", memory.arena_state())
        model = str(built.model_path) if built.model_path is not None else "(from bytes)"
        self.log.session_created(built, model, (time.perf_counter_ns() - t0_ns) / 1e6)

    def release(self) -> None:
        """The session closed: give back its hold on the CPU memory arena."""
        if self._holds_arena:
            self._holds_arena = False
            memory.release()

    def run_start(self, run_options: Any) -> RunRecord | None:
        """Before a run: set the thread pools' size; a record if the run is logged or traced."""
        self.threads.apply()
        trace = self.trace
        logged = self.log.enabled(VERBOSE, run_options)
        if not logged and (trace is None or not trace.active):
            return None
        if logged:
            self.log.log(VERBOSE, "run started on %d thread(s)", self.threads.size, run_options=run_options)
        events: list[dict[str, Any]] | None = [] if trace is not None and trace.active else None
        return RunRecord(time.perf_counter_ns(), events, logged)

    def run_end(self, record: RunRecord, run_options: Any) -> None:
        t1 = time.perf_counter_ns()
        if record.events is not None and self.trace is not None:
            self.trace.add_run(record.t0_ns, t1, record.events, getattr(run_options, "run_tag", ""))
        if record.logged:
            self.log.log(VERBOSE, "run finished in %.3f ms", (t1 - record.t0_ns) / 1e6, run_options=run_options)
